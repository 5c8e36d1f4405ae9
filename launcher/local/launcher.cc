#include "launcher/local/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/error.h"
#include "launcher/cpu_binding.h"
#include "launcher/local/guardian.h"

namespace hvd::launcher::local {

namespace asio = boost::asio;

namespace {

constexpr size_t kReadChunk = 16 * 1024;

// Everything the child needs, prepared before fork() so the child only makes system calls.
struct ExecImage {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string exec_error_prefix;
  // Where argv[0] may be, in order: itself when it names a path, else each directory of the WORKER's
  // PATH (mpirun's -x PATH=... semantics; execvpe would search hvdrun's own PATH instead). Relative
  // directories are taken from the worker's working directory, where the child resolves them.
  std::vector<std::string> candidates;
  std::vector<char*> script_argv;  // /bin/sh, <candidate>, argv[1..]: a script without "#!" (ENOEXEC)
  std::optional<CoreBinding> binding;  // --bind-to core

  explicit ExecImage(const LaunchSpec& spec) {
    strings.reserve(spec.argv.size() + spec.env.size());
    for (const auto& a : spec.argv) strings.push_back(a);
    for (const auto& [k, v] : spec.env) strings.push_back(k + "=" + v);
    for (size_t i = 0; i < spec.argv.size(); ++i) argv.push_back(strings[i].data());
    argv.push_back(nullptr);
    for (size_t i = spec.argv.size(); i < strings.size(); ++i) envp.push_back(strings[i].data());
    envp.push_back(nullptr);
    exec_error_prefix = cannotExecutePrefix(spec.rank, spec.argv.front());
    if (spec.bind_index >= 0) binding = bindToCore(spec.bind_index, spec.rank, spec.host.name);
    const std::string& program = spec.argv.front();
    if (program.find('/') != std::string::npos) {
      candidates.push_back(program);
    } else {
      std::string path = "/usr/local/bin:/usr/bin:/bin";
      if (const char* own = std::getenv("PATH")) path = own;
      for (const auto& [k, v] : spec.env) {
        if (k == "PATH") path = v;
      }
      size_t begin = 0;
      for (;;) {
        const size_t end = path.find(':', begin);
        const std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
        candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + program);
        if (end == std::string::npos) break;
        begin = end + 1;
      }
    }
    script_argv.push_back(const_cast<char*>("/bin/sh"));
    script_argv.push_back(nullptr);  // the candidate, set in the child
    for (size_t i = 1; i < argv.size(); ++i) script_argv.push_back(argv[i]);  // ends with argv's nullptr
  }
};

// execvpe over image.candidates, with the worker's environment. Returns (with errno set) only on failure.
// Async-signal-safe: runs in the child between fork() and exec.
void execCandidates(ExecImage& image) {
  bool denied = false;
  for (auto& candidate : image.candidates) {
    ::execve(candidate.c_str(), image.argv.data(), image.envp.data());
    if (errno == ENOEXEC) {  // as execvpe: a script without "#!" runs under /bin/sh
      image.script_argv[1] = candidate.data();
      ::execve("/bin/sh", image.script_argv.data(), image.envp.data());
      return;
    }
    if (errno == EACCES) {
      denied = true;
    } else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ELOOP &&
               errno != ENAMETOOLONG) {
      return;
    }
  }
  errno = denied ? EACCES : ENOENT;
}

void writeError(const std::string& prefix, const char* what) {
  const std::string line = prefix + what + "\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

// The child between fork() and exec. Never returns.
// Entered with every signal blocked.
[[noreturn]] void childMain(const LaunchSpec& spec, ExecImage& image, pid_t parent, int out_fd,
                            int err_fd) {
  ::setsid();
  // Die with hvdrun. The parent may already be gone between fork() and prctl(): then getppid() differs.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
  if (::dup2(out_fd, STDOUT_FILENO) < 0 || ::dup2(err_fd, STDERR_FILENO) < 0) ::_exit(127);
  // Before exec, so that every thread the worker starts inherits it.
  if (image.binding && !applyCoreBinding(*image.binding)) ::_exit(127);
  if (!spec.forward_stdin) {
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0) ::_exit(127);
  }
  // hvdrun's descriptors (sockets of the rendezvous server, other workers' pipes) stay with hvdrun.
  ::close_range(3, ~0U, 0);
  // exec keeps ignored signals ignored and the signal mask: give the worker a clean slate. Signals are
  // blocked since before fork(); unblocked only once no handler of hvdrun's is left.
  resetSignalsForExec();
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) {
    writeError(image.exec_error_prefix,
               (std::string("cannot change to directory ") + spec.cwd + ": " + std::strerror(errno)).c_str());
    ::_exit(127);
  }
  execCandidates(image);
  writeError(image.exec_error_prefix, std::strerror(errno));
  ::_exit(127);
}

ExitStatus fromWaitStatus(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.kind = ExitStatus::Kind::kSignaled;
    s.signal = WTERMSIG(status);
  } else {
    s.kind = ExitStatus::Kind::kExited;
    s.code = WEXITSTATUS(status);
  }
  return s;
}

}  // namespace

// One started process: its pipes, its state, and the events it owes the job. Shared between the Worker
// handle, the launcher's reaping table and pending asio handlers, so a handler never outlives it.
struct LocalLauncher::Child : std::enable_shared_from_this<LocalLauncher::Child> {
  Child(asio::io_context& ioc, int rank, pid_t pid, int out_fd, int err_fd, WorkerEvents* events,
        Guardian* guardian)
      : rank(rank), pid(pid), events(events), guardian(guardian), drain_timer(ioc) {
    streams[0].emplace(ioc, out_fd);
    streams[1].emplace(ioc, err_fd);
  }

  void startReading(int index) {
    auto self = shared_from_this();
    streams[index]->async_read_some(asio::buffer(buffers[index]), [self, index](const auto& ec, size_t n) {
      if (n > 0 && self->events) {
        self->events->onOutput(self->rank, index ? Stream::kStderr : Stream::kStdout,
                               std::string_view(self->buffers[index].data(), n));
      }
      if (!ec) {
        self->startReading(index);
      } else {
        self->closeStream(index);
      }
    });
  }

  void closeStream(int index) {
    if (!streams[index]) return;
    boost::system::error_code ignored;
    streams[index]->close(ignored);
    streams[index].reset();
    if (events) events->onStreamClosed(rank, index ? Stream::kStderr : Stream::kStdout);
    finishIfDone();
  }

  void onReaped(int wait_status, const struct rusage& usage, std::chrono::milliseconds drain_timeout) {
    status = fromWaitStatus(wait_status);
    status->peak_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux counts KiB
    state = stop_requested && state != WorkerState::kFailed ? WorkerState::kStopped
            : status->success()                             ? WorkerState::kSucceeded
                                                            : WorkerState::kFailed;
    if (finishIfDone()) return;
    auto self = shared_from_this();
    drain_timer.expires_after(drain_timeout);
    drain_timer.async_wait([self](const auto& ec) {
      if (ec) return;
      self->closeStream(0);
      self->closeStream(1);
    });
  }

  // Reports the exit once the process has been reaped and both streams are closed.
  bool finishIfDone() {
    if (!status || streams[0] || streams[1] || reported) return reported;
    reported = true;
    drain_timer.cancel();
    // Leftovers of the group (background children) go with the worker.
    ::kill(-pid, SIGKILL);
    if (guardian) guardian->forget(pid);
    if (events) events->onExit(rank, *status);
    return true;
  }

  void detach() {
    events = nullptr;
    for (int i = 0; i < 2; ++i) {
      if (streams[i]) {
        boost::system::error_code ignored;
        streams[i]->close(ignored);
        streams[i].reset();
      }
    }
    drain_timer.cancel();
  }

  const int rank;
  const pid_t pid;
  WorkerEvents* events;
  Guardian* guardian;
  WorkerState state = WorkerState::kRunning;
  bool stop_requested = false;
  bool reported = false;
  std::optional<ExitStatus> status;
  std::optional<asio::posix::stream_descriptor> streams[2];
  std::array<std::array<char, kReadChunk>, 2> buffers;
  asio::steady_timer drain_timer;
};

namespace {

class LocalWorker : public Worker {
 public:
  explicit LocalWorker(std::shared_ptr<LocalLauncher::Child> child) : child_(std::move(child)) {}

  ~LocalWorker() override {
    if (!child_->status) signalWorkerGroup(child_->pid, SIGKILL);
    child_->detach();  // the launcher still reaps the process
  }

  int rank() const override { return child_->rank; }
  WorkerState state() const override { return child_->state; }
  std::optional<int> pid() const override { return child_->pid; }

  void signal(int signo) override {
    if (child_->status) return;
    child_->stop_requested = true;
    signalWorkerGroup(child_->pid, signo);
  }

 private:
  std::shared_ptr<LocalLauncher::Child> child_;
};

}  // namespace

LocalLauncher::LocalLauncher(asio::io_context& ioc, std::chrono::milliseconds drain_timeout)
    : ioc_(ioc),
      drain_timeout_(drain_timeout),
      sigchld_(ioc, SIGCHLD),
      guardian_(std::make_unique<Guardian>()) {
  awaitSigchld();
}

LocalLauncher::~LocalLauncher() {
  sigchld_.cancel();
  for (auto& [pid, child] : children_) {
    signalWorkerGroup(pid, SIGKILL);  // not reaped yet: the pid is still this child's
    child->detach();
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void LocalLauncher::awaitSigchld() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    reap();
    awaitSigchld();
  });
}

void LocalLauncher::reap() {
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    struct rusage usage {};
    const pid_t r = ::wait4(it->first, &status, WNOHANG, &usage);
    if (r == it->first) {
      auto child = it->second;
      it = children_.erase(it);
      child->onReaped(status, usage, drain_timeout_);
    } else {
      ++it;
    }
  }
}

std::unique_ptr<Worker> LocalLauncher::start(const LaunchSpec& spec, WorkerEvents& events) {
  HVD_INTERNAL_ASSERT(!spec.argv.empty(), "empty command for rank ", spec.rank);
  ExecImage image(spec);
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    throw LaunchError(detail::concat("rank ", spec.rank, ": cannot create a pipe: ", errnoText(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw LaunchError(detail::concat("rank ", spec.rank, ": cannot create a pipe: ", errnoText(e)));
  }
  const pid_t parent = ::getpid();
  // Signals stay blocked across fork() until the child has reset hvdrun's handlers: a handler running in
  // the child would report the signal to hvdrun's own event loop through the inherited asio pipe.
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw LaunchError(
        detail::concat("rank ", spec.rank, " on ", spec.host.name, ": fork failed: ", errnoText(e)));
  }
  if (pid == 0) childMain(spec, image, parent, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  // The group exists from the child's setsid() on; signalWorkerGroup() reaches the child before that.
  guardian_->watch(pid);
  auto child = std::make_shared<Child>(ioc_, spec.rank, pid, out[0], err[0], &events, guardian_.get());
  children_.emplace(pid, child);
  child->startReading(0);
  child->startReading(1);
  // A child that ended before the SIGCHLD handler knew its pid would otherwise wait for the next signal.
  asio::post(ioc_, [this] { reap(); });
  return std::make_unique<LocalWorker>(std::move(child));
}

}  // namespace hvd::launcher::local
