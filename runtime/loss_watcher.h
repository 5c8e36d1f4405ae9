// LossWatcher: tells the runtime at once when a control-plane connection closes under it, from a thread of
// its own, so that a rank blocked inside a collective learns that the job lost a peer.
//
// Why: the background thread reads the control plane only between collectives. While it runs one, a peer
// that died is noticed by Gloo alone, and Gloo does not always wake the waiter (gloo_backend/abort_signal.h:
// a send queued towards a dead peer sleeps until the Gloo timeout, 30 s by default). Every rank has a
// control connection that closes when the job loses a peer: the coordinator (rank 0) sees a dead worker's
// connection close at once, tells every worker to abort and closes its own connections; a worker sees the
// coordinator's connection close (the coordinator gave up, died or its host went away). The watcher sleeps
// in poll() on those sockets for exactly that (POLLRDHUP, POLLHUP, POLLERR: a peer's FIN or reset; it never
// reads, so the messages stay for the background thread) and on an eventfd that stop() signals. An idle or
// busy job pays nothing: no wake-up until a connection closes.
//
// Contract:
//   LossWatcher(fds, on_loss)  starts the thread; fds: (socket, what it connects to: "rank 3",
//                              "the coordinator (rank 0)"). The caller keeps the sockets open until stop().
//   on_loss(what)              runs on the watcher's thread, at most once, for the first connection that
//                              closes; the watcher then ends.
//   stop()                     wakes the thread and joins it; on_loss never runs after stop() returns.
//                              Idempotent; the destructor calls it. Call it before closing the sockets.
// Threading: construct and stop() from one thread (the runtime's background thread or init).
// Errors: the constructor throws NetworkError when it cannot create its eventfd or thread.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hvd::runtime {

class LossWatcher {
 public:
  LossWatcher(std::vector<std::pair<int, std::string>> fds, std::function<void(const std::string&)> on_loss);
  ~LossWatcher();
  LossWatcher(const LossWatcher&) = delete;
  LossWatcher& operator=(const LossWatcher&) = delete;

  void stop() noexcept;

 private:
  void run();

  std::vector<std::pair<int, std::string>> fds_;
  std::function<void(const std::string&)> on_loss_;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace hvd::runtime
