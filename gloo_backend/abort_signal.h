// AbortSignal: lets a thread other than the one running a collective make every Gloo operation in flight,
// and every later one, fail at once with a given error.
//
// Why it exists (our reading of Debian's Gloo, 0.0~git20220518, gloo/transport/tcp/pair.cc): when a TCP pair
// fails (its peer died: EOF, reset, EPIPE), Pair::signalException wakes the waiters of every operation it
// knows about except one kind -- a send of an unbound buffer that was partly written and queued in the
// pair's transmit queue (tx_) because the socket's buffer was full. That loop wakes only operations on
// pre-registered buffers (op.buf) and skips unbound ones (op.ubuf). A rank whose ring allreduce was
// pushing a segment to the peer that died then sleeps in UnboundBuffer::waitSend until Gloo's timeout
// (HOROVOD_GLOO_TIMEOUT_SECONDS, 30 s by default), although the pair itself knew of the failure at once.
// Whether the segment was still queued when the peer died is a matter of timing: a race, seen about once
// in 40 runs of a 3-rank 16 MiB ring beside two busy processes.
//
// The cure: Communicator creates the unbound buffers of its operations itself and attaches each to the
// signal for as long as the operation runs; the runtime, told by its control plane that a peer is gone
// (runtime/loss_watcher.h), calls abort(). Gloo's public interface offers one way to wake a waiter from
// outside: UnboundBuffer::abortWaitSend() / abortWaitRecv(), after which the wait returns as if done (its
// "aborted" result is ignored by Gloo's algorithms, which go on to their next step). So abort() keeps
// waking the attached buffers every kRepeat until the operation let go of them (it unwound, or ran its
// remaining steps into the sockets that its peers closed meanwhile), and the raised signal is sticky: the
// Communicator fails every operation that overlapped it, whatever Gloo returned, so data that went through
// an aborted wait is never reported as a result. Waits on Gloo's own internal buffers (the ring's receive
// scratch) end as their peers give up and close their sockets, which Gloo does report.
// (Gloo's tcp::UnboundBuffer::signalException would be the direct way, but Debian's package lacks
// gloo/common/memory.h, which the TCP transport's headers include.)
//
// Threading: every member is thread-safe. abort() may run while the background thread is inside Gloo.
#pragma once

#include <chrono>
#include <exception>
#include <mutex>
#include <vector>

namespace hvd::gloo_backend {

class AbortSignal {
 public:
  // How often abort() wakes the attached targets again, and for how long at most (then the Gloo
  // timeout of the operation still bounds it).
  static constexpr std::chrono::milliseconds kRepeat{1};
  static constexpr std::chrono::milliseconds kPersistence{10000};

  // What abort() wakes: an operation's buffer (see communicator.cc). wake() must not block.
  class Target {
   public:
    virtual void wake() noexcept = 0;

   protected:
    ~Target() = default;
  };

  // Raises the signal with error (the first error wins), then wakes every attached target, again every
  // kRepeat, until none is attached or kPersistence passed; returns then. Never throws.
  void abort(std::exception_ptr error) noexcept;
  // The error abort() was given, or null. An operation that ran while it was raised has failed.
  std::exception_ptr error() const;

  // A target lives between attach and detach. attach wakes it at once when the signal is raised.
  void attach(Target* target);
  void detach(Target* target) noexcept;

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  std::vector<Target*> targets_;
};

}  // namespace hvd::gloo_backend
