#include "launcher/slurm/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <cstring>
#include <filesystem>
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
#include "launcher/ssh/proxy_protocol.h"
#include "launcher/ssh/remote.h"
#include "launcher/ssh/tcp_link.h"
#include "base/error.h"
#include "rendezvous/token.h"

namespace hvd::launcher::slurm {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using ssh::FrameType;
using ssh::PayloadWriter;
using ssh::ProxyHost;
using ssh::ProxyWorker;

namespace {

// A node's connection before it joined: bytes until the join line.
struct Pending {
  int fd = -1;
  std::string received;
};

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

class SlurmLauncher : public Launcher, public ssh::ConnectBackTransport {
 public:
  SlurmLauncher(asio::io_context& io, SlurmOptions options)
      : ConnectBackTransport(io, options.stdin_fd), io_(io), options_(std::move(options)) {
    if (options_.proxy_path.empty()) {
      ssh::ProxyOptions p;
      options_.proxy_path = ssh::proxyPath(p);
    }
  }
  ~SlurmLauncher() override;

  std::string name() const override { return "slurm"; }
  void preflight(const std::vector<HostSpec>& hosts) override;
  void checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                uint16_t port) override;
  std::unique_ptr<Worker> start(const LaunchSpec& spec, WorkerEvents& events) override;

 private:
  void spawnSrun(const std::vector<HostSpec>& hosts, const std::string& connect_to, const std::string& token);
  void forwardSrunOutput(const std::string& bytes);
  void readSrunOutput();
  void watchSrun();

  asio::io_context& io_;
  SlurmOptions options_;
  pid_t srun_ = -1;
  int srun_status_ = 0;
  bool srun_done_ = false;
  int srun_out_ = -1;  // srun's stdout and stderr, one pipe
  std::string srun_tail_;   // an unfinished line
  std::string srun_lines_;  // the last lines, for error messages
  std::unique_ptr<asio::posix::stream_descriptor> srun_reader_;
  std::unique_ptr<asio::steady_timer> srun_timer_;
  std::array<char, 4096> srun_buffer_{};
  std::map<std::string, std::shared_ptr<ProxyHost>> proxies_;  // by node name
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

void SlurmLauncher::preflight(const std::vector<HostSpec>& hosts) {
  (void)hosts;
  const std::string& srun = options_.srun;
  HVD_CHECK(findExecutable(srun, currentEnvironment()), LaunchError, "'", srun, "' not found in PATH: the Slurm launcher starts hvd-proxy on the ",
            "allocation's nodes with srun (choose another with --launcher ssh)");
}

void SlurmLauncher::forwardSrunOutput(const std::string& bytes) {
  srun_tail_ += bytes;
  size_t nl;
  while ((nl = srun_tail_.find('\n')) != std::string::npos) {
    const std::string line = srun_tail_.substr(0, nl);
    srun_tail_.erase(0, nl + 1);
    if (line.empty()) continue;
    std::cerr << ("hvdrun: " + line + "\n");  // srun's lines start with "srun: "; the proxies' with "hvd-proxy"
    srun_lines_ += line + "\n";
    if (srun_lines_.size() > 8192) srun_lines_.erase(0, srun_lines_.size() - 8192);
  }
}

void SlurmLauncher::spawnSrun(const std::vector<HostSpec>& hosts, const std::string& connect_to,
                              const std::string& token) {
  const auto args = srunCommand(options_, hosts, options_.proxy_path, connect_to);
  const HelperProcess srun = startHelper(args, {ssh::kProxyTokenEnv}, {std::string(ssh::kProxyTokenEnv) + "=" + token},
                                         SIGKILL, "srun: ");
  srun_ = srun.pid;
  srun_out_ = srun.output;
  ::fcntl(srun_out_, F_SETFL, ::fcntl(srun_out_, F_GETFL) | O_NONBLOCK);
}

void SlurmLauncher::checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                             uint16_t) {
  if (hosts.empty()) return;
  HVD_CHECK(srun_ < 0, LaunchError, "the Slurm launcher's step was started already");
  uint16_t port = 0;
  const int listener = ssh::listenForProxies(address, port);
  const std::string connect_to = ssh::connectTarget(address, port);
  const std::string token = rendezvous::generateToken();
  try {
    spawnSrun(hosts, connect_to, token);
  } catch (...) {
    ::close(listener);
    throw;
  }
  std::map<std::string, const HostSpec*> wanted;
  for (const auto& h : hosts) wanted[h.name] = &h;
  std::vector<Pending> pending;
  std::map<std::string, Pending> joined;  // by node, with the bytes after the join line
  const std::string heartbeat = PayloadWriter().frame(FrameType::kHeartbeat);
  const auto deadline = Clock::now() + options_.join_timeout;
  auto next_beat = Clock::now() + ssh::kHeartbeatInterval;
  std::string failure;
  while (joined.size() < wanted.size() && failure.empty()) {
    std::vector<pollfd> fds{{listener, POLLIN, 0}, {srun_out_, POLLIN, 0}};
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) pending.push_back({fd, {}});
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(srun_out_, buf, sizeof buf)) > 0) forwardSrunOutput(std::string(buf, n));
    }
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      char buf[4096];
      const ssize_t n = ::recv(p.fd, buf, sizeof buf, 0);
      if (n > 0) p.received.append(buf, n);
      const auto nl = p.received.find('\n');
      const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      if (nl == std::string::npos && !closed && p.received.size() < 4096) {
        ++i;
        continue;
      }
      // A join line, or a connection that is not a proxy of this job (dropped without a word).
      const std::string line = nl == std::string::npos ? "" : p.received.substr(0, nl);
      const std::string node = ssh::parseJoinLine(line, token).value_or("");
      if (!node.empty() && wanted.count(node) && !joined.count(node)) {
        joined[node] = Pending{p.fd, p.received.substr(nl + 1)};
        (void)::send(p.fd, heartbeat.data(), heartbeat.size(), MSG_NOSIGNAL);
      } else {
        if (!node.empty())
          std::cerr << ("hvdrun: warning: hvd-proxy joined from node '" + node + "', which is not one of the job's " +
                        "hosts (or joined twice); ignored\n");
        ::close(p.fd);
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (Clock::now() >= next_beat) {
      for (auto& [node, p] : joined) (void)::send(p.fd, heartbeat.data(), heartbeat.size(), MSG_NOSIGNAL);
      next_beat = Clock::now() + ssh::kHeartbeatInterval;
    }
    int status = 0;
    if (!srun_done_ && ::waitpid(srun_, &status, WNOHANG) == srun_) {
      srun_done_ = true;
      srun_status_ = status;
      char buf[4096];
      ssize_t n;
      while ((n = ::read(srun_out_, buf, sizeof buf)) > 0) forwardSrunOutput(std::string(buf, n));
      failure = "srun ended (" + describeStatus(status) + ")";
    } else if (Clock::now() >= deadline) {
      failure = detail::concat("no answer within ", options_.join_timeout.count() / 1000.0, " s");
    }
  }
  ::close(listener);
  for (auto& p : pending) ::close(p.fd);
  if (!failure.empty()) {
    for (auto& [node, p] : joined) ::close(p.fd);
    std::string missing;
    for (const auto& [name, h] : wanted) {
      if (!joined.count(name)) missing += (missing.empty() ? "" : ", ") + name;
    }
    const std::string last = lastLine(srun_lines_);
    throw LaunchError(detail::concat("hvd-proxy did not start on ", missing, " through srun: ", failure,
                                     last.empty() ? "" : "; it said: " + last));
  }
  for (auto& [node, p] : joined) {
    auto host = std::make_shared<ProxyHost>("srun " + node, node, options_.proxy_path);
    host->attach(std::make_unique<ssh::TcpLink>(io_, p.fd, *host, node));
    if (!p.received.empty()) host->onData(Stream::kStdout, p.received);
    proxies_[node] = host;
  }
  srun_reader_ = std::make_unique<asio::posix::stream_descriptor>(io_, std::exchange(srun_out_, -1));
  srun_timer_ = std::make_unique<asio::steady_timer>(io_);
  readSrunOutput();
  watchSrun();
}

void SlurmLauncher::readSrunOutput() {
  srun_reader_->async_read_some(asio::buffer(srun_buffer_), [this, alive = alive_](
                                                                const boost::system::error_code& ec, size_t n) {
    if (!*alive) return;
    if (n > 0) forwardSrunOutput(std::string(srun_buffer_.data(), n));
    if (!ec) readSrunOutput();
  });
}

void SlurmLauncher::watchSrun() {
  if (srun_done_) return;
  srun_timer_->expires_after(std::chrono::milliseconds(250));
  srun_timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    int status = 0;
    if (::waitpid(srun_, &status, WNOHANG) == srun_) {
      srun_done_ = true;
      srun_status_ = status;
      return;  // each proxy's connection reports its own end
    }
    watchSrun();
  });
}

std::unique_ptr<Worker> SlurmLauncher::start(const LaunchSpec& spec, WorkerEvents& events) {
  HVD_CHECK(!spec.argv.empty(), LaunchError, "rank ", spec.rank, " on host ", spec.host.name, ": empty command");
  auto it = proxies_.find(spec.host.name);
  HVD_CHECK(it != proxies_.end(), LaunchError, "rank ", spec.rank, ": host ", spec.host.name,
            " is not a node of the srun step (the Slurm launcher starts ranks only on the hosts it was checked with)");
  auto worker = std::make_unique<ProxyWorker>(*this, spec, events, it->second);
  it->second->add(worker.get(), spec.rank, io_);
  return worker;
}

SlurmLauncher::~SlurmLauncher() {
  *alive_ = false;
  // EOF to every proxy: each ends (nothing of this job runs any more, or SIGTERM/SIGKILL to what still
  // does), and the step with them.
  for (auto& [node, host] : proxies_) host->close();
  srun_reader_.reset();
  srun_timer_.reset();
  if (srun_ > 0 && !srun_done_) {
    auto waitFor = [&](std::chrono::milliseconds limit) {
      const auto until = Clock::now() + limit;
      while (Clock::now() < until) {
        if (::waitpid(srun_, &srun_status_, WNOHANG) == srun_) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return false;
    };
    // The proxies take up to kKillGrace to stop ranks that still run.
    if (!waitFor(ssh::kKillGrace + std::chrono::seconds(2))) {
      ::kill(srun_, SIGTERM);
      if (!waitFor(std::chrono::seconds(2))) {
        ::kill(srun_, SIGKILL);
        while (::waitpid(srun_, &srun_status_, 0) < 0 && errno == EINTR) {
        }
      }
    }
  }
  if (srun_out_ >= 0) ::close(srun_out_);
}

}  // namespace

SlurmOptions SlurmOptions::fromEnvironment() {
  SlurmOptions o;
  if (const char* srun = std::getenv("HVD_SRUN"); srun && *srun) o.srun = srun;
  if (const char* args = std::getenv("HVD_SRUN_ARGS"); args && *args) {
    std::istringstream in(args);
    for (std::string a; in >> a;) o.extra_args.push_back(a);
  }
  if (const char* path = std::getenv("HVD_SSH_PROXY_PATH"); path && *path) {
    if (path[0] != '/')
      throw UsageError(std::string("HVD_SSH_PROXY_PATH='") + path + "' is not an absolute path");
    o.proxy_path = path;
  }
  return o;
}

std::vector<std::string> srunCommand(const SlurmOptions& options, const std::vector<HostSpec>& hosts,
                                     const std::string& proxy, const std::string& connect_to) {
  std::string nodelist;
  for (const auto& h : hosts) nodelist += (nodelist.empty() ? "" : ",") + h.name;
  const std::string n = std::to_string(hosts.size());
  std::vector<std::string> args = {options.srun,
                                   "--nodes=" + n,
                                   "--ntasks=" + n,
                                   "--ntasks-per-node=1",
                                   "--nodelist=" + nodelist,
                                   "--cpu-bind=none",
                                   "--whole",
                                   "--mpi=none",
                                   "--input=none",
                                   "--kill-on-bad-exit=0",
                                   "--job-name=hvd-proxy"};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  args.insert(args.end(), {proxy, "--connect", connect_to});
  return args;
}

std::unique_ptr<Launcher> makeLauncher(asio::io_context& io, const SlurmOptions& options) {
  return std::make_unique<SlurmLauncher>(io, options);
}

}  // namespace hvd::launcher::slurm
