#include "launcher/helper_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/launcher.h"
#include "base/error.h"

extern char** environ;

namespace hvd::launcher {

HelperProcess startHelper(const std::vector<std::string>& args, const std::vector<std::string>& drop,
                          const std::vector<std::string>& add, int death_signal, const std::string& exec_prefix) {
  HVD_CHECK(!args.empty(), LaunchError, "a helper process needs a program");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool dropped = false;
    for (const auto& name : drop) {
      dropped = dropped || (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=');
    }
    if (!dropped) env.emplace_back(*e);
  }
  env.insert(env.end(), add.begin(), add.end());
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  HVD_CHECK(::pipe2(out, O_CLOEXEC) == 0, LaunchError, "cannot create a pipe for ", args.front(), ": ", errnoText(errno));
  const std::string exec_error = exec_prefix + "cannot execute '" + args.front() + "': ";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::prctl(PR_SET_PDEATHSIG, death_signal) != 0 || ::getppid() != parent) ::_exit(127);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(out[1], 2) < 0) ::_exit(127);
    ::close_range(3, ~0U, 0);
    resetSignalsForExec();
    execOrExit(argv.data(), envp.data(), exec_error);
  }
  const int err = errno;
  ::close(out[1]);
  if (pid < 0) {
    ::close(out[0]);
    throw LaunchError(detail::concat("cannot start ", args.front(), ": fork failed: ", errnoText(err)));
  }
  return {pid, out[0]};
}

}  // namespace hvd::launcher
