// The live view of a running job: what the status port serves (rendezvous/status_page.h) and what hvdrun's end-of-job
// summary is made from.
//
// Three sources feed it, each through its own calls:
//   - the launcher, about processes: started (host, pid), output lines (the last kTailLines kept, of
//     running workers and of the kEndedTails that ended last), exited (code or signal, peak RSS when the
//     launcher could measure it);
//   - the workers, about the runtime: a RankReport about once a second (PUT /_hvd/report/<rank> on the
//     rendezvous port, with the job token), and a last one with state "shutdown" from hvd_shutdown();
//   - the rendezvous server, about itself: every request it answered (method, status, seconds).
// A worker is known by its `id`: its rank in a static job, its worker number in an elastic job (whose
// ranks change from round to round; a report names the rank it has now, and the worker it comes from by
// host and pid, or by `id` when the launcher set HVD_WORKER_ID).
//
// Per worker the state is the furthest one reached:
//   starting  the launcher started it (or a report names it; hvd-rendezvous knows workers only so)
//   joined    it stored its address in the rendezvous (its rank joined the "global" scope of its round)
//   running   a report came: the runtime is initialized
//   exited    the launcher saw it end (exit code or signal); a "shutdown" report alone leaves it running
//
// Waits: rank 0 negotiates every collective, so its report lists the collectives some ranks submitted and
// others have not, with the ranks missing and for how long; a worker whose rank is missing from a wait
// older than kStuckAfter is "stuck" in snapshots, on the page and in /metrics.
//
// History: the sum over workers of allreduce bytes and of collectives, per second, over the last
// kHistorySeconds, from the differences between consecutive reports (for the page's chart).
//
// Threading: every method may be called from any thread (one mutex). Snapshots are copies.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/report.h"

namespace hvd {

enum class WorkerState { kStarting, kJoined, kRunning, kExited };
const char* toString(WorkerState state);  // "starting", "joined", "running", "exited"

// What the launcher and the worker's own reports tell of one worker.
struct WorkerRecord {
  int id = -1;
  int rank = -1;  // the latest report's rank, else the launcher's
  std::string host;
  std::optional<int64_t> pid;
  WorkerState state = WorkerState::kStarting;
  std::optional<int> exit_code;            // exited normally
  std::optional<int> signal;               // killed by a signal
  std::string exit_detail;                 // the launcher's words ("lost: connection reset"), may be empty
  std::optional<uint64_t> peak_rss_bytes;  // the launcher's measurement
  std::optional<RankReport> report;        // the latest
  uint64_t restarts = 0;                   // elastic: times the launcher started this worker again
};

// One worker as a snapshot shows it: its record, with peak_rss_bytes falling back to the last report's
// VmHWM, and what the snapshot derives.
struct WorkerView : WorkerRecord {
  double run_seconds = 0;                  // start to exit, or to now
  std::vector<std::string> tail;           // the last lines of its output, oldest first
  bool stuck = false;                      // missing from a wait older than kStuckAfter
  double stuck_seconds = 0;
  uint64_t collectives() const;            // sums over report->collectives
  uint64_t bytes() const;
};

struct HistoryPoint {
  int64_t unix_s = 0;               // the second (system clock)
  double allreduce_bytes_per_s = 0; // summed over workers
  double collectives_per_s = 0;     // summed over workers
};

struct RequestStats {
  std::map<std::pair<std::string, unsigned>, uint64_t> count;  // (method, status) -> requests
  // Latency histogram of requests answered without a long-poll wait: upper bounds in seconds, cumulative.
  static constexpr double kBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1};
  std::vector<uint64_t> latency_buckets = std::vector<uint64_t>(std::size(kBuckets), 0);
  uint64_t latency_count = 0;
  double latency_sum = 0;
  uint64_t long_polls = 0;  // requests that waited for a key (not in the histogram)
};

struct JobSnapshot {
  std::string name;                  // the command (hvdrun) or "hvd-rendezvous"
  double uptime_s = 0;
  int size = 0;                      // ranks planned (0: unknown, hvd-rendezvous)
  std::optional<uint64_t> round;     // elastic round
  std::vector<WorkerView> workers;   // by id
  std::vector<CollectiveWait> waits; // from rank 0's latest report
  std::vector<HistoryPoint> history; // oldest first
  RequestStats requests;
  uint64_t restarts = 0;             // elastic: workers started again
  uint64_t rounds = 0;               // elastic: rounds begun
  uint64_t stall_warnings = 0;
  std::map<WorkerState, int> countByState() const;
};

class Monitor {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kTailLines = 5;
  // Ended workers whose output tail is kept (the latest to end); older ones keep their summary facts only,
  // so that an elastic job replacing workers for days holds about a summary row per worker, not its output.
  static constexpr size_t kEndedTails = 32;
  static constexpr int kHistorySeconds = 300;
  static constexpr std::chrono::milliseconds kStuckAfter{1000};

  explicit Monitor(std::string name = "hvd-rendezvous", int size = 0);

  // Launcher side.
  void setSize(int size);
  void workerStarted(int id, int rank, const std::string& host, std::optional<int64_t> pid);
  void workerOutput(int id, std::string_view line);  // one line without its newline
  void workerExited(int id, std::optional<int> exit_code, std::optional<int> signal, std::string detail,
                    std::optional<uint64_t> peak_rss_bytes);
  void roundBegan(uint64_t round);
  void countRestart();  // elastic: a process started in the place of one that ended

  // Rendezvous side.
  void workerJoined(int rank, std::optional<uint64_t> round);  // its rank joined the round's global scope
  void report(RankReport report);
  void request(const std::string& method, unsigned status, std::optional<double> seconds);  // nullopt: waited

  JobSnapshot snapshot() const;

 private:
  struct Worker;
  Worker& worker(int id);  // requires mutex_
  mutable std::mutex mutex_;
  const Clock::time_point started_ = Clock::now();
  std::string name_;
  int size_ = 0;
  std::optional<uint64_t> round_;
  uint64_t rounds_ = 0;
  uint64_t restarts_ = 0;
  std::map<int, std::shared_ptr<Worker>> workers_;
  std::deque<int> ended_tails_;  // ids of ended workers that still have their tail, oldest first
  std::deque<HistoryPoint> history_;
  RequestStats requests_;
  std::vector<CollectiveWait> waits_;
  Clock::time_point waits_at_;
  uint64_t stall_warnings_ = 0;
};

}  // namespace hvd
