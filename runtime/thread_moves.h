// Moving the calling thread to another CPU without binding it. Its affinity mask is narrowed, which makes the
// kernel migrate it at once, and then set back to the mask it had: the thread stays free to run wherever it
// could before, and the kernel may move it again later.
//
// Why (HVD_MOVE_THREADS; docs/runtime.md, Thread placement, has the measurements): a rank on a host with
// fewer CPUs than its ranks' callers and background threads runs best with its two threads on one CPU and the
// other ranks' threads elsewhere. The kernel balances runnable threads by count, not by who waits for whom,
// and keeps any balanced placement, also one with both ranks' background threads on one CPU, where every
// shared-memory round waits for a context switch.
//
// Both return whether the thread moved. Nothing changes (false) when the mask cannot be read or set, allows
// no CPU to go to, or when the thread already is where it would go.
#pragma once

#include <chrono>

namespace hvd::runtime {

// Onto `cpu`, if the calling thread's mask allows it.
bool moveTo(int cpu);
// Onto another CPU than `cpu` that the calling thread's mask allows (the kernel picks which).
bool moveOff(int cpu);

// At most one move per period for the thread that owns it (a move costs two system calls and a migration).
class MovePacer {
 public:
  explicit MovePacer(std::chrono::milliseconds period = std::chrono::milliseconds(10)) : period_(period) {}
  // True at most once per period; the caller then moves.
  bool due();

 private:
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace hvd::runtime
