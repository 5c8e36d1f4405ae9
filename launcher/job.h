// A job: the host plan, started and supervised to the end on one io_context.
//
// runJob() does, in order: choose a launcher per host (local for this machine, ssh otherwise) and run their
// preflight checks; choose the network; start the rendezvous server in-process with the plan's scope sizes
// and a fresh secret token; start one worker per rank; forward output; and stop the job on the first
// failure, on SIGINT/SIGTERM/SIGHUP, or when --start-timeout passes with ranks missing from the
// rendezvous. Stopping is all-or-nothing: SIGTERM to every running worker, SIGKILL after the grace period
// (launcher/supervisor.h, shared with elastic jobs). When runJob() returns, no worker of the job is left
// (local launcher: process groups killed and reaped).
// Threading: runJob() on the calling thread, which runs the io_context; not reentrant.
#pragma once

#include <string>
#include <vector>

#include <memory>

#include <boost/asio/io_context.hpp>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/launcher.h"
#include "launcher/output.h"
#include "rendezvous/server.h"

namespace hvd::launcher {

// What a worker's environment is built from, apart from the inherited variables.
struct RendezvousEndpoint {
  std::string address;
  std::string port;                     // text: "<port>" in dry runs
  std::string token;                    // "<secret>" in dry runs
  std::vector<std::string> interfaces;  // HOROVOD_GLOO_IFACE is the first
};

// The complete environment of one worker, in this order (later entries win): hvdrun's environment
// (except the variables hvdrun sets itself and those `launcher` does not inherit), the tuning and -x
// variables, PYTHONUNBUFFERED=1, the per-rank HOROVOD_* variables, the rendezvous and interface variables,
// then `job` (an elastic job's HOROVOD_ELASTIC and round).
std::vector<std::pair<std::string, std::string>> workerEnvironment(
    const Placement& placement, const HvdrunOptions& options, const Environment& inherited, const Launcher* launcher,
    const RendezvousEndpoint& endpoint, const std::vector<std::pair<std::string, std::string>>& job = {});

// The launchers of a job, one per kind, made when a host first needs one. By LauncherKind: kAuto gives
// LocalLauncher for this machine (isLocalHost) and the ssh launcher for every other host; kLocal,
// LocalLauncher for all; kSsh, ssh for all; kSlurm, the Slurm launcher (launcher/slurm/launcher.h) for all.
class LauncherPool {
 public:
  // `agent`: the --launcher-agent command, for kind kAgent.
  LauncherPool(boost::asio::io_context& ioc, const SshOptions& ssh, LauncherKind kind = LauncherKind::kAuto,
               std::string agent = "");
  ~LauncherPool();
  bool isLocal(const HostSpec& host) const;
  // Whether `kind` starts `host`'s ranks with LocalLauncher.
  static bool isLocal(LauncherKind kind, const SshOptions& ssh, const HostSpec& host);
  Launcher& forHost(const HostSpec& host);
  bool hasLocal() const { return local_ != nullptr; }

 private:
  boost::asio::io_context& ioc_;
  const SshOptions& ssh_;
  LauncherKind kind_;
  std::string agent_;
  std::unique_ptr<Launcher> local_;
  std::unique_ptr<Launcher> remote_;
};

// The job's rendezvous server, started on `ioc` for workers on `remote_hosts` (as the launchers reach them;
// empty: every worker is local) and, with a token, trusting this user's local processes when every worker
// is local. With --verbose, says where it listens and who may use it. `others_may_join`: see chooseNetwork.
struct Rendezvous {
  std::unique_ptr<rendezvous::Server> server;
  RendezvousEndpoint endpoint;
  bool trust_local_peers = false;
};
Rendezvous openRendezvous(boost::asio::io_context& ioc, const HvdrunOptions& options,
                          const std::vector<HostSpec>& remote_hosts, OutputForwarder& output,
                          bool others_may_join = false);

// POSIX shell quoting equivalent to Python's shlex.quote.
std::string shellQuote(const std::string& word);

// One line per rank: host, the variables hvdrun sets (secret masked) and the command. For --dry-run.
std::string describePlan(const std::vector<Placement>& plan, const HvdrunOptions& options,
                         const Environment& inherited);

// Runs the job of `plan` (above) to its end on the calling thread; the arguments must outlive the call.
RunResult runJob(const HvdrunOptions& options, const std::vector<Placement>& plan,
                 const Environment& inherited);

}  // namespace hvd::launcher
