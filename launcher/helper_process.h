// A helper process of hvdrun's, not a rank: the srun step that starts the proxies, a launcher agent.
//
//   HelperProcess p = startHelper({"srun", ...}, {"HVD_PROXY_TOKEN"}, {"HVD_PROXY_TOKEN=" + token}, SIGKILL, "srun: ");
//   ... read p.output (its stdout and stderr, one pipe), waitpid(p.pid, ...) ...
//
// The helper gets hvdrun's environment without the variables named in `drop`, plus `add` ("NAME=VALUE"); stdin
// /dev/null; its own process group (a terminal's Ctrl-C reaches hvdrun, which tears the job down in order);
// every signal at its default; `death_signal` when hvdrun dies (PR_SET_PDEATHSIG). A program that cannot be
// executed writes "<exec_prefix>cannot execute 'PROGRAM': <errno text>" into the pipe and exits 127.
// Errors: LaunchError naming the program when no pipe can be made or fork fails.
// Threading: any thread; the child calls only async-signal-safe functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hvd::launcher {

struct HelperProcess {
  pid_t pid = -1;
  int output = -1;  // the read end of its stdout and stderr (close-on-exec, blocking)
};

HelperProcess startHelper(const std::vector<std::string>& args, const std::vector<std::string>& drop,
                          const std::vector<std::string>& add, int death_signal, const std::string& exec_prefix);

}  // namespace hvd::launcher
