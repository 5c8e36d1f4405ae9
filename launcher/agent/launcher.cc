#include "launcher/agent/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "launcher/cli.h"
#include "launcher/helper_process.h"
#include "launcher/output.h"
#include "launcher/ssh/launcher.h"
#include "launcher/ssh/proxy.h"
#include "launcher/ssh/proxy_host.h"
#include "launcher/ssh/remote.h"
#include "launcher/ssh/tcp_link.h"
#include "base/error.h"
#include "rendezvous/token.h"

namespace hvd::launcher::agent {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using ssh::ProxyHost;
using ssh::ProxyWorker;

namespace {

// How often the agents are reaped and the join deadlines looked at.
constexpr std::chrono::milliseconds kWatchInterval{100};
// A connection must send its join line within this time.
constexpr std::chrono::seconds kJoinLineTimeout{10};
constexpr size_t kMaxJoinLine = 4096;

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// One rank's agent process and the proxy it is to bring.
struct Agent {
  int rank = -1;
  std::string host;
  std::shared_ptr<ProxyHost> proxy;
  pid_t pid = -1;
  bool reaped = false;
  bool joined = false;
  bool closed = false;  // its proxy was told to end: its one rank has ended
  Clock::time_point deadline;
  std::unique_ptr<asio::posix::stream_descriptor> output;  // its stdout and stderr, one pipe
  std::array<char, 4096> buffer{};
  std::string tail;       // an unfinished line
  std::string last_line;  // for error messages
};

// A connection that has not sent its join line yet.
struct Joining {
  explicit Joining(asio::io_context& io) : socket(io), timer(io) {}
  asio::ip::tcp::socket socket;
  asio::steady_timer timer;
  std::string received;
  std::array<char, 512> buffer{};
};

class AgentLauncher : public Launcher, public ssh::ConnectBackTransport {
 public:
  AgentLauncher(asio::io_context& io, AgentOptions options)
      : ConnectBackTransport(io, options.stdin_fd), io_(io), options_(std::move(options)), acceptor_(io), watch_(io), token_(rendezvous::generateToken()) {
    if (options_.proxy_path.empty()) options_.proxy_path = ssh::proxyPath(ssh::ProxyOptions{});
  }
  ~AgentLauncher() override;

  std::string name() const override { return "agent"; }
  bool hostsShareInterfaceNames() const override { return false; }
  void preflight(const std::vector<HostSpec>& hosts) override;
  void checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                uint16_t port) override;
  std::unique_ptr<Worker> start(const LaunchSpec& spec, WorkerEvents& events) override;

 private:
  void accept();
  void readJoinLine(std::shared_ptr<Joining> joining);
  void joined(std::shared_ptr<Joining> joining, const std::string& name, std::string rest);
  void readOutput(const std::string& name);
  void forwardOutput(Agent& agent, std::string_view bytes);
  void watch();
  void stopAgent(Agent& agent, int signo);

  asio::io_context& io_;
  AgentOptions options_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer watch_;
  std::string token_;
  std::string connect_to_;
  uint64_t started_ = 0;
  std::map<std::string, Agent> agents_;  // by the proxy's name
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

void AgentLauncher::preflight(const std::vector<HostSpec>&) {
  HVD_CHECK(!options_.command.empty(), LaunchError, "--launcher-agent is empty: name the program that starts hvd-proxy on a host");
  HVD_CHECK(findExecutable(options_.command.front(), currentEnvironment()), LaunchError, "--launcher-agent '",
            options_.command.front(), "' not found in PATH");
}

void AgentLauncher::checkRendezvousReachable(const std::vector<HostSpec>&, const std::string& address, uint16_t) {
  if (acceptor_.is_open()) return;
  uint16_t port = 0;
  const int fd = ssh::listenForProxies(address, port);
  boost::system::error_code ec;
  acceptor_.assign(address.find(':') != std::string::npos ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd, ec);
  HVD_CHECK(!ec, LaunchError, "cannot listen for hvd-proxy connections on ", address, ": ", ec.message());
  connect_to_ = ssh::connectTarget(address, port);
  accept();
  watch();
}

void AgentLauncher::accept() {
  auto joining = std::make_shared<Joining>(io_);
  acceptor_.async_accept(joining->socket, [this, joining, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive) return;
    if (!ec) {
      joining->timer.expires_after(kJoinLineTimeout);
      joining->timer.async_wait([joining](const boost::system::error_code& e) {
        boost::system::error_code ignored;
        if (!e) joining->socket.close(ignored);  // silent too long: not a proxy of this job
      });
      readJoinLine(joining);
    }
    if (ec != asio::error::operation_aborted) accept();
  });
}

void AgentLauncher::readJoinLine(std::shared_ptr<Joining> joining) {
  joining->socket.async_read_some(asio::buffer(joining->buffer), [this, joining, alive = alive_](
                                                                     const boost::system::error_code& ec, size_t n) {
    if (!*alive) return;
    joining->received.append(joining->buffer.data(), n);
    const auto nl = joining->received.find('\n');
    if (nl == std::string::npos) {
      if (!ec && joining->received.size() < kMaxJoinLine) readJoinLine(joining);
      return;  // closed or garbled: dropped without a word
    }
    joining->timer.cancel();
    const auto name = ssh::parseJoinLine(std::string_view(joining->received).substr(0, nl), token_);
    if (!name) return;
    joined(joining, *name, joining->received.substr(nl + 1));
  });
}

void AgentLauncher::joined(std::shared_ptr<Joining> joining, const std::string& name, std::string rest) {
  const auto it = agents_.find(name);
  if (it == agents_.end() || it->second.joined || it->second.proxy->state() != ProxyHost::State::kOpening) {
    std::cerr << ("hvdrun: warning: an hvd-proxy joined as '" + name + "', which no rank waits for (or it joined "
                  "late or twice); ignored\n");
    return;
  }
  Agent& agent = it->second;
  agent.joined = true;
  const int fd = joining->socket.release();
  agent.proxy->attach(std::make_unique<ssh::TcpLink>(io_, fd, *agent.proxy, agent.host));
  if (!rest.empty()) agent.proxy->onData(Stream::kStdout, rest);
}

std::unique_ptr<Worker> AgentLauncher::start(const LaunchSpec& spec, WorkerEvents& events) {
  HVD_CHECK(!spec.argv.empty(), LaunchError, "rank ", spec.rank, " on host ", spec.host.name, ": empty command");
  HVD_CHECK(acceptor_.is_open(), LaunchError, "rank ", spec.rank,
            ": the agent launcher starts ranks only after its listener was opened (checkRendezvousReachable)");
  const std::string name = detail::concat("agent-", ++started_, "-rank-", spec.rank);
  auto proxy = std::make_shared<ProxyHost>("agent for rank " + std::to_string(spec.rank) + " on " + spec.host.name,
                                           spec.host.name, options_.proxy_path);
  auto worker = std::make_unique<ProxyWorker>(*this, spec, events, proxy);
  proxy->add(worker.get(), spec.rank, io_);
  // The agent alone gets the token and the proxy's name, to pass on to the proxy.
  const HelperProcess helper =
      startHelper(agentCommand(options_, spec.host.name, options_.proxy_path, connect_to_),
                  {ssh::kProxyTokenEnv, ssh::kProxyNameEnv},
                  {std::string(ssh::kProxyTokenEnv) + "=" + token_, std::string(ssh::kProxyNameEnv) + "=" + name},
                  SIGTERM, "");
  Agent& agent = agents_[name];
  agent.rank = spec.rank;
  agent.host = spec.host.name;
  agent.proxy = proxy;
  agent.pid = helper.pid;
  agent.deadline = Clock::now() + options_.join_timeout;
  agent.output = std::make_unique<asio::posix::stream_descriptor>(io_, helper.output);
  readOutput(name);
  return worker;
}

void AgentLauncher::readOutput(const std::string& name) {
  Agent& agent = agents_.at(name);
  agent.output->async_read_some(asio::buffer(agent.buffer), [this, name, alive = alive_](
                                                                const boost::system::error_code& ec, size_t n) {
    if (!*alive) return;
    const auto it = agents_.find(name);
    if (it == agents_.end()) return;
    Agent& a = it->second;
    if (n > 0) forwardOutput(a, std::string_view(a.buffer.data(), n));
    if (!ec) readOutput(name);
  });
}

void AgentLauncher::forwardOutput(Agent& agent, std::string_view bytes) {
  agent.tail.append(bytes);
  size_t nl;
  while ((nl = agent.tail.find('\n')) != std::string::npos) {
    const std::string line = agent.tail.substr(0, nl);
    agent.tail.erase(0, nl + 1);
    if (line.empty()) continue;
    std::cerr << detail::concat("hvdrun: agent for rank ", agent.rank, " on ", agent.host, ": ", line, "\n");
    agent.last_line = line;
  }
  if (agent.tail.size() > 8192) agent.tail.erase(0, agent.tail.size() - 8192);
}

void AgentLauncher::stopAgent(Agent& agent, int signo) {
  if (agent.reaped || agent.pid <= 0) return;
  if (::kill(-agent.pid, signo) != 0) ::kill(agent.pid, signo);
}

void AgentLauncher::watch() {
  watch_.expires_after(kWatchInterval);
  watch_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    const auto now = Clock::now();
    for (auto& [name, agent] : agents_) {
      int status = 0;
      if (!agent.reaped && ::waitpid(agent.pid, &status, WNOHANG) == agent.pid) {
        agent.reaped = true;
        if (!agent.joined) {
          // What it printed last may still be in the pipe.
          char buf[4096];
          const int fd = agent.output->native_handle();
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
          for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) forwardOutput(agent, std::string_view(buf, n));
          if (!agent.tail.empty()) forwardOutput(agent, "\n");
          agent.proxy->failToOpen(detail::concat("the launcher agent for rank ", agent.rank, " on ", agent.host,
                                                 " ended with ", describeStatus(status),
                                                 " before hvd-proxy connected back",
                                                 agent.last_line.empty() ? "" : ": " + agent.last_line));
        }
      } else if (!agent.joined && !agent.reaped && now >= agent.deadline &&
                 agent.proxy->state() == ProxyHost::State::kOpening) {
        stopAgent(agent, SIGTERM);
        agent.proxy->failToOpen(detail::concat("hvd-proxy for rank ", agent.rank, " on ", agent.host,
                                               " did not connect back within ", options_.join_timeout.count() / 1000.0,
                                               " s of starting the launcher agent",
                                               agent.last_line.empty() ? "" : "; it said: " + agent.last_line));
      }
    }
    // A proxy serves one rank: once that rank has ended, the proxy is told to end (and its agent with it);
    // agents that ended and whose proxies are done are forgotten.
    for (auto it = agents_.begin(); it != agents_.end();) {
      Agent& agent = it->second;
      if (agent.joined && !agent.closed && agent.proxy->idle()) {
        agent.proxy->close();
        agent.closed = true;
      }
      const bool done = agent.reaped && (agent.closed || agent.proxy->state() == ProxyHost::State::kFailed);
      it = done ? agents_.erase(it) : std::next(it);
    }
    watch();
  });
}

AgentLauncher::~AgentLauncher() {
  *alive_ = false;
  boost::system::error_code ec;
  acceptor_.close(ec);
  watch_.cancel();
  // EOF to every proxy: each ends (SIGTERM/SIGKILL to a rank that still runs).
  for (auto& [name, agent] : agents_) agent.proxy->close();
  auto reapAll = [&](std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (true) {
      bool left = false;
      for (auto& [name, agent] : agents_) {
        int status = 0;
        if (!agent.reaped && ::waitpid(agent.pid, &status, WNOHANG) == agent.pid) agent.reaped = true;
        left = left || !agent.reaped;
      }
      if (!left || Clock::now() >= until) return !left;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  // An agent that stays while its proxy runs ends once the proxy has stopped its rank (up to kKillGrace).
  if (!reapAll(ssh::kKillGrace + std::chrono::seconds(2))) {
    for (auto& [name, agent] : agents_) stopAgent(agent, SIGTERM);
    if (!reapAll(std::chrono::seconds(2))) {
      for (auto& [name, agent] : agents_) stopAgent(agent, SIGKILL);
      reapAll(std::chrono::seconds(5));
    }
  }
  for (auto& [name, agent] : agents_) agent.output.reset();
}

}  // namespace

AgentOptions AgentOptions::fromEnvironment(const std::string& agent) {
  AgentOptions o;
  std::istringstream in(agent);
  for (std::string word; in >> word;) o.command.push_back(word);
  if (o.command.empty()) throw UsageError("argument --launcher-agent: '" + agent + "' names no program");
  if (const char* timeout = std::getenv("HVD_AGENT_JOIN_TIMEOUT"); timeout && *timeout) {
    char* end = nullptr;
    const double seconds = std::strtod(timeout, &end);
    if (end == timeout || *end || !(seconds > 0) || seconds > 86400)
      throw UsageError(std::string("HVD_AGENT_JOIN_TIMEOUT='") + timeout + "' is not a number of seconds in (0, 86400]");
    o.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  if (const char* path = std::getenv("HVD_SSH_PROXY_PATH"); path && *path) {
    if (path[0] != '/') throw UsageError(std::string("HVD_SSH_PROXY_PATH='") + path + "' is not an absolute path");
    o.proxy_path = path;
  }
  return o;
}

std::vector<std::string> agentCommand(const AgentOptions& options, const std::string& host, const std::string& proxy,
                                      const std::string& connect_to) {
  std::vector<std::string> args = options.command;
  args.insert(args.end(), {host, proxy, "--connect", connect_to});
  return args;
}

std::unique_ptr<Launcher> makeLauncher(asio::io_context& io, const AgentOptions& options) {
  return std::make_unique<AgentLauncher>(io, options);
}

}  // namespace hvd::launcher::agent
