// A job: the host plan, started and supervised to the end on one io_context.
//
// run() does, in order: choose a launcher per host (local for this machine, ssh otherwise) and run their
// preflight checks; choose the network; start the rendezvous server in-process with the plan's scope sizes
// and a fresh secret token; start one worker per rank; forward output; and stop the job on the first
// failure, on SIGINT/SIGTERM/SIGHUP, or when --start-timeout passes with ranks missing from the
// rendezvous. Stopping is all-or-nothing: SIGTERM to every running worker, SIGKILL after the grace period.
// When run() returns, no worker of the job is left (local launcher: process groups killed and reaped).
// Threading: run() on the calling thread, which runs the io_context; not reentrant.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/launcher.h"

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
// variables, PYTHONUNBUFFERED=1, the per-rank HOROVOD_* variables, the rendezvous and interface variables.
std::vector<std::pair<std::string, std::string>> workerEnvironment(const Placement& placement,
                                                                   const HvdrunOptions& options,
                                                                   const Environment& inherited,
                                                                   const Launcher* launcher,
                                                                   const RendezvousEndpoint& endpoint);

// POSIX shell quoting equivalent to Python's shlex.quote.
std::string shellQuote(const std::string& word);

// One line per rank: host, the variables hvdrun sets (secret masked) and the command. For --dry-run.
std::string describePlan(const std::vector<Placement>& plan, const HvdrunOptions& options,
                         const Environment& inherited);

class Job {
 public:
  Job(HvdrunOptions options, std::vector<Placement> plan, Environment inherited);
  RunResult run();

 private:
  HvdrunOptions options_;
  std::vector<Placement> plan_;
  Environment inherited_;
};

}  // namespace hvd::launcher
