// RecordingStore: a MemoryStore that records the range of every sliced multi-key fetch, once the fetch has
// returned (Communicator::connect's tests: which slices it asks for, and when a rank has read its keys).
// Threading: safe from any number of threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/memory_store.h"
#include "rendezvous/store.h"

namespace hvd::test {

class RecordingStore final : public hvd::rendezvous::Store {
 public:
  void set(const std::string& key, const hvd::rendezvous::Bytes& value) override { store_.set(key, value); }
  std::optional<hvd::rendezvous::Bytes> tryGet(const std::string& key) override { return store_.tryGet(key); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    store_.wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return store_.add(key, delta); }
  void deleteKey(const std::string& key) override { store_.deleteKey(key); }
  std::string describe() const override { return "recording store"; }
  hvd::rendezvous::ValueList waitAndGet(const std::vector<std::string>& keys,
                                        std::chrono::milliseconds timeout,
                                        hvd::rendezvous::ValueRange range) override {
    auto values = Store::waitAndGet(keys, timeout, range);
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.push_back(range);
    return values;
  }
  // Fetches of exactly this range so far.
  size_t count(hvd::rendezvous::ValueRange range) {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<size_t>(std::count(ranges_.begin(), ranges_.end(), range));
  }
  // Sliced fetches so far.
  size_t fetches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ranges_.size();
  }

 private:
  hvd::rendezvous::MemoryStore store_;
  std::mutex mutex_;
  std::vector<hvd::rendezvous::ValueRange> ranges_;
};

}  // namespace hvd::test
