#include "runtime/reporter.h"

#include <condition_variable>
#include <fstream>
#include <set>

#include <pthread.h>
#include <unistd.h>

#include "base/error.h"
#include "rendezvous/http_store.h"
#include "runtime/log.h"

namespace hvd::runtime {

namespace {

// Servers (HttpStore::describe()) that refused reports: this process sends them no more. Never destroyed: a
// runtime shut down from a static destructor at exit may still look it up.
std::mutex refused_mutex;
std::set<std::string>& refusedServers() {
  static auto* servers = new std::set<std::string>;
  return *servers;
}

bool refused(const std::string& server) {
  std::lock_guard lock(refused_mutex);
  return refusedServers().count(server) > 0;
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

}  // namespace

void ReportStats::publishWaits(std::vector<CollectiveWait> waits, Clock::time_point at) {
  std::lock_guard lock(waits_mutex_);
  waits_ = std::move(waits);
  waits_at_ = at;
}

std::map<std::string, CollectiveCount> ReportStats::collectives() const {
  std::map<std::string, CollectiveCount> out;
  for (size_t i = 0; i < kOps; ++i) {
    const uint64_t count = count_[i].load(std::memory_order_relaxed);
    if (count == 0) continue;
    out[name(kCountedOps[i])] = {count, bytes_[i].load(std::memory_order_relaxed)};
  }
  return out;
}

std::vector<CollectiveWait> ReportStats::waits(Clock::time_point now) const {
  std::lock_guard lock(waits_mutex_);
  std::vector<CollectiveWait> out = waits_;
  const double later = std::chrono::duration<double>(now - waits_at_).count();
  if (later > 0) {
    for (auto& w : out) w.seconds += later;
  }
  return out;
}

MemoryUse memoryUse() {
  MemoryUse m;
  std::ifstream status("/proc/self/status");
  std::string line;
  auto kib = [](const std::string& text) {
    // "VmRSS:\t    1234 kB"
    const size_t digits = text.find_first_of("0123456789");
    return digits == std::string::npos ? uint64_t{0} : std::stoull(text.substr(digits)) * 1024;
  };
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss_bytes = kib(line);
    if (line.rfind("VmHWM:", 0) == 0) m.peak_rss_bytes = kib(line);
  }
  return m;
}

struct Reporter::State {
  RankReport identity;  // the fields that do not change
  std::chrono::milliseconds interval{1000};
  LogLevel log_level = LogLevel::kWarning;
  std::shared_ptr<rendezvous::HttpStore> server;
  std::string server_name;
  std::shared_ptr<const ReportStats> stats;
  Clock::time_point started;
  bool failing = false;    // the reporter's thread only: the last report failed
  bool delivered = false;  // the reporter's thread only: a report reached the server

  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;           // finish() was called
  Clock::time_point stop_deadline;  // finish()'s bound
  bool exited = false;             // the thread is done

  void log(LogLevel level, const std::string& message) const {
    logLine(log_level, level, identity.rank, message);
  }

  RankReport report(const std::string& state) const {
    RankReport r = identity;
    r.state = state;
    const auto now = Clock::now();
    r.uptime_s = std::chrono::duration<double>(now - started).count();
    r.collectives = stats->collectives();
    const MemoryUse m = memoryUse();
    r.rss_bytes = m.rss_bytes;
    r.peak_rss_bytes = m.peak_rss_bytes;
    if (r.rank == 0) {
      r.waits = stats->waits(now);
      r.stall_warnings = stats->stallWarnings();
    }
    return r;
  }

  // This process sends `server_name` no more reports.
  void refuse(const std::string& why) {
    {
      std::lock_guard lock(refused_mutex);
      refusedServers().insert(server_name);
    }
    log(LogLevel::kDebug, "the rendezvous server " + server_name + " does not take status reports (" + why +
                              "); this worker sends it no more");
  }

  // Sends one report; false when the server answered 404 (it takes no reports: never ask it again).
  bool send(const std::string& state, std::chrono::milliseconds timeout) {
    try {
      if (!server->sendReport(identity.rank, toJson(report(state)).dump(), timeout)) {
        refuse("404");
        return false;
      }
      if (failing) log(LogLevel::kDebug, "reports reach the rendezvous server " + server_name + " again");
      failing = false;
      delivered = true;
      return true;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      // Horovod's own server answers nothing: its handler raises on the path and closes the connection
      // (HttpStore's "end of stream"), which a server that took reports before would not do.
      if (!delivered && what.find("end of stream") != std::string::npos) {
        refuse("it closed the connection without an answer");
        return false;
      }
      log(failing ? LogLevel::kDebug : LogLevel::kWarning,
          detail::concat("status report to the rendezvous server ", server_name, " failed: ", what,
                         failing ? "" : " (reports go on; further failures are logged at debug level)"));
      failing = true;
      return true;
    }
  }
};

Reporter::Reporter(const RuntimeOptions& options, std::shared_ptr<rendezvous::HttpStore> server,
                   std::shared_ptr<const ReportStats> stats, Clock::time_point started)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.identity.rank = options.rank;
  s.identity.size = options.size;
  s.identity.local_rank = options.local_rank;
  s.identity.host = hostName();
  s.identity.pid = static_cast<int64_t>(::getpid());
  s.identity.id = options.worker_id;
  s.identity.round = options.elastic ? options.elastic_round : 0;
  s.interval = options.report_interval;
  s.log_level = options.log_level;
  s.server_name = server->describe();
  s.server = std::move(server);
  s.stats = std::move(stats);
  s.started = started;
  if (s.interval.count() <= 0 || refused(s.server_name)) {
    s.exited = true;
    return;
  }
  thread_ = std::thread(run, state_);
}

Reporter::~Reporter() { finish(); }

void Reporter::run(std::shared_ptr<State> state) {
  ::pthread_setname_np(::pthread_self(), "hvd-reporter");
  State& s = *state;
  bool taken = s.send("running", kReportTimeout);
  auto next = Clock::now() + s.interval;
  std::unique_lock lock(s.mutex);
  while (taken && !s.stopping) {
    if (s.cv.wait_until(lock, next, [&] { return s.stopping; })) break;
    lock.unlock();
    taken = s.send("running", kReportTimeout);
    lock.lock();
    // A report that took longer than the interval delays the next one rather than sending it at once.
    next = std::max(next + s.interval, Clock::now());
  }
  if (taken) {
    // stopping: the background thread has stopped, so the counts are final.
    s.cv.wait(lock, [&] { return s.stopping; });
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(s.stop_deadline - Clock::now());
    lock.unlock();
    if (left.count() > 0) s.send("shutdown", left);
    lock.lock();
  }
  s.exited = true;
  s.cv.notify_all();
}

void Reporter::finish() {
  if (!thread_.joinable()) return;
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (!s.stopping) {
    s.stopping = true;
    s.stop_deadline = Clock::now() + kFinishBudget;
    s.cv.notify_all();
  }
  // The requests' own deadlines end within the budget; the margin covers the rest (JSON, /proc).
  const bool exited = s.cv.wait_until(lock, s.stop_deadline + std::chrono::milliseconds(200), [&] { return s.exited; });
  lock.unlock();
  if (exited) {
    thread_.join();
  } else {
    // Stuck outside any deadline (a name lookup): it ends on its own, holding what it uses.
    s.log(LogLevel::kDebug, "the status reporter did not stop within " +
                                std::to_string(kFinishBudget.count()) + " ms; shutdown goes on without it");
    thread_.detach();
  }
}

RankReport Reporter::snapshot(const std::string& state) const { return state_->report(state); }

}  // namespace hvd::runtime
