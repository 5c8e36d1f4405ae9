#include "runtime/runtime.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <poll.h>
#include <sched.h>
#include <random>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

#include "gloo_backend/abort_signal.h"
#include "gloo_backend/communicator.h"
#include "rendezvous/http_store.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/round.h"
#include "runtime/autotune.h"
#include "runtime/channel.h"
#include "runtime/coordinator.h"
#include "runtime/elastic.h"
#include "runtime/gloo_transport.h"
#include "runtime/gpu.h"
#include "runtime/hierarchical.h"
#include "runtime/log.h"
#include "runtime/loss_watcher.h"
#include "runtime/reporter.h"
#include "runtime/shm/transport.h"
#include "runtime/timeline.h"
#include "runtime/wire.h"

namespace hvd::runtime {

using gloo_backend::Communicator;
using gloo_backend::CommunicatorOptions;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kControlKey = "hvd_control/coordinator";

// Why everything pending fails when the job stops.
std::string shutDownMessage(const std::string& reason) {
  if (reason.empty()) return "libhvd has been shut down (hvd_shutdown() on one of the ranks)";
  return "libhvd has been shut down: " + reason;
}

// The error of every operation pending or submitted once the job stopped: PeerLostError when a peer process
// was lost (an elastic job re-forms on it), else ShutDownError.
// How often rank 0 of an elastic job asks the rendezvous server whether the job re-formed without a member.
constexpr std::chrono::milliseconds kRoundCheckInterval{500};

std::exception_ptr stopError(const std::string& reason, bool peer_lost) {
  if (peer_lost) return std::make_exception_ptr(PeerLostError("libhvd stopped, the job lost a peer: " + reason));
  return std::make_exception_ptr(ShutDownError(shutDownMessage(reason)));
}

}  // namespace

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
  void run();
  // Runs until shutdown; throws on a lost peer or a failed collective. Sets abort_ when the job is
  // being torn down because of a failure.
  void loop();
  void takeQueue(std::vector<Request>& fresh, bool& shutdown_requested);
  void addRequest(int rank, const Request& request, Clock::time_point now) {
    if (request.type != OpType::kJoin) timeline_->negotiateRank(request.name, request.type, rank);
    coordinator_->add(rank, request, now);
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
  std::vector<WaitRegistry::Key> waits_sent_;
  // The waits to report now (see waits_), or nullopt.
  std::optional<std::vector<WaitRegistry::Key>> dueWaitReport();
  Clock::time_point busy_until_;  // the background thread polls without sleeping until then
  std::chrono::microseconds busy_poll_{0};  // RuntimeOptions::busy_poll, resolved
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

  // Submission queue: user threads -> background thread.
  mutable std::mutex mutex_;
  std::deque<Entry> queue_;
  std::set<Key> names_in_flight_;
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  std::string stop_reason_;
  bool stopped_peer_lost_ = false;  // the stop was caused by a lost peer (peer_lost_, for user threads)
  // Unnamed operations are counted per process set and operation type, so a rank that is not a member of
  // a set (and so does not submit its operations) still names its other operations like every other rank.
  std::map<std::pair<int32_t, OpType>, uint64_t> unnamed_;
  uint64_t set_changes_ = 0;  // names of process-set registrations, counted alike on every rank

  // Background thread only.
  std::map<Key, Entry> table_;
  std::vector<std::byte> scratch_;  // fusion buffer, grown on demand and reused
  // Results of allgather, alltoall and reducescatter; up to 256 MiB of released ones stay mapped.
  std::shared_ptr<BufferPool> result_pool_ = std::make_shared<BufferPool>(size_t{256} << 20);
  std::unique_ptr<Timeline> timeline_;  // writes only on rank 0 with HOROVOD_TIMELINE
  bool shutdown_sent_ = false;
  std::optional<Clock::time_point> hold_;  // coordinator: fusion window (Coordinator::holdUntil)
  // Workers: name -> (cache id, the descriptor this rank submitted when the id was given).
  std::map<Key, std::pair<uint32_t, Request>> response_cache_;
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

namespace {

// Gloo writes to its sockets with writev(), which raises SIGPIPE when the peer is gone, and SIGPIPE's
// default action ends the process: a C or C++ worker would die with a peer instead of failing its
// operations with HVD_ERR_PEER_LOST. (Python ignores SIGPIPE already.) Rather than change the disposition
// for the whole process, init blocks SIGPIPE in its own thread while it runs: the threads that write to
// the sockets (Gloo's device loop, the background thread) start inside and inherit the blocked mask, so
// their writes fail with EPIPE. A SIGPIPE that init's own writes raised is taken off before the caller's
// mask comes back.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe, &previous_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      while (::sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t previous_;
  bool was_pending_ = false;
};

}  // namespace

Runtime::Impl::Impl(RuntimeOptions options, std::shared_ptr<rendezvous::Store> store)
    : options_(std::move(options)), store_(std::move(store)) {
  const SigpipeBlocked sigpipe_blocked;
  const auto started = Clock::now();
  auto phase = [&, last = started](const char* what) mutable {
    const auto now = Clock::now();
    log(LogLevel::kDebug, detail::concat("init: ", what, " took ",
                                         std::chrono::duration_cast<std::chrono::microseconds>(now - last).count(),
                                         " us"));
    last = now;
  };
  // Workers started by srun or an MPI launcher learn their local and cross numbers from every rank's host
  // name first: the GPU, the data paths and the contexts below depend on them.
  options_.numberByHost(*store_);
  options_.validate();
  cycle_time_ = options_.cycle_time;
  busy_poll_ = options_.busy_poll.value_or(options_.local_size > shm::onlineCores() ? std::chrono::microseconds(0)
                                                                                    : RuntimeOptions::kDefaultBusyPoll);
  // An elastic process keeps the device of its slot when a round renumbers its host's ranks.
  const auto pin = pinGpu(options_.elastic ? options_.slot_local_rank : options_.local_rank, options_.gpu_pinning);
  device_ = pin.device;
  log(LogLevel::kDebug, pin.detail);

  gloo_backend::DeviceOptions dev;
  dev.iface = options_.iface;
  if (dev.iface.empty()) dev.hostname = localAddress("", singleHost(), options_.rendezvous_addr.value_or(""));
  gloo_device_ = gloo_backend::Device::create(dev);
  // Horovod's order (every rank must use it: each rendezvous blocks): global, local, cross.
  auto connect = [&](std::string scope, int rank, int size) {
    CommunicatorOptions o;
    o.scope = std::move(scope);
    o.rank = rank;
    o.size = size;
    o.timeout = options_.gloo_timeout;
    o.rendezvous_timeout = options_.rendezvousTimeout();
    o.abort = abort_signal_;
    log(LogLevel::kDebug, detail::concat(o.scope, " rendezvous started for rank=", rank, ", size=", size));
    return std::shared_ptr<Communicator>(Communicator::connect(store_, gloo_device_, o));
  };
  try {
    phase("GPU pinning and the Gloo device");
    global_ = connect("global", options_.rank, options_.size);
    phase("global rendezvous");
    local_ = options_.local_size == options_.size
                 ? global_
                 : connect("local_" + options_.hostname, options_.local_rank, options_.local_size);
    phase("local rendezvous");
    cross_ = options_.cross_size == options_.size
                 ? global_
                 : connect("cross_" + std::to_string(options_.local_rank), options_.cross_rank, options_.cross_size);
    phase("cross rendezvous");
    if (options_.shared_memory && options_.local_size > 1) {
      shm::Options o;
      o.scope = "shm_" + options_.hostname;
      o.rank = options_.local_rank;
      o.size = options_.local_size;
      o.timeout = options_.gloo_timeout;
      o.rendezvous_timeout = options_.rendezvousTimeout();
      o.job_rank = options_.rank;
      log(LogLevel::kDebug, detail::concat(o.scope, " shared-memory segment for local rank ", o.rank, " of ", o.size));
      shm_ = shm::Transport::connect(store_, o);
      phase("shared memory");
    }
    const bool tune_path = options_.autotune && options_.autotune_options.tune_hierarchical;
    const bool want_hierarchical = options_.hierarchical_allreduce.value_or(true);
    // singleHost() holds on every rank or on none, so the ranks of a one-host job skip the check together.
    // (cross_size may differ between ranks: with 2 ranks on one host and 1 on another, local rank 1 has a
    // cross size of 1.)
    if ((want_hierarchical || options_.hierarchical_allgather || tune_path) && !singleHost()) {
      // Every rank must take the same path: hierarchical only where every host has as many ranks as this
      // one and shared memory works on all of them; the allgather also needs the ranks numbered host by
      // host (a MIN over the job, once).
      const bool even = shm_ && options_.local_size * options_.cross_size == options_.size;
      int32_t ok[2] = {even, even && options_.rank == options_.cross_rank * options_.local_size + options_.local_rank};
      global_->allreduce(ok, 2, DataType::kInt32, ReduceOp::kMin);
      hierarchical_possible_ = ok[0] == 1;
      hierarchical_ = hierarchical_possible_ && want_hierarchical;
      hierarchical_allgather_ = ok[1] == 1 && options_.hierarchical_allgather;
      if (!hierarchical_ && options_.hierarchical_allreduce == true && options_.rank == 0) {
        log(LogLevel::kWarning, "HOROVOD_HIERARCHICAL_ALLREDUCE=1 ignored: it needs several hosts with the same "
                                "number of ranks each, and shared memory on (HVD_SHARED_MEMORY)");
      }
      if (!hierarchical_allgather_ && options_.hierarchical_allgather && options_.rank == 0) {
        log(LogLevel::kWarning, "HOROVOD_HIERARCHICAL_ALLGATHER=1 ignored: it needs several hosts with the same "
                                "number of ranks each, ranks numbered host by host, and shared memory on "
                                "(HVD_SHARED_MEMORY)");
      }
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    HVD_CHECK(wake_fd_ >= 0, NetworkError, "eventfd failed: ", errnoText(errno));
    connectControlPlane();
    watchForLostPeers();
    phase("control plane");
  } catch (...) {
    watcher_.reset();
    // Init failed part-way (a peer never came, a timeout): close without the orderly barrier, which
    // would only wait for the same missing peers once more.
    for (const auto& c : {global_, local_, cross_}) {
      if (c) c->close(false);
    }
    if (shm_) shm_->close(false);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    wake_fd_ = -1;
    throw;
  }
  {
    SetInfo global;
    global.ranks.resize(static_cast<size_t>(options_.size));
    for (int r = 0; r < options_.size; ++r) global.ranks[r] = r;
    global.is_static = true;
    set_info_[0] = std::move(global);
    set_comms_[0] = globalTransport();
    log(options_.rank == 0 ? LogLevel::kInfo : LogLevel::kDebug,
        detail::concat("data path of the job: ", set_comms_[0]->path(), " (allreduce ",
                       set_comms_[0]->pathOf("ALLREDUCE"), ", allgather ", set_comms_[0]->pathOf("ALLGATHER"), "; ",
                       options_.size, " ranks, ", options_.local_size, " on this host)"));
  }
  if (options_.rank == 0) {
    CoordinatorOptions c;
    c.size = options_.size;
    c.fusion_threshold = options_.fusion_threshold;
    c.cache_capacity = options_.cache_capacity;
    c.stall_check = options_.stall_check;
    c.stall_warning_time = options_.stall_warning_time;
    c.stall_shutdown_time = options_.stall_shutdown_time;
    coordinator_ = std::make_unique<Coordinator>(c);
    if (options_.elastic && options_.size > 1 && options_.rendezvous_addr) {
      round_server_ = Runtime::server(options_);
      next_round_check_ = Clock::now() + kRoundCheckInterval;
    }
    if (options_.autotune && options_.size > 1) {
      AutotuneOptions a = options_.autotune_options;
      a.tune_hierarchical = a.tune_hierarchical && hierarchical_possible_;
      autotuner_ = std::make_unique<Autotuner>(a, TunableParams{options_.fusion_threshold, options_.cycle_time,
                                                                hierarchical_});
      if (a.log_path && !autotuner_->logOpen()) {
        log(LogLevel::kError, detail::concat("cannot write the autotune log ", *a.log_path, ": ", errnoText(errno)));
      }
    }
  }
  timeline_ = std::make_unique<Timeline>(options_.rank == 0 ? options_.timeline_path : std::nullopt,
                                         options_.timeline_mark_cycles);
  if (options_.rank == 0 && options_.timeline_path && !timeline_->enabled()) {
    log(LogLevel::kError, detail::concat("Error opening the timeline file ", *options_.timeline_path, ": ",
                                         errnoText(errno), "; no timeline will be written"));
  }
  // The reporter's thread starts here too, inside SigpipeBlocked: its writes must not kill the process.
  std::shared_ptr<rendezvous::HttpStore> report_server;
  if (options_.report_interval.count() > 0) {
    report_server = options_.rendezvous_addr ? Runtime::server(options_)
                                             : std::dynamic_pointer_cast<rendezvous::HttpStore>(store_);
  }
  if (report_server) {
    report_stats_ = std::make_shared<ReportStats>();
    if (coordinator_) next_waits_ = Clock::now() + ReportStats::kWaitsInterval;
  }
  thread_ = std::thread([this] { run(); });
  if (report_server) {
    try {
      reporter_ = std::make_unique<Reporter>(options_, report_server, report_stats_, started);
    } catch (const std::exception& e) {  // no thread to be had: the job runs without reports
      log(LogLevel::kWarning, detail::concat("status reports to ", report_server->describe(), " are off: ", e.what()));
    }
  }
}

void Runtime::Impl::connectControlPlane() {
  if (options_.size == 1) return;
  const std::string address = localAddress(options_.iface, singleHost(), options_.rendezvous_addr.value_or(""));
  if (options_.rank == 0) {
    uint16_t port = 0;
    const int listen_fd = listenTcp(address, port);
    const uint64_t nonce = std::random_device{}() * (uint64_t{1} << 32) ^ std::random_device{}();
    const std::string value = detail::concat(address, " ", port, " ", nonce);
    store_->set(kControlKey, rendezvous::Bytes(value.begin(), value.end()));
    worker_channels_.resize(options_.size);
    try {
      const auto deadline = Clock::now() + options_.gloo_timeout;
      for (int joined = 1; joined < options_.size; ++joined) {
        std::string peer;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        auto channel = std::make_unique<Channel>(acceptTcp(listen_fd, left, peer), peer);
        const Hello hello = decodeHello(channel->receiveOne(options_.gloo_timeout));
        HVD_CHECK(hello.magic == Hello::kMagic && hello.nonce == nonce, NetworkError,
                  "control connection from ", peer, " is not from this job's libhvd (bad hello)");
        HVD_CHECK(hello.rank > 0 && hello.rank < options_.size && !worker_channels_[hello.rank], NetworkError,
                  "control connection from ", peer, " claims rank ", hello.rank, " (invalid or duplicate)");
        worker_channels_[hello.rank] = std::move(channel);
      }
    } catch (...) {
      ::close(listen_fd);
      throw;
    }
    ::close(listen_fd);
    store_->deleteKey(kControlKey);  // every rank has read it; a later init publishes a fresh one
    return;
  }
  const auto raw = store_->get(kControlKey, options_.rendezvousTimeout());
  std::istringstream in(std::string(raw.begin(), raw.end()));
  std::string host;
  uint16_t port = 0;
  uint64_t nonce = 0;
  in >> host >> port >> nonce;
  HVD_CHECK(!in.fail(), StoreError, "malformed control-plane address '", std::string(raw.begin(), raw.end()),
            "' in ", store_->describe(), " key ", kControlKey);
  coordinator_channel_ = std::make_unique<Channel>(connectTcp(host, port, options_.gloo_timeout),
                                                   detail::concat("rank 0 at ", host, ":", port));
  Hello hello;
  hello.nonce = nonce;
  hello.rank = options_.rank;
  coordinator_channel_->send(encode(hello));
}

void Runtime::Impl::watchForLostPeers() {
  std::vector<std::pair<int, std::string>> fds;
  if (coordinator_channel_) fds.emplace_back(coordinator_channel_->fd(), "the coordinator (rank 0)");
  for (size_t r = 1; r < worker_channels_.size(); ++r) {
    if (worker_channels_[r]) fds.emplace_back(worker_channels_[r]->fd(), detail::concat("rank ", r));
  }
  if (fds.empty()) return;
  const bool worker = coordinator_channel_ != nullptr;
  watcher_ = std::make_unique<LossWatcher>(std::move(fds), [signal = abort_signal_, worker](const std::string& what) {
    // A worker: the coordinator stopped the job (it tells why in its abort list, read afterwards) or is gone.
    // The coordinator: a worker's process died or its host went away.
    const std::string why =
        worker ? detail::concat(what, " closed its control connection: the job is stopping (a peer was lost, or "
                                      "the coordinator failed)")
               : detail::concat(what, " closed its control connection to the coordinator: its process died or its "
                                      "host went away");
    signal->abort(std::make_exception_ptr(PeerLostError(why)));
  });
}

void Runtime::Impl::takeCoordinatorsReason() {
  if (!coordinator_channel_ || !abort_signal_->error()) return;
  std::vector<std::vector<char>> messages;
  coordinator_channel_->receive(messages);  // non-blocking: whatever came before the connection closed
  for (const auto& m : messages) {
    try {
      const ResponseList list = decodeResponseList(m);
      if (!list.abort) continue;
      reason_ = list.shutdown_reason;
      peer_lost_ = list.peer_lost;
      return;
    } catch (const std::exception&) {
      return;  // a cut-off message: keep the watcher's reason
    }
  }
}

Runtime::Impl::~Impl() {
  shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Runtime::Impl::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] auto rv = ::write(wake_fd_, &one, sizeof one);
}

void Runtime::Impl::check(Request& r) {
  using gloo_backend::isValid;
  HVD_CHECK(isValid(r.dtype), UsageError, "invalid data type ", static_cast<int>(r.dtype));
  HVD_CHECK(r.rows >= 0 && r.row_elements >= 0, UsageError, "negative shape ", r.rows, "x", r.row_elements,
            " for '", r.name, "'");
  auto set = set_info_.find(r.process_set);
  HVD_CHECK(set != set_info_.end(), UsageError, "process set ", r.process_set, " is not registered (",
            r.name.empty() ? std::string(runtime::name(r.type)) : "'" + r.name + "'", ")");
  const std::vector<int>& ranks = set->second.ranks;
  const int set_size = static_cast<int>(ranks.size());
  HVD_CHECK(std::binary_search(ranks.begin(), ranks.end(), options_.rank), UsageError, "rank ", options_.rank,
            " is not a member of the provided process set ", r.process_set, " (ranks ", formatRanks(ranks), ")");
  switch (r.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      HVD_CHECK(isValid(r.op), UsageError, "invalid reduce operation ", static_cast<int>(r.op), " for '", r.name,
                "'");
      HVD_CHECK(r.type == OpType::kAllreduce || r.op == ReduceOp::kSum || r.op == ReduceOp::kAverage, UsageError,
                "reducescatter supports sum and average only, got ", gloo_backend::name(r.op), " for '", r.name,
                "'");
      HVD_CHECK(r.dtype != DataType::kBool || (r.prescale == 1.0 && r.postscale == 1.0 && r.op != ReduceOp::kAverage),
                UsageError, "bool tensor '", r.name, "' cannot be averaged or scaled");
      HVD_CHECK(r.elements() == 0 || (r.input && r.output) || r.type == OpType::kReducescatter, UsageError,
                "null buffer for '", r.name, "'");
      break;
    case OpType::kBroadcast:
      HVD_CHECK(r.root >= 0 && r.root < options_.size, UsageError, "broadcast received invalid root rank ", r.root,
                " for '", r.name, "' (size ", options_.size, ")");
      HVD_CHECK(std::binary_search(ranks.begin(), ranks.end(), r.root), UsageError, "broadcast root rank ", r.root,
                " of '", r.name, "' is not a member of process set ", r.process_set, " (ranks ", formatRanks(ranks),
                ")");
      break;
    case OpType::kAlltoall:
      if (!r.splits.empty()) {
        HVD_CHECK(static_cast<int>(r.splits.size()) == set_size, UsageError, "Number of entries in splits (",
                  r.splits.size(), ") does not equal number of workers (", set_size, ") for '", r.name, "'");
        int64_t sum = 0;
        for (auto s : r.splits) {
          HVD_CHECK(s >= 0, UsageError, "negative split ", s, " for '", r.name, "'");
          sum += s;
        }
        HVD_CHECK(sum <= r.rows, UsageError, "Sum of splits entries (", sum,
                  ") is greater than the first dimension of tensor '", r.name, "' (", r.rows, ")");
      } else {
        HVD_CHECK(r.rows % set_size == 0, UsageError, "splits not provided, but first dimension of tensor '", r.name,
                  "' (", r.rows, ") is not an even multiple of the number of workers (", set_size, ")");
      }
      break;
    case OpType::kJoin:
      HVD_CHECK(r.process_set == 0, UsageError, "join runs on the global process set only (got process set ",
                r.process_set, ")");
      break;
    default:
      break;
  }
  if (r.name.empty()) r.name = detail::concat(runtime::name(r.type), ".noname.", unnamed_[{r.process_set, r.type}]++);
}

std::shared_ptr<Work> Runtime::Impl::push(Request r, bool static_set) {
  HVD_CHECK(!names_in_flight_.count(keyOf(r)), UsageError, "Requested to ", runtime::name(r.type),
            " a tensor with the same name as another tensor that is currently being processed: '", r.name,
            "'. If you want to request another tensor, use a different tensor name.");
  names_in_flight_.insert(keyOf(r));
  auto work = std::make_shared<Work>(r.name, busy_poll_ / 2);
  work->watch(waits_, r.process_set);
  queue_.push_back({std::move(r), work, Clock::now(), static_set});
  return work;
}

std::shared_ptr<Work> Runtime::Impl::enqueue(Request r) {
  HVD_CHECK(r.type != OpType::kProcessSet, UsageError, "process sets are added with addProcessSet()");
  std::shared_ptr<Work> work;
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || shutdown_requested_) std::rethrow_exception(stopError(stop_reason_, stopped_peer_lost_));
    {
      std::lock_guard sets(sets_mutex_);
      check(r);
    }
    was_empty = queue_.empty();
    work = push(std::move(r));
  }
  // The background thread drains the whole queue per wake-up: one eventfd write per burst, not per op.
  if (was_empty) wake();
  return work;
}

std::vector<std::shared_ptr<Work>> Runtime::Impl::enqueueGroup(std::vector<Request> requests) {
  HVD_CHECK(!requests.empty(), UsageError, "a group needs at least one operation");
  std::vector<std::shared_ptr<Work>> works;
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || shutdown_requested_) std::rethrow_exception(stopError(stop_reason_, stopped_peer_lost_));
    {
      std::lock_guard sets(sets_mutex_);
      for (auto& r : requests) {
        HVD_CHECK(r.type == requests[0].type && r.process_set == requests[0].process_set, UsageError,
                  "a group's operations must all be ", runtime::name(requests[0].type), " on process set ",
                  requests[0].process_set, "; '", r.name, "' is ", runtime::name(r.type), " on process set ",
                  r.process_set);
        HVD_CHECK(r.type != OpType::kJoin && r.type != OpType::kProcessSet && r.type != OpType::kBarrier,
                  UsageError, runtime::name(r.type), " cannot be grouped");
        check(r);
      }
    }
    std::set<Key> names;
    for (const auto& r : requests) {
      HVD_CHECK(names.insert(keyOf(r)).second && !names_in_flight_.count(keyOf(r)), UsageError,
                "Requested to ", runtime::name(r.type),
                " a tensor with the same name as another tensor that is currently being processed: '", r.name,
                "'. If you want to request another tensor, use a different tensor name.");
    }
    const std::string group = requests[0].name;
    was_empty = queue_.empty();
    for (auto& r : requests) {
      r.group = group;
      r.group_size = static_cast<int32_t>(requests.size());
      works.push_back(push(std::move(r)));
    }
  }
  if (was_empty) wake();
  return works;
}

std::shared_ptr<Work> Runtime::Impl::changeProcessSet(Request r, bool is_static) {
  r.type = OpType::kProcessSet;
  std::shared_ptr<Work> work;
  bool was_empty = false;
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || shutdown_requested_) std::rethrow_exception(stopError(stop_reason_, stopped_peer_lost_));
    HVD_CHECK(is_static || options_.dynamic_process_sets, UsageError,
              "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to add or remove process sets after initialization (",
              r.members.empty() ? detail::concat("removing process set ", r.process_set)
                                : std::string("adding a process set"),
              ")");
    if (r.members.empty()) {
      std::lock_guard sets(sets_mutex_);
      auto it = set_info_.find(r.process_set);
      HVD_CHECK(it != set_info_.end(), UsageError, "cannot remove process set ", r.process_set,
                ": no such process set");
      HVD_CHECK(!it->second.is_static, UsageError, "cannot remove process set ", r.process_set,
                r.process_set == 0 ? ": it is the global process set" : ": it was registered at init");
    } else {
      std::sort(r.members.begin(), r.members.end());
      for (size_t i = 0; i < r.members.size(); ++i) {
        HVD_CHECK(r.members[i] >= 0 && r.members[i] < options_.size, UsageError, "process set rank ", r.members[i],
                  " is out of range for a job of size ", options_.size);
        HVD_CHECK(i == 0 || r.members[i] != r.members[i - 1], UsageError, "rank ", r.members[i],
                  " appears twice in the process set");
      }
    }
    // Registration is negotiated on the global set; the name counts registrations, alike on every rank.
    r.name = detail::concat("process_set.", set_changes_++);
    const int32_t target = r.process_set;
    r.process_set = 0;
    if (r.members.empty()) r.root = target;
    was_empty = queue_.empty();
    work = push(std::move(r), is_static);
  }
  if (was_empty) wake();
  return work;
}

void Runtime::Impl::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
  }
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
  // After the background thread: the last report carries the final counts.
  if (reporter_) reporter_->finish();
}

void Runtime::Impl::run() {
  try {
    loop();
  } catch (const std::exception& e) {
    // Stopped first: it must not run once the teardown below closes the connections it watches.
    watcher_.reset();
    reason_ = e.what();
    abort_ = true;
    peer_lost_ = dynamic_cast<const PeerLostError*>(&e) != nullptr;
    if (peer_lost_) takeCoordinatorsReason();
    log(LogLevel::kError, detail::concat("background loop stopped: ", reason_));
    if (coordinator_ && !abort_sent_) {
      // The workers learn why at once (they may be idle, waiting for the next list), and whether it was a
      // lost peer, rather than only that the coordinator's connection closed.
      ResponseList abort;
      abort.shutdown = true;
      abort.abort = true;
      abort.peer_lost = peer_lost_;
      abort.shutdown_reason = detail::concat("rank 0 stopped: ", reason_);
      broadcastToWorkers(abort);
    }
  }
  // After a normal end of the loop, before the orderly close: a peer leaving its last barrier first closes
  // its connections, and that is no loss.
  watcher_.reset();
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    stop_reason_ = reason_;
    stopped_peer_lost_ = peer_lost_;
  }
  failAll(reason_);
  if (waits_shown_) report_stats_->publishWaits({}, Clock::now());  // nothing waits once stopped
  // Orderly close in the rendezvous order, the same on every rank (see Communicator::close()); close()
  // is idempotent, so an aliased context closes once.
  if (shm_ && peer_lost_) shm_->leavingAfterLostPeer();
  if (shm_) shm_->close(!abort_);
  global_->close(!abort_);
  local_->close(!abort_);
  cross_->close(!abort_);
  // Process sets in id order, the same on every member.
  for (auto& [id, comm] : set_comms_) comm->close(!abort_);
  coordinator_channel_.reset();
  worker_channels_.clear();
  timeline_.reset();  // closes the JSON array
}

void Runtime::Impl::takeQueue(std::vector<Request>& fresh, bool& shutdown_requested) {
  std::deque<Entry> taken;
  {
    std::lock_guard lock(mutex_);
    taken.swap(queue_);
    shutdown_requested = shutdown_requested_;
  }
  const auto now = Clock::now();
  for (auto& e : taken) {
    timeline_->queued(e.request.name, e.enqueued, now);
    fresh.push_back(e.request);
    table_.emplace(keyOf(e.request), std::move(e));
  }
}

void Runtime::Impl::loop() {
  std::vector<pollfd> fds;
  std::vector<std::vector<char>> messages;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    if (coordinator_channel_) fds.push_back({coordinator_channel_->fd(), POLLIN, 0});
    for (const auto& c : worker_channels_) {
      if (c) fds.push_back({c->fd(), POLLIN, 0});
    }
    bool buffered = coordinator_channel_ && coordinator_channel_->hasBuffered();
    for (const auto& c : worker_channels_) buffered = buffered || (c && c->hasBuffered());
    std::optional<Clock::time_point> wake_at;  // coordinator: the next stall check or the fusion window's end
    if (coordinator_ && !buffered) {
      wake_at = coordinator_->nextStallCheck();
      if (hold_ && (!wake_at || *hold_ < *wake_at)) wake_at = hold_;
      if (next_round_check_ && (!wake_at || *next_round_check_ < *wake_at)) wake_at = next_round_check_;
      // The waits' list follows names that wait (and is emptied once they are gone); an idle job sleeps.
      if (next_waits_ && (waits_shown_ || !coordinator_->idle()) && (!wake_at || *next_waits_ < *wake_at)) {
        wake_at = next_waits_;
      }
    }
    if (waits_->version() != waits_sent_version_) {
      const auto due = waits_->changedAt() + kWaitReportDelay;
      if (!wake_at || due < *wake_at) wake_at = due;
    }
    int rv = 0;
    if (!buffered && Clock::now() < busy_until_) {
      // Busy-poll window after activity (see RuntimeOptions::busy_poll): the next request or response
      // usually comes within microseconds, and a sleeping thread takes tens of them to wake. The spin
      // ends early where the coordinator has something due.
      const auto spin_end = wake_at ? std::min(busy_until_, *wake_at) : busy_until_;
      while (rv == 0 && Clock::now() < spin_end) {
        rv = ::poll(fds.data(), fds.size(), 0);
        if (rv == 0) ::sched_yield();
      }
    }
    if (rv == 0) {
      int timeout_ms = -1;
      if (buffered) {
        timeout_ms = 0;
      } else if (wake_at) {
        // Round up: waking a little late only delays by less than a millisecond.
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(*wake_at - Clock::now()).count();
        timeout_ms = static_cast<int>(std::max<int64_t>(0, (left + 999) / 1000));
      }
      // Never asleep for long: a user thread that began to block meanwhile (waits_) is reported within
      // kWaitReportDelay plus this.
      if (timeout_ms < 0 || timeout_ms > kIdleWakeMs) timeout_ms = kIdleWakeMs;
      rv = ::poll(fds.data(), fds.size(), timeout_ms);
    }
    HVD_CHECK(rv >= 0 || errno == EINTR, NetworkError, "poll failed: ", errnoText(errno));
    if (rv > 0 && busy_poll_.count() > 0) busy_until_ = Clock::now() + busy_poll_;
    if (fds[0].revents) {
      uint64_t count;
      [[maybe_unused]] auto n = ::read(wake_fd_, &count, sizeof count);
    }

    std::vector<Request> fresh;
    bool shutdown_requested = false;
    takeQueue(fresh, shutdown_requested);
    const auto waits_report = dueWaitReport();

    if (coordinator_) {
      const auto now = Clock::now();
      for (const auto& q : fresh) addRequest(0, q, now);
      if (waits_report) coordinator_->setWaiting(0, *waits_report);
      if (shutdown_requested) coordinator_->requestShutdown(0);
      for (size_t r = 1; r < worker_channels_.size(); ++r) {
        auto& channel = worker_channels_[r];
        messages.clear();
        const bool open = channel->receive(messages);
        for (const auto& m : messages) {
          RequestBatch batch = decodeRequestBatch(m);
          for (const auto& q : batch.requests) addRequest(static_cast<int>(r), q, now);
          for (uint32_t id : batch.cached) addRequest(static_cast<int>(r), coordinator_->cachedRequest(id), now);
          if (options_.log_level <= LogLevel::kTrace) {
            log(LogLevel::kTrace, detail::concat("rank ", r, ": ", batch.requests.size(), " requests, ",
                                                 batch.cached.size(), " response cache hits"));
          }
          if (batch.shutdown) coordinator_->requestShutdown(static_cast<int>(r));
          if (batch.has_waiting) {
            std::vector<WaitRegistry::Key> waiting;
            for (size_t i = 0; i < batch.waiting_sets.size(); ++i) {
              waiting.emplace_back(batch.waiting_sets[i], batch.waiting_names[i]);
            }
            coordinator_->setWaiting(static_cast<int>(r), std::move(waiting));
          }
        }
        if (!open) {
          // A worker vanished: tell every other rank, then stop. Its error text names the peer.
          ResponseList abort;
          abort.shutdown = true;
          abort.abort = true;
          abort.peer_lost = true;
          abort.shutdown_reason = detail::concat("rank ", r, " disconnected from the coordinator (",
                                                 channel->error(), "); the job cannot continue");
          worker_channels_[r].reset();
          broadcastToWorkers(abort);
          throw PeerLostError(abort.shutdown_reason);
        }
      }
      if (const std::string stall = coordinator_->checkStalls(Clock::now()); !stall.empty()) {
        log(LogLevel::kWarning, stall);
        if (report_stats_) report_stats_->stallWarning();
      }
      if (next_waits_ && Clock::now() >= *next_waits_) publishWaits();
      if (next_round_check_ && Clock::now() >= *next_round_check_) checkRoundNews();
      hold_ = coordinator_->holdUntil(Clock::now(), cycle_time_);
      if (hold_) continue;
      ResponseList list = coordinator_->next();
      if (list.responses.empty() && !list.shutdown) continue;
      list.path = std::exchange(pending_path_, ResponseList::kPathUnchanged);
      timeline_->cycleStart();
      for (const auto& response : list.responses) {
        for (const auto& name : response.names) timeline_->negotiateEnd(name);
      }
      broadcastToWorkers(list);
      if (!execute(list)) return;
      if (autotuner_) autotune(list);
      continue;
    }

    if (!fresh.empty() || (shutdown_requested && !shutdown_sent_) || waits_report) {
      RequestBatch batch;
      if (waits_report) {
        batch.has_waiting = true;
        for (const auto& [set, name] : *waits_report) {
          batch.waiting_sets.push_back(set);
          batch.waiting_names.push_back(name);
        }
      }
      for (auto& q : fresh) {
        auto hit = response_cache_.find(keyOf(q));
        if (hit != response_cache_.end() && sameDescriptor(hit->second.second, q)) {
          batch.cached.push_back(hit->second.first);
        } else {
          batch.requests.push_back(std::move(q));
        }
      }
      batch.shutdown = shutdown_requested && !shutdown_sent_;
      shutdown_sent_ = shutdown_sent_ || batch.shutdown;
      try {
        coordinator_channel_->send(encode(batch));
      } catch (const NetworkError& e) {
        throw PeerLostError(detail::concat("lost the connection to the coordinator (rank 0): ", e.what()));
      }
    }
    if (coordinator_channel_) {
      messages.clear();
      const bool open = coordinator_channel_->receive(messages);
      for (const auto& m : messages) {
        if (!execute(decodeResponseList(m))) return;
      }
      if (!open) {
        abort_ = true;
        throw PeerLostError(detail::concat("lost the connection to the coordinator (rank 0): ",
                                           coordinator_channel_->error()));
      }
    } else if (shutdown_requested) {
      return;  // size 1 has no coordinator_channel_ but always has a coordinator_; not reached
    }
  }
}

std::optional<std::vector<WaitRegistry::Key>> Runtime::Impl::dueWaitReport() {
  if (waits_->version() == waits_sent_version_ || Clock::now() - waits_->changedAt() < kWaitReportDelay) {
    return std::nullopt;
  }
  auto snap = waits_->snapshot();
  waits_sent_version_ = snap.version;
  if (snap.keys == waits_sent_) return std::nullopt;
  waits_sent_ = snap.keys;
  return std::move(snap.keys);
}

void Runtime::Impl::publishWaits() {
  const auto now = Clock::now();
  next_waits_ = now + ReportStats::kWaitsInterval;
  auto waits = coordinator_->waits(now, ReportStats::kWaitsMinAge, ReportStats::kMaxWaits);
  if (waits.empty() && !waits_shown_) return;
  waits_shown_ = !waits.empty();
  report_stats_->publishWaits(std::move(waits), now);
}

void Runtime::Impl::checkRoundNews() {
  next_round_check_ = Clock::now() + kRoundCheckInterval;
  rendezvous::RoundNews news;
  try {
    news = round_server_->roundNews(options_.elastic_round);
  } catch (const Error& e) {
    log(LogLevel::kDebug, detail::concat("elastic: cannot ask the rendezvous server for new rounds: ", e.what()));
    return;
  }
  // A round that only adds members waits for the next commit (hvd_elastic_check_host_updates); one without
  // a member of this round means a peer is gone, even if its connections never close (a host cut off).
  if (news.round <= options_.elastic_round || !(news.changes & rendezvous::kRoundRemoved)) return;
  ResponseList abort;
  abort.shutdown = true;
  abort.abort = true;
  abort.peer_lost = true;
  abort.shutdown_reason = detail::concat("the job re-formed without a member of elastic round ", options_.elastic_round,
                                         " (round ", news.round, " began): a peer was lost");
  broadcastToWorkers(abort);
  throw PeerLostError(abort.shutdown_reason);
}

void Runtime::Impl::broadcastToWorkers(const ResponseList& list) {
  const auto bytes = encode(list);
  std::optional<PeerLostError> lost;
  for (size_t r = 0; r < worker_channels_.size(); ++r) {
    auto& c = worker_channels_[r];
    if (!c) continue;
    try {
      c->send(bytes);
    } catch (const std::exception& e) {
      // The worker is gone (its socket is closed or reset). The others still get this list; then the loop
      // stops, and run() tells them to abort.
      c.reset();
      if (!lost) lost.emplace(detail::concat("rank ", r, " is unreachable from the coordinator (", e.what(), ")"));
    }
  }
  if (list.abort) abort_sent_ = true;
  if (lost && !list.abort) throw *lost;
}

bool Runtime::Impl::execute(const ResponseList& list) {
  if (list.path != ResponseList::kPathUnchanged) {
    hierarchical_ = list.path == ResponseList::kPathHierarchical;
    HVD_CHECK(!hierarchical_ || hierarchical_possible_, BackendError,
              "the coordinator switched to the hierarchical allreduce, which this rank cannot run");
    set_comms_[0] = globalTransport();
  }
  for (const auto& s : list.responses) execute(s);
  // The next request usually follows a completed operation at once: poll for it before sleeping.
  if (!list.responses.empty() && busy_poll_.count() > 0) busy_until_ = Clock::now() + busy_poll_;
  if (!list.shutdown) return true;
  reason_ = list.shutdown_reason;
  abort_ = list.abort;
  peer_lost_ = list.peer_lost;
  return false;
}

Runtime::Impl::Entry* Runtime::Impl::find(int32_t set, const std::string& name) {
  auto it = table_.find(Key{set, name});
  return it == table_.end() ? nullptr : &it->second;
}

void Runtime::Impl::complete(int32_t set, const std::string& name, std::exception_ptr error) {
  auto it = table_.find(Key{set, name});
  if (it == table_.end()) return;
  const Key key = it->first;  // name may live in the node erased below
  if (report_stats_ && !error) report_stats_->completed(it->second.request.type, it->second.request.bytes());
  auto work = std::move(it->second.work);
  table_.erase(it);
  {
    std::lock_guard lock(mutex_);
    names_in_flight_.erase(key);
  }
  work->finish(std::move(error));
}

void Runtime::Impl::failAll(const std::string& reason) {
  std::deque<Entry> queued;
  {
    std::lock_guard lock(mutex_);
    queued.swap(queue_);
  }
  for (auto& e : queued) table_.emplace(keyOf(e.request), std::move(e));
  const auto error = stopError(reason, peer_lost_);
  while (!table_.empty()) {
    const Key key = table_.begin()->first;
    complete(key.first, key.second, error);
  }
}

std::byte* Runtime::Impl::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Runtime::Impl::execute(const Response& s) {
  if (s.kind == Response::Kind::kError) {
    std::exception_ptr error;
    if (s.error_class == Response::ErrorClass::kStalled) {
      error = std::make_exception_ptr(StalledError(s.error));
    } else if (s.error_class == Response::ErrorClass::kInvalid) {
      error = std::make_exception_ptr(UsageError(s.error));
    } else {
      error = std::make_exception_ptr(MismatchError(s.error));
    }
    for (const auto& name : s.names) complete(s.process_set, name, error);
    if (s.type == OpType::kJoin && s.names.empty()) {  // the stalled join: each rank's has its own name
      for (auto& [key, entry] : table_) {
        if (entry.request.type == OpType::kJoin) {
          const Key pending = key;
          complete(pending.first, pending.second, error);
          break;
        }
      }
    }
    return;
  }
  if (s.type == OpType::kProcessSet) return executeProcessSet(s);
  auto comm = set_comms_.find(s.process_set);
  if (comm == set_comms_.end()) return;  // a set this rank is not a member of
  if (!coordinator_) {
    for (size_t i = 0; i < s.cache_ids.size() && i < s.names.size(); ++i) {
      if (!s.cache_ids[i]) continue;
      if (Entry* e = find(s.process_set, s.names[i])) {
        Request descriptor = e->request;
        descriptor.input = nullptr;
        descriptor.output = nullptr;
        response_cache_[{s.process_set, s.names[i]}] = {s.cache_ids[i], std::move(descriptor)};
      }
    }
  }
  try {
    timelineStart(s);
    if (s.type == OpType::kAllreduce) {
      executeAllreduce(s, *comm->second);
    } else {
      executeOther(s, *comm->second, comm->second->rank());
    }
    timelineEnd(s);
  } catch (const std::exception& e) {
    // The context is dead after a failed collective: fail these works with the cause, then stop.
    const auto error = std::current_exception();
    for (const auto& name : s.names) complete(s.process_set, name, error);
    throw;
  }
}

void Runtime::Impl::executeProcessSet(const Response& s) {
  const int32_t id = s.root;
  Entry* e = find(0, s.names[0]);
  const bool is_static = e && e->static_set;
  if (s.counts.empty()) {  // removed
    if (auto comm = set_comms_.find(id); comm != set_comms_.end()) {
      comm->second->close(true);  // every member removes it at this point of the same order
      set_comms_.erase(comm);
    }
    std::lock_guard lock(sets_mutex_);
    set_info_.erase(id);
  } else {
    SetInfo info;
    info.ranks.assign(s.counts.begin(), s.counts.end());
    info.is_static = is_static;
    const auto me = std::lower_bound(info.ranks.begin(), info.ranks.end(), options_.rank);
    if (me != info.ranks.end() && *me == options_.rank) {
      CommunicatorOptions o;
      o.scope = detail::concat("process_set_", id);
      o.rank = static_cast<int>(me - info.ranks.begin());
      o.size = static_cast<int>(info.ranks.size());
      o.timeout = options_.gloo_timeout;
      o.abort = abort_signal_;
      log(LogLevel::kDebug, detail::concat(o.scope, " rendezvous started for rank=", o.rank, ", size=", o.size));
      set_comms_[id] = std::make_shared<GlooTransport>(Communicator::connect(store_, gloo_device_, o));
    }
    std::lock_guard lock(sets_mutex_);
    set_info_[id] = std::move(info);
  }
  if (e) e->work->result_int = id;
  complete(0, s.names[0]);
}

void Runtime::Impl::timelineStart(const Response& s) {
  if (s.type == OpType::kJoin) return;
  for (const auto& name : s.names) timeline_->start(name, s.type);
}

void Runtime::Impl::timelineEnd(const Response& s) {
  if (s.type == OpType::kJoin) return;
  for (size_t i = 0; i < s.names.size(); ++i) {
    std::string shape;
    if (s.type == OpType::kAllreduce) {
      shape = detail::concat("[", s.counts[i], "]");
    } else if (s.type == OpType::kBroadcast) {
      shape = detail::concat("[", s.counts[0], "]");
    } else if (s.type != OpType::kBarrier) {
      shape = detail::concat("[-1, ", s.row_elements, "]");  // first dimension differs between ranks
    }
    timeline_->end(s.names[i], gloo_backend::name(s.dtype), shape);
  }
}

std::shared_ptr<Transport> Runtime::Impl::globalTransport() {
  if (shm_ && singleHost()) return shm_;
  if (!flat_global_) flat_global_ = std::make_shared<GlooTransport>(global_);
  if (!hierarchical_ && !hierarchical_allgather_) return flat_global_;
  return std::make_shared<HierarchicalTransport>(shm_, std::make_shared<GlooTransport>(cross_), flat_global_,
                                                 hierarchical_, hierarchical_allgather_);
}

void Runtime::Impl::autotune(const ResponseList& list) {
  // One record per executed list, timed at its end: the fused allreduces of a cycle are one step of work.
  std::vector<std::string> names;
  size_t bytes = 0;
  for (const auto& r : list.responses) {
    if (r.type != OpType::kAllreduce || r.process_set != 0 || !r.error.empty()) continue;
    names.insert(names.end(), r.names.begin(), r.names.end());
    size_t elements = 0;
    for (int64_t c : r.counts) elements += static_cast<size_t>(c);
    bytes += elements * gloo_backend::elementSize(r.dtype);
  }
  if (names.empty()) return;
  if (const auto tuned = autotuner_->record(names, bytes, Clock::now())) {
    coordinator_->setFusionThreshold(tuned->fusion_threshold);
    cycle_time_ = tuned->cycle_time;
    // Against the path the executed list left in force (hierarchical_ is up to date on rank 0 too).
    if (tuned->hierarchical != hierarchical_)
      pending_path_ = tuned->hierarchical ? ResponseList::kPathHierarchical : ResponseList::kPathFlat;
    log(LogLevel::kInfo, detail::concat("autotune: fusion threshold ", tuned->fusion_threshold, " bytes, cycle time ",
                                        tuned->cycle_time.count(), " us, ",
                                        tuned->hierarchical ? "hierarchical" : "flat", " allreduce"));
  }
  if (autotuner_->done()) {
    log(LogLevel::kInfo, autotuner_->summary());
    autotuner_.reset();
  }
}

void Runtime::Impl::executeAllreduce(const Response& s, Transport& comm) {
  const size_t esize = gloo_backend::elementSize(s.dtype);
  const double post = s.postscale * (s.op == ReduceOp::kAverage ? 1.0 / comm.size() : 1.0);
  Entry* single = s.names.size() == 1 ? find(s.process_set, s.names[0]) : nullptr;
  if (single) {
    // Unfused: reduce in the caller's output buffer.
    const Request& q = single->request;
    const size_t n = static_cast<size_t>(s.counts[0]);
    if (n && q.input != q.output) std::memcpy(q.output, q.input, n * esize);
    gloo_backend::scale(s.dtype, q.output, n, s.prescale);
    timeline_->activityStart(s.names, comm.pathOf("ALLREDUCE"), "ALLREDUCE");
    comm.allreduce(q.output, n, s.dtype, s.op);
    timeline_->activityEnd(s.names);
    gloo_backend::scale(s.dtype, q.output, n, post);
    complete(s.process_set, s.names[0]);
    return;
  }
  // Fused (or this rank joined and contributes zeros): pack into the reused fusion buffer.
  size_t total = 0;
  for (auto c : s.counts) total += static_cast<size_t>(c);
  // Up to 1 MiB the fusion buffer is the communicator's staging buffer: no second copy in and out.
  std::byte* buffer = comm.stagingBuffer(total * esize);
  if (!buffer) buffer = scratch(total * esize);
  timeline_->activityStart(s.names, "MEMCPY_IN_FUSION_BUFFER");
  size_t offset = 0;
  for (size_t i = 0; i < s.names.size(); ++i) {
    const size_t bytes = static_cast<size_t>(s.counts[i]) * esize;
    if (Entry* e = find(s.process_set, s.names[i])) {
      if (bytes) std::memcpy(buffer + offset, e->request.input, bytes);
    } else {
      std::memset(buffer + offset, 0, bytes);
    }
    offset += bytes;
  }
  timeline_->activityEnd(s.names);
  gloo_backend::scale(s.dtype, buffer, total, s.prescale);
  timeline_->activityStart(s.names, comm.pathOf("ALLREDUCE"), "ALLREDUCE");
  comm.allreduce(buffer, total, s.dtype, s.op);
  timeline_->activityEnd(s.names);
  gloo_backend::scale(s.dtype, buffer, total, post);
  timeline_->activityStart(s.names, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (size_t i = 0; i < s.names.size(); ++i) {
    const size_t bytes = static_cast<size_t>(s.counts[i]) * esize;
    if (Entry* e = find(s.process_set, s.names[i])) {
      if (bytes) std::memcpy(e->request.output, buffer + offset, bytes);
      complete(s.process_set, s.names[i]);
    }
    offset += bytes;
  }
}

void Runtime::Impl::executeOther(const Response& s, Transport& comm, int set_rank) {
  const size_t esize = gloo_backend::elementSize(s.dtype);
  const size_t row_bytes = static_cast<size_t>(s.row_elements) * esize;
  const int n = comm.size();
  const int me = set_rank;
  Entry* e = s.names.empty() ? nullptr : find(s.process_set, s.names[0]);  // join has no name
  HVD_INTERNAL_ASSERT(e || s.type == OpType::kJoin, runtime::name(s.type), " '",
                      s.names.empty() ? "" : s.names[0], "' not submitted on rank ", options_.rank);
  switch (s.type) {
    case OpType::kBroadcast: {
      const size_t bytes = static_cast<size_t>(s.counts[0]) * esize;
      if (bytes && e->request.input && e->request.input != e->request.output) {
        std::memcpy(e->request.output, e->request.input, bytes);
      }
      timeline_->activityStart(s.names, comm.pathOf("BCAST"), "BCAST");
      // The root is a global rank; the set's context numbers its members by set rank.
      // set_info_ changes only on this thread, so reading it here needs no lock.
      const auto& ranks = set_info_.at(s.process_set).ranks;
      const int root = static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), s.root) - ranks.begin());
      comm.broadcast(e->request.output, bytes, root);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kAllgather: {
      std::vector<size_t> bytes(n);
      int64_t rows = 0;
      for (int r = 0; r < n; ++r) {
        bytes[r] = static_cast<size_t>(s.counts[r]) * row_bytes;
        rows += s.counts[r];
      }
      Work& w = *e->work;
      w.result.allocate(result_pool_, static_cast<size_t>(rows) * row_bytes);
      w.result_rows = rows;
      timeline_->activityStart(s.names, comm.pathOf("ALLGATHER"), "ALLGATHER");
      comm.allgatherv(e->request.input, w.result.data(), bytes);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kAlltoall: {
      std::vector<size_t> send(n), recv(n);
      Work& w = *e->work;
      w.received_splits.assign(n, 0);
      int64_t rows = 0;
      for (int p = 0; p < n; ++p) {
        send[p] = static_cast<size_t>(s.splits[me * n + p]) * row_bytes;
        w.received_splits[p] = s.splits[p * n + me];
        recv[p] = static_cast<size_t>(w.received_splits[p]) * row_bytes;
        rows += w.received_splits[p];
      }
      w.result.allocate(result_pool_, static_cast<size_t>(rows) * row_bytes);
      w.result_rows = rows;
      timeline_->activityStart(s.names, comm.pathOf("ALLTOALL"), "ALLTOALL");
      comm.alltoallv(e->request.input, send, w.result.data(), recv);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kReducescatter: {
      // Ring reduce-scatter of the whole tensor in the scratch buffer; this rank keeps its block of rows
      // (the first rows % n ranks one more).
      const int64_t rows = s.counts[0];
      const size_t elements = static_cast<size_t>(rows) * static_cast<size_t>(s.row_elements);
      std::byte* buffer = scratch(elements * esize);
      if (elements) std::memcpy(buffer, e->request.input, elements * esize);
      gloo_backend::scale(s.dtype, buffer, elements, s.prescale);
      const int64_t base = rows / n, extra = rows % n;
      std::vector<size_t> block_elements(n);
      for (int p = 0; p < n; ++p) {
        block_elements[p] = static_cast<size_t>((base + (p < extra ? 1 : 0)) * s.row_elements);
      }
      timeline_->activityStart(s.names, comm.pathOf("REDUCESCATTER"), "REDUCESCATTER");
      comm.reduceScatter(buffer, block_elements, s.dtype, s.op);
      timeline_->activityEnd(s.names);
      const double post = s.postscale * (s.op == ReduceOp::kAverage ? 1.0 / n : 1.0);
      const int64_t mine = base + (me < extra ? 1 : 0);
      const int64_t first = me * base + std::min<int64_t>(me, extra);
      Work& w = *e->work;
      w.result.allocate(result_pool_, static_cast<size_t>(mine) * row_bytes);
      w.result_rows = mine;
      if (mine) std::memcpy(w.result.data(), buffer + first * row_bytes, w.result.size());
      gloo_backend::scale(s.dtype, w.result.data(), static_cast<size_t>(mine * s.row_elements), post);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kBarrier:
      timeline_->activityStart(s.names, comm.pathOf("BARRIER"), "BARRIER");
      comm.barrier();
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    case OpType::kJoin: {
      for (auto& [key, entry] : table_) {
        if (entry.request.type == OpType::kJoin) {
          entry.work->result_int = s.last_joined_rank;
          const Key done = key;
          complete(done.first, done.second);
          break;
        }
      }
      return;
    }
    case OpType::kAllreduce:
    case OpType::kProcessSet:
      break;
  }
  HVD_INTERNAL_ASSERT(false, "unexpected response type ", static_cast<int>(s.type));
}

Runtime::Runtime(RuntimeOptions options, std::shared_ptr<rendezvous::Store> store)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(store))) {}

Runtime::~Runtime() = default;

namespace {

// The HttpStore settings of the options' rendezvous server (which must be set).
rendezvous::StoreOptions serverOf(const RuntimeOptions& options) {
  rendezvous::StoreOptions s;
  s.host = *options.rendezvous_addr;
  s.port = static_cast<uint16_t>(options.rendezvous_port);
  s.token = options.token;
  s.request_deadline = options.gloo_timeout;
  return s;
}

}  // namespace

std::shared_ptr<rendezvous::Store> Runtime::makeStore(const RuntimeOptions& options) {
  if (!options.rendezvous_addr) return std::make_shared<rendezvous::MemoryStore>();
  auto http = server(options);
  if (options.elastic) return std::make_shared<elastic::RoundWatchStore>(options.elastic_round, http);
  return http;
}

std::shared_ptr<rendezvous::HttpStore> Runtime::server(const RuntimeOptions& options) {
  HVD_CHECK(options.rendezvous_addr, UsageError,
            "no rendezvous server (HOROVOD_GLOO_RENDEZVOUS_ADDR is not set) for rank ", options.rank);
  return std::make_shared<rendezvous::HttpStore>(serverOf(options));
}

RuntimeOptions Runtime::nextElasticRound(RuntimeOptions options, uint64_t after, bool until_taken_in) {
  HVD_CHECK(options.elastic && options.rendezvous_addr, UsageError,
            "re-joining an elastic job needs HOROVOD_ELASTIC=1 and the rendezvous server");
  rendezvous::HttpStore server(serverOf(options));
  const auto deadline = std::chrono::steady_clock::now() + options.elastic_timeout;
  auto place = server.nextRound(options.slot(), after, options.elastic_timeout);
  while (until_taken_in && place.slot.rank < 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    HVD_CHECK(left.count() > 0, RendezvousTimeout, "no elastic round took slot ", options.slot(), " in within ",
              options.elastic_timeout.count(), " s (HOROVOD_ELASTIC_TIMEOUT)");
    place = server.nextRound(options.slot(), place.round, left);
  }
  const rendezvous::SlotAssignment& p = place.slot;
  HVD_CHECK(p.rank >= 0, BackendError, "slot ", options.slot(), " is not in elastic round ", place.round,
            ": the job went on without this worker");
  options.rank = p.rank;
  options.size = p.size;
  options.local_rank = p.local_rank;
  options.local_size = p.local_size;
  options.cross_rank = p.cross_rank;
  options.cross_size = p.cross_size;
  options.elastic_round = place.round;
  options.validate();
  return options;
}

const RuntimeOptions& Runtime::options() const { return impl_->options_; }
int Runtime::device() const { return impl_->device_; }
std::shared_ptr<Work> Runtime::enqueue(Request request) { return impl_->enqueue(std::move(request)); }
std::vector<std::shared_ptr<Work>> Runtime::enqueueGroup(std::vector<Request> requests) {
  return impl_->enqueueGroup(std::move(requests));
}
std::shared_ptr<Work> Runtime::addProcessSet(std::vector<int> ranks, bool is_static) {
  Request r;
  r.members.assign(ranks.begin(), ranks.end());
  HVD_CHECK(!r.members.empty(), UsageError, "a process set needs at least one rank");
  return impl_->changeProcessSet(std::move(r), is_static);
}
std::shared_ptr<Work> Runtime::removeProcessSet(int32_t id) {
  Request r;
  r.process_set = id;
  return impl_->changeProcessSet(std::move(r), false);
}
std::optional<std::vector<int>> Runtime::processSetRanks(int32_t id) const {
  auto info = impl_->processSet(id);
  if (!info) return std::nullopt;
  return info->ranks;
}
std::vector<int32_t> Runtime::processSetIds() const { return impl_->processSetIds(); }
void Runtime::shutdown() { impl_->shutdown(); }
bool Runtime::stopped() const { return impl_->stopped(); }

}  // namespace hvd::runtime
