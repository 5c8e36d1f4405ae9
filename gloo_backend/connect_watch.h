// ConnectWatch: ends the pair connects of a rendezvous whose keys were dropped from the store.
//
// Why it exists (our reading of Debian's Gloo, 0.0~git20220518, gloo/transport/tcp/pair.{h,cc}): the
// listening side of a pair waits in Pair::connect for its peer to connect for 5 x the pair's timeout
// (150 s at HOROVOD_GLOO_TIMEOUT_SECONDS' default of 30), and nothing but Pair::close() from another
// thread ends that wait early (the wait's predicate is "state >= CONNECTED", and CLOSED comes after
// CONNECTED: connect() then returns as if it had connected, and every later use of the pair fails). In an
// elastic job a peer can publish its addresses and then leave for a later round before it connects (the
// driver began that round because hosts were added or a peer died); the rank left listening would wait
// out those 150 s for a peer that is not coming. The driver drops every key when it begins a round, so
// the rank's own key, which stays in the store from its publication until after the final barrier, tells
// whether the round is still on.
//
// While a ConnectWatch lives, its thread asks the store every kCheckInterval (the first time one interval
// after construction, so a connect that finishes in time costs no request) whether `key` still exists (a
// read of its value: the rank's address list, 44 + 2 x size bytes in the usual layout). Once it does not,
// or the store refuses to say (an ended elastic round's keys are answered with HTTP 410, a StoreError; an
// unreachable server fails the rendezvous's next request anyway), it closes every pair given and records
// why. The connecting thread sees fired() and stops connecting, and asks reason() what happened.
//
// stop() returns at once: a check in flight then finishes on its own and touches nothing (the thread
// closes pairs only under the lock that stop() takes, and never after it), so a slow store never holds up
// a rendezvous whose connects succeeded, and a late answer never closes pairs that connected.
//
// Threading: construct, stop and destroy on the connecting thread; fired() and reason() from any thread.
// The pairs must outlive stop().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace gloo::transport {
class Pair;
}

namespace hvd::gloo_backend {

class ConnectWatch {
 public:
  static constexpr std::chrono::milliseconds kCheckInterval{1000};

  ConnectWatch(std::shared_ptr<rendezvous::Store> store, std::string key,
               std::vector<gloo::transport::Pair*> pairs);
  ~ConnectWatch();  // stop()
  ConnectWatch(const ConnectWatch&) = delete;
  ConnectWatch& operator=(const ConnectWatch&) = delete;

  // Ends the watch: the pairs are not touched after it returns. Idempotent; never blocks on the store.
  void stop() noexcept;
  // Whether the watch closed the pairs.
  bool fired() const { return state_->fired.load(std::memory_order_acquire); }
  // Why the watch closed the pairs ("its key '<key>' was deleted from <store>", or the store's error), or
  // nullopt when it did not.
  std::optional<std::string> reason() const;

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    bool stopping = false;
    std::optional<std::string> reason;
    std::atomic<bool> fired{false};
  };
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive the watch
};

}  // namespace hvd::gloo_backend
