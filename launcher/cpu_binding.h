// --bind-to core: the CPUs a worker is bound to, as mpirun's --bind-to core binds its ranks.
//
// The cores of a host are those the process that starts its workers may run on (hvdrun here, hvd-proxy on a
// remote host or in a Slurm step), each core being all of its hardware threads: the CPUs of that process's
// affinity mask grouped by /sys/devices/system/cpu/cpuN/topology/{physical_package_id,core_id}, a CPU whose
// topology cannot be read counting as a core of its own. Cores are ordered by their lowest CPU, and the
// worker with index i among its host's workers (its local rank) is bound to the i-th. More workers than cores
// on a host is an error for that worker (mpirun refuses to bind more processes than cores too): wrapping
// around would put two ranks on one core while others stay idle.
//
// The binding is applied between fork and exec, so that every thread the worker starts (torch's intra-op
// pool, libhvd's background thread) inherits it.
#pragma once

#include <sched.h>

#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

// The cores of `cpus`, each as its CPUs in ascending order, cores ordered by their lowest CPU. `sysfs_cpu`
// is the directory with the cpuN/topology folders (tests give another).
std::vector<std::vector<int>> coresOf(const std::vector<int>& cpus,
                                      const std::string& sysfs_cpu = "/sys/devices/system/cpu");

// The CPUs this process may run on (its affinity mask), ascending.
std::vector<int> allowedCpus();

// "0-3,8": CPUs as a list with ranges, as /proc/PID/status and taskset print them.
std::string cpuList(const std::vector<int>& cpus);

// What rank `rank`, the worker with `index` among its host's workers, is bound to: the index-th core of this
// process's cores. Built before fork(); the child applies it with applyCoreBinding().
struct CoreBinding {
  std::optional<cpu_set_t> mask;  // the core's CPUs; empty when `error` says why not
  std::string cpus;               // the same as a list ("2,6")
  // "hvdrun: rank R: --bind-to core: H has N cores ... too few for worker K of that host\n"
  std::string error;
  // "hvdrun: rank R: --bind-to core: cannot bind it to CPUs L of H: ", followed by the errno text
  std::string failed_prefix;
};
CoreBinding bindToCore(int index, int rank, const std::string& host);

// In a child between fork and exec, stderr already its own: binds the calling process as `binding` says.
// False after writing the line that says why not (`error`, or `failed_prefix` and the errno text); the child
// then exits 127, as for a program that cannot be executed.
bool applyCoreBinding(const CoreBinding& binding);

}  // namespace hvd::launcher
