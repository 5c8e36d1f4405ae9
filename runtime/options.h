// RuntimeOptions: everything libhvd reads from the environment, parsed once at init.
//
// Variables read (all optional; defaults as Horovod's):
//   HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE   identity (0,1,0,1,0,1)
//   HOROVOD_HOSTNAME                      local scope name (default "localhost")
//   without HOROVOD_RANK: the variables of srun, Open MPI's mpirun or Hydra's mpiexec
//                                         (runtime/launcher_env.h): rank and size from them, local and cross
//                                         numbers derived at init from every rank's host name
//   HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT  the rendezvous server; required when SIZE > 1
//   HVD_RENDEZVOUS                        HOST:PORT ([V6]:PORT) of the server, for job scripts; the pair
//                                         above wins when HOROVOD_GLOO_RENDEZVOUS_ADDR is set
//   HVD_RENDEZVOUS_TOKEN                  the job's secret for the server (set by hvdrun)
//   HOROVOD_GLOO_IFACE                    network interface for Gloo and the control plane
//   HOROVOD_GLOO_TIMEOUT_SECONDS          rendezvous and every collective (30)
//   HOROVOD_FUSION_THRESHOLD              fusion buffer bytes (1 MiB, Horovod's is 128 MiB: see docs/runtime.md;
//                                         0 disables fusion)
//   HOROVOD_CYCLE_TIME                    fusion window in ms (1; a lone operation never waits)
//   HOROVOD_CACHE_CAPACITY                response cache entries (1024; 0 disables)
//   HOROVOD_TIMELINE, HOROVOD_TIMELINE_MARK_CYCLES   Chrome-trace file written by rank 0
//   HOROVOD_STALL_CHECK_DISABLE, HOROVOD_STALL_CHECK_TIME_SECONDS (60),
//   HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0 = never)
//   HOROVOD_LOG_LEVEL                     trace|debug|info|warning|error|fatal (warning)
//   HOROVOD_DYNAMIC_PROCESS_SETS          1: process sets may be added and removed after init
//   HVD_DISABLE_GPU_PINNING               1: do not select a CUDA device at init
//   HOROVOD_HIERARCHICAL_ALLREDUCE        1: allreduce within hosts over shared memory, across hosts over Gloo
//                                         (several ranks on each of several hosts; default 0)
//   HVD_SHARED_MEMORY                     0: ranks of one host exchange data over TCP (Gloo), and control
//                                         messages over the socket, instead of shared memory (default 1)
//   HVD_SHM_SINGLE_COPY                   0: large shared-memory messages copy through the segment even where
//                                         the ranks could read each other's memory (default 1)
//   HVD_SHM_EAGER_BROADCAST               1: a shared-memory broadcast root returns without waiting for its
//                                         readers, and stages an agreed one before announcing it (default 0)
//   HOROVOD_ELASTIC                       1: an elastic job (hvdrun sets it): the rendezvous scopes carry the
//                                         round (HVD_ELASTIC_ROUND, set by hvdrun at start), and an init
//                                         after a shutdown asks the server for this slot's place in the next
//                                         round, waiting up to HOROVOD_ELASTIC_TIMEOUT seconds (600); init's
//                                         rendezvous waits that long for the round's other ranks too
//   HVD_ELASTIC_STANDBY                   1: started by hvdrun outside any round (a replacement, a new host):
//                                         the first init waits for a round that includes this slot
//   CUDA_VISIBLE_DEVICES                  honoured by the CUDA runtime when pinning
//   HVD_REPORT_INTERVAL_SECONDS           seconds between this worker's reports to the rendezvous server's
//                                         status view (runtime/reporter.h; 1, fractions allowed; 0: none)
//   HVD_WORKER_ID                         the launcher's number for this worker, sent in the reports
// Invalid values (not a number, out of range, inconsistent identity) throw UsageError naming the
// variable and the value.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "base/slot.h"
#include "rendezvous/store.h"
#include "runtime/autotune.h"
#include "runtime/launcher_env.h"
#include "runtime/negotiation_options.h"

namespace hvd::runtime {

enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError, kFatal };

struct RuntimeOptions : SlotInfo, NegotiationOptions {
  std::string hostname = "localhost";

  std::optional<std::string> rendezvous_addr;
  int rendezvous_port = -1;
  std::optional<std::string> token;

  std::string iface;
  std::chrono::milliseconds gloo_timeout{rendezvous::Store::kDefaultTimeout};

  std::chrono::microseconds cycle_time{1000};

  std::optional<std::string> timeline_path;
  bool timeline_mark_cycles = false;

  bool dynamic_process_sets = false;

  LogLevel log_level = LogLevel::kWarning;
  bool gpu_pinning = true;
  bool shared_memory = true;
  bool shm_single_copy = true;  // HVD_SHM_SINGLE_COPY
  bool shm_eager_broadcast = false;  // HVD_SHM_EAGER_BROADCAST (runtime/shm/transport.h: Eager broadcast)
  // HOROVOD_HIERARCHICAL_ALLREDUCE. Unset: hierarchical wherever the job can run it (several hosts with
  // the same number of ranks, shared memory on), because it measured as fast or faster there; Horovod's
  // default is flat. 1: asked for (a warning where it cannot run); 0: flat.
  std::optional<bool> hierarchical_allreduce;
  bool hierarchical_allgather = false;
  // HOROVOD_AUTOTUNE and its HOROVOD_AUTOTUNE_* settings (runtime/autotune.h). What the environment sets
  // explicitly (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_HIERARCHICAL_ALLREDUCE) is not tuned.
  bool autotune = false;
  AutotuneOptions autotune_options;
  // HVD_BUSY_POLL_US: after any activity the background thread polls its sockets without sleeping
  // for this long (yielding the core between polls), and a waiting caller polls its operation for up
  // to half of it, so back-to-back small operations skip the tens of microseconds a wake-up takes.
  // An idle job still sleeps. 0: always sleep. Unset (nullopt): kDefaultBusyPoll, or 0 when a host
  // has more ranks than cores (the union of its ranks' affinity masks, host_cores.h), where every poll
  // would take a core from a rank that has work.
  std::optional<std::chrono::microseconds> busy_poll;
  static constexpr std::chrono::microseconds kDefaultBusyPoll{200};
  // HVD_WAIT_DRIVES: a caller that waits for a lone small operation runs the background thread's work itself
  // while it polls (the busy-poll half above), instead of only watching for the background thread to finish
  // it: a small operation then costs no hand-off between threads. 0: the caller only polls.
  bool wait_drives = true;
  // HVD_MOVE_THREADS: on a host whose CPUs do not outnumber its ranks' callers and background threads (and
  // where each rank has a CPU), keep each rank's threads together and the ranks' data-path threads apart: a
  // caller that waits for the background thread moves to its CPU, and a thread that waits in a shared-memory
  // round for a peer on its own CPU moves off it (runtime/thread_moves.h). 0: the kernel alone places them.
  bool move_threads = true;
  // HVD_FAST_PATH: in a job on one host, a lone response cache hit is agreed on in the shared-memory
  // segment instead of being negotiated through rank 0 (runtime/agreement.cc). 0: always negotiate.
  bool shm_agreement = true;

  // Elastic jobs (docs/elastic.md): the round this process runs in, and how long a re-initialization
  // waits for the driver to form the next one and for the round's other members to arrive.
  bool elastic = false;
  uint64_t elastic_round = 0;
  std::chrono::seconds elastic_timeout{600};
  // How long init's rendezvous waits for the other ranks: gloo_timeout, or in an elastic job
  // elastic_timeout, since the survivors of the last round reach a new one only at their next commit.
  std::chrono::milliseconds rendezvousTimeout() const {
    return elastic ? std::chrono::milliseconds(elastic_timeout) : gloo_timeout;
  }
  // A process the driver started outside any round (HVD_ELASTIC_STANDBY=1: a replacement, or a new host's):
  // its first init waits for the first round that takes its slot in, as a re-initialization does.
  bool elastic_standby = false;
  // The local rank the process was started with (HOROVOD_LOCAL_RANK): with HOROVOD_HOSTNAME it names the
  // process's slot in every round, and it chooses the GPU, so a process keeps its device when a round
  // renumbers the ranks of its host (local_rank is the round's).
  int slot_local_rank = 0;
  // "<HOROVOD_HOSTNAME>:<slot_local_rank>": this process's slot, which keeps its identity across rounds.
  std::string slot() const { return hostname + ":" + std::to_string(slot_local_rank); }

  // Reports to the rendezvous server's status view (runtime/reporter.h): every report_interval while the
  // runtime runs (zero: none), naming the worker by worker_id when the launcher gave one.
  std::chrono::milliseconds report_interval{1000};
  std::optional<int> worker_id;

  // Started by srun, mpirun or mpiexec rather than hvdrun (no HOROVOD_RANK): that launcher's rank, size and
  // what it said about the host. local_rank, local_size, cross_rank and cross_size are not known from the
  // environment then and hold 0, 1, 0, 1 until numberByHost() sets them; hostname is launcherHostName().
  std::optional<LauncherIdentity> launcher;

  // Launcher-started workers: every rank publishes its host name through `store` and takes Horovod's
  // local and cross numbers from the whole job's (launcher_env.h, exchangeHosts). Collective: every rank
  // of the job calls it, in the same order relative to other inits. Nothing to do without a launcher.
  // Throws UsageError (the launcher's numbers and the host names disagree; the same on every rank) or
  // RendezvousTimeout (ranks missing).
  void numberByHost(rendezvous::Store& store);

  // Reads the variables above through getenv (injectable for tests) and validates them. SIZE > 1
  // without a rendezvous server is a UsageError (Horovod silently runs every rank as a single process
  // then), and so are a partial or contradictory launcher environment (launcher_env.h).
  static RuntimeOptions fromEnvironment(const std::function<const char*(const char*)>& getenv);
  static RuntimeOptions fromEnvironment();

  // Throws UsageError for an inconsistent identity (rank >= size, ...).
  void validate() const;
};

}  // namespace hvd::runtime
