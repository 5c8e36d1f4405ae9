// Guardian: a small process that outlives hvdrun by a moment and kills the workers' process groups when
// hvdrun dies without cleaning up (SIGKILL, crash).
//
// PR_SET_PDEATHSIG alone kills only a worker's first process; a shell worker's children would survive.
// The guardian is forked (no exec) before any worker, in its own session so a terminal's Ctrl-C does not
// reach it. It reads process-group ids from a pipe; when the pipe reaches end of file without the
// "clean exit" message, hvdrun is gone, and it SIGKILLs every group it was told about, then exits.
// Threading: one owner (LocalLauncher), io_context thread.
#pragma once

#include <sys/types.h>

namespace hvd::launcher::local {

class Guardian {
 public:
  Guardian();   // forks the guardian; throws LaunchError naming errno text when it cannot
  ~Guardian();  // tells it hvdrun is exiting cleanly, then waits for it
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  void watch(pid_t pgid);   // a new worker group
  void forget(pid_t pgid);  // that group has been cleaned up by hvdrun itself

 private:
  void send(int message);
  pid_t pid_ = -1;
  int fd_ = -1;  // write end of the pipe
};

}  // namespace hvd::launcher::local
