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

#include "launcher/output.h"
#include "launcher/ssh/config.h"
#include "launcher/ssh/proxy_host.h"
#include "launcher/ssh/proxy_protocol.h"
#include "launcher/ssh/remote.h"
#include "base/error.h"

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


class SshWorker;

// Workers waiting for a connection being opened for them.
struct PendingConnection {
  size_t reserved = 0;
  std::vector<std::function<void(const std::shared_ptr<Session>&, const std::string& error)>> waiters;
};

class SshLauncher : public Launcher, public ProxyTransport {
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

  // ProxyTransport
  asio::io_context& jobLoop() override { return io_; }
  int stdinFd() const override { return proxy_.stdin_fd; }
  std::unique_ptr<Worker> startWithoutProxy(const LaunchSpec& spec, WorkerEvents& events) override {
    return startPerRank(spec, events);
  }

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

std::string proxyCommand(const std::string& path) {
  // Exit code 127 without the proxy's hello means "not installed there": that host falls back.
  return "test -x " + shellQuote(path) + " || exit 127; exec " + shellQuote(path);
}

// hvd-proxy's link over an ssh exec channel; the channel sends the heartbeat frames itself.
class ChannelLink : public ProxyLink {
 public:
  explicit ChannelLink(std::shared_ptr<Channel> channel) : channel_(std::move(channel)) {}
  void write(std::string_view bytes) override { channel_->write(bytes); }
  size_t queued() const override { return channel_->queued(); }
  void close() override {
    channel_->detach();
    channel_->closeStdin();
  }

 private:
  std::shared_ptr<Channel> channel_;
};

std::shared_ptr<ProxyHost> makeProxyHost(const Target& target, const std::string& path) {
  return std::make_shared<ProxyHost>("ssh " + target.describe(), target.describe(), path,
                                     "starting its workers with one ssh channel each");
}

// Opens the proxy's channel on `session`.
void attachProxy(ProxyHost& host, const std::shared_ptr<Session>& session, const std::string& path) {
  if (host.state() != ProxyHost::State::kOpening) return;
  auto channel = session->exec(proxyCommand(path), "", &host);
  if (channel->ended()) return;  // a broken session: onEnd has already said why
  channel->enableHeartbeat(PayloadWriter().frame(FrameType::kHeartbeat));
  host.attach(std::make_unique<ChannelLink>(std::move(channel)));
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
  host = makeProxyHost(target, proxy_.path);
  auto& sessions = pool_[target.describe()];
  std::erase_if(sessions, [](const auto& s) { return s->broken(); });
  for (auto& s : sessions) {
    if (s->openChannels() < kMaxChannelsPerConnection) {
      attachProxy(*host, s, proxy_.path);
      return host;
    }
  }
  try {
    sessions.push_back(runSync(sync_io_, connectLimited(target)));
  } catch (const std::exception& e) {
    host->failToOpen(e.what());
    return host;
  }
  attachProxy(*host, sessions.back(), proxy_.path);
  return host;
}

std::shared_ptr<ProxyHost> SshLauncher::proxyOnJobLoop(const Target& target) {
  auto& host = proxies_[target.describe()];
  // A proxy that failed (killed, its connection lost, the watchdog gave up) has already reported its ranks
  // lost; a rank started on the host later (an elastic job taking the host back) gets a new one.
  if (host && host->state() != ProxyHost::State::kFailed) return host;
  host = makeProxyHost(target, proxy_.path);
  withSession(target, [weak = std::weak_ptr<ProxyHost>(host), path = proxy_.path](
                          const std::shared_ptr<Session>& session, const std::string& error) {
    auto h = weak.lock();
    if (!h) return;
    if (!error.empty())
      h->failToOpen(error);
    else
      attachProxy(*h, session, path);
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
