// Requests submitted to the runtime and the Work handles that report their completion.
//
// A Work is future-like (as c10d's Work): the background thread calls finish(eptr) exactly once; users
// poll(), wait() (rethrows the operation's exception) or read exception(). Results of operations whose
// output size is decided by the job (allgather, alltoall, reducescatter, join) live in the Work.
// Threading: every method is safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "gloo_backend/types.h"
#include "rendezvous/error.h"

namespace hvd::runtime {

using gloo_backend::DataType;
using gloo_backend::ReduceOp;

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kProcessSet = 7,  // add or remove a process set (collective over the global set; Request::members)
};
const char* name(OpType type);

// Errors of operations, by cause (public C statuses map 1:1).
class MismatchError : public Error {  // ranks disagree on an operation (HVD_ERR_MISMATCH)
 public:
  using Error::Error;
};
class ShutDownError : public Error {  // the runtime was shut down (HVD_ERR_SHUT_DOWN)
 public:
  using Error::Error;
};
class StalledError : public Error {  // cancelled by the stall inspector (HVD_ERR_STALLED)
 public:
  using Error::Error;
};

// One collective as a rank submits it. The descriptor fields (everything but the pointers) are what
// the coordinator compares across ranks.
struct Request {
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;                // broadcast: global rank
  int64_t rows = 0;            // first dimension (allreduce/broadcast: the element count, row = 1)
  int64_t row_elements = 1;    // elements per row; must agree across ranks
  std::vector<int64_t> splits; // alltoall: rows sent to each set rank (empty: even split)
  int32_t process_set = 0;     // id of a registered process set (0: every rank)
  // Grouped operations (hvd_enqueue_group): the name of the group's first member and the group's size;
  // the coordinator releases the members together. Empty group: not grouped.
  std::string group;
  int32_t group_size = 0;
  // Process-set registration (kProcessSet): the ranks of a set to add (sorted), or empty to remove
  // process_set.
  std::vector<int32_t> members;

  const void* input = nullptr;
  void* output = nullptr;  // allreduce/broadcast: caller's buffer; others: the Work's result

  size_t elements() const { return static_cast<size_t>(rows) * static_cast<size_t>(row_elements); }
  size_t bytes() const { return elements() * gloo_backend::elementSize(dtype); }
};

class Work {
 public:
  explicit Work(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // True once finished (successfully or not).
  bool poll() const;
  // Blocks until finished, then rethrows the operation's exception if it failed.
  void wait() const;
  // As wait(), false when the timeout expired first.
  bool wait(std::chrono::milliseconds timeout) const;
  // The failure, or nullptr (also while running).
  std::exception_ptr exception() const;

  // Called once by the background thread; wakes waiters.
  void finish(std::exception_ptr error = nullptr);

  // Results (valid after a successful wait()).
  std::vector<std::byte> result;             // allgather, alltoall, reducescatter output
  int64_t result_rows = 0;                   // rows in result
  std::vector<int64_t> received_splits;      // alltoall: rows received from each rank
  int64_t result_int = -1;                   // join: last rank to join

 private:
  const std::string name_;
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace hvd::runtime
