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
// after construction, so a connect that finishes in time costs no request) whether `key` still exists.
// Once it does not, or the store refuses to say (an ended elastic round's keys are answered with HTTP 410,
// a StoreError), it closes every pair given and records why. The connecting thread then finds its
// connects returned (or failing on closed pairs) and asks reason() what happened.
//
// Threading: construct and destroy on the connecting thread; reason() from that thread after stop().
// The pairs must outlive the watch.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"

namespace gloo::transport {
class Pair;
}

namespace hvd::gloo_backend {

class ConnectWatch {
 public:
  static constexpr std::chrono::milliseconds kCheckInterval{1000};

  ConnectWatch(std::shared_ptr<rendezvous::Store> store, std::string key, std::vector<gloo::transport::Pair*> pairs);
  ~ConnectWatch();  // stop()
  ConnectWatch(const ConnectWatch&) = delete;
  ConnectWatch& operator=(const ConnectWatch&) = delete;

  // Ends the watch and joins its thread (at most one store request long). Idempotent.
  void stop() noexcept;
  // After stop(): why the watch closed the pairs ("its key '<key>' was deleted from <store>", or the
  // store's error), or nullopt when it did not close them.
  const std::optional<std::string>& reason() const { return reason_; }

 private:
  void run();

  std::shared_ptr<rendezvous::Store> store_;
  std::string key_;
  std::vector<gloo::transport::Pair*> pairs_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<std::string> reason_;  // written by the thread before it exits
  std::thread thread_;                 // last: starts once the members above exist
};

}  // namespace hvd::gloo_backend
