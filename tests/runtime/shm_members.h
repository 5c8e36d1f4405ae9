// The members of one shared-memory segment as threads of this process, connected concurrently as
// shm::Transport::connect requires (each member's connect waits for the others).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/shm/transport.h"

namespace hvd::runtime::testing {

// n members of the segment of `scope`, each with `base` and its own rank and the group's size.
inline std::vector<std::unique_ptr<shm::Transport>> shmMembers(int n, const std::string& scope,
                                                               const shm::Options& base = {}) {
  auto store = std::make_shared<rendezvous::MemoryStore>();
  std::vector<std::unique_ptr<shm::Transport>> t(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      shm::Options o = base;
      o.scope = scope;
      o.rank = r;
      o.size = n;
      t[r] = shm::Transport::connect(store, o);
    });
  }
  for (auto& th : threads) th.join();
  return t;
}

}  // namespace hvd::runtime::testing
