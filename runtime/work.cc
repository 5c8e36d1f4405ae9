#include "runtime/work.h"

namespace hvd::runtime {

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

void Work::wait() const {
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
  }
  done_cv_.notify_all();
}

}  // namespace hvd::runtime
