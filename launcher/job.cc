#include "launcher/job.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/agent/launcher.h"
#include "launcher/local/launcher.h"
#include "launcher/network.h"
#include "launcher/output.h"
#include "launcher/python_path.h"
#include "launcher/slurm/launcher.h"
#include "launcher/summary.h"
#include "launcher/supervisor.h"
#include "launcher/worker_heap.h"
#include "launcher/token_guard.h"
#include "base/error.h"
#include "rendezvous/server.h"
#include "rendezvous/token.h"

// The ssh transport provides hvd::launcher::ssh::makeLauncher in launcher/ssh/launcher.h. Until that
// header lands, remote hosts get a clear error instead of a link failure.
#if __has_include("launcher/ssh/launcher.h")
#include "launcher/ssh/launcher.h"
#define HVD_LAUNCHER_HAVE_SSH 1
#else
#define HVD_LAUNCHER_HAVE_SSH 0
#endif

namespace hvd::launcher {

namespace asio = boost::asio;

// ---------------------------------------------------------------------------------------------------------
// Environment

namespace {

class EnvBuilder {
 public:
  void set(const std::string& name, const std::string& value) {
    const auto [it, inserted] = index_.emplace(name, entries_.size());
    if (inserted) {
      entries_.emplace_back(name, value);
    } else {
      entries_[it->second].second = value;
    }
  }
  std::vector<std::pair<std::string, std::string>> take() { return std::move(entries_); }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
  std::map<std::string, size_t> index_;
};

// The GLIBC_TUNABLES a worker gets (launcher/worker_heap.h), decided from hvdrun's environment and -x.
std::optional<std::string> mallocTunables(const HvdrunOptions& options, const Environment& inherited) {
  if (!options.malloc_tuning) return std::nullopt;
  Environment chosen(inherited.begin(), inherited.end());
  chosen.insert(chosen.end(), options.worker_env.begin(), options.worker_env.end());
  return workerGlibcTunables(chosen);
}

// `name_interfaces`: set HOROVOD_GLOO_IFACE and NCCL_SOCKET_IFNAME; without, each rank takes the address
// that routes to the rendezvous server (the runtime's choice when no interface is named).
void setJobVariables(EnvBuilder& env, const Placement& p, const RendezvousEndpoint& endpoint, bool name_interfaces) {
  env.set("HOROVOD_HOSTNAME", p.host.name);
  env.set("HOROVOD_RANK", std::to_string(p.rank));
  env.set("HOROVOD_SIZE", std::to_string(p.size));
  env.set("HOROVOD_LOCAL_RANK", std::to_string(p.local_rank));
  env.set("HOROVOD_LOCAL_SIZE", std::to_string(p.local_size));
  env.set("HOROVOD_CROSS_RANK", std::to_string(p.cross_rank));
  env.set("HOROVOD_CROSS_SIZE", std::to_string(p.cross_size));
  env.set("HOROVOD_GLOO_RENDEZVOUS_ADDR", endpoint.address);
  env.set("HOROVOD_GLOO_RENDEZVOUS_PORT", endpoint.port);
  env.set("HOROVOD_CONTROLLER", "gloo");
  env.set("HOROVOD_CPU_OPERATIONS", "gloo");
  std::string joined;
  for (const auto& nic : endpoint.interfaces) joined += (joined.empty() ? "" : ",") + nic;
  if (name_interfaces) {
    env.set("HOROVOD_GLOO_IFACE", endpoint.interfaces.empty() ? "" : endpoint.interfaces.front());
    env.set("NCCL_SOCKET_IFNAME", joined);
  }
  // No token (--no-rendezvous-token): the variable stays unset, as an inherited one is dropped.
  if (!endpoint.token.empty()) env.set(rendezvous::kTokenEnv, endpoint.token);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> workerEnvironment(
    const Placement& placement, const HvdrunOptions& options, const Environment& inherited, const Launcher* launcher,
    const RendezvousEndpoint& endpoint, const std::vector<std::pair<std::string, std::string>>& job) {
  EnvBuilder env;
  for (const auto& [name, value] : inherited) {
    // horovodrun lets a launcher-level HOROVOD_RANK etc. override the per-rank values (nested launches);
    // hvdrun drops them, and the token of an enclosing job.
    if (isReservedVariable(name)) continue;
    if (launcher && !launcher->shouldInheritEnv(name)) continue;
    env.set(name, value);
  }
  for (const auto& [name, value] : options.worker_env) env.set(name, value);
  env.set("PYTHONUNBUFFERED", "1");
  std::string python_path;
  for (const auto& [name, value] : inherited) {
    if (name == "PYTHONPATH") python_path = value;
  }
  for (const auto& [name, value] : options.worker_env) {
    if (name == "PYTHONPATH") python_path = value;
  }
  if (const std::string path = workerPythonPath(options.horovod_compat, python_path); !path.empty()) {
    env.set("PYTHONPATH", path);
  }
  if (auto tunables = mallocTunables(options, inherited)) env.set("GLIBC_TUNABLES", *tunables);
  // An interface the user named (--network-interface) is used everywhere; hvdrun's own choice (the one
  // holding its address toward the hosts) only where the launcher's hosts share interface names.
  const bool name_interfaces = !options.network_interfaces.empty() || !launcher || launcher->hostsShareInterfaceNames();
  setJobVariables(env, placement, endpoint, name_interfaces);
  for (const auto& [name, value] : job) env.set(name, value);
  return env.take();
}

std::string shellQuote(const std::string& word) {
  if (word.empty()) return "''";
  bool safe = true;
  for (unsigned char c : word) {
    if (!(std::isalnum(c) || std::strchr("_@%+=:,./-", c))) safe = false;
  }
  if (safe) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string describePlan(const std::vector<Placement>& plan, const HvdrunOptions& options,
                         const Environment& inherited) {
  std::vector<HostSpec> remote;
  for (const auto& p : plan) {
    if (!LauncherPool::isLocal(options.launcher, options.ssh, p.host)) remote.push_back(p.host);
  }
  RendezvousEndpoint endpoint;
  endpoint.address = remote.empty() ? "127.0.0.1" : "<address routed to " + remote.front().name + ">";
  endpoint.port = "<port>";
  endpoint.token = options.rendezvous_token ? "<secret>" : "";
  endpoint.interfaces = options.network_interfaces.empty() ? std::vector<std::string>{"<interface>"}
                                                           : options.network_interfaces;
  if (remote.empty() && options.network_interfaces.empty()) endpoint.interfaces = {"lo"};
  std::ostringstream out;
  // Only what hvdrun sets is shown; hvdrun's own environment is passed on as well. GLIBC_TUNABLES depends
  // on that environment, so it is decided from the real one.
  const Environment none;
  const auto tunables = mallocTunables(options, inherited);
  for (const auto& p : plan) {
    const bool local = LauncherPool::isLocal(options.launcher, options.ssh, p.host);
    out << "rank " << p.rank << " on " << displayName(p.host) << " ("
        << (local ? "local" : options.launcher == LauncherKind::kAuto ? "ssh" : toString(options.launcher)) << "): env";
    for (const auto& [name, value] : workerEnvironment(p, options, none, nullptr, endpoint)) {
      if (name == "GLIBC_TUNABLES") continue;
      out << ' ' << name << '=' << shellQuote(value);
    }
    if (tunables) out << " GLIBC_TUNABLES=" << shellQuote(*tunables);
    for (const auto& arg : options.command) out << ' ' << shellQuote(arg);
    out << '\n';
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------------------------
// Launchers and the rendezvous server

LauncherPool::LauncherPool(asio::io_context& ioc, const SshOptions& ssh, LauncherKind kind, std::string agent)
    : ioc_(ioc), ssh_(ssh), kind_(kind), agent_(std::move(agent)) {}
LauncherPool::~LauncherPool() = default;

bool LauncherPool::isLocal(const HostSpec& host) const { return isLocal(kind_, ssh_, host); }

bool LauncherPool::isLocal(LauncherKind kind, const SshOptions& ssh, const HostSpec& host) {
  switch (kind) {
    case LauncherKind::kLocal:
      return true;
    case LauncherKind::kSsh:
    case LauncherKind::kSlurm:
    case LauncherKind::kAgent:
      return false;
    case LauncherKind::kAuto:
      break;
  }
  return !ssh.force_ssh && isLocalHost(host.name);
}

Launcher& LauncherPool::forHost(const HostSpec& host) {
  const bool local = isLocal(host);
  auto& slot = local ? local_ : remote_;
  if (!slot) {
    if (local) {
      slot = std::make_unique<local::LocalLauncher>(ioc_);
    } else if (kind_ == LauncherKind::kAgent) {
      slot = agent::makeLauncher(ioc_, agent::AgentOptions::fromEnvironment(agent_));
    } else if (kind_ == LauncherKind::kSlurm) {
      auto slurm = slurm::SlurmOptions::fromEnvironment();
      slot = slurm::makeLauncher(ioc_, slurm);
    } else {
#if HVD_LAUNCHER_HAVE_SSH
      slot = ssh::makeLauncher(ioc_, ssh_);
#else
      throw LaunchError(detail::concat("remote host ", host.name, ": ssh launch not available yet"));
#endif
    }
  }
  return *slot;
}

Rendezvous openRendezvous(asio::io_context& ioc, const HvdrunOptions& options, const std::vector<HostSpec>& remote_hosts,
                          OutputForwarder& output, bool others_may_join) {
  const NetworkPlan network = chooseNetwork(remote_hosts, options.network_interfaces, others_may_join);
  rendezvous::ServerOptions server_options;
  server_options.bind_address = network.bind_address;
  server_options.status_port = options.status_port;
  server_options.status_bind_address = options.status_address;
  server_options.job_name.clear();
  for (const auto& arg : options.command) server_options.job_name += (server_options.job_name.empty() ? "" : " ") + arg;
  if (options.rendezvous_token) {
    server_options.token = rendezvous::generateToken();
    // Every rank runs here: Horovod's own workers (no token) are served when they are this user's.
    server_options.trust_local_peers = remote_hosts.empty();
  }
  Rendezvous r;
  r.server = std::make_unique<rendezvous::Server>(ioc, server_options);
  r.trust_local_peers = server_options.trust_local_peers;
  r.endpoint.address = network.bind_address;
  r.endpoint.port = std::to_string(r.server->port());
  r.endpoint.token = server_options.token.value_or("");
  r.endpoint.interfaces = network.interfaces;
  if (const auto port = r.server->statusPort()) {
    const std::string& address = r.server->statusAddress();
    const bool v6 = address.find(':') != std::string::npos;
    output.message(Stream::kStderr, detail::concat("hvdrun: status page at http://", v6 ? "[" : "", address,
                                                   v6 ? "]" : "", ":", *port, "/\n"));
  }
  if (options.verbose) {
    std::string access = "token required";
    if (!server_options.token) {
      access = "no token (--no-rendezvous-token): open to anyone who reaches it";
    } else if (server_options.trust_local_peers) {
      access = "token required, except from this user's processes on this machine";
    }
    output.message(Stream::kStdout, detail::concat("hvdrun: rendezvous server listening on ", r.endpoint.address, ":",
                                                   r.endpoint.port, " (", access, ")\n"));
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Supervision

namespace {

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

class StaticSupervisor : public Supervisor {
 public:
  StaticSupervisor(const HvdrunOptions& options, const std::vector<Placement>& plan,
                   const Environment& inherited)
      : Supervisor(options),
        plan_(plan),
        inherited_(inherited),
        start_timer_(ioc_),
        workers_(plan.size()),
        ended_(plan.size(), false) {}

  RunResult run() {
    awaitSignal();
    try {
      prepare();
      startWorkers();
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      // Nothing or only part of the job started: stop what runs and report the cause.
      result_.error = e.what();
      if (output_) output_->message(Stream::kStderr, detail::concat("hvdrun: error: ", e.what(), "\n"));
      if (!output_) throw;
      stopAll(SIGTERM);
    }
    starting_ = false;
    if (running() == 0) {
      finish();
    } else {
      ioc_.run();
    }
    return result_;
  }

  void onExit(int rank, const ExitStatus& status) override {
    ended_[rank] = true;
    recordExit(server_->monitor(), rank, status);
    const Placement& p = plan_[rank];
    const bool stopped = workers_[rank]->state() == WorkerState::kStopped;
    if (!status.success() && !stopped) {
      result_.failures[rank] = WorkerFailure{p.host.name, status, std::chrono::system_clock::now()};
      if (!stopping_) {
        result_.first_failed_rank = rank;
        banner(rank, status);
        stopAll(SIGTERM);
      }
    } else if (options_.verbose) {
      output_->message(Stream::kStdout, detail::concat("hvdrun: rank ", rank, " on ", p.host.name,
                                                       " ended with ", status.describe(), "\n"));
    }
    if (running() == 0 && !starting_) finish();
  }

 private:
  size_t running() const {
    size_t n = 0;
    for (size_t r = 0; r < workers_.size(); ++r) n += workers_[r] && !ended_[r];
    return n;
  }

  // Sends `signo` to every started rank that has not ended.
  void signalAll(int signo) override {
    for (size_t r = 0; r < workers_.size(); ++r) {
      if (workers_[r] && !ended_[r]) workers_[r]->signal(signo);
    }
  }

  void stopTimers() override { start_timer_.cancel(); }

  std::string describeRunning() const override { return detail::concat(running(), " workers"); }

  void prepare() {
    // Launchers per host, and their checks before anything starts.
    const Hosts hosts = preflight(plan_);
    openOutput(plan_.size());
    const bool trusted = startRendezvous(hosts);
    server_->monitor().setSize(static_cast<int>(plan_.size()));
    server_->setScopeSizes(scopeSizes(plan_));
    for (const auto& host : hosts.remote) remote_names_.push_back(host.name);
    has_local_ranks_ = launchers_.hasLocal();
    // The observer runs on this io_context (the server's sessions do).
    server_->onTokenlessRejection(
        [this, trusted](const rendezvous::TokenlessRejection& r) { onTokenless(r, trusted); });
    if (options_.verbose) {
      // The ssh benchmark's "all ranks joined" figure; the observer runs on this io_context.
      server_->onAllJoined([this](const std::string& scope) {
        if (scope != "global") return;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                              created_);
        output_->message(Stream::kStdout, detail::concat("hvdrun: all ", plan_.size(),
                                                         " ranks joined the rendezvous ", ms.count(),
                                                         " ms after hvdrun started\n"));
      });
    }
    checkReachable(hosts);
  }

  void startWorkers() {
    char cwd[4096];
    const std::string dir = ::getcwd(cwd, sizeof cwd) ? cwd : "";
    for (const auto& p : plan_) {
      if (stopping_) break;  // a signal arrived or a worker failed while starting
      Launcher& launcher = launchers_.forHost(p.host);
      LaunchSpec spec;
      spec.rank = p.rank;
      spec.host = p.host;
      spec.argv = options_.command;
      spec.env = workerEnvironment(p, options_, inherited_, &launcher, endpoint_);
      spec.cwd = dir;
      spec.forward_stdin = p.rank == 0;
      spec.bind_index = options_.bind_to_core ? p.local_rank : -1;
      if (options_.verbose) {
        output_->message(Stream::kStdout,
                         detail::concat("hvdrun: starting rank ", p.rank, " on ", displayName(p.host), " (",
                                        launcher.name(), "): ", commandLine(spec), "\n"));
      }
      workers_[p.rank] = launcher.start(spec, *this);
      server_->monitor().workerStarted(p.rank, p.rank, p.host.name, workers_[p.rank]->pid());
      // Handle events that are already due (fast exits, signals) so a failure stops the start loop.
      ioc_.poll();
    }
    if (!stopping_) armStartTimeout();
  }

  static std::string commandLine(const LaunchSpec& spec) {
    std::string out;
    for (const auto& arg : spec.argv) out += (out.empty() ? "" : " ") + shellQuote(arg);
    return out;
  }

  void banner(int rank, const ExitStatus& status) {
    const Placement& p = plan_[rank];
    const std::string line(80, '=');
    const auto pid = workers_[rank]->pid();
    std::ostringstream out;
    out << line << "\n"
        << "=   hvdrun: BAD TERMINATION OF RANK " << rank << " ON HOST " << displayName(p.host)
        << (pid ? " (PID " + std::to_string(*pid) + ")" : "") << "\n"
        << "=   " << (status.kind == ExitStatus::Kind::kSignaled ? "KILLED BY " : "EXIT STATUS: ")
        << status.describe() << "\n";
    if (running() > 0) {
      out << "=   TERMINATING THE REMAINING " << running() << " WORKERS (SIGTERM, SIGKILL AFTER "
          << std::chrono::duration<double>(options_.grace_period).count() << " S)\n";
    }
    out << line << "\n";
    output_->message(Stream::kStderr, out.str());
  }

  // The server refused a request without the token: explain once, and end the job when the request
  // came from one of its hosts (launcher/token_guard.h says why only then).
  void onTokenless(const rendezvous::TokenlessRejection& rejection, bool local_peers_trusted) {
    if (stopping_) return;
    if (!job_addresses_) job_addresses_ = jobHostAddresses(remote_names_, has_local_ranks_);
    const TokenlessVerdict verdict = judgeTokenlessRequest(rejection, *job_addresses_, local_peers_trusted);
    if (verdict.stop_job) {
      result_.error = verdict.message;
      output_->message(Stream::kStderr, "hvdrun: error: " + verdict.message + "\n");
      stopAll(SIGTERM);
    } else if (!tokenless_reported_) {
      tokenless_reported_ = true;
      output_->message(Stream::kStderr, "hvdrun: warning: " + verdict.message + "\n");
    }
  }

  // One check at the deadline: the server remembers every rank that ever joined the global scope
  // (ScopeStatus::ever_joined_ranks), also after the scope completed and was cleared.
  void armStartTimeout() {
    start_timer_.expires_after(options_.start_timeout);
    start_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !stopping_) startTimeoutExpired();
    });
  }

  void startTimeoutExpired() {
    std::set<int> seen_joined;
    const auto scopes = server_->scopes();
    if (const auto global = scopes.find("global"); global != scopes.end()) {
      seen_joined.insert(global->second.ever_joined_ranks.begin(), global->second.ever_joined_ranks.end());
    }
    // With the default timeout, a job none of whose ranks uses the rendezvous is not an hvd job.
    if (seen_joined.empty() && !options_.start_timeout_explicit) return;
    std::vector<int> missing;
    std::string hosts;
    for (const auto& p : plan_) {
      if (ended_[p.rank] || seen_joined.count(p.rank)) continue;
      missing.push_back(p.rank);
      if (hosts.find(p.host.name) == std::string::npos) hosts += (hosts.empty() ? "" : ", ") + p.host.name;
    }
    if (missing.empty()) return;
    result_.error = detail::concat("start timeout: rank(s) ", joinRanks(missing), " (on ", hosts,
                                   ") did not join the rendezvous within ", options_.start_timeout.count(),
                                   " s (--start-timeout)");
    output_->message(Stream::kStderr, "hvdrun: error: " + *result_.error + "; stopping the job\n");
    stopAll(SIGTERM);
  }

  const std::vector<Placement>& plan_;
  const Environment& inherited_;
  asio::steady_timer start_timer_;
  // Destroyed before the base's launchers: workers (kill what still runs) first.
  std::vector<std::unique_ptr<Worker>> workers_;  // by rank
  std::vector<bool> ended_;
  std::vector<std::string> remote_names_;  // as the launchers reach them
  bool has_local_ranks_ = false;
  std::optional<std::set<std::string>> job_addresses_;  // resolved at the first tokenless request
  bool tokenless_reported_ = false;
  bool starting_ = true;  // inside the start loop: ranks not started yet do not count as ended
};

}  // namespace

RunResult runJob(const HvdrunOptions& options, const std::vector<Placement>& plan,
                 const Environment& inherited) {
  // A closed console must show up as a failed write, not kill hvdrun with its workers still running.
  ::signal(SIGPIPE, SIG_IGN);
  StaticSupervisor supervisor(options, plan, inherited);
  return supervisor.run();
}

}  // namespace hvd::launcher
