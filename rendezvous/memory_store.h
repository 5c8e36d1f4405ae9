// In-process Store: ranks running as threads of one process (tests), and single-process jobs.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/store.h"

namespace hvd::rendezvous {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  // Sleeps on a condition variable that every set and add notify: a waiter wakes as its key appears.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void deleteKey(const std::string& key) override;
  std::string describe() const override { return "memory store"; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;  // notified after every set/add, so waiters re-check
  std::map<std::string, Bytes> data_;
};

}  // namespace hvd::rendezvous
