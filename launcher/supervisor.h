// The supervision a static job (launcher/job.h, workers keyed by rank) and an elastic job
// (launcher/elastic.h, workers keyed by worker id) share: the io_context the job runs on, hvdrun's
// SIGINT/SIGTERM/SIGHUP, the output forwarder every worker writes through, the rendezvous server, the
// end-of-job summary and the job's RunResult.
//
// A job derives from Supervisor, starts its workers with itself as their WorkerEvents (onExit is the job's),
// and tells the core through the hooks below which processes it runs. What the core does:
//   - Setup, before any worker starts, in this order: preflight (a launcher per host and its checks),
//     openOutput, startRendezvous, checkReachable. Each throws what the launchers and the server throw.
//   - All-or-nothing stop: stopAll(signo) sends signo to every process of the job, and SIGKILL to the
//     workers asked to stop once --termination-grace-seconds have passed. A SIGINT, SIGTERM or SIGHUP stops
//     the job with that signal (RunResult::interrupted_by); a second one kills every process at once.
//   - When the reader of hvdrun's stdout is gone (EPIPE) and no --output-filename keeps the output, the job
//     stops as a pipeline producer would on SIGPIPE (interrupted_by = SIGPIPE).
//   - finish() writes the summary, stops the server and the io_context, so that the job's run() returns.
// Members are destroyed in reverse: the derived job's first (its workers: destroying a running one kills
// it), then the launchers (reap), the output, the server, and the loop last.
// Threading: everything on the io_context's thread, which the derived job's run() runs; not reentrant.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/job.h"
#include "launcher/launcher.h"
#include "launcher/output.h"
#include "launcher/summary.h"
#include "rendezvous/server.h"

namespace hvd::launcher {

// "SIGINT", "SIGTERM", "SIGHUP", "SIGKILL", else "signal N": for hvdrun's messages about the signals it gets.
std::string signalName(int signo);

class Supervisor : public WorkerEvents {
 public:
  // Forwarded to the output; a broken stdout stops the job (above).
  void onOutput(int id, Stream stream, std::string_view bytes) override;
  void onStreamClosed(int id, Stream stream) override;

 protected:
  // Takes SIGINT, SIGTERM and SIGHUP from now on; awaitSignal() handles them once the loop runs.
  explicit Supervisor(const HvdrunOptions& options);
  ~Supervisor() override;

  // The hosts of the job's first workers: by launcher, and the remote ones named as their launcher reaches
  // them (what the rendezvous address is chosen by).
  struct Hosts {
    std::map<Launcher*, std::vector<HostSpec>> by_launcher;
    std::vector<HostSpec> remote;
  };
  // Makes the launcher of every host in `plan` and runs their preflight checks.
  Hosts preflight(const std::vector<Placement>& plan);
  // Opens the output forwarder for `num_proc` ranks (every segment also goes to the status monitor) and the
  // summary.
  void openOutput(size_t num_proc);
  // Starts the rendezvous server (server_, endpoint_; see openRendezvous). Returns whether it trusts this
  // user's local processes without the token.
  bool startRendezvous(const Hosts& hosts, bool others_may_join = false);
  // Asks every launcher whether its hosts reach the server.
  void checkReachable(const Hosts& hosts);

  // Handles the next SIGINT/SIGTERM/SIGHUP, and every one after it.
  void awaitSignal();
  // hvdrun's own message: through the output forwarder, or straight to fd 1 or 2 before it exists.
  void message(Stream stream, std::string_view text);
  // The all-or-nothing stop: stopping_, signo to every process (signalAll), the job's timers stopped
  // (stopTimers), and SIGKILL after the grace period.
  virtual void stopAll(int signo);
  // SIGKILL to every process of the job, now.
  void killAll();
  // killAfterGrace() once the grace period has passed, unless a wait is already running. `restart`: the
  // grace starts now either way (the job stops: every worker gets the whole grace).
  void armKillTimer(bool restart = false);
  // The job has ended: the summary, then the server and the loop stop.
  void finish();

  // ---- what the job tells the core
  // Sends `signo` to every process of the job that has not ended.
  virtual void signalAll(int signo) = 0;
  // Stops the job's own timers: the job stops or finishes.
  virtual void stopTimers() = 0;
  // What a first signal stops, for its message ("3 workers", "the job").
  virtual std::string describeRunning() const = 0;
  // The grace period has passed: SIGKILL to the workers asked to stop. Default: killAll().
  virtual void killAfterGrace() { killAll(); }

  const HvdrunOptions& options_;
  boost::asio::io_context ioc_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer kill_timer_;
  std::unique_ptr<rendezvous::Server> server_;
  JobSummary summary_;
  std::unique_ptr<OutputForwarder> output_;
  LauncherPool launchers_;
  RendezvousEndpoint endpoint_;
  RunResult result_;
  bool stopping_ = false;
  bool kill_armed_ = false;
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
};

}  // namespace hvd::launcher
