#include "launcher/elastic.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/job.h"
#include "launcher/local/launcher.h"
#include "launcher/output.h"
#include "launcher/summary.h"
#include "base/error.h"
#include "launcher/supervisor.h"
#include "rendezvous/round.h"
#include "rendezvous/server.h"

namespace hvd::launcher {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

std::string slotName(const std::string& host, int local_rank) { return host + ":" + std::to_string(local_rank); }

std::vector<std::string> offeredSlots(const std::vector<HostSpec>& hosts, std::optional<int> max_np) {
  std::vector<std::string> slots;
  for (const auto& h : hosts) {
    for (int index = 0; index < h.slots && !(max_np && static_cast<int>(slots.size()) >= *max_np); ++index) {
      slots.push_back(slotName(h.name, index));
    }
  }
  return slots;
}

std::vector<ElasticPlace> planElasticRound(const std::vector<HostSpec>& hosts, const std::vector<std::string>& survivors,
                                           const std::set<std::string>& joining, std::optional<int> max_np) {
  struct Offer {
    const HostSpec* host;
    int index;
  };
  std::map<std::string, Offer> offered;
  std::vector<std::string> in_host_order;
  for (const auto& h : hosts) {
    for (int index = 0; index < h.slots && !(max_np && static_cast<int>(in_host_order.size()) >= *max_np); ++index) {
      in_host_order.push_back(slotName(h.name, index));
      offered.emplace(in_host_order.back(), Offer{&h, index});
    }
  }
  // Rank order: the survivors in their order, then the joining slots in host order.
  std::vector<std::string> members;
  std::set<std::string> taken;
  for (const auto& slot : survivors) {
    if (offered.count(slot) && taken.insert(slot).second) members.push_back(slot);
  }
  for (const auto& slot : in_host_order) {
    if (joining.count(slot) && taken.insert(slot).second) members.push_back(slot);
  }
  // Local ranks: a host's members by slot index; cross ranks: over the hosts (in order) that have a member
  // at that local rank.
  std::map<const HostSpec*, std::vector<int>> indexes;  // host -> its members' slot indexes, sorted
  for (const auto& slot : members) indexes[offered.at(slot).host].push_back(offered.at(slot).index);
  for (auto& [host, list] : indexes) std::sort(list.begin(), list.end());
  std::vector<ElasticPlace> plan;
  for (size_t r = 0; r < members.size(); ++r) {
    const Offer& o = offered.at(members[r]);
    const auto& mine = indexes.at(o.host);
    ElasticPlace e;
    e.slot = members[r];
    e.index = o.index;
    Placement& p = e.place;
    p.rank = static_cast<int>(r);
    p.size = static_cast<int>(members.size());
    p.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), o.index) - mine.begin());
    p.local_size = static_cast<int>(mine.size());
    for (const auto& h : hosts) {
      const auto it = indexes.find(&h);
      if (it == indexes.end() || static_cast<int>(it->second.size()) <= p.local_rank) continue;
      if (&h == o.host) p.cross_rank = p.cross_size;
      ++p.cross_size;
    }
    p.host = *o.host;
    plan.push_back(std::move(e));
  }
  return plan;
}

std::chrono::seconds blacklistCooldown(int count, std::pair<int, int> range) {
  long long seconds = range.first;
  for (int i = 1; i < count && seconds < range.second; ++i) seconds *= 2;
  return std::chrono::seconds(std::min<long long>(seconds, range.second));
}

namespace {

std::string describeHosts(const std::vector<Placement>& plan) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& p : plan) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == p.host.name; });
    if (it == counts.end()) {
      counts.emplace_back(p.host.name, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [host, n] : counts) out += detail::concat(out.empty() ? "" : ", ", host, ":", n);
  return out;
}

std::chrono::seconds discoveryTimeout(const Environment& env) {
  const auto* text = findEnv(env, "HVD_DISCOVERY_TIMEOUT_SECONDS");
  if (!text || text->empty()) return kDefaultDiscoveryTimeout;
  char* end = nullptr;
  const long long seconds = std::strtoll(text->c_str(), &end, 10);
  if (*end != '\0' || seconds < 1 || seconds > 86400) {
    throw UsageError(detail::concat("HVD_DISCOVERY_TIMEOUT_SECONDS must be a number of seconds from 1 to 86400, got '",
                                    *text, "'"));
  }
  return std::chrono::seconds(seconds);
}

class Driver : public Supervisor {
 public:
  // `discovery_timeout`: discoveryTimeout(inherited), checked before the supervisor takes the signals.
  Driver(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts, const Environment& inherited,
         std::chrono::seconds discovery_timeout)
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

  RunResult run() {
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

  void onExit(int id, const ExitStatus& status) override {
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

 private:
  struct HostState {
    HostSpec spec;
    bool listed = true;  // in the latest discovery output (always, for fixed hosts)
    std::optional<Clock::time_point> blacklisted_until;  // time_point::max(): for good
    int blacklist_count = 0;
    std::string blacklist_reason;
    std::deque<Clock::time_point> failures;  // within kFailureWindow
  };

  struct WorkerRec {
    std::string slot;
    std::string host;
    int rank = -1;  // in the round it last took part in
    std::unique_ptr<Worker> worker;
    bool ended = false;
    bool removed = false;  // stopped by the driver: left out of a round
    bool standby = false;  // started outside a round; a member once a round takes it in
    bool ready = false;    // standby and asking for its place
    bool replacement = false;  // standby for a slot whose member was lost (its return is not a new reset)
    uint64_t since = 0;        // the round it became a member in
  };

  // The discovery script's process: its stdout is the host list, its stderr goes to hvdrun's stderr.
  class DiscoveryEvents : public WorkerEvents {
   public:
    explicit DiscoveryEvents(Driver& d) : d_(d) {}
    void onOutput(int, Stream stream, std::string_view bytes) override {
      if (stream == Stream::kStdout) {
        out_.append(bytes);
      } else {
        d_.message(Stream::kStderr, bytes);
      }
    }
    void onStreamClosed(int, Stream) override {}
    void onExit(int, const ExitStatus& status) override { d_.discoveryEnded(status, std::move(out_)); }

   private:
    Driver& d_;
    std::string out_;
  };

  // ---- messages and outcome

  std::string hostsSeen() const {
    if (hosts_.empty()) return "; no host was found";
    std::string out = "; hosts found:";
    for (const auto& h : hosts_) {
      out += detail::concat(" ", h.spec.name, ":", h.spec.slots);
      if (!h.listed) out += " (no longer listed)";
      if (h.blacklisted_until) out += " (blacklisted: " + h.blacklist_reason + ")";
    }
    return out;
  }

  void fail(const std::string& why) {
    if (stopping_) return;
    result_.error = why;
    message(Stream::kStderr, "hvdrun: error: " + why + "; stopping the job\n");
    stopAll(SIGTERM);
  }

  bool anyRunning() const {
    for (const auto& [id, w] : workers_) {
      if (!w.ended) return true;
    }
    return discovery_ != nullptr;
  }

  // ---- hosts

  void addHost(const HostSpec& spec) {
    HostState h;
    h.spec = spec;
    hosts_.push_back(std::move(h));
  }

  HostState* findHost(const std::string& name) {
    for (auto& h : hosts_) {
      if (h.spec.name == name) return &h;
    }
    return nullptr;
  }

  std::vector<HostSpec> usableHosts() {
    std::vector<HostSpec> usable;
    const auto now = Clock::now();
    for (auto& h : hosts_) {
      if (h.blacklisted_until && *h.blacklisted_until <= now) {
        h.blacklisted_until.reset();
        h.failures.clear();
        message(Stream::kStderr, detail::concat("hvdrun: host ", h.spec.name, " is usable again after its cooldown\n"));
      }
      if (h.listed && !h.blacklisted_until && h.spec.slots > 0) usable.push_back(h.spec);
    }
    return usable;
  }

  void blacklist(HostState& h, const std::string& reason) {
    if (h.blacklisted_until) return;
    ++h.blacklist_count;
    h.blacklist_reason = reason;
    std::string period = "for the rest of the job";
    if (elastic_.cooldown) {
      const auto cooldown = blacklistCooldown(h.blacklist_count, *elastic_.cooldown);
      h.blacklisted_until = Clock::now() + cooldown;
      period = detail::concat("for ", cooldown.count(), " s (--blacklist-cooldown-range)");
    } else {
      h.blacklisted_until = Clock::time_point::max();
    }
    recordLoss(detail::concat("host ", h.spec.name, " blacklisted: ", reason));
    message(Stream::kStderr, detail::concat("hvdrun: blacklisting host ", h.spec.name, " ", period, ": ", reason, "\n"));
    // Its other workers go too.
    for (auto& [id, w] : workers_) {
      if (w.host == h.spec.name && !w.ended && !w.removed) {
        w.removed = true;
        w.worker->signal(SIGTERM);
      }
    }
    armKillTimer();
  }

  // ---- discovery

  void runDiscovery() {
    if (stopping_ || finishing_) return;
    LaunchSpec spec;
    spec.rank = 0;
    spec.host.name = "localhost";
    spec.argv = {"/bin/sh", "-c", *elastic_.discovery_script};
    spec.env.assign(inherited_.begin(), inherited_.end());
    spec.cwd = cwd_;
    discovery_events_ = std::make_unique<DiscoveryEvents>(*this);
    if (!discovery_launcher_) discovery_launcher_ = std::make_unique<local::LocalLauncher>(ioc_);
    discovery_timed_out_ = false;
    discovery_ = discovery_launcher_->start(spec, *discovery_events_);
    discovery_timer_.expires_after(discovery_timeout_);
    discovery_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !discovery_) return;
      discovery_timed_out_ = true;
      discovery_->signal(SIGKILL);
    });
  }

  void discoveryEnded(const ExitStatus& status, std::string out) {
    discovery_timer_.cancel();
    // The worker object goes once this callback has returned.
    asio::post(ioc_, [this, keep = std::shared_ptr<Worker>(std::move(discovery_))] {});
    std::string problem;
    if (discovery_timed_out_) {
      problem = detail::concat("did not finish within ", discovery_timeout_.count(),
                               " s (HVD_DISCOVERY_TIMEOUT_SECONDS) and was killed");
    } else if (!status.success()) {
      problem = "ended with " + status.describe();
    } else {
      try {
        updateHosts(parseDiscoveryOutput(out, options_.slots_per_host));
      } catch (const UsageError& e) {
        problem = detail::concat("printed what is not a host list: ", e.what());
      }
    }
    if (!problem.empty() && problem != discovery_problem_) {
      message(Stream::kStderr, detail::concat("hvdrun: warning: host discovery script '", *elastic_.discovery_script,
                                              "' ", problem, "; keeping the hosts known so far and retrying every 1 s\n"));
    } else if (problem.empty() && !discovery_problem_.empty()) {
      message(Stream::kStderr, "hvdrun: host discovery script works again\n");
    }
    discovery_problem_ = problem;
    if (stopping_ || finishing_) {
      if (!anyRunning()) finish();
      return;
    }
    tick();
    // horovodrun's period: 1 s after each call ends.
    tick_timer_.expires_after(std::chrono::seconds(1));
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) runDiscovery();
    });
  }

  void updateHosts(const std::vector<HostSpec>& found) {
    for (auto& h : hosts_) h.listed = false;
    for (const auto& spec : found) {
      if (HostState* h = findHost(spec.name)) {
        h->listed = true;
        h->spec = spec;
      } else {
        addHost(spec);
      }
    }
  }

  // ---- reconciling what runs with what should run

  // Every second without a discovery script (cooldowns end), and after every discovery result.
  void tick() {
    reconcile();
    if (elastic_.discovery_script || stopping_ || finishing_) return;
    tick_timer_.expires_after(std::chrono::seconds(1));
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) tick();
    });
  }

  // A worker failed: wait a moment for the exits of the same event (a host going down ends all its
  // workers) so that they make one round, not several.
  void settleThenReconcile() {
    settle_timer_.expires_after(kSettle);
    settle_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) reconcile();
    });
  }

  // The live members of the current round that hold the job's state, in rank order: members since the
  // first round or since a round before the current one, or of the current one once it has formed (every
  // member joined its rendezvous, and the first thing it runs is the sync); a process taken in by a round
  // that has not formed may not have the state yet.
  std::vector<std::string> survivors() const {
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

  bool roundFormed() const {
    const auto scopes = server_->scopes();
    const auto global = scopes.find(rendezvous::roundScope(round_, "global"));
    return global != scopes.end() && global->second.ever_joined_ranks.size() >= members_.size();
  }

  // A member of the current round is gone (ended, stopped) or was replaced by another process.
  bool memberLost() const {
    for (const auto& slot : members_) {
      const int id = member_ids_.at(slot);
      const WorkerRec& w = workers_.at(id);
      const auto it = live_.find(slot);
      if (w.ended || w.removed || it == live_.end() || it->second != id) return true;
    }
    return false;
  }

  void reconcile() {
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

  // Stops a worker the job no longer needs; its end is not a failure.
  void stopWorker(WorkerRec& w) {
    w.removed = true;
    w.worker->signal(SIGTERM);
    armKillTimer();
  }

  // The first worker returned from training with exit 0: no round will take standby processes in any
  // more, and the members the current round took in can only finish with it if that worker was in it.
  void beginFinishing(const WorkerRec& done) {
    const auto joined = server_->lastRound(done.slot);
    const bool round_complete = joined && *joined >= round_;
    for (auto& [id, w] : workers_) {
      if (w.ended || w.removed) continue;
      if (w.standby || (!round_complete && w.since == round_ && round_ > 1)) stopWorker(w);
    }
    if (discovery_) discovery_->signal(SIGKILL);
  }

  static const char* ordinalSuffix(int n) {
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

  std::string lostSummary() const {
    if (lost_.empty()) return "";
    std::string out = " (lost: ";
    if (lost_earlier_) out += detail::concat(lost_earlier_, " earlier losses; ");
    for (size_t i = 0; i < lost_.size(); ++i) out += (i ? "; " : "") + lost_[i];
    return out + ")";
  }

  // Records a loss for failure messages: the latest kLostKept in full, a count of the earlier ones.
  void recordLoss(std::string what) {
    lost_.push_back(std::move(what));
    if (lost_.size() > kLostKept) {
      lost_.pop_front();
      ++lost_earlier_;
    }
  }

  void belowMinimum(size_t usable) {
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

  void prepareFirstRound(const std::vector<Placement>& plan) {
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
  void beginRound(const std::vector<ElasticPlace>& plan, bool counted) {
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
      round.slots[e.slot] = {p.rank, p.size, p.local_rank, p.local_size, p.cross_rank, p.cross_size};
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

  // A process for a slot outside the current round: it asks for its place when it is ready.
  void startStandby(const std::vector<HostSpec>& hosts, const std::string& slot) {
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

  void startWorker(const Placement& p, const std::string& slot, int index, bool member) {
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

  void workerFailed(int id, WorkerRec& w, const ExitStatus& status) {
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
  void roundRequested(const std::string& slot) {
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

  // ---- teardown (the supervisor's rules, as for a static job)

  // The discovery script is killed outright whatever the signal: a stopping job reads no more hosts.
  void signalAll(int signo) override {
    for (auto& [id, w] : workers_) {
      if (!w.ended && w.worker) w.worker->signal(signo);
    }
    if (discovery_) discovery_->signal(SIGKILL);
  }

  // Not the discovery timer: the script is killed with the workers (signalAll), and discoveryEnded cancels
  // its timer.
  void stopTimers() override {
    tick_timer_.cancel();
    settle_timer_.cancel();
    below_timer_.cancel();
  }

  std::string describeRunning() const override { return "the job"; }

  // Workers left out of a round (removed) get SIGKILL after their grace too, also while the job runs on.
  void killAfterGrace() override {
    for (auto& [id, w] : workers_) {
      if (!w.ended && w.worker && (stopping_ || w.removed)) w.worker->signal(SIGKILL);
    }
  }

  // With nothing left running (before the first round, between discovery calls) the job ends at once.
  void stopAll(int signo) override {
    Supervisor::stopAll(signo);
    if (!anyRunning()) finish();
  }

  const HvdrunOptions::Elastic& elastic_;
  const Environment& inherited_;
  const std::chrono::seconds discovery_timeout_;
  std::string cwd_;
  asio::steady_timer tick_timer_;
  asio::steady_timer settle_timer_;
  asio::steady_timer below_timer_;
  asio::steady_timer discovery_timer_;
  std::set<std::string> slots_started_;  // slots that had a process: starting another there is a restart
  // Destroyed before the base's launchers: workers (kill what still runs) first.
  std::unique_ptr<Launcher> discovery_launcher_;
  std::unique_ptr<DiscoveryEvents> discovery_events_;
  std::unique_ptr<Worker> discovery_;
  std::map<int, WorkerRec> workers_;  // by worker id (the output tag)
  std::vector<HostState> hosts_;      // in the order they first appeared
  std::vector<std::string> members_;      // the current round's slots, in rank order
  std::map<std::string, int> member_ids_;  // the current round's slots -> their processes
  bool reform_requested_ = false;          // a member asked for a round after the current one
  bool growth_stopped_ = false;            // --reset-limit reached: no more processes are taken in
  std::map<std::string, int> live_;   // slot -> its live worker
  std::deque<std::string> lost_;     // what the job lost, for failure messages
  size_t lost_earlier_ = 0;         // losses no longer in lost_
  static constexpr size_t kLostKept = 16;
  std::optional<Clock::time_point> below_since_;
  std::string discovery_problem_;
  bool discovery_timed_out_ = false;
  uint64_t round_ = 0;
  int resets_ = 0;
  bool finishing_ = false;
};

}  // namespace

RunResult runElasticJob(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                        const Environment& inherited) {
  ::signal(SIGPIPE, SIG_IGN);
  Driver driver(options, fixed_hosts, inherited, discoveryTimeout(inherited));
  return driver.run();
}

}  // namespace hvd::launcher
