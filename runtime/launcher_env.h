// Workers started without hvdrun: their identity from the variables of the launcher that started them
// (srun, Open MPI's mpirun, MPICH's Hydra mpiexec), and the local and cross numbers those launchers do
// not give, derived at init from the host names every rank publishes in the rendezvous store.
//
// Contract:
//   launcherIdentity(getenv)   reads the launchers' variables; nullopt when none started this process.
//                              Throws UsageError, one line naming the variables and their values, for a
//                              partial set (a rank without a size, ...), rank >= size, and two launchers
//                              that disagree. Pure: reads nothing but getenv.
//   numberByHost(hosts, ...)   Horovod's numbering of ranks whose host names are known, checked against
//                              what the launcher said; UsageError when they disagree. Pure.
//   exchangeHosts(store, ...)  every rank publishes its host, rank 0 checks the whole job and publishes the
//                              result, every rank numbers itself from it: the same answer, or the same
//                              error, on every rank.
//
// Precedence (docs/runtime.md, "Workers started without hvdrun"): HOROVOD_RANK set (hvdrun, horovodrun)
// makes every launcher variable irrelevant; otherwise Open MPI, then PMI (Hydra; also Slurm's PMI-2
// plugin), then a task of an srun step. An MPI launcher wins over Slurm without a comparison: mpirun and
// mpiexec inside an allocation start their per-node proxies with srun, so their workers inherit the
// proxies' step variables (one task per node), which differ from the MPI ranks by design.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hvd::rendezvous {
class Store;
}

namespace hvd::runtime {

using Getenv = std::function<const char*(const char*)>;

enum class Launcher { kOpenMpi, kPmi, kSlurm };

// "Open MPI", "Hydra (PMI)", "srun".
const char* launcherName(Launcher launcher);

// What a launcher says about a rank's host, -1 where it says nothing; checked against the host names at
// init, never used in their place.
struct HostClaim {
  int local_rank = -1;
  int local_size = -1;
  int node = -1;  // SLURM_NODEID: ranks with the same node id must have the same host name, and only they
  // The variable names behind local_rank, local_size and node, for messages ("" when not given).
  std::string local_rank_var, local_size_var, node_var;
};

struct LauncherIdentity : HostClaim {
  Launcher launcher = Launcher::kSlurm;
  int rank = 0;
  int size = 1;
  // "OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=3": the variables read, for messages.
  std::string described;
  // Names this launcher's job (Slurm job and step, Open MPI's job id), so two jobs served by one
  // rendezvous daemon do not meet under the same keys; "" when the launcher names none.
  std::string job;
};

// The launcher that started this process, from its variables; nullopt when there is none. Slurm's
// variables count only in a task of a job step: SLURM_STEP_ID (or SLURM_STEPID) set to a step number.
// A batch script's shell and an salloc shell carry SLURM_PROCID=0 and SLURM_NTASKS of the allocation
// but no step id, or the id of the batch, extern or interactive step, and a program they run directly is
// one process, not rank 0 of an srun.
std::optional<LauncherIdentity> launcherIdentity(const Getenv& getenv);

// One rank's entry in the exchange: its host name and what its launcher said about it.
struct HostEntry : HostClaim {
  std::string host;
};

struct HostNumbers {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

// Horovod's numbering (MPI's split by host, then by local rank): a rank's local rank counts the lower
// ranks with its host name, its local size all ranks with that name; its cross rank counts the lower
// ranks with its local rank, its cross size all ranks with that local rank. Right for any layout:
// uneven hosts, ranks of one host not numbered together (srun --distribution=cyclic, mpirun --map-by
// node). Throws UsageError when an entry's launcher values disagree with the host names (a name shared by
// two nodes, one node under two names), naming the rank, the variables and the name.
std::vector<HostNumbers> numberByHost(const std::vector<HostEntry>& entries);

// The exchange, under keys "<scope>/<rank>" and "<scope>/hosts" of `store` (removed again once every rank
// has read them). Waits up to `timeout` for the other ranks (RendezvousTimeout naming the missing ones).
HostNumbers exchangeHosts(rendezvous::Store& store, const std::string& scope, int rank, int size,
                          const HostEntry& mine, std::chrono::milliseconds timeout);

// The host name a launcher-started worker goes by: HOROVOD_HOSTNAME, else SLURMD_NODENAME (the Slurm node
// running the task or the proxy that started it), else the system's host name.
std::string launcherHostName(const Getenv& getenv);

}  // namespace hvd::runtime
