#include "launcher/supervisor.h"

#include <signal.h>

#include <set>

#include "base/error.h"

namespace hvd::launcher {

namespace asio = boost::asio;

std::string signalName(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGKILL:
      return "SIGKILL";
    default:
      return "signal " + std::to_string(signo);
  }
}

Supervisor::Supervisor(const HvdrunOptions& options)
    : options_(options),
      signals_(ioc_, SIGINT, SIGTERM, SIGHUP),
      kill_timer_(ioc_),
      launchers_(ioc_, options_.ssh, options_.launcher, options_.launcher_agent) {}

Supervisor::~Supervisor() = default;

void Supervisor::onOutput(int id, Stream stream, std::string_view bytes) {
  output_->write(id, stream, bytes);
  // The reader of our stdout is gone and nothing else keeps the output: end the job as a pipeline
  // producer would end on SIGPIPE, instead of running on with nobody listening.
  if (output_->stdoutBroken() && !options_.output_filename && !stopping_) {
    result_.interrupted_by = SIGPIPE;
    stopAll(SIGTERM);
  }
}

void Supervisor::onStreamClosed(int id, Stream stream) { output_->close(id, stream); }

Supervisor::Hosts Supervisor::preflight(const std::vector<Placement>& plan) {
  Hosts hosts;
  std::set<std::string> seen;
  for (const auto& p : plan) {
    if (!seen.insert(p.host.name).second) continue;
    Launcher& l = launchers_.forHost(p.host);
    hosts.by_launcher[&l].push_back(p.host);
    if (launchers_.isLocal(p.host)) continue;
    HostSpec routed = p.host;
    routed.name = l.networkName(p.host);
    hosts.remote.push_back(std::move(routed));
  }
  for (auto& [launcher, list] : hosts.by_launcher) launcher->preflight(list);
  return hosts;
}

void Supervisor::openOutput(size_t num_proc) {
  OutputOptions out;
  out.tag = options_.tag_output;
  out.timestamp = options_.prefix_timestamp;
  out.directory = options_.output_filename;
  out.num_proc = static_cast<int>(num_proc);
  out.on_segment = [this](int id, Stream, std::string_view line) {
    if (server_) server_->monitor().workerOutput(id, line);
  };
  output_ = std::make_unique<OutputForwarder>(out);
  summary_.open(options_);
}

bool Supervisor::startRendezvous(const Hosts& hosts, bool others_may_join) {
  Rendezvous rendezvous = openRendezvous(ioc_, options_, hosts.remote, *output_, others_may_join);
  server_ = std::move(rendezvous.server);
  endpoint_ = rendezvous.endpoint;
  return rendezvous.trust_local_peers;
}

void Supervisor::checkReachable(const Hosts& hosts) {
  for (const auto& [launcher, list] : hosts.by_launcher) {
    launcher->checkRendezvousReachable(list, endpoint_.address, server_->port());
  }
}

void Supervisor::awaitSignal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (!result_.interrupted_by) result_.interrupted_by = signo;
    if (stopping_) {
      // A second signal: no more grace.
      message(Stream::kStderr,
              detail::concat("hvdrun: received ", signalName(signo), " again, killing all workers\n"));
      killAll();
    } else {
      message(Stream::kStderr,
              detail::concat("hvdrun: received ", signalName(signo), ", stopping ", describeRunning(), "\n"));
      stopAll(signo);
    }
    awaitSignal();
  });
}

void Supervisor::message(Stream stream, std::string_view text) {
  if (output_) {
    output_->message(stream, text);
  } else {
    writeAll(stream == Stream::kStdout ? 1 : 2, text);
  }
}

void Supervisor::stopAll(int signo) {
  stopping_ = true;
  signalAll(signo);
  stopTimers();
  armKillTimer(true);
}

void Supervisor::killAll() { signalAll(SIGKILL); }

void Supervisor::armKillTimer(bool restart) {
  if (kill_armed_ && !restart) return;
  kill_armed_ = true;
  kill_timer_.expires_after(options_.grace_period);  // cancels a pending wait, which then returns aborted
  kill_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    kill_armed_ = false;
    if (ec) return;
    killAfterGrace();
  });
}

void Supervisor::finish() {
  kill_timer_.cancel();
  stopTimers();
  signals_.cancel();
  if (server_ && output_) {
    summary_.write(server_->monitor().snapshot(), created_, result_.exitCode(), *output_);
  }
  if (server_) server_->stop();
  ioc_.stop();
}

}  // namespace hvd::launcher
