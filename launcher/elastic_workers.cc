// The elastic driver's workers (launcher/elastic_driver.h): starting, stopping and replacing them, a
// worker's failure, and a worker's request for its place in a round.
#include <signal.h>

#include <algorithm>
#include <memory>

#include <boost/asio/post.hpp>

#include "base/error.h"
#include "launcher/elastic_driver.h"
#include "launcher/host_plan.h"
#include "launcher/job.h"
#include "rendezvous/server.h"

namespace hvd::launcher {

namespace asio = boost::asio;

// Stops a worker the job no longer needs; its end is not a failure.
void ElasticDriver::stopWorker(WorkerRec& w) {
  w.removed = true;
  w.worker->signal(SIGTERM);
  armKillTimer();
}

// A process for a slot outside the current round: it asks for its place when it is ready.
void ElasticDriver::startStandby(const std::vector<HostSpec>& hosts, const std::string& slot) {
  const auto colon = slot.rfind(':');
  const std::string host = slot.substr(0, colon);
  const int index = std::stoi(slot.substr(colon + 1));
  // Placeholders, consistent with one another, but the slot (HOROVOD_HOSTNAME, HOROVOD_LOCAL_RANK): the
  // round that takes the process in gives its place.
  Placement p;
  p.rank = index;
  p.size = index + 1;
  p.local_rank = index;
  p.local_size = index + 1;
  p.cross_size = 1;
  for (const auto& h : hosts) {
    if (h.name == host) p.host = h;
  }
  startWorker(p, slot, index, false);
  if (const auto it = live_.find(slot); it != live_.end()) {
    workers_.at(it->second).replacement = std::find(members_.begin(), members_.end(), slot) != members_.end();
  }
}

void ElasticDriver::startWorker(const Placement& p, const std::string& slot, int index, bool member) {
  HostState& h = *findHost(p.host.name);
  if (!launchers_.isLocal(h.spec) && !isLocalHost(h.spec.name) &&
      (endpoint_.address.rfind("127.", 0) == 0 || endpoint_.address == "::1")) {
    blacklist(h, detail::concat("its workers cannot reach the rendezvous server, which listens on ", endpoint_.address,
                                " because the job began on this machine only; start the job with "
                                "--network-interface to let other hosts join"));
    settleThenReconcile();
    return;
  }
  Launcher* launcher = nullptr;
  try {
    launcher = &launchers_.forHost(h.spec);
  } catch (const Error& e) {
    blacklist(h, detail::concat("cannot start workers there: ", e.what()));
    settleThenReconcile();
    return;
  }
  const bool first = round_ == 1 && member;
  const int id = first ? p.rank : output_->addRank();
  // The slot's identity is its index: HOROVOD_LOCAL_RANK (the round's local rank comes from the server).
  Placement env_place = p;
  env_place.local_rank = index;
  env_place.local_size = std::max(p.local_size, index + 1);
  std::vector<std::pair<std::string, std::string>> job = {
      {"HOROVOD_ELASTIC", "1"},
      {"HVD_ELASTIC_ROUND", std::to_string(round_)},
      {"HOROVOD_ELASTIC_TIMEOUT", std::to_string(elastic_.timeout.count() + kWorkerTimeoutSlack.count())},
      {"HVD_WORKER_ID", std::to_string(id)}};  // names its reports to the status page
  if (!member) job.emplace_back("HVD_ELASTIC_STANDBY", "1");
  LaunchSpec spec;
  spec.rank = id;
  spec.host = h.spec;
  spec.argv = options_.command;
  spec.env = workerEnvironment(env_place, options_, inherited_, launcher, endpoint_, job);
  spec.cwd = cwd_;
  spec.forward_stdin = first && p.rank == 0;
  spec.bind_index = options_.bind_to_core ? index : -1;
  if (options_.verbose) {
    message(Stream::kStdout,
            detail::concat("hvdrun: starting ", member ? "rank " + std::to_string(p.rank) : std::string("a standby process"),
                           " (slot ", slot, ", worker ", id, ") on ", displayName(h.spec), " (", launcher->name(), ")\n"));
  }
  WorkerRec& w = workers_[id];
  w.slot = slot;
  w.host = h.spec.name;
  w.rank = member ? p.rank : -1;
  w.standby = !member;
  server_->markStarted(slot, round_);
  live_[slot] = id;
  try {
    w.worker = launcher->start(spec, *this);
    server_->monitor().workerStarted(id, w.rank, w.host, w.worker->pid());
    if (!slots_started_.insert(slot).second) server_->monitor().countRestart();
  } catch (const Error& e) {
    w.ended = true;
    live_.erase(slot);
    blacklist(h, detail::concat("cannot start workers there: ", e.what()));
    settleThenReconcile();
  }
}

void ElasticDriver::workerFailed(int id, WorkerRec& w, const ExitStatus& status) {
  HostState& h = *findHost(w.host);
  const std::string who = w.standby ? detail::concat("the standby process of slot ", w.slot, " (worker ", id, ")")
                                    : detail::concat("rank ", w.rank, " (slot ", w.slot, ", worker ", id, ") on ", w.host);
  recordLoss(detail::concat(who, ": ", status.describe()));
  const auto now = Clock::now();
  h.failures.push_back(now);
  while (!h.failures.empty() && now - h.failures.front() > kFailureWindow) h.failures.pop_front();
  message(Stream::kStderr, detail::concat("hvdrun: ", who, " failed with ", status.describe(),
                                          w.standby ? "\n" : "; re-forming the job\n"));
  if (status.kind == ExitStatus::Kind::kLost) {
    blacklist(h, "unreachable (" + status.describe() + ")");
  } else if (static_cast<int>(h.failures.size()) >= kFailuresToBlacklist) {
    blacklist(h, detail::concat(h.failures.size(), " worker failures within ", kFailureWindow.count(), " s"));
  }
  // Every member of the round failed: nothing is left to go on with (horovodrun stops here too).
  bool any_member_alive = false;
  for (const auto& [slot, member] : member_ids_) {
    any_member_alive = any_member_alive || (!workers_.at(member).ended && !workers_.at(member).removed);
  }
  if (!w.standby && !any_member_alive) {
    result_.failures[id] = WorkerFailure{w.host, status, std::chrono::system_clock::now()};
    result_.first_failed_rank = id;
    fail(detail::concat("every worker of elastic round ", round_, " failed", lostSummary()));
    return;
  }
  settleThenReconcile();
}

// A worker asks for its place in a round after its own (the server parks the request until the round
// begins): a standby process is ready; a member asking once the job is finishing will find none.
void ElasticDriver::roundRequested(const std::string& slot) {
  auto it = live_.find(slot);
  if (it == live_.end() || stopping_) return;
  WorkerRec& w = workers_.at(it->second);
  if (w.standby) {
    // A standby process is ready: it joins the next round.
    if (!w.ready && options_.verbose) {
      message(Stream::kStdout, detail::concat("hvdrun: the standby process of slot ", slot, " is ready\n"));
    }
    w.ready = true;
    asio::post(ioc_, [this] { reconcile(); });
    return;
  }
  if (!finishing_) {
    // A member asks for a new round: it re-initialized (a collective failed, perhaps without any process
    // dying: a timeout, a reset connection). The job re-forms even if nobody is gone.
    if (member_ids_.count(slot) && member_ids_.at(slot) == it->second) {
      reform_requested_ = true;
      settleThenReconcile();
    }
    return;
  }
  fail(detail::concat("rank ", w.rank, " (slot ", slot,
                      ") lost its peers and asks to re-form after another rank exited 0; an elastic job ends when "
                      "all its ranks return from training together"));
}

}  // namespace hvd::launcher
