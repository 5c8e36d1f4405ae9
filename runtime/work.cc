#include "runtime/work.h"

#include <sched.h>

#include <algorithm>

#include "base/enum_names.h"

namespace hvd::runtime {

BufferPool::Block BufferPool::take(size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->capacity >= bytes && it->capacity / 2 <= bytes && (best == free_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      Block block = std::move(*best);
      free_.erase(best);
      free_bytes_ -= block.capacity;
      return block;
    }
  }
  const size_t capacity = std::max<size_t>(bytes, 1);
  return Block{std::unique_ptr<std::byte[]>(new std::byte[capacity]), capacity};  // not zeroed
}

BufferPool::BufferPool(size_t keep_bytes) : keep_bytes_(keep_bytes) {
  free_.reserve(kMaxBlocks);  // give() never allocates
}

void BufferPool::give(Block block) noexcept {
  if (!block.data || block.capacity > keep_bytes_) return;
  const size_t capacity = block.capacity;
  std::lock_guard lock(mutex_);
  // Room comes from the smallest blocks held, never from one larger than this (large blocks are the
  // expensive ones to fault in again). Where that is not enough, nothing held goes and this block is freed.
  std::sort(free_.begin(), free_.end(), [](const Block& a, const Block& b) { return a.capacity < b.capacity; });
  size_t drop = 0;
  size_t bytes = free_bytes_;
  while (free_.size() - drop >= kMaxBlocks || bytes + capacity > keep_bytes_) {
    if (drop == free_.size() || free_[drop].capacity > capacity) return;
    bytes -= free_[drop].capacity;
    ++drop;
  }
  free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(drop));
  free_.push_back(std::move(block));
  free_bytes_ = bytes + capacity;
}

size_t BufferPool::freeBytes() const {
  std::lock_guard lock(mutex_);
  return free_bytes_;
}

void ResultBuffer::allocate(const std::shared_ptr<BufferPool>& pool, size_t bytes) {
  reset();
  pool_ = pool;
  block_ = pool_ ? pool_->take(bytes) : BufferPool::Block{std::unique_ptr<std::byte[]>(new std::byte[bytes ? bytes : 1]), bytes};
  size_ = bytes;
}

void ResultBuffer::reset() noexcept {
  if (pool_) pool_->give(std::move(block_));
  block_ = {};
  pool_.reset();
  size_ = 0;
}

namespace {
constexpr EnumName<OpType> kOpTypeNames[] = {{OpType::kAllreduce, "allreduce"},
                                             {OpType::kAllgather, "allgather"},
                                             {OpType::kBroadcast, "broadcast"},
                                             {OpType::kAlltoall, "alltoall"},
                                             {OpType::kReducescatter, "reducescatter"},
                                             {OpType::kBarrier, "barrier"},
                                             {OpType::kJoin, "join"},
                                             {OpType::kProcessSet, "process_set"}};
static_assert(namesEvery(kOpTypeNames, OpType::kAllreduce, OpType::kProcessSet));
}  // namespace

const char* name(OpType type) { return nameOf(kOpTypeNames, type); }

bool Work::poll() const {
  std::lock_guard lock(mutex_);
  return done_;
}

bool Work::spinUntilFinished() const {
  if (finished_.load(std::memory_order_acquire)) return true;
  if (spin_.count() <= 0) return false;
  if (driver_ && driver_->drive(finished_, spin_)) return finished_.load(std::memory_order_acquire);
  const auto until = std::chrono::steady_clock::now() + spin_;
  while (std::chrono::steady_clock::now() < until) {
    ::sched_yield();
    if (finished_.load(std::memory_order_acquire)) return true;
  }
  return false;
}

void Work::wait() const {
  // Finished: error_ was set before finished_ (under the lock) and never changes after, so it is read without
  // the lock.
  if (spinUntilFinished()) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  std::unique_lock lock(mutex_);
  // Blocked: the coordinator learns what this rank waits for (a deadlock is every rank blocked so).
  const bool blocks = !done_ && registry_;
  if (blocks) registry_->enter({set_, name_});
  done_cv_.wait(lock, [&] { return done_; });
  if (blocks) registry_->leave({set_, name_});
  if (error_) std::rethrow_exception(error_);
}

void WaitRegistry::change(const Key& key, int delta) {
  std::lock_guard lock(mutex_);
  auto& count = waiting_[key];
  count += delta;
  if (count <= 0) waiting_.erase(key);
  changed_at_ = Clock::now();
  version_.fetch_add(1, std::memory_order_acq_rel);
}

WaitRegistry::Clock::time_point WaitRegistry::changedAt() const {
  std::lock_guard lock(mutex_);
  return changed_at_;
}

WaitRegistry::Snapshot WaitRegistry::snapshot() const {
  std::lock_guard lock(mutex_);
  Snapshot s;
  s.keys.reserve(waiting_.size());
  for (const auto& [key, count] : waiting_) s.keys.push_back(key);
  s.version = version_.load(std::memory_order_acquire);
  s.changed_at = changed_at_;
  return s;
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

std::exception_ptr Work::exception() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    finished_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

}  // namespace hvd::runtime
