#include "runtime/host_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <string>

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

bool sharesMachine(gloo_backend::Communicator& cross, gloo_backend::Communicator* local) {
  // A kernel's boot id is random at each boot, so equal ids are one running kernel. Where it cannot be read
  // the rank's id is its own cross rank, which no other rank's matches.
  std::array<char, 40> id{};
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (!std::getline(file, text) || text.empty()) text = "unread " + std::to_string(cross.rank());
  text.copy(id.data(), id.size() - 1);
  std::vector<char> ids(id.size() * static_cast<size_t>(cross.size()));
  cross.allgatherv(id.data(), ids.data(), std::vector<size_t>(static_cast<size_t>(cross.size()), id.size()));
  int32_t shared = 0;
  for (int r = 0; r < cross.size(); ++r) {
    const auto theirs = ids.begin() + r * static_cast<ptrdiff_t>(id.size());
    if (r != cross.rank() && std::equal(id.begin(), id.end(), theirs)) shared = 1;
  }
  if (local) local->allreduce(&shared, 1, gloo_backend::DataType::kInt32, gloo_backend::ReduceOp::kMax);
  return shared == 1;
}

}  // namespace hvd::runtime
