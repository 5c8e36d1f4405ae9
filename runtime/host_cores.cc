#include "runtime/host_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

namespace hvd::runtime {

std::vector<uint8_t> ownCpus() {
  std::vector<uint8_t> cpus(CPU_SETSIZE, 0);
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) cpus[c] = CPU_ISSET(c, &set) ? 1 : 0;
  } else {
    const long online = std::clamp<long>(::sysconf(_SC_NPROCESSORS_ONLN), 1, CPU_SETSIZE);
    std::fill(cpus.begin(), cpus.begin() + online, 1);
  }
  return cpus;
}

int countCpus(const std::vector<uint8_t>& cpus) {
  return static_cast<int>(std::count_if(cpus.begin(), cpus.end(), [](uint8_t c) { return c != 0; }));
}

int hostCores(gloo_backend::Communicator& local) {
  std::vector<uint8_t> cpus = ownCpus();
  // The union: a CPU is in it where any rank's byte is 1.
  local.allreduce(cpus.data(), cpus.size(), gloo_backend::DataType::kUInt8, gloo_backend::ReduceOp::kMax);
  return countCpus(cpus);
}

}  // namespace hvd::runtime
