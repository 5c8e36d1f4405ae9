#include "runtime/thread_moves.h"

#include <sched.h>

namespace hvd::runtime {
namespace {

// Narrows the calling thread's mask to `to` (the kernel migrates it now), then restores `allowed`.
bool moveWithin(const cpu_set_t& allowed, const cpu_set_t& to) {
  if (CPU_COUNT(&to) == 0) return false;
  if (::sched_setaffinity(0, sizeof to, &to) != 0) return false;
  ::sched_setaffinity(0, sizeof allowed, &allowed);
  return true;
}

bool readMask(cpu_set_t& allowed) {
  CPU_ZERO(&allowed);
  return ::sched_getaffinity(0, sizeof allowed, &allowed) == 0;
}

}  // namespace

bool moveTo(int cpu) {
  cpu_set_t allowed;
  if (cpu < 0 || cpu >= CPU_SETSIZE || ::sched_getcpu() == cpu || !readMask(allowed) ||
      !CPU_ISSET(cpu, &allowed)) {
    return false;
  }
  cpu_set_t to;
  CPU_ZERO(&to);
  CPU_SET(cpu, &to);
  return moveWithin(allowed, to);
}

bool moveOff(int cpu) {
  cpu_set_t allowed;
  if (cpu < 0 || cpu >= CPU_SETSIZE || ::sched_getcpu() != cpu || !readMask(allowed)) return false;
  cpu_set_t to = allowed;
  CPU_CLR(cpu, &to);
  return moveWithin(allowed, to);
}

bool MovePacer::due() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return false;
  next_ = now + period_;
  return true;
}

}  // namespace hvd::runtime
