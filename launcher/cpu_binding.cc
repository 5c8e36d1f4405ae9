#include "launcher/cpu_binding.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "base/error.h"

namespace hvd::launcher {
namespace {

std::optional<long> readNumber(const std::string& path) {
  std::ifstream in(path);
  long value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

}  // namespace

std::vector<std::vector<int>> coresOf(const std::vector<int>& cpus, const std::string& sysfs_cpu) {
  // Key: (package, core), or (-1, cpu) for a CPU whose topology is unknown.
  std::map<std::pair<long, long>, std::vector<int>> by_core;
  for (int cpu : cpus) {
    const std::string dir = sysfs_cpu + "/cpu" + std::to_string(cpu) + "/topology/";
    const auto package = readNumber(dir + "physical_package_id");
    const auto core = readNumber(dir + "core_id");
    const auto key =
        package && core ? std::make_pair(*package, *core) : std::make_pair(-1L, static_cast<long>(cpu));
    by_core[key].push_back(cpu);
  }
  std::vector<std::vector<int>> cores;
  for (auto& [key, members] : by_core) {
    std::sort(members.begin(), members.end());
    cores.push_back(std::move(members));
  }
  std::sort(cores.begin(), cores.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return cores;
}

std::vector<int> allowedCpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  }
  return cpus;
}

std::string cpuList(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text.push_back(',');
    text.append(std::to_string(cpus[i]));
    if (j > i) {
      text.push_back('-');
      text.append(std::to_string(cpus[j]));
    }
    i = j + 1;
  }
  return text;
}

CoreBinding bindToCore(int index, int rank, const std::string& host) {
  const auto cpus = allowedCpus();
  const auto cores = coresOf(cpus);
  CoreBinding b;
  if (index < 0 || static_cast<size_t>(index) >= cores.size()) {
    b.error = detail::concat("hvdrun: rank ", rank, ": --bind-to core: ", host, " has ", cores.size(),
                             cores.size() == 1 ? " core" : " cores", " for the job's workers (CPUs ",
                             cpuList(cpus), "), too few for worker ", index + 1, " of that host\n");
    return b;
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : cores[static_cast<size_t>(index)]) CPU_SET(cpu, &mask);
  b.mask = mask;
  b.cpus = cpuList(cores[static_cast<size_t>(index)]);
  b.failed_prefix = detail::concat("hvdrun: rank ", rank, ": --bind-to core: cannot bind it to CPUs ", b.cpus,
                                   " of ", host, ": ");
  return b;
}

bool applyCoreBinding(const CoreBinding& binding) {
  const auto say = [](const char* text, size_t size) {
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, size);
  };
  if (!binding.mask) {
    say(binding.error.data(), binding.error.size());
    return false;
  }
  if (::sched_setaffinity(0, sizeof(cpu_set_t), &*binding.mask) == 0) return true;
  const char* why = std::strerror(errno);
  say(binding.failed_prefix.data(), binding.failed_prefix.size());
  say(why, std::strlen(why));
  say("\n", 1);
  return false;
}

}  // namespace hvd::launcher
