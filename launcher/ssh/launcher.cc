#include "launcher/ssh/launcher.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <csignal>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "launcher/ssh/config.h"
#include "launcher/ssh/proxy_protocol.h"
#include "launcher/ssh/remote.h"
#include "rendezvous/error.h"

namespace hvd::launcher::ssh {

namespace asio = boost::asio;

namespace {

std::string localUser() {
  if (const passwd* pw = ::getpwuid(::geteuid())) return pw->pw_name;
  const char* user = std::getenv("USER");
  return user ? user : "root";
}

std::string homeDir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* pw = ::getpwuid(::geteuid())) return pw->pw_dir;
  return "/";
}

// Runs a coroutine to completion on a private loop (preflight and the reachability check block by
// contract) and returns its result or rethrows its exception.
template <typename T>
T runSync(asio::io_context& io, asio::awaitable<T> task) {
  std::optional<T> result;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) result = std::move(value);
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// At most N coroutines past acquire() at once; the rest wait in FIFO order.
class Limiter {
 public:
  explicit Limiter(size_t max) : max_(max) {}
  asio::awaitable<void> acquire() {
    if (active_ < max_) {
      ++active_;
      co_return;
    }
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor);
    timer->expires_at(asio::steady_timer::time_point::max());
    waiting_.push_back(timer);
    boost::system::error_code ignored;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  void release() {
    if (waiting_.empty()) {
      --active_;
      return;
    }
    waiting_.front()->cancel();  // hands our slot to the first waiter
    waiting_.pop_front();
  }

 private:
  size_t max_;
  size_t active_ = 0;
  std::deque<std::shared_ptr<asio::steady_timer>> waiting_;
};

// Collects one short command's output and end (the reachability check).
class Collect : public ChannelHandler {
 public:
  void onData(Stream, std::string_view bytes) override { output += bytes; }
  void onEnd(const ChannelEnd& e) override {
    end = e;
    done = true;
  }
  std::string output;
  ChannelEnd end;
  bool done = false;
};

std::string lastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

// The state a remote worker (per-rank channel or hvd-proxy rank) ends in.
WorkerState endState(const ExitStatus& status, bool stop_requested) {
  if (status.success()) return WorkerState::kSucceeded;
  if (stop_requested) return WorkerState::kStopped;
  if (status.kind == ExitStatus::Kind::kLost) return WorkerState::kUnknown;
  return WorkerState::kFailed;
}

class SshWorker;
class ProxyHost;

// Workers waiting for a connection being opened for them.
struct PendingConnection {
  size_t reserved = 0;
  std::vector<std::function<void(const std::shared_ptr<Session>&, const std::string& error)>> waiters;
};

class SshLauncher : public Launcher {
 public:
  SshLauncher(asio::io_context& io, const SshOptions& options, const ProxyOptions& proxy)
      : io_(io), options_(options), proxy_(proxy) {
    home_ = homeDir();
    if (proxy_.enabled) proxy_.path = proxyPath(proxy_);
    connect_.known_hosts = options.known_hosts;
    connect_.known_hosts_file = options.known_hosts_file.value_or(home_ + "/.ssh/known_hosts");
    connect_.home = home_;
    connect_.timeout = options.connect_timeout;
  }

  ~SshLauncher() override;

  std::string name() const override { return "ssh"; }

  void preflight(const std::vector<HostSpec>& hosts) override;
  bool shouldInheritEnv(std::string_view name) const override;
  // The route to a host goes to its ~/.ssh/config HostName, not to the alias written in -H.
  std::string networkName(const HostSpec& host) const override { return resolveTarget(host, options_).hostname; }
  void checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                uint16_t port) override;
  std::unique_ptr<Worker> start(const LaunchSpec& spec, WorkerEvents& events) override;

  // For SshWorker: runs `use` with a session to `target` that has room for one more channel.
  void withSession(const Target& target,
                   std::function<void(const std::shared_ptr<Session>&, const std::string& error)> use);
  // One channel for this rank alone (no proxy, or none on its host).
  std::unique_ptr<Worker> startPerRank(const LaunchSpec& spec, WorkerEvents& events);
  asio::io_context& jobLoop() { return io_; }
  const ProxyOptions& proxyOptions() const { return proxy_; }

 private:
  asio::awaitable<std::shared_ptr<Session>> connectLimited(Target target);
  std::vector<Target> distinctTargets(const std::vector<HostSpec>& hosts) const;
  void moveToJobLoop();
  // The proxy of `target`'s host, opening its channel if there is none yet: on the private loop
  // (reachability check, throws LaunchError when the host cannot be connected) or on the job loop.
  std::shared_ptr<ProxyHost> proxySync(const Target& target);
  std::shared_ptr<ProxyHost> proxyOnJobLoop(const Target& target);
  // The reachability check of today's per-rank mode: one shell command per host (bash's /dev/tcp).
  // Returns the cause per target, empty when reachable.
  std::vector<std::string> checkWithShell(const std::vector<Target>& targets, const std::string& address,
                                          uint16_t port);

  asio::io_context& io_;
  SshOptions options_;
  ProxyOptions proxy_;
  ConnectOptions connect_;
  std::string home_;
  asio::io_context sync_io_;                                           // preflight and reachability check
  bool on_job_loop_ = false;                                           // sessions moved from sync_io_ to io_
  std::map<std::string, std::vector<std::shared_ptr<Session>>> pool_;  // by Target::describe()
  std::map<std::string, std::shared_ptr<PendingConnection>> filling_;  // accepting waiters, by host
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);         // guards completions after destruction
  std::map<std::string, std::unique_ptr<Limiter>> limiters_;
  std::map<std::string, std::shared_ptr<ProxyHost>> proxies_;  // by Target::describe()
};

class SshWorker : public Worker, public ChannelHandler {
 public:
  SshWorker(int rank, WorkerEvents& events) : rank_(rank), events_(events) {}
  ~SshWorker() override {
    *alive_ = false;
    if (channel_ && !channel_->ended()) {
      // Kill without reporting: the watchdog gets the signal, and EOF if the line never makes it.
      channel_->detach();
      channel_->write(signalLine(SIGKILL));
      channel_->closeStdin();
    }
  }

  int rank() const override { return rank_; }
  WorkerState state() const override { return state_; }

  void signal(int signo) override {
    if (ended_) return;
    stop_requested_ = true;
    if (channel_)
      channel_->write(signalLine(signo));
    else
      pending_signals_.push_back(signo);
  }

  void attach(const std::shared_ptr<Session>& session, std::string input) {
    channel_ = session->exec(bootstrapCommand(), std::move(input), this);
    if (ended_) return;
    channel_->enableHeartbeat();
    state_ = WorkerState::kRunning;
    for (int s : pending_signals_) channel_->write(signalLine(s));
    pending_signals_.clear();
  }

  void failToStart(const std::string& error) { onEnd(ChannelEnd{{}, {}, {}, error}); }

  void onData(Stream stream, std::string_view bytes) override { events_.onOutput(rank_, stream, bytes); }

  void onEnd(const ChannelEnd& end) override {
    if (ended_) return;
    ended_ = true;
    ExitStatus status;
    if (!end.error.empty()) {
      status.kind = ExitStatus::Kind::kLost;
      status.detail = end.error;
    } else if (end.exit_signal) {
      status.kind = ExitStatus::Kind::kSignaled;
      status.signal = *end.exit_signal;
      if (status.signal == 0) status.detail = "signal " + end.signal_name;
    } else {
      status.code = end.exit_code.value_or(255);
    }
    state_ = endState(status, stop_requested_);
    events_.onStreamClosed(rank_, Stream::kStdout);
    events_.onStreamClosed(rank_, Stream::kStderr);
    events_.onExit(rank_, status);
  }

  std::shared_ptr<bool> alive() const { return alive_; }

 private:
  int rank_;
  WorkerEvents& events_;
  WorkerState state_ = WorkerState::kInit;
  std::shared_ptr<Channel> channel_;
  std::vector<int> pending_signals_;
  bool stop_requested_ = false;
  bool ended_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// ---------------------------------------------------------------------------------------------------------
// hvd-proxy mode: one channel per host runs hvd-proxy (launcher/ssh/proxy.h), which starts every rank of
// that host and multiplexes their output, exits and signals as frames (launcher/ssh/proxy_protocol.h).

class ProxyWorker;

std::string proxyCommand(const std::string& path) {
  // Exit code 127 without the proxy's hello means "not installed there": that host falls back.
  return "test -x " + shellQuote(path) + " || exit 127; exec " + shellQuote(path);
}

// One host's hvd-proxy channel. Owned by the launcher; workers hold weak references.
// Threading: the loop that services its session (the private loop during the check, then the job's).
class ProxyHost : public ChannelHandler, public std::enable_shared_from_this<ProxyHost> {
 public:
  enum class State {
    kOpening,   // channel requested, no hello yet
    kReady,     // hello received: frames flow
    kFallback,  // no usable hvd-proxy there: its ranks get one channel each
    kFailed,    // connection or proxy failed: error() says why
  };

  ProxyHost(Target target, std::string path) : target_(std::move(target)), path_(std::move(path)) {}
  ~ProxyHost() override { close(); }

  void attach(const std::shared_ptr<Session>& session) {
    if (state_ != State::kOpening) return;
    auto channel = session->exec(proxyCommand(path_), "", this);
    if (channel->ended()) return;  // a broken session: onEnd has already said why
    channel_ = std::move(channel);
    channel_->enableHeartbeat(PayloadWriter().frame(FrameType::kHeartbeat));
  }
  void failToOpen(const std::string& error) { fail(error); }
  // Sends EOF: the proxy ends (its ranks get SIGTERM if any still run).
  void close() {
    if (!channel_) return;
    channel_->detach();
    channel_->closeStdin();
    channel_.reset();
  }

  State state() const { return state_; }
  size_t queued() const { return channel_ ? channel_->queued() : 0; }

  // Asks the proxy to connect to address:port; checkDone() turns true with checkError() set on failure
  // (also when the host fails or falls back: then the caller checks another way).
  void requestCheck(const std::string& address, uint16_t port) {
    check_done_ = false;
    check_error_.clear();
    check_ = PayloadWriter()
                 .bytes(address)
                 .u16(port)
                 .u32(static_cast<uint32_t>(kCheckTimeout.count()))
                 .frame(FrameType::kCheck);
    if (state_ == State::kReady) sendCheck();
    if (state_ == State::kFallback || state_ == State::kFailed) check_done_ = true;
  }
  bool checkDone() const { return check_done_; }
  const std::string& checkError() const { return check_error_; }

  void add(ProxyWorker* worker, int rank, asio::io_context& io);
  void remove(int rank) { workers_.erase(rank); }
  void send(const std::string& frame) {
    if (channel_ && state_ == State::kReady) channel_->write(frame);
  }

  void onData(Stream stream, std::string_view bytes) override;
  void onEnd(const ChannelEnd& end) override;

  static constexpr std::chrono::milliseconds kCheckTimeout{5000};

 private:
  void sendCheck() {
    if (check_.empty()) return;
    channel_->write(check_);
    check_.clear();
  }
  void handle(const Frame& frame);
  void becomeReady();
  void fallBack(const std::string& why);
  void fail(const std::string& why);

  Target target_;
  std::string path_;
  State state_ = State::kOpening;
  std::shared_ptr<Channel> channel_;
  std::string before_hello_;  // stdout before the magic (a chatty login script)
  FrameDecoder decoder_;
  std::string stderr_tail_;       // an unfinished line of the proxy's diagnostics
  std::string last_stderr_line_;  // the last complete one, for error messages
  std::string error_;
  std::string check_;  // a check frame waiting for the hello
  bool check_done_ = true;
  std::string check_error_;
  std::map<int, ProxyWorker*> workers_;  // ranks sent or waiting for the hello, until their exit
};

// A rank started through its host's proxy; on a host without one, a per-rank SshWorker takes its place.
class ProxyWorker : public Worker {
 public:
  ProxyWorker(SshLauncher& launcher, LaunchSpec spec, WorkerEvents& events, std::shared_ptr<ProxyHost> host)
      : launcher_(launcher), spec_(std::move(spec)), events_(events), host_(host) {}
  ~ProxyWorker() override {
    stopStdin();
    if (auto host = host_.lock()) {
      if (spawned_ && !ended_) host->send(signalFrame(SIGKILL));
      host->remove(spec_.rank);
    }
  }

  int rank() const override { return spec_.rank; }
  WorkerState state() const override { return fallback_ ? fallback_->state() : state_; }

  void signal(int signo) override {
    if (fallback_) return fallback_->signal(signo);
    if (ended_) return;
    stop_requested_ = true;
    if (!spawned_) {
      pending_signals_.push_back(signo);
    } else if (auto host = host_.lock()) {
      host->send(signalFrame(signo));
    }
  }

  // The host is ready: send this rank's description, then what was asked meanwhile.
  void spawn(ProxyHost& host) {
    SpawnRequest r{spec_.rank, spec_.host.name, spec_.cwd, spec_.argv, spec_.env, spec_.forward_stdin};
    host.send(encodeSpawn(r));
    spawned_ = true;
    state_ = WorkerState::kRunning;
    for (int s : pending_signals_) host.send(signalFrame(s));
    pending_signals_.clear();
    if (spec_.forward_stdin) startStdin();
  }

  // No proxy on that host: one channel of its own, as before the proxy existed.
  void useFallback() {
    fallback_ = launcher_.startPerRank(spec_, events_);
    for (int s : pending_signals_) fallback_->signal(s);
    pending_signals_.clear();
  }

  void onOutput(Stream stream, std::string_view bytes) { events_.onOutput(spec_.rank, stream, bytes); }

  void onExit(const ExitStatus& status) {
    if (ended_) return;
    ended_ = true;
    stopStdin();
    state_ = endState(status, stop_requested_);
    events_.onStreamClosed(spec_.rank, Stream::kStdout);
    events_.onStreamClosed(spec_.rank, Stream::kStderr);
    events_.onExit(spec_.rank, status);
  }

  void lost(const std::string& why) {
    ExitStatus status;
    status.kind = ExitStatus::Kind::kLost;
    status.detail = why;
    onExit(status);
  }

 private:
  std::string signalFrame(int signo) const {
    return PayloadWriter().i32(spec_.rank).i32(signo).frame(FrameType::kSignal);
  }

  // Rank 0's stdin: hvdrun's stdin, read on the job loop and sent as frames. A terminal or pipe is
  // reopened through /proc so that the non-blocking mode Asio sets stays on our own file description
  // (the shell's terminal is left as it was); a regular file is read through a duplicate.
  void startStdin() {
    const int source = launcher_.proxyOptions().stdin_fd;
    // A background hvdrun reading its terminal would be stopped (SIGTTIN): rank 0 gets EOF instead.
    if (::isatty(source) && ::tcgetpgrp(source) != ::getpgrp()) {
      sendStdin("", true);
      return;
    }
    struct stat st {};
    int fd = -1;
    if (::fstat(source, &st) == 0 && !S_ISREG(st.st_mode))
      fd = ::open(("/proc/self/fd/" + std::to_string(source)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = ::fcntl(source, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      sendStdin("", true);
      return;
    }
    stdin_ = std::make_unique<asio::posix::stream_descriptor>(launcher_.jobLoop(), fd);
    stdin_timer_ = std::make_unique<asio::steady_timer>(launcher_.jobLoop());
    readStdin();
  }

  void readStdin() {
    auto host = host_.lock();
    if (!stdin_ || !host) return;
    // Backpressure: a fast producer must not pile up megabytes in the channel's queue.
    if (host->queued() > kStdinQueueLimit) {
      stdin_timer_->expires_after(std::chrono::milliseconds(20));
      stdin_timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
        if (!ec && *alive) readStdin();
      });
      return;
    }
    stdin_->async_read_some(asio::buffer(stdin_buffer_),
                            [this, alive = alive_](const boost::system::error_code& ec, size_t n) {
                              if (!*alive || !stdin_) return;
                              if (n > 0) sendStdin(std::string_view(stdin_buffer_.data(), n), false);
                              if (ec) {
                                sendStdin("", true);
                                stopStdin();
                                return;
                              }
                              readStdin();
                            });
  }

  void sendStdin(std::string_view bytes, bool eof) {
    auto host = host_.lock();
    if (!host) return;
    if (eof)
      host->send(PayloadWriter().i32(spec_.rank).frame(FrameType::kStdinEof));
    else
      host->send(PayloadWriter().i32(spec_.rank).bytes(bytes).frame(FrameType::kStdin));
  }

  void stopStdin() {
    *alive_ = false;
    alive_ = std::make_shared<bool>(true);
    stdin_timer_.reset();
    stdin_.reset();
  }

  static constexpr size_t kStdinQueueLimit = 1u << 20;

  SshLauncher& launcher_;
  LaunchSpec spec_;
  WorkerEvents& events_;
  std::weak_ptr<ProxyHost> host_;
  std::unique_ptr<Worker> fallback_;
  WorkerState state_ = WorkerState::kInit;
  std::vector<int> pending_signals_;
  bool spawned_ = false;
  bool stop_requested_ = false;
  bool ended_ = false;
  std::unique_ptr<asio::posix::stream_descriptor> stdin_;
  std::unique_ptr<asio::steady_timer> stdin_timer_;
  std::array<char, 16 * 1024> stdin_buffer_{};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards pending stdin handlers
};

void ProxyHost::add(ProxyWorker* worker, int rank, asio::io_context& io) {
  switch (state_) {
    case State::kOpening:
      workers_[rank] = worker;
      return;
    case State::kReady:
      workers_[rank] = worker;
      worker->spawn(*this);
      return;
    case State::kFallback:
      worker->useFallback();
      return;
    case State::kFailed:
      // Not from inside start(): the job has not stored the worker yet.
      workers_[rank] = worker;
      asio::post(io, [weak = weak_from_this(), rank] {
        auto self = weak.lock();
        if (!self) return;
        if (auto it = self->workers_.find(rank); it != self->workers_.end()) {
          ProxyWorker* w = it->second;
          self->workers_.erase(it);
          w->lost(self->error_);
        }
      });
      return;
  }
}

void ProxyHost::onData(Stream stream, std::string_view bytes) {
  if (stream == Stream::kStderr) {
    // The proxy's own diagnostics (and whatever the login script says): shown, and kept for errors.
    stderr_tail_ += bytes;
    size_t nl;
    while ((nl = stderr_tail_.find('\n')) != std::string::npos) {
      const std::string line = stderr_tail_.substr(0, nl);
      stderr_tail_.erase(0, nl + 1);
      // One write per line: the job's output forwarder writes whole lines to the same stderr.
      if (!line.empty()) std::cerr << ("hvdrun: ssh " + target_.describe() + ": " + line + "\n");
      last_stderr_line_ = line.empty() ? last_stderr_line_ : line;
    }
    if (stderr_tail_.size() > 4096) stderr_tail_.erase(0, stderr_tail_.size() - 4096);
    return;
  }
  if (state_ == State::kFallback || state_ == State::kFailed) return;
  if (state_ == State::kOpening) {
    before_hello_ += bytes;
    const auto at = before_hello_.find(kProxyHelloMagic);
    if (at == std::string::npos) {
      if (before_hello_.size() > 65536)
        before_hello_.erase(0, before_hello_.size() - kProxyHelloMagic.size());
      return;
    }
    decoder_.feed(std::string_view(before_hello_).substr(at + kProxyHelloMagic.size()));
    before_hello_.clear();
  } else {
    decoder_.feed(bytes);
  }
  try {
    while (auto frame = decoder_.next()) {
      handle(*frame);
      if (state_ == State::kFallback || state_ == State::kFailed) return;
    }
  } catch (const Error& e) {
    fail(detail::concat("hvd-proxy on ", target_.describe(), ": ", e.what()));
    close();
  }
}

void ProxyHost::handle(const Frame& frame) {
  PayloadReader in(frame);
  if (state_ == State::kOpening) {
    if (frame.type != FrameType::kHello)
      throw LaunchError(detail::concat("expected a hello frame, got ", PayloadReader::typeName(frame.type)));
    const uint32_t version = in.u32();
    if (version != kProxyVersion) {
      fallBack(detail::concat(path_, " speaks protocol ", version, ", this hvdrun ", kProxyVersion));
      close();
      return;
    }
    becomeReady();
    return;
  }
  switch (frame.type) {
    case FrameType::kCheckResult: {
      const bool ok = in.u8() != 0;
      std::string why = in.bytes();
      in.end();
      check_done_ = true;
      check_error_ = ok ? "" : why;
      return;
    }
    case FrameType::kStarted:
      return;  // the pid is the remote host's: nothing to do with it here
    case FrameType::kOutput: {
      const int rank = in.i32();
      const uint8_t stream = in.u8();
      const std::string bytes = in.bytes();
      in.end();
      if (auto it = workers_.find(rank); it != workers_.end())
        it->second->onOutput(stream ? Stream::kStderr : Stream::kStdout, bytes);
      return;
    }
    case FrameType::kExit: {
      const int rank = in.i32();
      const uint8_t kind = in.u8();
      const int value = in.i32();
      in.end();
      ExitStatus status;
      if (kind == 1) {
        status.kind = ExitStatus::Kind::kSignaled;
        status.signal = value;
      } else {
        status.code = value;
      }
      if (auto it = workers_.find(rank); it != workers_.end()) {
        ProxyWorker* w = it->second;
        workers_.erase(it);
        w->onExit(status);
      }
      return;
    }
    default:
      throw LaunchError(detail::concat("unexpected ", PayloadReader::typeName(frame.type), " frame"));
  }
}

void ProxyHost::becomeReady() {
  state_ = State::kReady;
  sendCheck();
  auto workers = workers_;  // a spawn may end a worker at once (the host fails meanwhile)
  for (auto& [rank, w] : workers) {
    if (workers_.count(rank)) w->spawn(*this);
  }
}

void ProxyHost::fallBack(const std::string& why) {
  state_ = State::kFallback;
  std::cerr << ("hvdrun: ssh " + target_.describe() + ": " + why +
                "; starting its workers with one ssh channel each\n");
  check_done_ = true;
  auto workers = std::exchange(workers_, {});
  for (auto& [rank, w] : workers) w->useFallback();
}

void ProxyHost::fail(const std::string& why) {
  if (state_ == State::kFailed || state_ == State::kFallback) return;
  state_ = State::kFailed;
  error_ = why;
  if (!check_done_) {
    check_done_ = true;
    check_error_ = why;
  }
  auto workers = std::exchange(workers_, {});
  for (auto& [rank, w] : workers) w->lost(why);
}

void ProxyHost::onEnd(const ChannelEnd& end) {
  channel_.reset();
  if (state_ == State::kOpening && end.error.empty() && end.exit_code == 127) {
    fallBack("no hvd-proxy at " + path_ + " there (exit code 127)");
    return;
  }
  if (!end.error.empty()) {
    fail(end.error);
    return;
  }
  std::string how = end.exit_signal ? "signal " + (end.signal_name.empty() ? std::to_string(*end.exit_signal)
                                                                           : end.signal_name)
                                    : "exit code " + std::to_string(end.exit_code.value_or(255));
  fail(detail::concat("hvd-proxy ", path_, " on ", target_.describe(), " ended (", how, ")",
                      last_stderr_line_.empty() ? "" : ": " + last_stderr_line_));
}

std::vector<Target> SshLauncher::distinctTargets(const std::vector<HostSpec>& hosts) const {
  std::vector<Target> out;
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    Target t = resolveTarget(h, options_);
    if (seen.insert(t.describe()).second) out.push_back(std::move(t));
  }
  return out;
}

asio::awaitable<std::shared_ptr<Session>> SshLauncher::connectLimited(Target target) {
  auto& limiter = limiters_[target.hostname + ":" + std::to_string(target.port)];
  if (!limiter) limiter = std::make_unique<Limiter>(kMaxConcurrentHandshakesPerHost);
  Limiter* l = limiter.get();
  co_await l->acquire();
  try {
    auto session = co_await Session::connect(std::move(target), connect_);
    l->release();
    co_return session;
  } catch (...) {
    l->release();
    throw;
  }
}

void SshLauncher::preflight(const std::vector<HostSpec>& hosts) {
  const auto targets = distinctTargets(hosts);
  std::vector<std::string> errors(targets.size());
  auto all = [&]() -> asio::awaitable<int> {
    // Every host at once; each coroutine records its own result, so all failures are reported.
    auto remaining = std::make_shared<size_t>(targets.size());
    auto done = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor);
    done->expires_at(asio::steady_timer::time_point::max());
    for (size_t i = 0; i < targets.size(); ++i) {
      asio::co_spawn(
          sync_io_,
          [this, &targets, &errors, i]() -> asio::awaitable<void> {
            try {
              auto session = co_await connectLimited(targets[i]);
              pool_[targets[i].describe()].push_back(std::move(session));
            } catch (const std::exception& e) {
              errors[i] = e.what();
            }
          },
          [remaining, done](std::exception_ptr) {
            if (--*remaining == 0) done->cancel();
          });
    }
    if (!targets.empty()) {
      boost::system::error_code ignored;
      co_await done->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    co_return 0;
  };
  HVD_CHECK(!on_job_loop_, LaunchError, "ssh preflight called after workers started");
  runSync(sync_io_, all());
  std::string message;
  for (const auto& e : errors) {
    if (!e.empty()) message += (message.empty() ? "" : "\n") + e;
  }
  if (!message.empty()) {
    pool_.clear();
    throw LaunchError(message);
  }
}

bool SshLauncher::shouldInheritEnv(std::string_view name) const {
  // Variables that describe this machine or this login session; the remote login sets its own.
  static const std::set<std::string_view> kLocalOnly = {
      "HOME",          "USER",          "LOGNAME", "SHELL",      "MAIL",       "HOSTNAME",       "PWD",
      "OLDPWD",        "SHLVL",         "_",       "TMPDIR",     "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
      "SSH_AUTH_SOCK", "SSH_AGENT_PID", "DISPLAY", "XAUTHORITY", "TERMCAP",    "WINDOWID"};
  if (name.rfind("BASH_FUNC_", 0) == 0) return false;
  return kLocalOnly.count(name) == 0;
}

std::vector<std::string> SshLauncher::checkWithShell(const std::vector<Target>& targets,
                                                     const std::string& address, uint16_t port) {
  // bash's /dev/tcp: no tool needed on the host. The address is not secret; the token is not involved.
  const std::string command = "exec timeout 5 bash -c " +
                              shellQuote("exec 3<>/dev/tcp/" + address + "/" + std::to_string(port)) +
                              " 2>&1";
  std::vector<std::unique_ptr<Collect>> results;
  std::vector<std::string> errors(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    results.push_back(std::make_unique<Collect>());
    auto& sessions = pool_[targets[i].describe()];
    if (sessions.empty()) {
      try {
        sessions.push_back(runSync(sync_io_, connectLimited(targets[i])));
      } catch (const std::exception& e) {
        errors[i] = e.what();
        results.back()->done = true;
        continue;
      }
    }
    sessions.front()->exec(command, "", results.back().get());
  }
  auto allDone = [&] {
    for (const auto& r : results) {
      if (!r->done) return false;
    }
    return true;
  };
  sync_io_.restart();
  while (!allDone() && sync_io_.run_one() > 0) {
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& r = *results[i];
    if (!errors[i].empty() || (r.end.exit_code && *r.end.exit_code == 0)) continue;
    if (!r.end.error.empty())
      errors[i] = r.end.error;
    else if (r.end.exit_code && *r.end.exit_code == 124)
      errors[i] = "timed out after 5s";
    else {
      // bash says "bash: line 1: /dev/tcp/ADDR/PORT: Connection refused"; keep the cause.
      const std::string line = lastLine(r.output);
      const auto colon = line.rfind(": ");
      errors[i] = line.empty() ? "connect failed, exit code " + std::to_string(r.end.exit_code.value_or(-1))
                  : colon == std::string::npos ? line
                                               : line.substr(colon + 2);
    }
  }
  return errors;
}

std::shared_ptr<ProxyHost> SshLauncher::proxySync(const Target& target) {
  auto& host = proxies_[target.describe()];
  if (host && host->state() != ProxyHost::State::kFailed) return host;
  host = std::make_shared<ProxyHost>(target, proxy_.path);
  auto& sessions = pool_[target.describe()];
  std::erase_if(sessions, [](const auto& s) { return s->broken(); });
  for (auto& s : sessions) {
    if (s->openChannels() < kMaxChannelsPerConnection) {
      host->attach(s);
      return host;
    }
  }
  try {
    sessions.push_back(runSync(sync_io_, connectLimited(target)));
  } catch (const std::exception& e) {
    host->failToOpen(e.what());
    return host;
  }
  host->attach(sessions.back());
  return host;
}

std::shared_ptr<ProxyHost> SshLauncher::proxyOnJobLoop(const Target& target) {
  auto& host = proxies_[target.describe()];
  if (host) return host;  // a failed one stays failed: its ranks are reported lost with its error
  host = std::make_shared<ProxyHost>(target, proxy_.path);
  withSession(target, [weak = std::weak_ptr<ProxyHost>(host)](const std::shared_ptr<Session>& session,
                                                              const std::string& error) {
    auto h = weak.lock();
    if (!h) return;
    if (!error.empty())
      h->failToOpen(error);
    else
      h->attach(session);
  });
  return host;
}

void SshLauncher::checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                           uint16_t port) {
  const auto targets = distinctTargets(hosts);
  if (targets.empty()) return;
  HVD_CHECK(!on_job_loop_, LaunchError, "ssh reachability check called after workers started");
  std::vector<std::string> errors(targets.size());
  std::vector<Target> by_shell;  // hosts without a proxy
  std::vector<size_t> by_shell_index;
  if (proxy_.enabled) {
    // Every host's proxy channel opens in parallel (they share the private loop); the channels stay open
    // and later carry the host's ranks.
    std::vector<std::shared_ptr<ProxyHost>> proxies;
    for (const auto& t : targets) {
      proxies.push_back(proxySync(t));
      proxies.back()->requestCheck(address, port);
    }
    auto allDone = [&] {
      for (const auto& p : proxies) {
        if (!p->checkDone()) return false;
      }
      return true;
    };
    sync_io_.restart();
    while (!allDone() && sync_io_.run_one() > 0) {
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      if (proxies[i]->state() == ProxyHost::State::kFallback) {
        by_shell.push_back(targets[i]);
        by_shell_index.push_back(i);
      } else {
        errors[i] = proxies[i]->checkDone() ? proxies[i]->checkError() : "no answer from hvd-proxy";
      }
    }
  } else {
    by_shell = targets;
    for (size_t i = 0; i < targets.size(); ++i) by_shell_index.push_back(i);
  }
  if (!by_shell.empty()) {
    const auto shell_errors = checkWithShell(by_shell, address, port);
    for (size_t j = 0; j < by_shell.size(); ++j) errors[by_shell_index[j]] = shell_errors[j];
  }
  std::string message;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (errors[i].empty()) continue;
    message +=
        (message.empty() ? "" : "\n") +
        ("host " + targets[i].describe() + " cannot reach the rendezvous server at " + address + ":" +
         std::to_string(port) + " (" + errors[i] + "); choose a reachable address with --network-interface");
  }
  if (!message.empty()) throw LaunchError(message);
}

void SshLauncher::moveToJobLoop() {
  if (on_job_loop_) return;
  on_job_loop_ = true;
  // Let channels of the reachability check finish freeing before their sockets change loops.
  sync_io_.restart();
  sync_io_.poll();
  for (auto& [key, sessions] : pool_) {
    std::erase_if(sessions, [](const auto& s) { return s->broken(); });
    for (auto& s : sessions) s->rebind(io_);
  }
}

void SshLauncher::withSession(const Target& target,
                              std::function<void(const std::shared_ptr<Session>&, const std::string&)> use) {
  const std::string key = target.describe();
  auto& sessions = pool_[key];
  std::erase_if(sessions, [](const auto& s) { return s->broken(); });
  for (auto& s : sessions) {
    if (s->openChannels() < kMaxChannelsPerConnection) {
      use(s, "");
      return;
    }
  }
  // No room: join the connection being opened for this host, or open one more.
  auto& batch = filling_[key];
  if (!batch || batch->reserved >= kMaxChannelsPerConnection) {
    batch = std::make_shared<PendingConnection>();
    asio::co_spawn(
        io_, connectLimited(target),
        [this, alive = alive_, key, b = batch](std::exception_ptr e, std::shared_ptr<Session> session) {
          if (!*alive) return;
          if (filling_[key] == b) filling_.erase(key);
          std::string error;
          if (e) {
            try {
              std::rethrow_exception(e);
            } catch (const std::exception& ex) {
              error = ex.what();
            }
          }
          if (session) pool_[key].push_back(session);
          for (auto& waiter : b->waiters) waiter(session, error);
        });
  }
  batch->reserved++;
  batch->waiters.push_back(std::move(use));
}

std::unique_ptr<Worker> SshLauncher::startPerRank(const LaunchSpec& spec, WorkerEvents& events) {
  const Target target = resolveTarget(spec.host, options_);
  RemoteWorker remote{spec.host.name, spec.cwd, spec.env, spec.argv};
  auto input = bootstrapInput(remote);
  auto worker = std::make_unique<SshWorker>(spec.rank, events);
  SshWorker* raw = worker.get();
  withSession(target, [raw, alive = raw->alive(), input = std::move(input)](
                          const std::shared_ptr<Session>& session, const std::string& error) mutable {
    if (!*alive) return;
    if (!error.empty())
      raw->failToStart(error);
    else
      raw->attach(session, std::move(input));
  });
  return worker;
}

std::unique_ptr<Worker> SshLauncher::start(const LaunchSpec& spec, WorkerEvents& events) {
  HVD_CHECK(!spec.argv.empty(), LaunchError, "rank ", spec.rank, " on host ", spec.host.name,
            ": empty command");
  moveToJobLoop();
  if (!proxy_.enabled) return startPerRank(spec, events);
  auto host = proxyOnJobLoop(resolveTarget(spec.host, options_));
  auto worker = std::make_unique<ProxyWorker>(*this, spec, events, host);
  host->add(worker.get(), spec.rank, io_);
  return worker;
}

SshLauncher::~SshLauncher() {
  *alive_ = false;
  // EOF to every proxy: each ends at once (nothing of this job runs any more, or SIGTERM/SIGKILL to what
  // still does); closing the connections below would end them too.
  for (auto& [key, host] : proxies_) host->close();
}

}  // namespace

Target resolveTarget(const HostSpec& host, const SshOptions& options) {
  const std::string home = homeDir();
  const std::string user = localUser();
  const SshConfig config = SshConfig::load(options.config_file.value_or(home + "/.ssh/config"), home);
  const HostConfig hc = config.lookup(host.name, user, home);
  Target t;
  t.alias = host.name;
  t.hostname = hc.hostname;
  t.user = host.user ? *host.user : hc.user.value_or(user);
  t.port = options.port ? *options.port : hc.port.value_or(22);
  if (options.identity_file) t.identity_files.push_back(*options.identity_file);
  t.identity_files.insert(t.identity_files.end(), hc.identity_files.begin(), hc.identity_files.end());
  return t;
}

ProxyOptions ProxyOptions::fromEnvironment() {
  ProxyOptions o;
  if (const char* mode = std::getenv("HVD_SSH_PROXY"); mode && *mode) {
    const std::string m = mode;
    if (m == "never")
      o.enabled = false;
    else if (m != "auto")
      throw UsageError("HVD_SSH_PROXY='" + m + "' is not one of auto, never");
  }
  if (const char* path = std::getenv("HVD_SSH_PROXY_PATH"); path && *path) {
    if (path[0] != '/')
      throw UsageError(std::string("HVD_SSH_PROXY_PATH='") + path + "' is not an absolute path");
    o.path = path;
  }
  return o;
}

std::string proxyPath(const ProxyOptions& proxy) {
  if (!proxy.path.empty()) return proxy.path;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw LaunchError("cannot read /proc/self/exe to find hvd-proxy next to this program: " + ec.message() +
                      " (set HVD_SSH_PROXY_PATH)");
  }
  return self.parent_path() / "hvd-proxy";
}

std::unique_ptr<Launcher> makeLauncher(asio::io_context& io, const SshOptions& options) {
  ProxyOptions proxy = ProxyOptions::fromEnvironment();
  if (options.proxy) proxy.enabled = *options.proxy;  // --ssh-proxy > HVD_SSH_PROXY > auto
  return makeLauncher(io, options, proxy);
}

std::unique_ptr<Launcher> makeLauncher(asio::io_context& io, const SshOptions& options,
                                       const ProxyOptions& proxy) {
  return std::make_unique<SshLauncher>(io, options, proxy);
}

}  // namespace hvd::launcher::ssh
