// The agent transport: hvd::launcher::Launcher through a program the user names, as Open MPI's
// plm_rsh_agent and MPICH Hydra's -launcher-exec replace ssh. It lets any scheduler that can run a command on
// a host (a Dask cluster, a container orchestrator, a batch system without srun) start hvdrun's ranks,
// static or elastic, without a transport of its own in hvdrun.
//
//   hvdrun --launcher-agent "python3 -m hvd.executor.dask_agent" -np 4 -H 10.0.0.2:2,10.0.0.3:2 train.py
//
// For every rank, hvdrun runs on this machine
//     AGENT... HOST PROXY --connect ADDRESS:PORT
// AGENT being the --launcher-agent words (split on spaces), HOST the rank's host as the plan names it, PROXY
// the hvd-proxy program (next to hvdrun, or HVD_SSH_PROXY_PATH), and ADDRESS:PORT a listener of hvdrun's on
// the rendezvous server's address. The agent's environment is hvdrun's plus HVD_PROXY_TOKEN (the job's
// secret, never on a command line) and HVD_PROXY_NAME (a name unique within the job). The agent's one duty:
// make `PROXY --connect ADDRESS:PORT` run on HOST with both variables in its environment, and keep it
// running (the agent may exit once the proxy connected, or stay until it ends). The proxy connects back and
// presents the token and its name; from then on the rank is started, its output and exit forwarded and its
// signals delivered exactly as under srun (launcher/slurm/launcher.h). One proxy serves one rank, so an agent
// may pick, per rank, the process slot the rank will occupy.
//
// The hosts an agent reaches need not name their interfaces as this machine does (containers, network
// namespaces, heterogeneous nodes): ranks get no HOROVOD_GLOO_IFACE unless --network-interface names one, and
// each takes the local address that routes to the rendezvous server.
//
// Errors, each ending that rank's start as a lost worker (kLost) with the reason: the agent ends before its
// proxy connected ("the launcher agent for rank R on H ended with exit code N before hvd-proxy connected
// back: <its last line>"), or the proxy has not connected within AgentOptions::join_timeout (the agent is
// then stopped). preflight throws LaunchError when the agent program is not found. The agent's own output
// goes to hvdrun's stderr, each line prefixed "hvdrun: agent for rank R on H: ".
//
// Teardown: closing a proxy's connection ends it (SIGTERM, then SIGKILL, to its rank); agents still running
// when the launcher is destroyed get SIGTERM, then SIGKILL; every agent dies with hvdrun (PR_SET_PDEATHSIG).
// Threading: construct, start and destroy on the job's io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/launcher.h"

namespace hvd::launcher::agent {

struct AgentOptions {
  std::vector<std::string> command;  // the agent and its first arguments; command[0] looked up in PATH
  // hvd-proxy on the hosts; empty: next to the running executable (the same install prefix everywhere).
  std::string proxy_path;
  int stdin_fd = 0;  // rank 0's forwarded stdin
  std::chrono::milliseconds join_timeout{60000};

  // `agent` split on spaces; HVD_AGENT_JOIN_TIMEOUT (seconds), HVD_SSH_PROXY_PATH (shared with ssh).
  // Throws UsageError naming a bad value.
  static AgentOptions fromEnvironment(const std::string& agent);
};

// The agent's command line for one rank (for messages, dry runs and tests).
std::vector<std::string> agentCommand(const AgentOptions& options, const std::string& host,
                                      const std::string& proxy, const std::string& connect_to);

std::unique_ptr<Launcher> makeLauncher(boost::asio::io_context& io, const AgentOptions& options);

}  // namespace hvd::launcher::agent
