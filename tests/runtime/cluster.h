// Ranks as threads: n Runtimes in this process over one MemoryStore (each with its own Gloo device,
// control plane and background thread), for fast sweeps over sizes, types and operations.
// All ranks are on one host, so the job's data path is shared memory; HVD_SHARED_MEMORY=0 in the test's
// environment runs the same cases over Gloo's TCP pairs (ctest registers the binary both ways).
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/runtime.h"

namespace hvd::runtime::testing {

class Cluster {
 public:
  explicit Cluster(int n, const std::function<void(RuntimeOptions&)>& tweak = {}) : runtimes_(n) {
    auto store = std::make_shared<rendezvous::MemoryStore>();
    forEach([&](int r) {
      RuntimeOptions o;
      o.rank = r;
      o.size = n;
      o.local_rank = r;
      o.local_size = n;
      o.gloo_timeout = std::chrono::seconds(20);
      const char* shm = std::getenv("HVD_SHARED_MEMORY");
      o.shared_memory = !(shm && std::strcmp(shm, "0") == 0);
      if (tweak) tweak(o);
      runtimes_[r] = std::make_unique<Runtime>(o, store);
    });
  }
  ~Cluster() {
    // Shut down concurrently: each rank's shutdown waits for the others.
    std::vector<std::thread> threads;
    for (auto& rt : runtimes_) {
      if (rt) threads.emplace_back([&rt] { rt->shutdown(); });
    }
    for (auto& t : threads) t.join();
  }

  int size() const { return static_cast<int>(runtimes_.size()); }
  Runtime& operator[](int rank) { return *runtimes_[rank]; }

  // Runs body(rank) on one thread per rank; rethrows the first exception after all finished.
  void forEach(const std::function<void(int)>& body) {
    std::vector<std::exception_ptr> errors(runtimes_.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  std::vector<std::unique_ptr<Runtime>> runtimes_;
};

// A request of `type` named `name` on `rows` rows of `row_elements` elements of `dtype` read from `input`;
// the other fields as Request has them (op kSum, root 0, process set 0, no output buffer).
inline Request request(OpType type, std::string name, DataType dtype, int64_t rows, int64_t row_elements,
                       const void* input) {
  Request q;
  q.type = type;
  q.name = std::move(name);
  q.dtype = dtype;
  q.rows = rows;
  q.row_elements = row_elements;
  q.input = input;
  return q;
}

}  // namespace hvd::runtime::testing
