// --bind-to core's view of a host (launcher/cpu_binding.h): CPUs grouped into cores by a sysfs topology that
// the test writes (hardware threads of one core together, a CPU without topology a core of its own), the
// order of the cores, and the CPU lists as messages print them. The binding itself is applied and checked
// by real jobs (job_test.cc, agent_test.cc, the ssh loopback test).
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "launcher/cpu_binding.h"

using namespace hvd::launcher;
namespace fs = std::filesystem;

namespace {

// A sysfs cpu folder in a fresh temporary directory: cpuN/topology/{physical_package_id,core_id}.
struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("hvd-cpu-binding-" + std::to_string(::getpid()));
  FakeSysfs() { fs::remove_all(root); }
  ~FakeSysfs() { fs::remove_all(root); }
  void cpu(int n, int package, int core) {
    const fs::path dir = root / ("cpu" + std::to_string(n)) / "topology";
    fs::create_directories(dir);
    std::ofstream(dir / "physical_package_id") << package << "\n";
    std::ofstream(dir / "core_id") << core << "\n";
  }
};

}  // namespace

TEST_CASE("cores: hardware threads of a core together, ordered by their lowest CPU") {
  FakeSysfs sys;
  // Two packages of two cores, two threads each, numbered as Linux often does: thread siblings 4 apart.
  for (int cpu = 0; cpu < 8; ++cpu) sys.cpu(cpu, cpu % 4 / 2, cpu % 2);
  CHECK(coresOf({0, 1, 2, 3, 4, 5, 6, 7}, sys.root.string()) ==
        std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // Only the CPUs the starter may use count: a mask that splits a core keeps the part it has.
  CHECK(coresOf({1, 2, 5}, sys.root.string()) == std::vector<std::vector<int>>{{1, 5}, {2}});
  // Core ids repeat across packages: package 1's core 0 is not package 0's.
  FakeSysfs two;
  two.cpu(0, 0, 0);
  two.cpu(1, 1, 0);
  CHECK(coresOf({0, 1}, two.root.string()) == std::vector<std::vector<int>>{{0}, {1}});
}

TEST_CASE("cores: a CPU whose topology cannot be read is a core of its own") {
  FakeSysfs sys;
  sys.cpu(0, 0, 0);
  sys.cpu(2, 0, 0);
  CHECK(coresOf({0, 1, 2, 3}, sys.root.string()) == std::vector<std::vector<int>>{{0, 2}, {1}, {3}});
  CHECK(coresOf({}, sys.root.string()).empty());
}

TEST_CASE("CPU lists print as taskset and /proc/PID/status do") {
  CHECK(cpuList({}) == "");
  CHECK(cpuList({3}) == "3");
  CHECK(cpuList({0, 1, 2, 3}) == "0-3");
  CHECK(cpuList({0, 2, 3, 4, 8, 10, 11}) == "0,2-4,8,10-11");
}

TEST_CASE(
    "bindToCore: this process's cores, one per index; beyond them an error naming the host and its CPUs") {
  const auto cores = coresOf(allowedCpus());
  REQUIRE(!cores.empty());
  for (size_t i = 0; i < cores.size(); ++i) {
    const CoreBinding b = bindToCore(static_cast<int>(i), 7, "here");
    REQUIRE(b.mask.has_value());
    CHECK(b.error.empty());
    CHECK(b.cpus == cpuList(cores[i]));
    CHECK(b.failed_prefix ==
          "hvdrun: rank 7: --bind-to core: cannot bind it to CPUs " + b.cpus + " of here: ");
    CHECK(CPU_COUNT(&*b.mask) == static_cast<int>(cores[i].size()));
    for (int cpu : cores[i]) CHECK(CPU_ISSET(cpu, &*b.mask));
  }
  const CoreBinding beyond = bindToCore(static_cast<int>(cores.size()), 7, "here");
  CHECK(!beyond.mask.has_value());
  CHECK(beyond.error == "hvdrun: rank 7: --bind-to core: here has " + std::to_string(cores.size()) +
                            (cores.size() == 1 ? " core" : " cores") + " for the job's workers (CPUs " +
                            cpuList(allowedCpus()) + "), too few for worker " +
                            std::to_string(cores.size() + 1) + " of that host\n");
}
