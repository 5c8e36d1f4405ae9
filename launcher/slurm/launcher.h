// The Slurm transport: hvd::launcher::Launcher over one srun step, as MPICH Hydra and Open MPI start their
// per-node daemons inside an allocation (no ssh keys needed).
//
//   auto slurm = hvd::launcher::slurm::makeLauncher(io, options);
//   slurm->preflight(hosts);                       // srun must be found (LaunchError otherwise)
//   slurm->checkRendezvousReachable(hosts, address, port);
//   for each rank: workers.push_back(slurm->start(spec, events));
//
// checkRendezvousReachable listens on `address` (the one chosen for the rendezvous server, so a node that
// reaches this listener reaches the server too) and runs ONE step over every host:
//     srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=h1,h2,... --cpu-bind=none --whole
//          --mpi=none --input=none --kill-on-bad-exit=0 --job-name=hvd-proxy  hvd-proxy --connect ADDR:PORT
// with hvdrun's environment plus the job's token in HVD_PROXY_TOKEN (never on a command line). Each node's
// hvd-proxy (launcher/ssh/proxy.h) connects back, presents the token and its node name, and from then on
// starts that node's ranks and forwards their output, exits and signals exactly as over ssh
// (launcher/ssh/proxy_host.h). It blocks until every node's proxy joined (heartbeats keep the early ones
// alive), and throws LaunchError naming the nodes that did not, with srun's last line, when srun ends first
// or after SlurmOptions::join_timeout.
//
// --whole gives the step every CPU of each node and --cpu-bind=none leaves the ranks unbound, so the ranks a
// proxy starts are not confined to the one CPU a task of that step would get.
//
// Teardown: closing the connections ends every proxy (SIGTERM, then SIGKILL, to its ranks) and with them the
// step; srun gets SIGTERM and then SIGKILL if it outlives them. srun dies with hvdrun (PR_SET_PDEATHSIG), and
// a proxy whose connection closes tears its ranks down, so a SIGKILLed hvdrun leaves nothing on any node. A
// proxy also tears down on SIGTERM (scancel).
// Threading: construct, start and destroy on the job's io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/launcher.h"

namespace hvd::launcher::slurm {

struct SlurmOptions {
  std::string srun = "srun";  // looked up in PATH
  // hvd-proxy on the nodes; empty: next to the running executable (the same install prefix everywhere).
  std::string proxy_path;
  int stdin_fd = 0;  // rank 0's forwarded stdin
  std::chrono::milliseconds join_timeout{60000};
  // Extra srun arguments (HVD_SRUN_ARGS, split on spaces), placed before the program.
  std::vector<std::string> extra_args;

  // HVD_SRUN (the srun program), HVD_SRUN_ARGS, HVD_SSH_PROXY_PATH (shared with ssh).
  static SlurmOptions fromEnvironment();
};

// The srun command line of the proxies' step (for messages, dry runs and tests).
std::vector<std::string> srunCommand(const SlurmOptions& options, const std::vector<HostSpec>& hosts,
                                     const std::string& proxy, const std::string& connect_to);

std::unique_ptr<Launcher> makeLauncher(boost::asio::io_context& io, const SlurmOptions& options);

}  // namespace hvd::launcher::slurm
