// Runtime::Impl: the state of one libhvd instance (runtime/runtime.h's Runtime), shared by the files that
// implement it, each with one job:
//   runtime.cc          init (the constructor: rendezvous, control plane, data paths, background thread),
//                       what user threads call (enqueue, groups, process-set changes, shutdown), the public
//                       Runtime
//   control_plane.cc    the connections between rank 0 (the coordinator) and the other ranks, the
//                       watcher that turns a closed connection into PeerLostError, rank 0's reports of
//                       waits and its checks for a re-formed elastic job
//   background_loop.cc  the background thread and progress() (submissions to the coordinator, responses
//                       back, each list executed in order, completion and failure of every pending
//                       operation), which a user thread that waits may run instead (drive())
//   collectives.cc      executing one negotiated response on the data paths (Gloo, shared memory,
//                       hierarchical), fusion, process-set registration, timeline and autotune
//   agreement.cc        negotiation-free cached operations: the ranks of a one-host job agree on a lone
//                       response cache hit in the shared-memory segment, without the coordinator
// Internal to libhvd (not installed). Threading: members are the background thread's unless their comment
// names mutex_ or sets_mutex_ (shared with user threads); "the background thread's" means whoever holds
// progress_, which is the background thread or a user thread in drive().
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <poll.h>

#include "gloo_backend/abort_signal.h"
#include "gloo_backend/communicator.h"
#include "rendezvous/http_store.h"
#include "runtime/announcer.h"
#include "runtime/autotune.h"
#include "runtime/channel.h"
#include "runtime/coordinator.h"
#include "runtime/log.h"
#include "runtime/loss_watcher.h"
#include "runtime/reporter.h"
#include "runtime/runtime.h"
#include "runtime/shm/transport.h"
#include "runtime/timeline.h"
#include "runtime/wire.h"

namespace hvd::runtime {

using gloo_backend::Communicator;
using gloo_backend::CommunicatorOptions;
using Clock = std::chrono::steady_clock;

// The store key under which rank 0 publishes its control-plane address ("host port nonce").
inline constexpr const char* kControlKey = "hvd_control/coordinator";
// How often rank 0 of an elastic job asks the rendezvous server whether the job re-formed without a member.
inline constexpr std::chrono::milliseconds kRoundCheckInterval{500};

// The error of every operation pending or submitted once the job stopped: PeerLostError when a peer process
// was lost (an elastic job re-forms on it), else ShutDownError.
std::exception_ptr stopError(const std::string& reason, bool peer_lost);

class Runtime::Impl {
 public:
  Impl(RuntimeOptions options, std::shared_ptr<rendezvous::Store> store);
  ~Impl();

  std::shared_ptr<Work> enqueue(Request request);
  std::vector<std::shared_ptr<Work>> enqueueGroup(std::vector<Request> requests);
  std::shared_ptr<Work> changeProcessSet(Request request, bool is_static);
  void shutdown();

  // A registered process set as user threads see it (guarded by sets_mutex_).
  struct SetInfo {
    std::vector<int> ranks;  // sorted global ranks
    bool is_static = false;
  };
  std::optional<SetInfo> processSet(int32_t id) const {
    std::lock_guard lock(sets_mutex_);
    auto it = set_info_.find(id);
    if (it == set_info_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<int32_t> processSetIds() const {
    std::lock_guard lock(sets_mutex_);
    std::vector<int32_t> ids;
    for (const auto& [id, info] : set_info_) ids.push_back(id);
    return ids;
  }
  bool stopped() const {
    std::lock_guard lock(mutex_);
    return stopped_;
  }

  RuntimeOptions options_;
  int device_ = -1;
  std::atomic<uint64_t> agreed_{0};   // operations agreed without the coordinator (agreement.cc)
  std::atomic<uint64_t> refused_{0};  // this rank's announcements the others did not all make
  std::atomic<uint64_t> staged_reads_{0};  // agreed broadcasts read as staged (shm_->stagedReads())

 private:
  struct Entry {
    Request request;
    std::shared_ptr<Work> work;
    Clock::time_point enqueued;
    bool static_set = false;  // kProcessSet: registered by init
  };
  // A name within its process set (names are scoped per set, as Horovod scopes them).
  using Key = std::pair<int32_t, std::string>;
  static Key keyOf(const Request& r) { return {r.process_set, r.name}; }
  static SetNameView viewOf(const Request& r) { return {r.process_set, r.name}; }

  // Checks r against this rank's view of the job; names an unnamed r. Requires mutex_ and sets_mutex_.
  void check(Request& r);
  std::shared_ptr<Work> push(Request r, bool static_set = false);  // requires mutex_

  void connectControlPlane();
  // Starts watcher_ over the control connections (runtime/loss_watcher.h); size > 1.
  void watchForLostPeers();
  // A worker whose collective the abort signal failed: the coordinator's reason, from the abort list it
  // sent before closing its connection (when it came), replaces the watcher's.
  void takeCoordinatorsReason();
  void wake();
  // After a user thread queued work (the queue's length before and after): wake() where the background thread
  // needs it. It drains the whole queue per wake-up: at most one eventfd write per burst.
  void submitted(size_t before, size_t after);
  void run();
  // Runs until shutdown; throws on a lost peer or a failed collective. Sets abort_ when the job is
  // being torn down because of a failure.
  void loop();

  // Progress: what the background thread does each time something happened (progress(): submissions to the
  // coordinator, its rounds, responses executed; false once the loop must end) runs under progress_, either
  // on the background thread or on a user thread that waits for an operation (drive(), through its Work's
  // Driver). Everything the background thread owns is guarded by progress_ so. A user thread that ends the
  // loop (a shutdown list, an exception) leaves loop_over_ or loop_error_ for the background thread, which
  // ends it there and tears down (run()); after that no one runs progress().
  class WaitDriver;
  static constexpr size_t kDrivenBytes = 64 * 1024;        // the largest operation a waiting thread drives
  void takeProgress(std::unique_lock<std::mutex>& lock);   // without sleeping on the mutex where it can
  void drainWake();                                        // reads the eventfd wake() writes
  void awaitActivity(std::unique_lock<std::mutex>& lock);  // the background thread between progress() calls
  bool progress();
  // False (and nothing done) where the caller should only poll: other operations are in flight.
  bool drive(const std::atomic<bool>& finished, std::chrono::microseconds spin);
  void endProgress();
  // Moves the submissions into table_; fresh points at their requests there (valid until they complete).
  void takeQueue(std::vector<const Request*>& fresh, bool& shutdown_requested);
  std::vector<Entry> taken_;  // takeQueue()'s, kept for its capacity
  // f(channel) for each open control channel (the coordinator's to every worker, a worker's to the
  // coordinator) until one returns true; whether one did.
  template <typename F>
  bool anyChannel(F&& f) {
    if (coordinator_channel_ && f(*coordinator_channel_)) return true;
    for (const auto& c : worker_channels_) {
      if (c && f(*c)) return true;
    }
    return false;
  }
  void addRequest(int rank, const Request& request, Clock::time_point now) {
    if (request.type != OpType::kJoin) timeline_->negotiateRank(request.name, request.type, rank);
    coordinator_->add(rank, request, now);
  }
  void addCachedRequest(int rank, uint32_t id, Clock::time_point now) {
    if (timeline_->enabled()) {
      const Request& q = coordinator_->cachedRequest(id, rank);
      timeline_->negotiateRank(q.name, q.type, rank);
    }
    coordinator_->addCached(rank, id, now);
  }
  // Timeline bracket of one response's execution on this rank (no-op unless rank 0 writes one).
  void timelineStart(const Response& s);
  void timelineEnd(const Response& s);
  void coordinatorStep();
  void broadcastToWorkers(const ResponseList& list);
  // Rank 0 with a reporter: lists the waits for it (ReportStats::publishWaits) and when to do so next.
  void publishWaits();
  // Elastic jobs, rank 0: throws PeerLostError (after telling the workers) when the driver has begun a round
  // without a member of this one.
  void checkRoundNews();
  bool execute(const ResponseList& list);  // false: leave the loop
  void execute(const Response& response);
  void executeAllreduce(const Response& s, Transport& comm);
  void executeOther(const Response& s, Transport& comm, int set_rank);
  // Every rank of the job runs on this host (the same answer on every rank, unlike cross_size).
  bool singleHost() const { return options_.local_size == options_.size; }
  // The data path of the global set: shared memory on one host, Gloo otherwise (see init).
  std::shared_ptr<Transport> globalTransport();
  // Rank 0 under autotune, once a list has executed: feeds its allreduces to the tuner as one record and
  // applies what it decides. A path change waits in pending_path_ for the next list, which carries it to
  // every rank.
  void autotune(const ResponseList& list);
  void executeProcessSet(const Response& s);
  Entry* find(int32_t set, const std::string& name);
  // This rank's join awaiting its response, if any (a rank has at most one; its name is its own, so a join's
  // response finds it by type).
  std::optional<Key> pendingJoin() const;
  void complete(int32_t set, const std::string& name, std::exception_ptr error = nullptr);
  void failAll(const std::string& reason);
  std::byte* scratch(size_t bytes);
  void log(LogLevel level, const std::string& message) const {
    logLine(options_.log_level, level, options_.rank, message);
  }

  std::shared_ptr<rendezvous::Store> store_;
  std::shared_ptr<gloo_backend::Device> gloo_device_;
  // local_ and cross_ are global_ itself where their members are the same ranks in the same order (one
  // host; one rank per host): Gloo would otherwise connect and close a second identical mesh.
  std::shared_ptr<Communicator> global_, local_, cross_;
  // The ranks of this host over shared memory (HVD_SHARED_MEMORY, more than one local rank).
  std::shared_ptr<shm::Transport> shm_;
  bool hierarchical_ = false;  // allreduce: shared memory within hosts, Gloo across (all ranks agree)
  bool hierarchical_possible_ = false;  // every host has as many ranks and shared memory (checked at init)
  bool hierarchical_allgather_ = false;  // allgather likewise (needs the ranks numbered host by host)
  std::shared_ptr<Transport> flat_global_;  // the global set's flat path (kept for autotune's switches)
  std::unique_ptr<Autotuner> autotuner_;  // rank 0 under HOROVOD_AUTOTUNE, until it is done
  uint8_t pending_path_ = ResponseList::kPathUnchanged;  // autotune's path for the next list
  std::chrono::microseconds cycle_time_{0};  // the fusion window in force: the options', then autotune's
  // Background thread only: the data path of every process set this rank is a member of (0: the job).
  std::map<int32_t, std::shared_ptr<Transport>> set_comms_;
  // Every registered set, members or not (user threads read it through processSet()).
  mutable std::mutex sets_mutex_;
  std::map<int32_t, SetInfo> set_info_;

  // Control plane.
  int wake_fd_ = -1;
  // What user threads block on (Work::wait), reported to the coordinator once unchanged for
  // kWaitReportDelay: the coordinator's deadlock check needs it, a training step's quick waits do not.
  static constexpr std::chrono::milliseconds kWaitReportDelay{100};
  static constexpr int kIdleWakeMs = 250;
  std::shared_ptr<WaitRegistry> waits_ = std::make_shared<WaitRegistry>();
  uint64_t waits_sent_version_ = 0;
  uint64_t waits_seen_version_ = 0;  // the version whose report is due at waits_due_
  Clock::time_point waits_due_{};
  std::vector<WaitRegistry::Key> waits_sent_;
  // The waits to report now (see waits_), or nullopt.
  std::optional<std::vector<WaitRegistry::Key>> dueWaitReport();
  Clock::time_point busy_until_;  // the background thread polls without sleeping until then
  std::chrono::microseconds busy_poll_{0};  // RuntimeOptions::busy_poll, resolved
  int host_cores_ = 1;                      // the CPUs this host's ranks may run on together (host_cores.h)
  // HVD_MOVE_THREADS, where it applies (runtime.cc): a thread that waits for the background thread's work
  // moves to the CPU the background thread last ran progress() on.
  bool move_threads_ = false;
  std::atomic<int> background_cpu_{-1};
  std::atomic<bool> moved_{false};  // a waiting thread moved (logged once)
  void joinBackground();
  std::unique_ptr<Channel> coordinator_channel_;           // workers
  std::vector<std::unique_ptr<Channel>> worker_channels_;  // coordinator, index = rank (0 empty)
  std::unique_ptr<Coordinator> coordinator_;               // rank 0 only
  // Fails the Gloo operations in flight when watcher_ sees a control connection close (abort_signal.h):
  // shared by every Communicator of this runtime.
  std::shared_ptr<gloo_backend::AbortSignal> abort_signal_ = std::make_shared<gloo_backend::AbortSignal>();
  std::unique_ptr<LossWatcher> watcher_;  // from init until the background loop ends
  // Elastic jobs, rank 0: the rendezvous server, asked every kRoundCheckInterval whether the driver began a
  // round without a member of this one (a host that went silent never closes its connections).
  std::shared_ptr<rendezvous::HttpStore> round_server_;
  std::optional<Clock::time_point> next_round_check_;

  std::mutex progress_;
  bool loop_over_ = false;           // guarded by progress_
  std::exception_ptr loop_error_;    // guarded by progress_
  bool drove_ = false;               // guarded by progress_: a user thread ran progress() (logged once)
  // Guarded by progress_: a user thread runs progress() now. It leaves the periodic duties (the wait report,
  // stall checks, the waits' list, the round checks) to the background thread, which looks every busy-poll
  // period meanwhile: a driver polls for one reply and should not read the clock for them on every look.
  bool driving_ = false;
  // Where the background thread is: awake (progress(), or polling without sleeping), parked (user threads
  // drive: it looks again every busy-poll period without being woken), or asleep in poll() until woken.
  enum BackgroundState : int { kAwake, kParked, kAsleep };
  std::atomic<int> background_{kAwake};
  std::atomic<int> drivers_{0};       // user threads in drive(): the background thread parks
  std::atomic<bool> queued_{false};   // queue_ is not empty (written under mutex_): what a polling thread reads
  std::vector<pollfd> poll_fds_;               // awaitActivity's
  std::vector<std::vector<char>> messages_;    // progress()'s
  std::vector<const Request*> fresh_;          // progress()'s
  std::shared_ptr<WaitDriver> driver_;         // HVD_WAIT_DRIVES and busy polling: small operations' Driver
  std::shared_ptr<WaitDriver> joiner_;         // move_threads_: the Driver of the others

  // Submission queue: user threads -> background thread.
  mutable std::mutex mutex_;
  std::vector<Entry> queue_;
  std::unordered_set<Key, SetNameHash, SetNameEqual> names_in_flight_;
  // The node of the last name that completed, reused by the next submission (push()): a steady state of one
  // operation after another allocates no node and, for a name of the same length or shorter, no string.
  decltype(names_in_flight_)::node_type spare_name_;
  std::atomic<size_t> in_flight_{0};  // names_in_flight_.size() (written under mutex_), read without the lock
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  std::string stop_reason_;
  bool stopped_peer_lost_ = false;  // the stop was caused by a lost peer (peer_lost_, for user threads)
  // Unnamed operations are counted per process set and operation type, so a rank that is not a member of
  // a set (and so does not submit its operations) still names its other operations like every other rank.
  std::map<std::pair<int32_t, OpType>, uint64_t> unnamed_;
  uint64_t set_changes_ = 0;  // names of process-set registrations, counted alike on every rank

  // Background thread only.
  std::unordered_map<Key, Entry, SetNameHash, SetNameEqual> table_;
  // As spare_name_, for table_: complete() keeps the node, place() reuses it.
  decltype(table_)::node_type spare_entry_;
  // Puts a submission into table_ (through spare_entry_ where there is one); the entry of its name.
  Entry& place(Entry&& e);
  std::vector<std::byte> scratch_;  // fusion buffer, grown on demand and reused
  // Results of allgather, alltoall and reducescatter; up to 256 MiB of released ones stay mapped.
  std::shared_ptr<BufferPool> result_pool_ = std::make_shared<BufferPool>(size_t{256} << 20);
  std::unique_ptr<Timeline> timeline_;  // writes only on rank 0 with HOROVOD_TIMELINE
  bool timeline_on_ = false;            // timeline_->enabled(), fixed at init: user threads read it too
  bool shutdown_sent_ = false;
  std::optional<Clock::time_point> hold_;  // coordinator: fusion window (Coordinator::holdUntil)
  // Workers: name -> (cache id, the descriptor this rank submitted when the id was given).
  std::unordered_map<Key, std::pair<uint32_t, Request>, SetNameHash, SetNameEqual> response_cache_;

  // Negotiation-free cached operations (agreement.cc). A rank whose only pending operation is a response
  // cache hit announces its cache id in the shared-memory segment instead of asking the coordinator; when
  // every rank announced the same id, all of them execute the response that rank 0 sent the last time that
  // name ran alone. Any other outcome (another id, a rank busy at the coordinator or idle past the grace,
  // answered for) sends the operation to the coordinator as before.
  // This rank's open announcement (the round and the value are announcer_'s).
  // The record of the name's last lone run (alone_'s element: its address outlives rehashing, and no record
  // is ever erased), with the name as its key.
  using AloneRecord = std::pair<const Key, std::pair<Response, Request>>;
  struct Announcement {
    const AloneRecord* alone;
    // At the first clock read, the 16th look (settleAnnouncement): the grace counts from a fraction of a
    // microsecond after the announcement, and an announcement that settles before then reads no clock.
    std::optional<Clock::time_point> started;
    unsigned looks = 0;  // settleAnnouncement's
  };
  // Whether this rank announces (decided at init from its options, which are normally every rank's; a rank
  // that does not is answered for, after the grace, by those that do).
  bool agreement_ = false;
  bool agreed_execution_ = false;  // execute() runs an agreed response
  // Operations come in batches: several were in flight at once between the last two moments this rank had
  // none. The first of the next batch is then sent to the coordinator, where the rest join it in one fused
  // response, rather than announced and run alone.
  bool batched_ = false;
  size_t in_flight_peak_ = 0;  // the most operations in flight since this rank last had none
  Announcer announcer_;             // this rank's rounds of announcements (runtime/announcer.h)
  std::optional<Announcement> announcing_;
  bool busy_shown_ = false;             // what this rank's busy word says
  std::chrono::microseconds grace_{0};  // how long an announcer waits for an idle rank
  // The last response that ran a cached name alone, with this rank's descriptor then.
  std::unordered_map<Key, std::pair<Response, Request>, SetNameHash, SetNameEqual> alone_;
  // Called by progress(): settles this rank's open announcement. kRefused puts its operation first in fresh,
  // for the coordinator.
  enum class Settled { kOpen, kAgreed, kRefused };
  Settled settleAnnouncement(std::vector<const Request*>& fresh);
  // After takeQueue(): announces fresh's lone operation where it can and may (then clears fresh), answers for
  // this rank when it has business at the coordinator, and keeps the busy word.
  void announceOrAnswer(std::vector<const Request*>& fresh, bool shutdown_requested, bool may_announce);
  // Before announcing q, whose last lone run was s: the root of a broadcast stages its message in the segment.
  void stageBroadcast(const Response& s, const Request& q);
  void showBusy(bool busy);
  bool onlyGlobalSet() const;             // no process set but the job's is registered
  void rememberAlone(const Response& s);  // execute(): a response that ran one cached name
  bool abort_ = false;
  bool peer_lost_ = false;    // the job is torn down because a peer process was lost
  bool abort_sent_ = false;   // coordinator: the workers were told to abort
  std::string reason_;

  std::thread thread_;

  // Reports to the rendezvous server (runtime/reporter.h); null when this rank sends none.
  std::shared_ptr<ReportStats> report_stats_;  // written by the background thread
  std::unique_ptr<Reporter> reporter_;
  std::optional<Clock::time_point> next_waits_;  // rank 0 with a reporter: when to list the waits next
  bool waits_shown_ = false;                     // the list published last is not empty
};

// The Driver (work.h) of a runtime's Works: a waiting user thread runs Runtime::Impl::drive() (`drives`:
// small operations, HVD_WAIT_DRIVES), or only joins the background thread's CPU (joinBackground()). Detached
// before the runtime goes; a wait afterwards only polls.
class Runtime::Impl::WaitDriver final : public Driver {
 public:
  WaitDriver(Runtime::Impl* impl, bool drives) : impl_(impl), drives_(drives) {}
  bool drive(const std::atomic<bool>& finished, std::chrono::microseconds spin) override;
  void detach() {
    std::lock_guard lock(mutex_);
    impl_ = nullptr;
  }

 private:
  std::mutex mutex_;  // held while a thread drives; one at a time, the others poll
  Runtime::Impl* impl_;
  const bool drives_;
};

}  // namespace hvd::runtime
