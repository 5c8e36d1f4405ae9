#include "gloo_backend/abort_signal.h"

#include <algorithm>
#include <thread>

namespace hvd::gloo_backend {

void AbortSignal::abort(std::exception_ptr error) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + kPersistence;
  std::unique_lock lock(mutex_);
  if (error_) return;
  error_ = std::move(error);
  while (!targets_.empty() && std::chrono::steady_clock::now() < deadline) {
    for (Target* t : targets_) t->wake();
    lock.unlock();
    std::this_thread::sleep_for(kRepeat);
    lock.lock();
  }
}

std::exception_ptr AbortSignal::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void AbortSignal::attach(Target* target) {
  std::lock_guard lock(mutex_);
  targets_.push_back(target);
  if (error_) target->wake();
}

void AbortSignal::detach(Target* target) noexcept {
  std::lock_guard lock(mutex_);
  const auto it = std::find(targets_.begin(), targets_.end(), target);
  if (it != targets_.end()) {
    *it = targets_.back();
    targets_.pop_back();
  }
}

}  // namespace hvd::gloo_backend
