// LocalLauncher: workers on this machine, by fork/exec, supervised from the job's io_context.
//
// Every worker
//   - runs in its own session and process group (setsid), so signals reach everything it starts
//     (killpg) and a terminal Ctrl-C reaches hvdrun only;
//   - dies with hvdrun even when hvdrun is SIGKILLed: PR_SET_PDEATHSIG kills the worker itself, and a
//     guardian process (launcher/local/guardian.h) kills the worker's whole process group;
//   - gets its stdout/stderr as pipes read through posix::stream_descriptor on the job's loop, stdin from
//     hvdrun (rank 0) or /dev/null (every other rank);
//   - that cannot be executed ends with exit code 127 and "hvdrun: rank N: cannot execute 'cmd': <why>"
//     on its stderr.
// Exits are collected on SIGCHLD (an asio::signal_set), never by a blocking wait.
// Threading: construct, start and destroy on the io_context's thread; all callbacks run there.
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "launcher/launcher.h"

namespace hvd::launcher::local {

class Guardian;

class LocalLauncher : public Launcher {
 public:
  // After a worker's process ended, how long its pipes may stay open (a background grandchild holding
  // them) before the launcher stops reading and reports the exit.
  static constexpr std::chrono::milliseconds kDefaultDrainTimeout{1000};

  explicit LocalLauncher(boost::asio::io_context& ioc,
                         std::chrono::milliseconds drain_timeout = kDefaultDrainTimeout);
  ~LocalLauncher() override;

  std::string name() const override { return "local"; }
  std::unique_ptr<Worker> start(const LaunchSpec& spec, WorkerEvents& events) override;

  struct Child;  // a started process (launcher/local/launcher.cc)

 private:
  void awaitSigchld();
  void reap();

  boost::asio::io_context& ioc_;
  std::chrono::milliseconds drain_timeout_;
  boost::asio::signal_set sigchld_;
  std::unique_ptr<Guardian> guardian_;
  std::map<int, std::shared_ptr<Child>> children_;  // by pid, until reaped
};

}  // namespace hvd::launcher::local
