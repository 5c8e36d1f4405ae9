#include "runtime/work.h"

#include <algorithm>

#include <sched.h>

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

void BufferPool::give(Block block) {
  if (!block.data || block.capacity > keep_bytes_) return;
  std::lock_guard lock(mutex_);
  // Make room by dropping the smallest blocks: large ones are the expensive ones to fault in again.
  while (!free_.empty() && (free_.size() >= kMaxBlocks || free_bytes_ + block.capacity > keep_bytes_)) {
    auto smallest = std::min_element(free_.begin(), free_.end(),
                                     [](const Block& a, const Block& b) { return a.capacity < b.capacity; });
    if (smallest->capacity > block.capacity) return;  // keep the larger ones already held
    free_bytes_ -= smallest->capacity;
    free_.erase(smallest);
  }
  free_bytes_ += block.capacity;
  free_.push_back(std::move(block));
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

void ResultBuffer::reset() {
  if (pool_) pool_->give(std::move(block_));
  block_ = {};
  pool_.reset();
  size_ = 0;
}

const char* name(OpType type) {
  switch (type) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
  }
  return "invalid";
}

bool Work::poll() const {
  std::lock_guard lock(mutex_);
  return done_;
}

bool Work::spinUntilFinished() const {
  if (finished_.load(std::memory_order_acquire)) return true;
  if (spin_.count() <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + spin_;
  while (std::chrono::steady_clock::now() < until) {
    ::sched_yield();
    if (finished_.load(std::memory_order_acquire)) return true;
  }
  return false;
}

void Work::wait() const {
  spinUntilFinished();
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
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
