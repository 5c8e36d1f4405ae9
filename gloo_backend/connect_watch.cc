#include "gloo_backend/connect_watch.h"

#include <exception>

#include <gloo/transport/pair.h>

#include "base/error.h"

namespace hvd::gloo_backend {

ConnectWatch::ConnectWatch(std::shared_ptr<rendezvous::Store> store, std::string key,
                           std::vector<gloo::transport::Pair*> pairs)
    : state_(std::make_shared<State>()) {
  // The thread owns what it uses: it may still be inside a store request when stop() lets it go.
  std::thread([state = state_, store = std::move(store), key = std::move(key), pairs = std::move(pairs)] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(state->mutex);
        if (state->wake.wait_for(lock, kCheckInterval, [&] { return state->stopping; })) return;
      }
      std::optional<std::string> why;
      try {
        if (!store->check({key})) {
          why = detail::concat("its key '", key, "' was deleted from ", store->describe());
        }
      } catch (const std::exception& e) {
        why = e.what();
      }
      std::lock_guard<std::mutex> lock(state->mutex);
      if (state->stopping) return;  // the connects ended meanwhile: the pairs are no longer the watch's
      if (!why) continue;
      // Pair::close() takes the pair's lock, which its waiting connect() released while it waits.
      for (auto* pair : pairs) pair->close();
      state->reason = std::move(why);
      state->fired.store(true, std::memory_order_release);
      return;
    }
  }).detach();
}

ConnectWatch::~ConnectWatch() { stop(); }

void ConnectWatch::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
}

std::optional<std::string> ConnectWatch::reason() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reason;
}

}  // namespace hvd::gloo_backend
