// Reports: what a worker's runtime tells the rendezvous server about itself, for the job's status view
// (base/report.h: a RankReport as JSON over PUT /_hvd/report/<rank>, HttpStore::sendReport).
//
// Who: every rank whose store is the rendezvous server over HTTP (HOROVOD_GLOO_RENDEZVOUS_ADDR or
// HVD_RENDEZVOUS, or a Runtime given an HttpStore), unless RuntimeOptions::report_interval is zero
// (HVD_REPORT_INTERVAL_SECONDS=0).
//
// When: once as soon as init has completed (the page shows the rank running at once), then every
// report_interval (1 s by default; a report that is late skips its turn rather than queueing), and a last
// one with state "shutdown" from Runtime::shutdown() once the background thread has stopped, so its counts
// are final. finish() returns within kFinishBudget (about 1 s) whatever the server does.
//
// What: rank, size, local rank, the host's name (gethostname), pid, HVD_WORKER_ID when the launcher set it,
// the elastic round, the state, seconds since init began, per operation name (name(OpType): the names of
// kCountedOps, the same names rank 0's waits carry as CollectiveWait::op) the operations this rank completed
// and their input bytes, VmRSS and VmHWM (/proc/self/status), and on rank 0 the names some ranks submitted
// and others have not (Coordinator::waits) and how many stall warnings it logged.
//
// Cost on the collectives' path: the thread that runs the runtime's progress (the background thread, or a
// user thread that waits, one at a time under the runtime's progress mutex) adds to two counters per
// completed operation (relaxed stores of counters no other thread writes meanwhile) and, on rank 0, lists the
// waits into a mutex-guarded slot at most every kWaitsInterval. Everything else (JSON, /proc, HTTP) happens
// on the reporter's own thread.
//
// Failures: a report that fails is logged once (warning), later failures only at debug level, and the next
// report is tried as usual. A server that answers 404 (one without the report route), or that closes the
// connection without an answer before any report got through (Horovod's own server, whose handler fails on
// the path), is never sent another report from this process (logged at debug level).
//
// Threading: ReportStats: the writer methods from the background thread only, the readers from any thread.
// Reporter: construct and finish() from one thread; it starts its own thread, which inherits the creator's
// signal mask (the runtime starts it while SIGPIPE is blocked).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/report.h"
#include "runtime/options.h"
#include "runtime/work.h"

namespace hvd::rendezvous {
class HttpStore;
}  // namespace hvd::rendezvous

namespace hvd::runtime {

// The operations reports count, each under name(op).
inline constexpr OpType kCountedOps[] = {OpType::kAllreduce,     OpType::kAllgather, OpType::kBroadcast,
                                         OpType::kAlltoall,      OpType::kReducescatter, OpType::kBarrier,
                                         OpType::kJoin};

// What the background thread publishes for the reporter.
class ReportStats {
 public:
  using Clock = std::chrono::steady_clock;
  // Rank 0 lists its waits at most this often, and only names submitted at least this long ago.
  static constexpr std::chrono::milliseconds kWaitsInterval{250};
  static constexpr std::chrono::milliseconds kWaitsMinAge{250};
  static constexpr size_t kMaxWaits = 16;

  // The thread that runs progress: an operation of `type` completed on this rank; `bytes`: its input's size.
  // Types outside kCountedOps (process-set changes) are not counted.
  void completed(OpType type, uint64_t bytes) {
    const auto i = static_cast<size_t>(type);
    if (i >= kOps) return;
    // Writers take turns under the progress mutex: a relaxed load and store, no read-modify-write.
    count_[i].store(count_[i].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes_[i].store(bytes_[i].load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  // Background thread, rank 0: a stall warning was logged.
  void stallWarning() {
    stall_warnings_.store(stall_warnings_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // Background thread, rank 0: the waits as of `at` (replaces the previous list).
  void publishWaits(std::vector<CollectiveWait> waits, Clock::time_point at);

  // Any thread: the operations completed so far, by name (those with a count only).
  std::map<std::string, CollectiveCount> collectives() const;
  // Any thread: the latest published waits, their ages brought forward to `now`.
  std::vector<CollectiveWait> waits(Clock::time_point now) const;
  uint64_t stallWarnings() const { return stall_warnings_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kOps = std::size(kCountedOps);
  static_assert(static_cast<size_t>(OpType::kJoin) + 1 == kOps, "kCountedOps are the OpTypes below kProcessSet");
  std::array<std::atomic<uint64_t>, kOps> count_{};
  std::array<std::atomic<uint64_t>, kOps> bytes_{};
  std::atomic<uint64_t> stall_warnings_{0};
  mutable std::mutex waits_mutex_;
  std::vector<CollectiveWait> waits_;  // guarded by waits_mutex_
  Clock::time_point waits_at_;                     // guarded by waits_mutex_
};

// Sends this rank's reports on its own thread (see the top of this file).
class Reporter {
 public:
  using Clock = std::chrono::steady_clock;
  // How long finish() may take, the last report included.
  static constexpr std::chrono::milliseconds kFinishBudget{1000};
  // How long one periodic report may take (the last one gets what is left of kFinishBudget).
  static constexpr std::chrono::milliseconds kReportTimeout{500};

  // Starts the thread, which sends the first report at once. options: the runtime's (identity, round,
  // report_interval > 0, worker_id, log level); started: when init began (uptime is counted from it).
  Reporter(const RuntimeOptions& options, std::shared_ptr<rendezvous::HttpStore> server,
           std::shared_ptr<const ReportStats> stats, Clock::time_point started);
  ~Reporter();  // finish()
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Sends the "shutdown" report (unless the server refused reports) and stops the thread, within
  // kFinishBudget: a thread still stuck in a request after that is left to end on its own. Idempotent.
  void finish();

  // The RankReport as the reporter would send it now (for tests).
  RankReport snapshot(const std::string& state) const;

 private:
  struct State;
  static void run(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive finish() (see there)
  std::thread thread_;
};

// VmRSS and VmHWM of this process in bytes, from /proc/self/status (0 where unreadable).
struct MemoryUse {
  uint64_t rss_bytes = 0, peak_rss_bytes = 0;
};
MemoryUse memoryUse();

}  // namespace hvd::runtime
