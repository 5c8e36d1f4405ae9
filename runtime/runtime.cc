// libhvd's Runtime: init, what user threads call, and the public Runtime (see runtime_impl.h for how the
// implementation is divided between files).

#include "runtime/runtime_impl.h"

#include <algorithm>
#include <cerrno>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rendezvous/memory_store.h"
#include "rendezvous/round.h"
#include "runtime/elastic.h"
#include "runtime/gpu.h"
#include "runtime/host_cores.h"
#include "runtime/spare_node.h"

namespace hvd::runtime {

namespace {

// Why everything pending fails when the job stops.
std::string shutDownMessage(const std::string& reason) {
  if (reason.empty()) return "libhvd has been shut down (hvd_shutdown() on one of the ranks)";
  return "libhvd has been shut down: " + reason;
}

}  // namespace

std::exception_ptr stopError(const std::string& reason, bool peer_lost) {
  if (peer_lost) return std::make_exception_ptr(PeerLostError("libhvd stopped, the job lost a peer: " + reason));
  return std::make_exception_ptr(ShutDownError(shutDownMessage(reason)));
}

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
    // Polling or not (host_cores.h). The ranks of a host decide alike: announcements need all of them
    // polling.
    host_cores_ = options_.local_size > 1 ? hostCores(*local_) : countCpus(ownCpus());
    const bool oversubscribed = options_.local_size > host_cores_;
    busy_poll_ = options_.busy_poll.value_or(oversubscribed ? std::chrono::microseconds(0)
                                                            : RuntimeOptions::kDefaultBusyPoll);
    phase("the host's cores");
    cross_ = options_.cross_size == options_.size
                 ? global_
                 : connect("cross_" + std::to_string(options_.local_rank), options_.cross_rank, options_.cross_size);
    phase("cross rendezvous");
    // Thread placement (thread_moves.h): where the ranks' callers and background threads outnumber the host's
    // CPUs, but each rank has one of its own. Not where other hosts of the job share the machine: a thread
    // held to one CPU then competes there with ranks this host does not count, whom the kernel would move.
    // (singleHost() holds on every rank or on none, as sharesMachine() needs.)
    const bool shared_machine =
        !singleHost() && sharesMachine(*cross_, options_.local_size > 1 ? local_.get() : nullptr);
    const bool placing = options_.move_threads && options_.local_size > 1 && !oversubscribed &&
                         2 * options_.local_size > host_cores_;
    move_threads_ = placing && !shared_machine;
    if (placing && shared_machine) {
      log(LogLevel::kDebug,
          "thread placement: off, this host's CPUs are shared with another host of the job "
          "(the same kernel; HVD_MOVE_THREADS)");
    }
    phase("the host's machine");
    if (options_.shared_memory && options_.local_size > 1) {
      shm::Options o;
      o.scope = "shm_" + options_.hostname;
      o.rank = options_.local_rank;
      o.size = options_.local_size;
      o.timeout = options_.gloo_timeout;
      o.rendezvous_timeout = options_.rendezvousTimeout();
      o.job_rank = options_.rank;
      o.single_copy = options_.shm_single_copy;
      o.eager_broadcast = options_.shm_eager_broadcast;
      o.oversubscribed = oversubscribed;
      o.move_off_peers = move_threads_;
      log(LogLevel::kDebug, detail::concat(o.scope, " shared-memory segment for local rank ", o.rank, " of ", o.size));
      shm_ = shm::Transport::connect(store_, o);
      log(LogLevel::kDebug, detail::concat(o.scope, ": ", shm_->singleCopyNote()));
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
    // Negotiation-free cached operations (agreement.cc): one host over shared memory, with a response cache
    // and busy polling (an announcer polls for the others); not under autotune (its samples are the
    // coordinator's lists) nor with a timeline (HOROVOD_TIMELINE, set for every rank: it shows each
    // operation's negotiation).
    agreement_ = options_.shm_agreement && shm_ && set_comms_[0] == shm_ && options_.cache_capacity > 0 &&
                 !options_.autotune && !options_.timeline_path && busy_poll_.count() > 0;
    // An announcer waits for an idle rank as long as a busy poll lasts, up to the default (HVD_BUSY_POLL_US
    // may be up to a second; an announcer does nothing else meanwhile).
    grace_ = std::min(busy_poll_, RuntimeOptions::kDefaultBusyPoll);
    log(options_.rank == 0 ? LogLevel::kInfo : LogLevel::kDebug,
        detail::concat("data path of the job: ", set_comms_[0]->path(), " (allreduce ",
                       set_comms_[0]->pathOf("ALLREDUCE"), ", allgather ", set_comms_[0]->pathOf("ALLGATHER"),
                       "; ", options_.size, " ranks, ", options_.local_size, " on this host, which has ",
                       host_cores_, host_cores_ == 1 ? " core" : " cores", " for them",
                       options_.local_size <= host_cores_ ? ""
                       : busy_poll_.count() > 0           ? ": oversubscribed, yet HVD_BUSY_POLL_US polls"
                                                          : ": oversubscribed, nothing polls",
                       ")"));
  }
  if (options_.rank == 0) {
    CoordinatorOptions c;
    static_cast<NegotiationOptions&>(c) = options_;
    c.size = options_.size;
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
  timeline_on_ = timeline_->enabled();
  if (options_.rank == 0 && options_.timeline_path && !timeline_on_) {
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
  // The operations submitted from here on may be driven by the thread that waits for them (see drive()).
  if (options_.wait_drives && busy_poll_.count() > 0) driver_ = std::make_shared<WaitDriver>(this, true);
  if (move_threads_) joiner_ = std::make_shared<WaitDriver>(this, false);
  thread_ = std::thread([this] { run(); });
  if (report_server) {
    try {
      reporter_ = std::make_unique<Reporter>(options_, report_server, report_stats_, started);
    } catch (const std::exception& e) {  // no thread to be had: the job runs without reports
      log(LogLevel::kWarning, detail::concat("status reports to ", report_server->describe(), " are off: ", e.what()));
    }
  }
}

Runtime::Impl::~Impl() {
  if (driver_) driver_->detach();
  if (joiner_) joiner_->detach();
  shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Runtime::Impl::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] auto rv = ::write(wake_fd_, &one, sizeof one);
}

void Runtime::Impl::submitted(size_t before, size_t after) {
  // Only a sleeping background thread needs the eventfd: one that polls reads queued_; one that is parked
  // looks again within a busy-poll period, and the user thread that drives takes the queue itself (or wakes it
  // when it stops with entries left). A parked thread is woken for a queue that grows while no one drives (a
  // burst of asynchronous submissions, which it negotiates while more come), not for the one operation
  // that a caller submits and then waits for (and drives).
  const int background = background_.load(std::memory_order_seq_cst);
  if ((background == kAsleep && before == 0) ||
      (background == kParked && before <= 1 && after >= 2 && drivers_.load(std::memory_order_seq_cst) == 0)) {
    wake();
  }
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
  const auto fill = [&](decltype(names_in_flight_)::node_type& node) {
    node.value().first = r.process_set;
    node.value().second.assign(r.name);
  };
  const bool fresh_name = insertThrough(names_in_flight_, spare_name_, fill, [&] { return keyOf(r); }).second;
  HVD_CHECK(fresh_name, UsageError, "Requested to ", runtime::name(r.type),
            " a tensor with the same name as another tensor that is currently being processed: '", r.name,
            "'. If you want to request another tensor, use a different tensor name.");
  // Only small operations are driven: there the hand-offs are most of the time, while a large one's copies
  // dwarf them, and the parked background thread's periodic look would interrupt them (1 MiB allreduce at
  // np=2: 137 us left to the background thread, 185 us driven).
  auto work = std::make_shared<Work>(r.name, busy_poll_ / 2,
                                     r.bytes() <= kDrivenBytes && driver_ ? driver_ : joiner_);
  work->watch(waits_, r.process_set);
  in_flight_.store(names_in_flight_.size(), std::memory_order_release);
  // The time is the timeline's only (a clock read is a good part of a small operation's own time).
  queue_.push_back({std::move(r), work, timeline_on_ ? Clock::now() : Clock::time_point{}, static_set});
  queued_.store(true, std::memory_order_seq_cst);
  return work;
}

std::shared_ptr<Work> Runtime::Impl::enqueue(Request r) {
  HVD_CHECK(r.type != OpType::kProcessSet, UsageError, "process sets are added with addProcessSet()");
  std::shared_ptr<Work> work;
  size_t before = 0, after = 0;
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || shutdown_requested_) std::rethrow_exception(stopError(stop_reason_, stopped_peer_lost_));
    {
      std::lock_guard sets(sets_mutex_);
      check(r);
    }
    before = queue_.size();
    work = push(std::move(r));
    after = queue_.size();
  }
  submitted(before, after);
  return work;
}

std::vector<std::shared_ptr<Work>> Runtime::Impl::enqueueGroup(std::vector<Request> requests) {
  HVD_CHECK(!requests.empty(), UsageError, "a group needs at least one operation");
  std::vector<std::shared_ptr<Work>> works;
  size_t before = 0, after = 0;
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
    before = queue_.size();
    for (auto& r : requests) {
      r.group = group;
      r.group_size = static_cast<int32_t>(requests.size());
      works.push_back(push(std::move(r)));
    }
    after = queue_.size();
  }
  submitted(before, after);
  return works;
}

std::shared_ptr<Work> Runtime::Impl::changeProcessSet(Request r, bool is_static) {
  r.type = OpType::kProcessSet;
  std::shared_ptr<Work> work;
  size_t before = 0, after = 0;
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
    before = queue_.size();
    work = push(std::move(r), is_static);
    after = queue_.size();
  }
  submitted(before, after);
  return work;
}

void Runtime::Impl::shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_requested_ = true;
    queued_.store(true, std::memory_order_seq_cst);  // takeQueue() looks under the lock only when it is set
  }
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
  // After the background thread: the last report carries the final counts.
  if (reporter_) reporter_->finish();
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
  static_cast<SlotInfo&>(options) = p;
  options.elastic_round = place.round;
  options.validate();
  return options;
}

const RuntimeOptions& Runtime::options() const { return impl_->options_; }
int Runtime::device() const { return impl_->device_; }
uint64_t Runtime::agreedOperations() const { return impl_->agreed_.load(std::memory_order_relaxed); }
uint64_t Runtime::refusedAnnouncements() const { return impl_->refused_.load(std::memory_order_relaxed); }
uint64_t Runtime::stagedBroadcastReads() const { return impl_->staged_reads_.load(std::memory_order_relaxed); }
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
