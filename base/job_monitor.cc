#include "base/job_monitor.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace hvd {

namespace {

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double secondsBetween(Monitor::Clock::time_point from, Monitor::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

const char* toString(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting: return "starting";
    case WorkerState::kJoined: return "joined";
    case WorkerState::kRunning: return "running";
    case WorkerState::kExited: return "exited";
  }
  return "unknown";
}

uint64_t WorkerView::collectives() const {
  uint64_t n = 0;
  if (report) {
    for (const auto& [op, c] : report->collectives) n += c.count;
  }
  return n;
}

uint64_t WorkerView::bytes() const {
  uint64_t n = 0;
  if (report) {
    for (const auto& [op, c] : report->collectives) n += c.bytes;
  }
  return n;
}

std::map<WorkerState, int> JobSnapshot::countByState() const {
  std::map<WorkerState, int> out;
  for (auto s : {WorkerState::kStarting, WorkerState::kJoined, WorkerState::kRunning, WorkerState::kExited}) out[s] = 0;
  for (const auto& w : workers) ++out[w.state];
  return out;
}

struct Monitor::Worker : WorkerRecord {
  std::optional<Clock::time_point> started, ended;
  std::deque<std::string> tail;
};

Monitor::Monitor(std::string name, int size) : name_(std::move(name)), size_(size) {}

Monitor::Worker& Monitor::worker(int id) {
  auto& slot = workers_[id];
  if (!slot) {
    slot = std::make_shared<Worker>();
    slot->id = id;
    slot->rank = id;
  }
  return *slot;
}

void Monitor::setSize(int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_ = size;
}

void Monitor::workerStarted(int id, int rank, const std::string& host, std::optional<int64_t> pid) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& w = worker(id);
  if (w.started) {
    // Started again (elastic): a new process in the same place.
    const uint64_t restarts = w.restarts + 1;
    w = Worker{};
    w.id = id;
    w.restarts = restarts;
  }
  w.rank = rank;
  w.host = host;
  w.pid = pid;
  w.started = Clock::now();
}

void Monitor::workerOutput(int id, std::string_view line) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& w = worker(id);
  w.tail.emplace_back(line);
  while (w.tail.size() > kTailLines) w.tail.pop_front();
}

void Monitor::workerExited(int id, std::optional<int> exit_code, std::optional<int> signal, std::string detail,
                           std::optional<uint64_t> peak_rss_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& w = worker(id);
  w.state = WorkerState::kExited;
  w.exit_code = exit_code;
  w.signal = signal;
  w.exit_detail = std::move(detail);
  w.ended = Clock::now();
  if (peak_rss_bytes) w.peak_rss_bytes = peak_rss_bytes;
  ended_tails_.push_back(id);
  if (ended_tails_.size() > kEndedTails) {
    if (auto it = workers_.find(ended_tails_.front()); it != workers_.end()) {
      std::deque<std::string>().swap(it->second->tail);
    }
    ended_tails_.pop_front();
  }
}

void Monitor::roundBegan(uint64_t round) {
  std::lock_guard<std::mutex> lock(mutex_);
  round_ = round;
  ++rounds_;
}

void Monitor::countRestart() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++restarts_;
}

void Monitor::workerJoined(int rank, std::optional<uint64_t> round) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (round) {
    // Elastic: the rank belongs to whichever worker reported it in this round; before its first report the
    // launcher's rank (the round it was started in) is all there is.
    for (auto& [id, w] : workers_) {
      const bool this_round = w->report ? w->report->round == *round && w->report->rank == rank : w->rank == rank;
      if (this_round && w->state == WorkerState::kStarting) w->state = WorkerState::kJoined;
    }
    return;
  }
  auto& w = worker(rank);
  if (w.state == WorkerState::kStarting) w.state = WorkerState::kJoined;
}

void Monitor::report(RankReport report) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Which worker: the launcher's id, else a worker with this host and pid, else the rank.
  std::optional<int> id = report.id;
  if (!id) {
    for (const auto& [wid, w] : workers_) {
      if (w->pid && *w->pid == report.pid && w->host == report.host) id = wid;
    }
  }
  auto& w = worker(id.value_or(report.rank));
  if (!w.started) w.started = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(report.uptime_s));
  if (w.host.empty()) w.host = report.host;
  if (!w.pid) w.pid = report.pid;
  w.rank = report.rank;
  if (w.state != WorkerState::kExited) w.state = WorkerState::kRunning;

  // History: what this worker did since its previous report, in the current second's bucket.
  double bytes = 0, collectives = 0;
  for (const auto& [op, c] : report.collectives) {
    const CollectiveCount before = w.report && w.report->pid == report.pid && w.report->collectives.count(op)
                                       ? w.report->collectives.at(op)
                                       : CollectiveCount{};
    const uint64_t dc = c.count >= before.count ? c.count - before.count : c.count;
    const uint64_t db = c.bytes >= before.bytes ? c.bytes - before.bytes : c.bytes;
    collectives += static_cast<double>(dc);
    if (op == "allreduce") bytes += static_cast<double>(db);
  }
  const int64_t now = unixNow();
  if (history_.empty() || history_.back().unix_s != now) {
    // One point per second, empty seconds included, so the chart's time axis is even.
    int64_t next = history_.empty() ? now : history_.back().unix_s + 1;
    if (now - next > kHistorySeconds) next = now - kHistorySeconds;
    for (; next <= now; ++next) history_.push_back({next, 0, 0});
    while (!history_.empty() && history_.front().unix_s <= now - kHistorySeconds) history_.pop_front();
  }
  history_.back().allreduce_bytes_per_s += bytes;
  history_.back().collectives_per_s += collectives;

  if (report.rank == 0) {
    waits_ = report.waits;
    waits_at_ = Clock::now();
    stall_warnings_ = std::max(stall_warnings_, report.stall_warnings);
  }
  w.report = std::move(report);
}

void Monitor::request(const std::string& method, unsigned status, std::optional<double> seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_.count[{method, status}];
  if (!seconds) {
    ++requests_.long_polls;
    return;
  }
  ++requests_.latency_count;
  requests_.latency_sum += *seconds;
  for (size_t i = 0; i < std::size(RequestStats::kBuckets); ++i) {
    if (*seconds <= RequestStats::kBuckets[i]) ++requests_.latency_buckets[i];
  }
}

JobSnapshot Monitor::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  JobSnapshot s;
  s.name = name_;
  s.uptime_s = secondsBetween(started_, now);
  s.size = size_;
  s.round = round_;
  s.rounds = rounds_;
  s.restarts = restarts_;
  s.requests = requests_;
  s.stall_warnings = stall_warnings_;
  // Waits age between reports: add the time since rank 0 sent them.
  const double age = waits_.empty() ? 0 : secondsBetween(waits_at_, now);
  for (auto w : waits_) {
    w.seconds += age;
    s.waits.push_back(std::move(w));
  }
  std::map<int, double> stuck;  // rank -> longest wait it holds up
  for (const auto& w : s.waits) {
    if (w.seconds * 1000 < static_cast<double>(kStuckAfter.count())) continue;
    for (int r : w.missing) stuck[r] = std::max(stuck[r], w.seconds);
  }
  const auto history_end = unixNow();
  for (const auto& p : history_) {
    if (p.unix_s > history_end - kHistorySeconds) s.history.push_back(p);
  }
  for (const auto& [id, w] : workers_) {
    WorkerView v;
    static_cast<WorkerRecord&>(v) = *w;
    if (w->started) v.run_seconds = secondsBetween(*w->started, w->ended.value_or(now));
    if (!v.peak_rss_bytes && w->report && w->report->peak_rss_bytes) v.peak_rss_bytes = w->report->peak_rss_bytes;
    v.tail.assign(w->tail.begin(), w->tail.end());
    if (w->state != WorkerState::kExited) {
      if (auto it = stuck.find(w->rank); it != stuck.end()) {
        v.stuck = true;
        v.stuck_seconds = it->second;
      }
    }
    s.restarts += w->restarts;
    s.workers.push_back(std::move(v));
  }
  return s;
}

}  // namespace hvd
