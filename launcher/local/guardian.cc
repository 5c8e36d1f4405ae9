#include "launcher/local/guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <set>

#include "base/error.h"

namespace hvd::launcher::local {

namespace {

constexpr int32_t kCleanExit = 0;  // message: hvdrun is exiting and has cleaned up itself

// The guardian's whole life, in the forked child, entered with every signal blocked. Async-signal-safe calls
// only besides std::set, which is safe here because the child is single-threaded from the fork on and owns
// its heap copy.
[[noreturn]] void guardianMain(int read_fd) {
  ::setsid();
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_IGN);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);
  ::dup2(read_fd, 3);
  ::close_range(4, ~0U, 0);
  std::set<int32_t> groups;
  int32_t message = 0;
  for (;;) {
    const ssize_t n = ::read(3, &message, sizeof message);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof message)) break;  // EOF: hvdrun is gone
    if (message == kCleanExit) ::_exit(0);
    if (message > 0) {
      groups.insert(message);
    } else {
      groups.erase(-message);
    }
  }
  for (int32_t group : groups) ::kill(-group, SIGKILL);
  ::_exit(0);
}

}  // namespace

Guardian::Guardian() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError("cannot create the guardian pipe: " + errnoText(errno));
  // Blocked across fork() until the guardian has replaced hvdrun's signal handlers (see LocalLauncher).
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_ = ::fork();
  if (pid_ != 0) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid_ < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw LaunchError("cannot fork the guardian process: " + errnoText(err));
  }
  if (pid_ == 0) guardianMain(fds[0]);
  ::close(fds[0]);
  fd_ = fds[1];
}

Guardian::~Guardian() {
  send(kCleanExit);
  ::close(fd_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Guardian::watch(pid_t pgid) { send(static_cast<int32_t>(pgid)); }
void Guardian::forget(pid_t pgid) { send(-static_cast<int32_t>(pgid)); }

void Guardian::send(int message) {
  const int32_t m = message;
  // 4 bytes to a pipe are written whole. A guardian that died (EPIPE; SIGPIPE is ignored by hvdrun)
  // leaves only PR_SET_PDEATHSIG as protection; nothing else to do here.
  while (::write(fd_, &m, sizeof m) < 0 && errno == EINTR) {
  }
}

}  // namespace hvd::launcher::local
