// The background thread: takes submissions, runs the coordinator's rounds (rank 0) or sends the requests
// to it (other ranks), executes each response list in order, and completes or fails every pending
// operation. See runtime_impl.h.

#include "runtime/runtime_impl.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>

#include "base/cpu_relax.h"
#include "rendezvous/round.h"
#include "runtime/hierarchical.h"
#include "runtime/spare_node.h"
#include "runtime/thread_moves.h"

namespace hvd::runtime {

void Runtime::Impl::run() {
  ::pthread_setname_np(::pthread_self(), "hvd-background");  // as top -H and /proc/PID/task/TID/comm show it
  try {
    loop();
  } catch (const std::exception& e) {
    endProgress();
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
  endProgress();
  if (agreement_) {
    log(LogLevel::kDebug, detail::concat("response cache hits agreed without the coordinator: ",
                                         agreed_.load(), " (", refused_.load(), " announcements refused)",
                                         options_.shm_eager_broadcast
                                             ? detail::concat("; broadcasts read as staged: ", staged_reads_.load())
                                             : std::string()));
  }
  if (coordinator_ && options_.size > 1) {
    log(LogLevel::kDebug, detail::concat("coordinator: ", coordinator_->answeredByHits(),
                                         " names answered from the response cache, every member's a hit"));
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

void Runtime::Impl::takeQueue(std::vector<const Request*>& fresh, bool& shutdown_requested) {
  // Nothing submitted and no shutdown asked for (shutdown() sets queued_ too): no lock, no allocation, on a
  // path that a thread polling for a reply runs millions of times a second.
  if (!queued_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lock(mutex_);
    taken_.swap(queue_);
    queued_.store(false, std::memory_order_relaxed);
    shutdown_requested = shutdown_requested_;
  }
  const auto now = timeline_on_ ? Clock::now() : Clock::time_point{};
  for (auto& e : taken_) {
    if (timeline_on_) timeline_->queued(e.request.name, e.enqueued, now);
    fresh.push_back(&place(std::move(e)).request);
  }
  taken_.clear();
}

Runtime::Impl::Entry& Runtime::Impl::place(Entry&& e) {
  // A name already in the table keeps its entry, as emplace() would.
  const auto fill = [&](decltype(table_)::node_type& node) {
    node.key().first = e.request.process_set;
    node.key().second.assign(e.request.name);
    node.mapped() = std::move(e);
  };
  const auto make = [&] { return std::pair<const Key, Entry>(keyOf(e.request), std::move(e)); };
  return insertThrough(table_, spare_entry_, fill, make).first->second;
}

void Runtime::Impl::loop() {
  std::unique_lock lock(progress_, std::defer_lock);
  takeProgress(lock);
  for (;;) {
    // A failure is recorded before the lock is let go, so that no user thread runs progress() after it.
    try {
      awaitActivity(lock);
      if (move_threads_) {
        if (const int cpu = ::sched_getcpu(); background_cpu_.load(std::memory_order_relaxed) != cpu) {
          background_cpu_.store(cpu, std::memory_order_relaxed);
        }
      }
      if (!loop_over_ && !loop_error_ && !progress()) loop_over_ = true;
    } catch (...) {
      if (!loop_error_) loop_error_ = std::current_exception();
    }
    if (loop_error_) std::rethrow_exception(loop_error_);  // this thread's, or a user thread's in drive()
    if (loop_over_) return;
  }
}

void Runtime::Impl::takeProgress(std::unique_lock<std::mutex>& lock) {
  // A user thread holds it for one progress() at a time: try again rather than sleep on the mutex, so that its
  // unlock never needs a wake-up, but stop spinning if it holds it for long (a big collective).
  for (int tries = 0; !lock.try_lock(); ++tries) {
    if (tries == 200) {
      lock.lock();
      return;
    }
    ::sched_yield();
  }
}

void Runtime::Impl::endProgress() {
  std::lock_guard lock(progress_);
  loop_over_ = true;
}

bool Runtime::Impl::drive(const std::atomic<bool>& finished, std::chrono::microseconds spin) {
  // A lone operation only: a burst of them is negotiated while it is submitted and executed as one fused
  // operation, which the background thread pipelines better (measured: 100 x 4 KiB took 300 us driven
  // against 240 us left to it).
  if (in_flight_.load(std::memory_order_acquire) > 1) {
    if (move_threads_) joinBackground();
    return false;
  }
  drivers_.fetch_add(1, std::memory_order_seq_cst);
  unsigned polls = 0;
  // The clock is read here and then every 16th poll: a poll is a fraction of a microsecond when progress()
  // has nothing to do, but one that runs a step across hosts can take tens of microseconds, so the spin is
  // bounded from the start (a deadline set only at the first check let such a thread spin far past it).
  const Clock::time_point until = Clock::now() + spin;
  const auto spinning = [&] { return polls % 16 != 0 || polls == 0 || Clock::now() < until; };
  while (!finished.load(std::memory_order_acquire) && spinning()) {
    {
      std::unique_lock lock(progress_, std::try_to_lock);
      if (lock.owns_lock()) {
        if (loop_over_ || loop_error_) break;
        if (!drove_) {
          drove_ = true;
          log(LogLevel::kDebug, "progress: a user thread that waits runs it (HVD_WAIT_DRIVES)");
        }
        driving_ = true;
        try {
          if (!progress()) loop_over_ = true;
        } catch (...) {
          loop_error_ = std::current_exception();
        }
        driving_ = false;
        if (loop_over_ || loop_error_) {
          wake();  // the background thread ends the loop and tears down
          break;
        }
      }
    }
    // A pause between polls, a yield now and then: a thread drives only where the host has a core per rank
    // (busy polling is off otherwise), but other processes may want this one.
    if (++polls % 64 == 0) {
      ::sched_yield();
    } else {
      cpuRelax();
    }
  }
  drivers_.fetch_sub(1, std::memory_order_seq_cst);
  // The background thread takes over: this thread's operation if it is not done (it will sleep on it now),
  // submissions made meanwhile (submitted() did not wake it), and whatever its poll() waits for that
  // progress() changed (a fusion window, a reply due).
  const bool queued = queued_.load(std::memory_order_seq_cst);
  const int background = background_.load(std::memory_order_seq_cst);
  if (background != kAwake && (queued || !finished.load(std::memory_order_acquire) || background == kAsleep)) wake();
  return true;
}

void Runtime::Impl::joinBackground() {
  thread_local MovePacer pacer;  // per waiting thread
  const int cpu = background_cpu_.load(std::memory_order_relaxed);
  if (cpu < 0 || ::sched_getcpu() == cpu || !pacer.due() || !moveTo(cpu)) return;
  if (!moved_.exchange(true, std::memory_order_relaxed)) {
    log(LogLevel::kDebug,
        detail::concat("thread placement: a thread waiting for the background thread moved to its CPU ", cpu,
                       " (HVD_MOVE_THREADS)"));
  }
}

bool Runtime::Impl::WaitDriver::drive(const std::atomic<bool>& finished, std::chrono::microseconds spin) {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !impl_) return false;
  if (!drives_) {
    if (impl_->move_threads_) impl_->joinBackground();
    return false;
  }
  return impl_->drive(finished, spin);
}

bool Runtime::Impl::progress() {
  std::vector<std::vector<char>>& messages = messages_;
  std::vector<const Request*>& fresh = fresh_;
  fresh.clear();
  // An open announcement (agreement.cc) holds everything else back until it settles, within the grace.
  Settled settled = Settled::kAgreed;
  if (announcing_ && (settled = settleAnnouncement(fresh)) == Settled::kOpen) return true;
  bool shutdown_requested = false;
  takeQueue(fresh, shutdown_requested);
  if (agreement_) {
    announceOrAnswer(fresh, shutdown_requested, settled != Settled::kRefused);
    if (announcing_) return true;
  }
  const auto waits_report = driving_ ? std::nullopt : dueWaitReport();

  if (coordinator_) {
    const auto now = Clock::now();
    for (const Request* q : fresh) addRequest(0, *q, now);
    if (agreement_ && (!fresh.empty() || shutdown_requested)) showBusy(true);
    if (waits_report) coordinator_->setWaiting(0, *waits_report);
    if (shutdown_requested) {
      coordinator_->requestShutdown(0);
      shutdown_sent_ = true;  // as a worker's once sent (agreement.cc reads it)
    }
    for (size_t r = 1; r < worker_channels_.size(); ++r) {
      auto& channel = worker_channels_[r];
      messages.clear();
      const bool open = channel->receive(messages);
      for (const auto& m : messages) {
        RequestBatch batch = decodeRequestBatch(m);
        for (const auto& q : batch.requests) addRequest(static_cast<int>(r), q, now);
        for (uint32_t id : batch.cached) addCachedRequest(static_cast<int>(r), id, now);
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
    if (!driving_) {
      if (const std::string stall = coordinator_->checkStalls(now); !stall.empty()) {
        log(LogLevel::kWarning, stall);
        if (report_stats_) report_stats_->stallWarning();
      }
      if (next_waits_ && now >= *next_waits_) publishWaits();
      if (next_round_check_ && now >= *next_round_check_) checkRoundNews();
    }
    hold_ = coordinator_->holdUntil(now, cycle_time_);
    if (hold_) return true;
    ResponseList list = coordinator_->next();
    if (list.responses.empty() && !list.shutdown) return true;
    list.path = std::exchange(pending_path_, ResponseList::kPathUnchanged);
    timeline_->cycleStart();
    for (const auto& response : list.responses) {
      for (const auto& name : response.names) timeline_->negotiateEnd(name);
    }
    broadcastToWorkers(list);
    if (!execute(list)) return false;
    if (autotuner_) autotune(list);
    return true;
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
    for (const Request* q : fresh) {
      auto hit = response_cache_.find(viewOf(*q));
      if (hit != response_cache_.end() && sameDescriptor(hit->second.second, *q)) {
        batch.cached.push_back(hit->second.first);
      } else {
        batch.requests.push_back(*q);
      }
    }
    batch.shutdown = shutdown_requested && !shutdown_sent_;
    shutdown_sent_ = shutdown_sent_ || batch.shutdown;
    try {
      if (agreement_ && (!batch.requests.empty() || !batch.cached.empty() || batch.shutdown)) showBusy(true);
      coordinator_channel_->send(encode(batch));
    } catch (const NetworkError& e) {
      throw PeerLostError(detail::concat("lost the connection to the coordinator (rank 0): ", e.what()));
    }
  }
  if (coordinator_channel_) {
    messages.clear();
    const bool open = coordinator_channel_->receive(messages);
    for (const auto& m : messages) {
      if (!execute(decodeResponseList(m))) return false;
    }
    if (!open) {
      abort_ = true;
      throw PeerLostError(detail::concat("lost the connection to the coordinator (rank 0): ",
                                         coordinator_channel_->error()));
    }
  } else if (shutdown_requested) {
    return false;  // size 1 has no coordinator_channel_ but always has a coordinator_; not reached
  }
  return true;
}

void Runtime::Impl::awaitActivity(std::unique_lock<std::mutex>& lock) {
  if (drivers_.load(std::memory_order_relaxed) > 0) {
    // A user thread runs progress() (drive()): keep off the cores meanwhile, without telling the rings'
    // writers (their wake-ups would be for nothing), and look again every busy-poll period: a thread that
    // stops driving wakes this one only where it left work behind, and a submission does not wake it.
    background_.store(kParked, std::memory_order_seq_cst);
    lock.unlock();
    pollfd wake{wake_fd_, POLLIN, 0};
    const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(busy_poll_).count();
    const timespec timeout{period / 1000000000, period % 1000000000};
    const int rv = ::ppoll(&wake, 1, &timeout, nullptr);
    background_.store(kAwake, std::memory_order_relaxed);
    takeProgress(lock);
    if (rv > 0) drainWake();
    return;
  }
  if (announcing_) {
    // It settles within the grace: look again at once, with the lock let go so that a caller that waits can
    // run progress() itself (drive()), and the core yielded, as in the busy-poll window, to a thread of this
    // rank that computes meanwhile (a backward pass submitting its gradients one by one).
    lock.unlock();
    ::sched_yield();
    takeProgress(lock);
    return;
  }
  std::vector<pollfd>& fds = poll_fds_;
  fds.clear();
  fds.push_back({wake_fd_, POLLIN, 0});
  if (coordinator_channel_) fds.push_back({coordinator_channel_->fd(), POLLIN, 0});
  for (const auto& c : worker_channels_) {
    if (c) fds.push_back({c->fd(), POLLIN, 0});
  }
  bool buffered = anyChannel([](Channel& c) { return c.hasBuffered(); });
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
  int poll_errno = 0;
  if (!buffered && Clock::now() < busy_until_) {
    // Busy-poll window after activity (see RuntimeOptions::busy_poll): the next request or response
    // usually comes within microseconds, and a sleeping thread takes tens of them to wake. The spin
    // ends early where the coordinator has something due.
    const auto spin_end = wake_at ? std::min(busy_until_, *wake_at) : busy_until_;
    while (rv == 0 && Clock::now() < spin_end) {
      // A submission (queued_) and a message in a shared-memory ring (shm::RingChannel) show without a
      // system call.
      if (queued_.load(std::memory_order_acquire) || anyChannel([](Channel& c) { return c.hasBuffered(); })) break;
      // Unlocked between looks: a user thread that waits meanwhile may run progress() itself (drive()).
      lock.unlock();
      rv = ::poll(fds.data(), fds.size(), 0);
      poll_errno = errno;
      if (rv == 0) ::sched_yield();
      takeProgress(lock);
      // A caller that drove meanwhile may have left an announcement open: it settles only in progress().
      if (loop_over_ || loop_error_ || announcing_ || drivers_.load(std::memory_order_relaxed) > 0) return;
    }
  }
  if (announcing_) return;
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
    // Every channel is told first (a ring's writer then wakes this poll), and each that has a message
    // already makes it a poll that does not block.
    bool ready = false;
    anyChannel([&](Channel& c) {
      ready = !c.prepareToBlock() || ready;
      return false;
    });
    // Asleep without the lock: a waiting user thread runs progress() meanwhile, and wakes this thread when it
    // stops (its work changed what this poll waits for). A submission wakes it once it reads kAsleep; one
    // made before shows in queued_.
    background_.store(kAsleep, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst)) ready = true;
    lock.unlock();
    rv = ::poll(fds.data(), fds.size(), ready ? 0 : timeout_ms);
    poll_errno = errno;
    background_.store(kAwake, std::memory_order_relaxed);
    takeProgress(lock);
    if (loop_over_ || loop_error_) return;
    anyChannel([](Channel& c) {
      c.unblocked();
      return false;
    });
  }
  HVD_CHECK(rv >= 0 || poll_errno == EINTR, NetworkError, "poll failed: ", errnoText(poll_errno));
  if (rv <= 0) return;
  if (busy_poll_.count() > 0) busy_until_ = Clock::now() + busy_poll_;
  if (fds[0].revents) drainWake();
  // The channels in the order fds has them (anyChannel's).
  size_t i = 1;
  anyChannel([&](Channel& c) {
    if (i < fds.size() && fds[i].fd == c.fd() && fds[i].revents) c.readable();
    ++i;
    return false;
  });
}

void Runtime::Impl::drainWake() {
  uint64_t count;
  [[maybe_unused]] auto n = ::read(wake_fd_, &count, sizeof count);
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
  auto it = table_.find(SetNameView(set, name));
  return it == table_.end() ? nullptr : &it->second;
}

void Runtime::Impl::complete(int32_t set, const std::string& name, std::exception_ptr error) {
  auto it = table_.find(SetNameView(set, name));
  if (it == table_.end()) return;
  if (report_stats_ && !error) report_stats_->completed(it->second.request.type, it->second.request.bytes());
  // Out of the table with its key (name may live in it): no copy of the name.
  auto node = table_.extract(it);
  auto work = std::move(node.mapped().work);
  // Nothing of this rank's at the coordinator any more (agreement.cc); a shutdown asked for stays.
  if (agreement_ && table_.empty()) {
    if (!shutdown_sent_) showBusy(false);
    batched_ = in_flight_peak_ > 1;
    in_flight_peak_ = 0;
  }
  {
    std::lock_guard lock(mutex_);
    auto name = names_in_flight_.extract(node.key());
    if (!spare_name_) spare_name_ = std::move(name);
    in_flight_.store(names_in_flight_.size(), std::memory_order_release);
  }
  work->finish(std::move(error));
  if (!spare_entry_) spare_entry_ = std::move(node);
}

void Runtime::Impl::failAll(const std::string& reason) {
  std::vector<Entry> queued;
  {
    std::lock_guard lock(mutex_);
    queued.swap(queue_);
    queued_.store(false, std::memory_order_relaxed);
  }
  for (auto& e : queued) table_.emplace(keyOf(e.request), std::move(e));
  const auto error = stopError(reason, peer_lost_);
  while (!table_.empty()) {
    const Key key = table_.begin()->first;
    complete(key.first, key.second, error);
  }
}

}  // namespace hvd::runtime
