// CPU affinity helpers shared by the C++ tests that bind threads to cores.
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <vector>

namespace hvd::test {

// The CPUs the calling thread may run on, in order; empty when its mask cannot be read.
inline std::vector<int> allowedCpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Sets the mask of thread `tid` (0: the calling thread) to `cpus`; false when the kernel refuses.
inline bool setCpus(const std::vector<int>& cpus, pid_t tid = 0) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return ::sched_setaffinity(tid, sizeof set, &set) == 0;
}

// Binds the calling thread to one CPU; false when the kernel refuses.
inline bool pinTo(int cpu) { return setCpus({cpu}); }

}  // namespace hvd::test
