#include "launcher/elastic.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/error.h"
#include "launcher/elastic_driver.h"
#include "launcher/host_plan.h"
#include "launcher/summary.h"
#include "rendezvous/round.h"
#include "rendezvous/server.h"

namespace hvd::launcher {

namespace asio = boost::asio;

ElasticDriver::ElasticDriver(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                             const Environment& inherited, std::chrono::seconds discovery_timeout)
    : Supervisor(options),
      elastic_(*options.elastic),
      inherited_(inherited),
      discovery_timeout_(discovery_timeout),
      tick_timer_(ioc_),
      settle_timer_(ioc_),
      below_timer_(ioc_),
      discovery_timer_(ioc_) {
  for (const auto& h : fixed_hosts) addHost(h);
  char cwd[4096];
  cwd_ = ::getcwd(cwd, sizeof cwd) ? cwd : "";
}

RunResult ElasticDriver::run() {
  awaitSignal();
  const auto deadline = Clock::now() + elastic_.timeout;
  below_timer_.expires_at(deadline);
  below_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || round_ > 0 || stopping_) return;
    fail(detail::concat("fewer than -np ", options_.num_proc, " slots became available within ",
                        elastic_.timeout.count(), " s (--elastic-timeout)", hostsSeen()));
  });
  if (elastic_.discovery_script) {
    runDiscovery();
  } else {
    tick();
  }
  ioc_.run();
  return result_;
}

void ElasticDriver::onExit(int id, const ExitStatus& status) {
  WorkerRec& w = workers_.at(id);
  w.ended = true;
  recordExit(server_->monitor(), id, status);
  if (auto it = live_.find(w.slot); it != live_.end() && it->second == id) live_.erase(it);
  const bool stopped = w.worker->state() == WorkerState::kStopped;
  const std::string who = w.standby ? detail::concat("the standby process of slot ", w.slot, " (worker ", id, ")")
                                    : detail::concat("rank ", w.rank, " (slot ", w.slot, ", worker ", id, ")");
  if (w.removed || (stopped && !status.success() && stopping_)) {
    if (options_.verbose) message(Stream::kStdout, detail::concat("hvdrun: ", who, " stopped: ", status.describe(), "\n"));
  } else if (status.success()) {
    if (!finishing_ && options_.verbose) {
      message(Stream::kStdout, detail::concat("hvdrun: ", who, " exited 0: the job is finishing\n"));
    }
    if (!finishing_) beginFinishing(w);
    finishing_ = true;
  } else if (stopping_ || finishing_) {
    result_.failures[id] = WorkerFailure{w.host, status, std::chrono::system_clock::now()};
    if (!stopping_) {
      result_.first_failed_rank = id;
      fail(detail::concat(who, " failed with ", status.describe(), " after the job began finishing"));
    }
  } else {
    workerFailed(id, w, status);
  }
  if ((stopping_ || finishing_) && !anyRunning()) finish();
  // An ended worker's launcher object (its channel, pipes, buffers) is not needed any more: a job that
  // replaces workers for days must not keep one per replacement. Destroyed after this callback returns.
  asio::post(ioc_, [keep = std::shared_ptr<Worker>(std::move(w.worker))] {});
}

// ---- messages and outcome

std::string ElasticDriver::hostsSeen() const {
  if (hosts_.empty()) return "; no host was found";
  std::string out = "; hosts found:";
  for (const auto& h : hosts_) {
    out += detail::concat(" ", h.spec.name, ":", h.spec.slots);
    if (!h.listed) out += " (no longer listed)";
    if (h.blacklisted_until) out += " (blacklisted: " + h.blacklist_reason + ")";
  }
  return out;
}

void ElasticDriver::fail(const std::string& why) {
  if (stopping_) return;
  result_.error = why;
  message(Stream::kStderr, "hvdrun: error: " + why + "; stopping the job\n");
  stopAll(SIGTERM);
}

bool ElasticDriver::anyRunning() const {
  for (const auto& [id, w] : workers_) {
    if (!w.ended) return true;
  }
  return discovery_ != nullptr;
}

// ---- reconciling what runs with what should run

// Every second without a discovery script (cooldowns end), and after every discovery result.
void ElasticDriver::tick() {
  reconcile();
  if (elastic_.discovery_script || stopping_ || finishing_) return;
  tick_timer_.expires_after(std::chrono::seconds(1));
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

// A worker failed: wait a moment for the exits of the same event (a host going down ends all its
// workers) so that they make one round, not several.
void ElasticDriver::settleThenReconcile() {
  settle_timer_.expires_after(kSettle);
  settle_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) reconcile();
  });
}

// The live members of the current round that hold the job's state, in rank order: members since the
// first round or since a round before the current one, or of the current one once it has formed (every
// member joined its rendezvous, and the first thing it runs is the sync); a process taken in by a round
// that has not formed may not have the state yet.
std::vector<std::string> ElasticDriver::survivors() const {
  std::optional<bool> formed;
  std::vector<std::string> out;
  for (const auto& slot : members_) {
    const WorkerRec& w = workers_.at(member_ids_.at(slot));
    if (w.ended || w.removed) continue;
    if (w.since == round_ && w.since != 1) {
      if (!formed) formed = roundFormed();
      if (!*formed) continue;
    }
    out.push_back(slot);
  }
  return out;
}

bool ElasticDriver::roundFormed() const {
  const auto scopes = server_->scopes();
  const auto global = scopes.find(rendezvous::roundScope(round_, "global"));
  return global != scopes.end() && global->second.ever_joined_ranks.size() >= members_.size();
}

// A member of the current round is gone (ended, stopped) or was replaced by another process.
bool ElasticDriver::memberLost() const {
  for (const auto& slot : members_) {
    const int id = member_ids_.at(slot);
    const WorkerRec& w = workers_.at(id);
    const auto it = live_.find(slot);
    if (w.ended || w.removed || it == live_.end() || it->second != id) return true;
  }
  return false;
}

void ElasticDriver::reconcile() {
  if (stopping_ || finishing_) return;
  const auto hosts = usableHosts();
  const auto offered = offeredSlots(hosts, elastic_.max_np);
  if (round_ == 0) {
    if (static_cast<int>(offered.size()) < options_.num_proc) return;  // the start deadline runs
    below_timer_.cancel();
    beginRound(planElasticRound(hosts, {}, std::set<std::string>(offered.begin(), offered.end()), elastic_.max_np),
               false);
    return;
  }
  const std::set<std::string> wanted(offered.begin(), offered.end());
  // Workers whose slot is no longer offered (its host was removed, shrank or is blacklisted; --max-np) stop.
  for (auto& [id, w] : workers_) {
    if (!w.ended && !w.removed && !wanted.count(w.slot)) stopWorker(w);
  }
  // Every offered slot without a process gets one, on standby: it joins a round once it is ready, so
  // the running workers never wait for a process to start.
  if (!growth_stopped_) {
    for (const auto& slot : offered) {
      if (!live_.count(slot)) startStandby(hosts, slot);
      if (stopping_) return;
    }
  }
  const auto holders = survivors();
  std::set<std::string> joining;  // ready standby processes, and members that may not hold the state yet
  for (const auto& [slot, id] : live_) {
    const WorkerRec& w = workers_.at(id);
    if (w.removed) continue;
    if ((w.standby && w.ready) || (!w.standby && std::find(holders.begin(), holders.end(), slot) == holders.end())) {
      joining.insert(slot);
    }
  }
  const auto plan = planElasticRound(hosts, holders, joining, elastic_.max_np);
  if (static_cast<int>(plan.size()) < elastic_.min_np) {
    belowMinimum(plan.size());
    return;
  }
  if (below_since_) {
    below_timer_.cancel();
    below_since_.reset();
    message(Stream::kStderr, "hvdrun: enough processes again\n");
  }
  std::vector<std::string> slots;
  for (const auto& e : plan) slots.push_back(e.slot);
  const bool lost = memberLost() || reform_requested_;
  if (slots == members_ && !lost) return;  // the same processes, all alive: nothing to re-form
  if (holders.empty()) {
    fail(detail::concat("no process of elastic round ", round_, " is left to hand the job's state on",
                        lostSummary()));
    return;
  }
  // A round that only takes back processes replacing lost ones completes the re-formation their loss
  // began: it is not another reset.
  bool replacements_only = !lost;
  for (const auto& slot : slots) {
    if (std::find(members_.begin(), members_.end(), slot) != members_.end()) continue;
    replacements_only = replacements_only && workers_.at(live_.at(slot)).replacement;
  }
  const bool counted = !replacements_only;
  if (counted && elastic_.reset_limit && resets_ >= *elastic_.reset_limit) {
    if (!lost) {
      // Growing would pass the limit, but the job can go on as it is: it stays at its size.
      if (!growth_stopped_) {
        message(Stream::kStderr, detail::concat("hvdrun: not taking in more processes: the job re-formed ", resets_,
                                                " times (--reset-limit ", *elastic_.reset_limit, ")\n"));
      }
      growth_stopped_ = true;
      for (auto& [id, w] : workers_) {
        if (w.standby && !w.ended && !w.removed) stopWorker(w);
      }
      return;
    }
    fail(detail::concat("the job would re-form a ", resets_ + 1, ordinalSuffix(resets_ + 1), " time, past --reset-limit ",
                        *elastic_.reset_limit, lostSummary()));
    return;
  }
  beginRound(plan, counted);
}

// The first worker returned from training with exit 0: no round will take standby processes in any
// more, and the members the current round took in can only finish with it if that worker was in it.
void ElasticDriver::beginFinishing(const WorkerRec& done) {
  const auto joined = server_->lastRound(done.slot);
  const bool round_complete = joined && *joined >= round_;
  for (auto& [id, w] : workers_) {
    if (w.ended || w.removed) continue;
    if (w.standby || (!round_complete && w.since == round_ && round_ > 1)) stopWorker(w);
  }
  if (discovery_) discovery_->signal(SIGKILL);
}

const char* ElasticDriver::ordinalSuffix(int n) {
  if (n % 100 >= 11 && n % 100 <= 13) return "th";
  switch (n % 10) {
    case 1:
      return "st";
    case 2:
      return "nd";
    case 3:
      return "rd";
    default:
      return "th";
  }
}

std::string ElasticDriver::lostSummary() const {
  if (lost_.empty()) return "";
  std::string out = " (lost: ";
  if (lost_earlier_) out += detail::concat(lost_earlier_, " earlier losses; ");
  for (size_t i = 0; i < lost_.size(); ++i) out += (i ? "; " : "") + lost_[i];
  return out + ")";
}

// Records a loss for failure messages: the latest kLostKept in full, a count of the earlier ones.
void ElasticDriver::recordLoss(std::string what) {
  lost_.push_back(std::move(what));
  if (lost_.size() > kLostKept) {
    lost_.pop_front();
    ++lost_earlier_;
  }
}

void ElasticDriver::belowMinimum(size_t usable) {
  if (below_since_) return;
  below_since_ = Clock::now();
  message(Stream::kStderr, detail::concat("hvdrun: only ", usable, " processes are ready, fewer than --min-np ",
                                          elastic_.min_np, "; waiting up to ", elastic_.timeout.count(),
                                          " s (--elastic-timeout) for more\n"));
  below_timer_.expires_after(elastic_.timeout);
  below_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !below_since_) return;
    fail(detail::concat("fewer than --min-np ", elastic_.min_np, " processes were ready for ", elastic_.timeout.count(),
                        " s (--elastic-timeout)", lostSummary()));
  });
}

void ElasticDriver::prepareFirstRound(const std::vector<Placement>& plan) {
  // The first round's hosts are checked before anything starts, as a static job's are (a failure ends the
  // job); hosts found later are started directly, and blacklisted when that fails.
  const Hosts hosts = preflight(plan);
  openOutput(plan.size());
  startRendezvous(hosts, elastic_.discovery_script.has_value());
  checkReachable(hosts);
  // The server's sessions run on this io_context.
  server_->onRoundRequest([this](const std::string& slot, uint64_t) { roundRequested(slot); });
}

// `counted`: a re-formation --reset-limit counts.
void ElasticDriver::beginRound(const std::vector<ElasticPlace>& plan, bool counted) {
  const bool first = round_ == 0;
  std::vector<Placement> placements;
  for (const auto& e : plan) placements.push_back(e.place);
  if (first) prepareFirstRound(placements);
  if (counted) ++resets_;
  rendezvous::ElasticRound round;
  round.number = ++round_;
  std::set<std::string> next;
  for (const auto& e : plan) {
    const Placement& p = e.place;
    round.slots[e.slot] = rendezvous::SlotAssignment(p);
    next.insert(e.slot);
  }
  // Scopes under both names: the round's for libhvd, the plain ones for Horovod's own workers.
  for (const auto& [scope, size] : scopeSizes(placements)) {
    round.scope_sizes[rendezvous::roundScope(round.number, scope)] = size;
    round.scope_sizes[scope] = size;
  }
  for (const auto& h : hosts_) {
    if (h.blacklisted_until) round.blacklist.push_back(h.spec.name);
  }
  // What changed: members gone (or replaced by another process), processes new to the job's rounds.
  const auto same_process = [&](const std::string& slot) {
    const auto member = member_ids_.find(slot);
    const auto live = live_.find(slot);
    return member != member_ids_.end() && live != live_.end() && live->second == member->second &&
           !workers_.at(member->second).removed;
  };
  for (const auto& slot : members_) {
    if (!next.count(slot) || !same_process(slot)) round.changes |= rendezvous::kRoundRemoved;
  }
  for (const auto& slot : next) {
    if (!same_process(slot)) round.changes |= rendezvous::kRoundAdded;
  }
  members_.clear();
  member_ids_.clear();
  reform_requested_ = false;
  server_->beginRound(round);
  server_->monitor().setSize(static_cast<int>(plan.size()));
  server_->monitor().roundBegan(round.number);
  if (!first || options_.verbose) {
    message(Stream::kStderr, detail::concat("hvdrun: elastic round ", round.number, ": ", plan.size(), " ranks on ",
                                            describeHosts(placements), "\n"));
  }
  for (const auto& e : plan) {
    if (auto it = live_.find(e.slot); it == live_.end()) {
      startWorker(e.place, e.slot, e.index, true);  // the first round's processes
      if (stopping_) return;
    }
    const auto it = live_.find(e.slot);
    if (it == live_.end()) continue;  // could not be started: its host is blacklisted, the next check goes on
    WorkerRec& w = workers_.at(it->second);
    w.rank = e.place.rank;
    if (w.standby || w.since == 0) w.since = round_;
    w.standby = false;
    members_.push_back(e.slot);
    member_ids_[e.slot] = it->second;
  }
}

// ---- teardown (the supervisor's rules, as for a static job)

// The discovery script is killed outright whatever the signal: a stopping job reads no more hosts.
void ElasticDriver::signalAll(int signo) {
  for (auto& [id, w] : workers_) {
    if (!w.ended && w.worker) w.worker->signal(signo);
  }
  if (discovery_) discovery_->signal(SIGKILL);
}

// Not the discovery timer: the script is killed with the workers (signalAll), and discoveryEnded cancels
// its timer.
void ElasticDriver::stopTimers() {
  tick_timer_.cancel();
  settle_timer_.cancel();
  below_timer_.cancel();
}

// Workers left out of a round (removed) get SIGKILL after their grace too, also while the job runs on.
void ElasticDriver::killAfterGrace() {
  for (auto& [id, w] : workers_) {
    if (!w.ended && w.worker && (stopping_ || w.removed)) w.worker->signal(SIGKILL);
  }
}

// With nothing left running (before the first round, between discovery calls) the job ends at once.
void ElasticDriver::stopAll(int signo) {
  Supervisor::stopAll(signo);
  if (!anyRunning()) finish();
}

RunResult runElasticJob(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                        const Environment& inherited) {
  ::signal(SIGPIPE, SIG_IGN);
  ElasticDriver driver(options, fixed_hosts, inherited, discoveryTimeout(inherited));
  return driver.run();
}

}  // namespace hvd::launcher
