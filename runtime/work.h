// Requests submitted to the runtime and the Work handles that report their completion.
//
// A Work is future-like (as c10d's Work): the background thread calls finish(eptr) exactly once; users
// poll(), wait() (rethrows the operation's exception) or read exception(). Results of operations whose
// output size is decided by the job (allgather, alltoall, reducescatter, join) live in the Work.
// Threading: every method is safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gloo_backend/types.h"
#include "base/error.h"

namespace hvd::runtime {

using gloo_backend::DataType;
using gloo_backend::ReduceOp;

// On the wire, and the values below kProcessSet equal the C API's hvd_op (c_api.cc checks each): new
// values go at the end.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
  kProcessSet,  // add or remove a process set (collective over the global set; Request::members)
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
  // The tensor's shape when the caller gave it (has_shape); the ranks' shapes are compared as Horovod does.
  bool has_shape = false;
  std::vector<int64_t> shape;
  // Where the caller's tensor lives: -1 the CPU, else a CUDA device ordinal (the data itself is host
  // memory either way). Ranks must agree on CPU against GPU, as in Horovod; ordinals may differ.
  int32_t device = -1;
  bool onGpu() const { return device >= 0; }

  const void* input = nullptr;
  void* output = nullptr;  // allreduce/broadcast: caller's buffer; others: the Work's result

  size_t elements() const { return static_cast<size_t>(rows) * static_cast<size_t>(row_elements); }
  size_t bytes() const { return elements() * gloo_backend::elementSize(dtype); }
};

// Memory for the results whose size the job decides (allgather, alltoall, reducescatter). Blocks are
// handed out uninitialised and go back to their pool when the ResultBuffer dies (hvd_release, or the
// last reference to the Work), so a training loop that gathers the same sizes step after step reuses
// pages that are already mapped. Why: a fresh 32 MiB result per call (a 16 MiB allgather on 2 ranks)
// was zero-filled and took 8192 page faults every time, 150 of its 158 ms on this machine.
// Threading: every method is safe from any thread.
class BufferPool {
 public:
  struct Block {
    std::unique_ptr<std::byte[]> data;
    size_t capacity = 0;
  };
  // Keeps at most kMaxBlocks free blocks of at most keep_bytes together.
  explicit BufferPool(size_t keep_bytes);
  static constexpr size_t kMaxBlocks = 8;

  // The smallest free block that holds bytes without wasting more than its size again, else a new one.
  Block take(size_t bytes);
  // Keeps block for reuse when it fits under the limits, making room by freeing held blocks no larger
  // than it, smallest first; else frees it (and keeps what is held).
  void give(Block block) noexcept;
  size_t freeBytes() const;

 private:
  const size_t keep_bytes_;
  mutable std::mutex mutex_;
  std::vector<Block> free_;
  size_t free_bytes_ = 0;
};

class ResultBuffer {
 public:
  ResultBuffer() = default;
  ~ResultBuffer() { reset(); }
  ResultBuffer(const ResultBuffer&) = delete;
  ResultBuffer& operator=(const ResultBuffer&) = delete;

  // bytes of uninitialised memory from pool (null pool: plain allocation), replacing what was held.
  void allocate(const std::shared_ptr<BufferPool>& pool, size_t bytes);
  void reset() noexcept;

  std::byte* data() { return block_.data.get(); }
  const std::byte* data() const { return block_.data.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::byte* begin() const { return data(); }
  const std::byte* end() const { return data() + size_; }

 private:
  std::shared_ptr<BufferPool> pool_;
  BufferPool::Block block_;
  size_t size_ = 0;
};

// Hash and equality of a (process set, name) key: the runtime's tables by name are looked up several times
// per operation, and ordered maps of such keys spent most of a small operation's bookkeeping comparing names
// that share a prefix. Both take a SetNameView as well (transparent lookup), so that looking a request's or a
// response's name up copies nothing.
using SetNameView = std::pair<int32_t, std::string_view>;
struct SetNameHash {
  using is_transparent = void;
  size_t operator()(const SetNameView& key) const noexcept {
    return std::hash<std::string_view>{}(key.second) ^
           (static_cast<size_t>(static_cast<uint32_t>(key.first)) * 0x9e3779b97f4a7c15ull);
  }
  size_t operator()(const std::pair<int32_t, std::string>& key) const noexcept {
    return (*this)(SetNameView(key.first, key.second));
  }
};
struct SetNameEqual {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const noexcept {
    return a.first == b.first && std::string_view(a.second) == std::string_view(b.second);
  }
};

// The operations this process's user threads are blocked in Work::wait() for, by (process set, name): what the
// coordinator needs to tell a certain deadlock (every rank blocked on operations other ranks never submit)
// from ranks that are merely busy. Work::wait() enters and leaves; the background thread, seeing version()
// change, takes a snapshot() and reports it once it has not changed for a while (quick waits, every training
// step's, are never reported: no traffic on the hot path). Threading: any thread.
class WaitRegistry {
 public:
  using Key = std::pair<int32_t, std::string>;
  using Clock = std::chrono::steady_clock;
  struct Snapshot {
    std::vector<Key> keys;
    uint64_t version = 0;
    Clock::time_point changed_at;  // of the last enter or leave
  };
  void enter(const Key& key) { change(key, +1); }
  void leave(const Key& key) { change(key, -1); }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  Clock::time_point changedAt() const;
  Snapshot snapshot() const;

 private:
  void change(const Key& key, int delta);
  mutable std::mutex mutex_;
  std::map<Key, int> waiting_;  // how many threads wait for each
  std::atomic<uint64_t> version_{0};
  Clock::time_point changed_at_;
};

// What a thread that waits for a Work can do instead of polling it: run the runtime's progress itself
// (Runtime::Impl's background work, see runtime_impl.h), which spares the hand-offs between it and the
// background thread that are most of a small collective's time.
class Driver {
 public:
  virtual ~Driver() = default;
  // Makes progress until `finished` or for about `spin`, yielding the core whenever another thread makes it;
  // false (nothing done) where the waiting thread should only poll.
  virtual bool drive(const std::atomic<bool>& finished, std::chrono::microseconds spin) = 0;
};

class Work {
 public:
  // spin: how long wait() polls for completion (yielding the core, or driving the runtime's progress with
  // driver) before it sleeps.
  explicit Work(std::string name, std::chrono::microseconds spin = {}, std::shared_ptr<Driver> driver = nullptr)
      : name_(std::move(name)), spin_(spin), driver_(std::move(driver)) {}

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
  // While a wait() blocks, the operation (process set `set`, this work's name) is listed in `registry`.
  void watch(std::shared_ptr<WaitRegistry> registry, int32_t set) {
    registry_ = std::move(registry);
    set_ = set;
  }

  // Results (valid after a successful wait()).
  ResultBuffer result;                       // allgather, alltoall, reducescatter output
  int64_t result_rows = 0;                   // rows in result
  std::vector<int64_t> received_splits;      // alltoall: rows received from each rank
  int64_t result_int = -1;                   // join: last rank to join

 private:
  // Polls finished_ for up to spin_; true when the operation finished meanwhile.
  bool spinUntilFinished() const;

  const std::string name_;
  const std::chrono::microseconds spin_;
  const std::shared_ptr<Driver> driver_;
  std::atomic<bool> finished_{false};  // done_, readable without the lock
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::shared_ptr<WaitRegistry> registry_;
  int32_t set_ = 0;
};

}  // namespace hvd::runtime
