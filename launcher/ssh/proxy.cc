#include "launcher/ssh/proxy.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/parent_death.h"
#include "launcher/cpu_binding.h"
#include "launcher/launcher.h"
#include "launcher/ssh/proxy_protocol.h"
#include "launcher/ssh/remote.h"

extern char** environ;

namespace hvd::launcher::ssh {

namespace {

using Clock = std::chrono::steady_clock;

// The channel is slow and a rank is loud: stop reading ranks' pipes (they block, as on a terminal) until
// this much queued output has gone out.
constexpr size_t kMaxQueuedOutput = 4u << 20;
constexpr size_t kReadChunk = 32 * 1024;

void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// One rank this proxy started.
struct Rank {
  int rank = -1;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  int stdin_fd = -1;      // write end of a forwarded stdin
  std::string stdin_pending;
  bool stdin_eof = false;  // close stdin_fd once stdin_pending is out
  bool exited = false;
  int wait_status = 0;
  Clock::time_point drain_deadline;
};

// A reachability check in progress: a non-blocking TCP connect.
struct Check {
  int fd = -1;
  std::string address;
  uint16_t port = 0;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
};

class Proxy {
 public:
  Proxy() : host_(hostName()) {}

  int run() {
    ::signal(SIGPIPE, SIG_IGN);
    // SIGTERM, SIGINT and SIGHUP (scancel, a job's end under srun) tear the ranks down as hvdrun's
    // going away does, instead of ending the proxy alone.
    sigset_t chld;
    ::sigemptyset(&chld);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) ::sigaddset(&chld, sig);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    sigchld_fd_ = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigchld_fd_ < 0) return die("signalfd failed: " + errnoText(errno));
    setNonBlocking(kOut);
    out_.append(kProxyHelloMagic);
    out_ += PayloadWriter().u32(kProxyVersion).frame(FrameType::kHello);
    last_heard_ = Clock::now();
    while (true) {
      // Done once hvdrun is gone and nothing of ours is left, or once SIGKILL went to every group.
      if (teardown_ && (kill_sent_ || (ranks_.empty() && !anyGroupAlive()))) break;
      pollOnce();
      if (error_) return 1;
    }
    flushBestEffort();
    return 0;
  }

 private:
  static constexpr int kIn = 0;
  static constexpr int kOut = 1;

  int die(const std::string& message) {
    const std::string line = "hvd-proxy on " + host_ + ": " + message + "\n";
    [[maybe_unused]] const ssize_t n = ::write(2, line.data(), line.size());
    return 1;
  }

  // Whether any process of any rank's group still exists (kill with signal 0 only checks).
  bool anyGroupAlive() const {
    for (const auto& p : groups_) {
      if (::kill(-p, 0) == 0) return true;
    }
    return false;
  }

  // ----- the loop

  void pollOnce() {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> who;  // (kind, id): 0 stdin, 1 stdout, 2 sigchld, 3 rank out, 4 rank
                                           // err, 5 rank stdin, 6 check
    auto add = [&](int fd, short events, int kind, int id) {
      fds.push_back({fd, events, 0});
      who.emplace_back(kind, id);
    };
    if (!stdin_eof_) add(kIn, POLLIN, 0, 0);
    if (!out_.empty()) add(kOut, POLLOUT, 1, 0);
    add(sigchld_fd_, POLLIN, 2, 0);
    const bool reading = out_.size() < kMaxQueuedOutput;
    for (auto& [rank, r] : ranks_) {
      for (int s = 0; s < 2; ++s) {
        if (r.fds[s] >= 0 && reading) add(r.fds[s], POLLIN, 3 + s, rank);
      }
      if (r.stdin_fd >= 0 && !r.stdin_pending.empty()) add(r.stdin_fd, POLLOUT, 5, rank);
    }
    for (size_t i = 0; i < checks_.size(); ++i) add(checks_[i].fd, POLLOUT, 6, static_cast<int>(i));

    const auto now = Clock::now();
    auto deadline = teardown_ ? kill_at_ : last_heard_ + kWatchdogTimeout;
    for (const auto& [rank, r] : ranks_) {
      if (r.exited) deadline = std::min(deadline, r.drain_deadline);
    }
    for (const auto& c : checks_) deadline = std::min(deadline, c.deadline);
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait_ms + 1, 0, 60000)));
    if (n < 0 && errno != EINTR) {
      error_ = true;
      die("poll failed: " + errnoText(errno));
      return;
    }
    for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const auto [kind, id] = who[i];
      switch (kind) {
        case 0:
          readChannel();
          break;
        case 1:
          writeChannel();
          break;
        case 2:
          reap();
          break;
        case 3:
        case 4:
          if (auto it = ranks_.find(id); it != ranks_.end()) readRank(it->second, kind - 3);
          break;
        case 5:
          if (auto it = ranks_.find(id); it != ranks_.end()) writeRankStdin(it->second);
          break;
        case 6:
          finishCheck(static_cast<size_t>(id), false);
          break;
      }
      if (error_) return;
    }
    timers();
  }

  void timers() {
    const auto now = Clock::now();
    // Checks finished above were removed; the rest may have run out of time (indices shift: go backwards).
    for (size_t i = checks_.size(); i-- > 0;) {
      if (now >= checks_[i].deadline) finishCheck(i, true);
    }
    std::vector<int> done;
    for (auto& [rank, r] : ranks_) {
      if (r.exited && (now >= r.drain_deadline || (r.fds[0] < 0 && r.fds[1] < 0))) done.push_back(rank);
    }
    for (int rank : done) reportExit(rank);
    if (!teardown_ && now - last_heard_ >= kWatchdogTimeout) startTeardown();
    if (teardown_ && now >= kill_at_) {
      for (const auto& p : groups_) ::kill(-p, SIGKILL);
      kill_sent_ = true;
    }
  }

  // ----- the channel

  void send(std::string frame) {
    if (channel_gone_) return;  // nobody is listening any more
    out_ += frame;
  }

  void writeChannel() {
    const ssize_t n = ::write(kOut, out_.data(), out_.size());
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      // The channel is gone; stdin EOF follows.
      out_.clear();
      startTeardown();
    }
  }

  // What is still queued, for up to a second (the channel does not block).
  void flushBestEffort() {
    const auto until = Clock::now() + std::chrono::seconds(1);
    while (!out_.empty() && Clock::now() < until) {
      pollfd p{kOut, POLLOUT, 0};
      if (::poll(&p, 1, 100) < 0 && errno != EINTR) return;
      const ssize_t n = ::write(kOut, out_.data(), out_.size());
      if (n > 0) {
        out_.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return;
      }
    }
  }

  void readChannel() {
    char buf[kReadChunk];
    const ssize_t n = ::read(kIn, buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      stdin_eof_ = true;
      startTeardown();
      return;
    }
    if (n == 0) {
      stdin_eof_ = true;
      startTeardown();
      return;
    }
    last_heard_ = Clock::now();
    decoder_.feed(std::string_view(buf, static_cast<size_t>(n)));
    try {
      while (auto frame = decoder_.next()) handle(*frame);
    } catch (const Error& e) {
      error_ = true;
      die(e.what());
      startTeardown();
      for (const auto& p : groups_) ::kill(-p, SIGKILL);
    }
  }

  void handle(const Frame& frame) {
    switch (frame.type) {
      case FrameType::kHeartbeat:
        return;
      case FrameType::kCheck: {
        PayloadReader in(frame);
        Check c;
        c.address = in.bytes();
        c.port = in.u16();
        c.timeout = std::chrono::milliseconds(in.u32());
        in.end();
        startCheck(std::move(c));
        return;
      }
      case FrameType::kSpawn:
        spawn(decodeSpawn(frame));
        return;
      case FrameType::kStdin:
      case FrameType::kStdinEof: {
        PayloadReader in(frame);
        const int rank = in.i32();
        std::string bytes = frame.type == FrameType::kStdin ? in.bytes() : std::string();
        in.end();
        auto it = ranks_.find(rank);
        if (it == ranks_.end() || it->second.stdin_fd < 0) return;  // ended, or its stdin already closed
        if (frame.type == FrameType::kStdinEof) it->second.stdin_eof = true;
        it->second.stdin_pending += bytes;
        writeRankStdin(it->second);
        return;
      }
      case FrameType::kSignal: {
        PayloadReader in(frame);
        const int rank = in.i32();
        const int signo = in.i32();
        in.end();
        for (const auto& [r, rk] : ranks_) {
          if ((rank < 0 || r == rank) && rk.pid > 0) {
            // A reaped rank's pid may be reused: only its group (left-over members) is signalled.
            if (rk.exited)
              ::kill(-rk.pid, signo);
            else
              signalWorkerGroup(rk.pid, signo);
          }
        }
        return;
      }
      default:
        throw LaunchError(
            detail::concat("unexpected proxy ", PayloadReader::typeName(frame.type), " frame from hvdrun"));
    }
  }

  // ----- reachability

  void startCheck(Check c) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(c.address.c_str(), std::to_string(c.port).c_str(), &hints, &res);
    if (rc != 0) {
      sendCheck(false, std::string("cannot resolve ") + c.address + ": " + ::gai_strerror(rc));
      return;
    }
    c.fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) {
      ::freeaddrinfo(res);
      sendCheck(false, "socket: " + errnoText(errno));
      return;
    }
    const int connected = ::connect(c.fd, res->ai_addr, res->ai_addrlen);
    const int err = errno;
    ::freeaddrinfo(res);
    c.deadline = Clock::now() + c.timeout;
    checks_.push_back(std::move(c));
    if (connected == 0 || err != EINPROGRESS) finishCheck(checks_.size() - 1, false);
  }

  void finishCheck(size_t i, bool timed_out) {
    Check c = std::move(checks_[i]);
    checks_.erase(checks_.begin() + static_cast<long>(i));
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    ::close(c.fd);
    if (err == 0 && !timed_out) {
      sendCheck(true, "");
    } else if (err == 0) {
      sendCheck(false,
                detail::concat("timed out after ", std::chrono::duration<double>(c.timeout).count(), "s"));
    } else {
      sendCheck(false, std::strerror(err));  // the text bash printed in per-rank mode: "Connection refused"
    }
  }

  void sendCheck(bool ok, const std::string& why) {
    send(PayloadWriter().u8(ok ? 1 : 0).bytes(why).frame(FrameType::kCheckResult));
  }

  // ----- ranks

  void rankMessage(int rank, const std::string& text) {
    send(PayloadWriter().i32(rank).u8(1).bytes(text).frame(FrameType::kOutput));
  }

  void sendExit(int rank, int kind, int value) {
    send(PayloadWriter().i32(rank).u8(static_cast<uint8_t>(kind)).i32(value).frame(FrameType::kExit));
  }

  void spawn(const SpawnRequest& req) {
    if (teardown_) return;
    if (ranks_.count(req.rank)) throw LaunchError(detail::concat("rank ", req.rank, " sent twice"));
    const std::string missing_dir = missingDirectoryMessage(req.cwd, req.host) + "\n";
    struct stat st {};
    if (::stat(req.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      rankMessage(req.rank, missing_dir);
      sendExit(req.rank, 0, 126);
      return;
    }
    // Everything the child needs, built before fork(): the child only makes system calls.
    std::optional<CoreBinding> binding;
    if (req.bind_index >= 0) {
      binding = bindToCore(req.bind_index, req.rank, req.host);
      if (!binding->mask) {
        rankMessage(req.rank, binding->error);
        sendExit(req.rank, 0, 127);
        return;
      }
    }
    std::set<std::string> overridden;
    for (const auto& [name, value] : req.env) overridden.insert(name);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string_view entry(*e);
      if (!overridden.count(std::string(entry.substr(0, entry.find('='))))) env_strings.emplace_back(entry);
    }
    for (const auto& [name, value] : req.env) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = req.argv;
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const std::string exec_error = cannotExecutePrefix(req.rank, req.argv.front());

    int out[2], err[2], in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        (req.forward_stdin && ::pipe2(in, O_CLOEXEC) != 0)) {
      rankMessage(req.rank, "hvdrun: rank " + std::to_string(req.rank) + " on " + req.host +
                                ": cannot create pipes: " + errnoText(errno) + "\n");
      sendExit(req.rank, 0, 127);
      return;
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setsid();
      // The proxy is the rank's only tie to hvdrun: if it dies unexpectedly, so does the rank.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
      const int stdin_fd = req.forward_stdin ? in[0] : ::open("/dev/null", O_RDONLY);
      if (stdin_fd < 0 || ::dup2(stdin_fd, 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(err[1], 2) < 0)
        ::_exit(127);
      // Before exec, so that every thread the rank starts inherits it.
      if (binding && !applyCoreBinding(*binding)) ::_exit(127);
      ::close_range(3, ~0U, 0);
      resetSignalsForExec();
      if (::chdir(req.cwd.c_str()) != 0) {
        [[maybe_unused]] const ssize_t n = ::write(2, missing_dir.data(), missing_dir.size());
        ::_exit(126);
      }
      // PATH lookup with the rank's PATH, as the bootstrap's `env` did.
      execOrExit(argv.data(), envp.data(), exec_error);
    }
    const int fork_errno = errno;
    ::close(out[1]);
    ::close(err[1]);
    if (in[0] >= 0) ::close(in[0]);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      if (in[1] >= 0) ::close(in[1]);
      rankMessage(req.rank, "hvdrun: rank " + std::to_string(req.rank) + " on " + req.host +
                                ": cannot fork: " + errnoText(fork_errno) + "\n");
      sendExit(req.rank, 0, 127);
      return;
    }
    Rank r;
    r.rank = req.rank;
    r.pid = pid;
    r.fds[0] = out[0];
    r.fds[1] = err[0];
    r.stdin_fd = in[1];
    if (r.stdin_fd >= 0) setNonBlocking(r.stdin_fd);
    ranks_[req.rank] = r;
    groups_.insert(pid);
    send(PayloadWriter().i32(req.rank).i32(pid).frame(FrameType::kStarted));
  }

  void readRank(Rank& r, int stream) {
    char buf[kReadChunk];
    const ssize_t n = ::read(r.fds[stream], buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      ::close(r.fds[stream]);
      r.fds[stream] = -1;
      return;
    }
    send(PayloadWriter()
             .i32(r.rank)
             .u8(static_cast<uint8_t>(stream))
             .bytes(std::string_view(buf, size_t(n)))
             .frame(FrameType::kOutput));
  }

  void writeRankStdin(Rank& r) {
    if (r.stdin_fd < 0) return;
    if (!r.stdin_pending.empty()) {
      const ssize_t n = ::write(r.stdin_fd, r.stdin_pending.data(), r.stdin_pending.size());
      if (n > 0) r.stdin_pending.erase(0, static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN && errno != EINTR) {  // the rank closed its stdin: drop the rest
        r.stdin_pending.clear();
        r.stdin_eof = true;
      }
    }
    if (r.stdin_eof && r.stdin_pending.empty()) {
      ::close(r.stdin_fd);
      r.stdin_fd = -1;
    }
  }

  void reap() {
    signalfd_siginfo info;
    while (::read(sigchld_fd_, &info, sizeof info) == sizeof info) {
      // hvdrun still listens: the ranks' ends reach it as after any exit.
      if (info.ssi_signo != SIGCHLD) startTeardown(false);
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& [rank, r] : ranks_) {
        if (r.pid != pid) continue;
        r.exited = true;
        r.wait_status = status;
        r.drain_deadline = Clock::now() + kProxyDrainTimeout;
        // Members of its group it left behind would be orphans.
        ::kill(-pid, SIGTERM);
      }
    }
  }

  void reportExit(int rank) {
    auto it = ranks_.find(rank);
    Rank& r = it->second;
    for (int& fd : r.fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    if (r.stdin_fd >= 0) ::close(r.stdin_fd);
    if (WIFSIGNALED(r.wait_status))
      sendExit(rank, 1, WTERMSIG(r.wait_status));
    else
      sendExit(rank, 0, WEXITSTATUS(r.wait_status));
    ranks_.erase(it);
  }

  // `channel_gone`: hvdrun can no longer be told anything (EOF, watchdog, a write error); else (a signal)
  // the ranks' output and exits are still sent, and flushed before the proxy exits.
  void startTeardown(bool channel_gone = true) {
    channel_gone_ = channel_gone_ || channel_gone;
    if (teardown_) return;
    teardown_ = true;
    for (const auto& p : groups_) ::kill(-p, SIGTERM);
    kill_at_ = Clock::now() + (groups_.empty() ? std::chrono::seconds(0) : kKillGrace);
    if (groups_.empty()) kill_sent_ = true;
  }

  std::string host_;
  int sigchld_fd_ = -1;
  std::string out_;  // frames not yet written to the channel
  FrameDecoder decoder_;
  bool stdin_eof_ = false;
  bool error_ = false;
  bool teardown_ = false;
  bool channel_gone_ = false;
  bool kill_sent_ = false;
  Clock::time_point last_heard_;
  Clock::time_point kill_at_;
  std::map<int, Rank> ranks_;  // started and not yet reported
  std::set<pid_t> groups_;     // every process group started (signalled at teardown, even after its leader)
  std::vector<Check> checks_;
};

int fail(const std::string& message, int code) {
  const std::string line = "hvd-proxy: " + message + "\n";
  [[maybe_unused]] const ssize_t n = ::write(2, line.data(), line.size());
  return code;
}

// --connect HOST:PORT: the frames travel over a TCP connection to hvdrun instead of stdin/stdout. It
// becomes fds 0 and 1 after the join line (kProxyJoinPrefix, the token, the node's name).
int connectBack(const std::string& where) {
  const auto colon = where.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == where.size())
    return fail("--connect '" + where + "' is not HOST:PORT", 2);
  std::string host = where.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = where.substr(colon + 1);
  const char* token = std::getenv(kProxyTokenEnv);
  if (!token || !*token) return fail(std::string(kProxyTokenEnv) + " is not set; --connect needs hvdrun's token", 2);
  const std::string join = std::string(kProxyJoinPrefix) + token + " " + proxyNodeName() + "\n";
  ::unsetenv(kProxyTokenEnv);  // not for the ranks
  ::unsetenv(kProxyNameEnv);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail("cannot resolve '" + host + "': " + ::gai_strerror(rc), 1);
  int fd = -1;
  std::string why;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = errnoText(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return fail("cannot connect to hvdrun at " + where + ": " + why, 1);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (size_t done = 0; done < join.size();) {
    const ssize_t n = ::send(fd, join.data() + done, join.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return fail("cannot write to hvdrun at " + where + ": " + errnoText(errno), 1);
    done += static_cast<size_t>(n);
  }
  if (::dup2(fd, 0) < 0 || ::dup2(fd, 1) < 0) return fail("dup2 failed: " + errnoText(errno), 1);
  ::close(fd);
  return 0;
}

}  // namespace

std::string proxyNodeName() {
  // The launcher's name for this proxy; Slurm's name for the node (slurmd -N may differ from the
  // hostname); else the hostname.
  if (const char* name = std::getenv(kProxyNameEnv); name && *name) return name;
  if (const char* node = std::getenv("SLURMD_NODENAME"); node && *node) return node;
  return hostName();
}

int runProxy(int argc, char** argv) {
  try {
    applyParentDeathSignal();
  } catch (const Error& e) {
    return fail(e.what(), 2);
  }
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "--version") {
      const std::string line = "hvd-proxy protocol " + std::to_string(kProxyVersion) + "\n";
      [[maybe_unused]] const ssize_t n = ::write(1, line.data(), line.size());
      return 0;
    }
    if (arg == "--connect" && argc == 3) {
      if (const int rc = connectBack(argv[2]); rc != 0) return rc;
      return Proxy().run();
    }
    return fail("unexpected argument '" + arg + "'; it is started by hvdrun (over ssh, or by srun with --connect HOST:PORT), not by hand", 2);
  }
  return Proxy().run();
}

}  // namespace hvd::launcher::ssh
