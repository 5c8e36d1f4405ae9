// Gloo's rendezvous::Store interface over our rendezvous::Store, so Gloo's connectFullMesh runs through
// the hvd rendezvous server (HttpStore), a MemoryStore (ranks as threads) or a FileStore.
//
// get() blocks until the key exists (Horovod's HTTPStore::get does not; Gloo's connectFullMesh reads
// "rank_<i>" of lower ranks without waiting first, so a non-blocking get would race).
// Threading: as safe as the underlying store (every hvd Store is thread-safe).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "rendezvous/store.h"

namespace hvd::gloo_backend {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<rendezvous::Store> store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<rendezvous::Store> store_;
  std::chrono::milliseconds timeout_;  // for get() and wait(keys), which Gloo calls without one
};

}  // namespace hvd::gloo_backend
