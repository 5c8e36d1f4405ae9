#include "gloo_backend/connect_watch.h"

#include <exception>

#include <gloo/transport/pair.h>

#include "base/error.h"

namespace hvd::gloo_backend {

ConnectWatch::ConnectWatch(std::shared_ptr<rendezvous::Store> store, std::string key,
                           std::vector<gloo::transport::Pair*> pairs)
    : store_(std::move(store)), key_(std::move(key)), pairs_(std::move(pairs)), thread_([this] { run(); }) {}

ConnectWatch::~ConnectWatch() { stop(); }

void ConnectWatch::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ConnectWatch::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, kCheckInterval, [this] { return stopping_; })) return;
    }
    std::optional<std::string> why;
    try {
      if (!store_->check({key_})) {
        why = detail::concat("its key '", key_, "' was deleted from ", store_->describe());
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why) continue;
    // Pair::close() takes the pair's lock, which its waiting connect() released while it waits.
    for (auto* pair : pairs_) pair->close();
    reason_ = std::move(why);
    return;
  }
}

}  // namespace hvd::gloo_backend
