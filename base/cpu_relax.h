// cpuRelax(): the CPU's spin-wait hint (x86 PAUSE, Arm YIELD), for loops that poll memory another core
// writes: it lets the sibling hyper-thread run and saves the pipeline flush when the awaited value arrives.
// Costs tens of nanoseconds, never a system call; elsewhere it does nothing.
#pragma once

namespace hvd {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace hvd
