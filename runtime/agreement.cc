// Negotiation-free cached operations: when a rank announces, and what an agreed or refused round means. The
// rounds themselves are runtime/announcer.h's, over the words of runtime/shm/announcements.h.
//
// Why announcing needs no coordinator. A rank announces only when it is quiescent: its one pending operation
// is a response cache hit of the global process set and nothing it submitted is at the coordinator. When
// every rank announced the same id, every rank is quiescent, so no response list is in flight to anyone, and
// the data rounds that follow are that operation's on every rank. When they did not, nothing ran and each
// announcer's operation goes to the coordinator as it would have. So the announcements are a sequence of
// their own beside the data rounds and never collide with a response.
//
// Nothing waits on a rank that does not announce. A rank that has business at the coordinator (an operation
// sent there, a join, a shutdown) shows it in its busy word, and an announcer answers "no" for it after a
// moment (kBusyGrace: the busy word of a rank that is just finishing its last operation lags by a fraction of
// a microsecond); an idle rank is answered for after the busy-poll period. So an announcement settles within
// that period, and while it is open this rank takes no other submissions and sends nothing, which keeps every
// response on the coordinator's side of the sequence. Answering for a rank is a compare-and-swap on its word,
// so exactly one of its own announcement and the answer lands; a rank that finds a round answered for it
// counts it as its own "no".
#include "runtime/runtime_impl.h"

#include <sched.h>

namespace hvd::runtime {
namespace {

constexpr std::chrono::microseconds kBusyGrace{10};

// What executing a response depends on, beyond its one name: equal on two responses of the same name means
// running either does the same. Every rank keeps the last one (rememberAlone), so all keep the same.
bool sameExecution(const Response& a, const Response& b) {
  return a.type == b.type && a.cache_ids == b.cache_ids && a.dtype == b.dtype && a.op == b.op &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.root == b.root &&
         a.row_elements == b.row_elements && a.counts == b.counts && a.splits == b.splits;
}

}  // namespace

bool Runtime::Impl::onlyGlobalSet() const {
  // Every registered set, members or not: the members of a set never announce, so a non-member's
  // announcements could only be refused. Only the background thread changes set_info_ (sets_mutex_ is for the
  // user threads that read it), so its own read needs no lock.
  return set_info_.size() == 1;
}

void Runtime::Impl::showBusy(bool busy) {
  if (busy == busy_shown_) return;
  busy_shown_ = busy;
  shm_->announcements().setBusy(busy);
}

void Runtime::Impl::rememberAlone(const Response& s) {
  if (s.process_set != 0 || s.names.size() != 1 || s.cache_ids.size() != 1 || s.cache_ids[0] == 0 ||
      !s.joined_ranks.empty() || s.kind != Response::Kind::kExecute) {
    return;
  }
  const Entry* e = find(0, s.names[0]);
  if (!e) return;
  // Looked up by a view first: every response of a cached name comes here, and in the steady state the
  // record is already the same (a key built for each would copy the name every time).
  auto it = alone_.find(viewOf(e->request));
  if (it == alone_.end()) it = alone_.try_emplace(keyOf(e->request)).first;
  auto& [response, descriptor] = it->second;
  // Another rank's part may have changed (an allgather's rows) while this rank's did not: the response is
  // compared, not only this rank's descriptor.
  if (!response.names.empty() && sameExecution(response, s) && sameDescriptor(descriptor, e->request)) return;
  response = s;
  descriptor = e->request;
  descriptor.input = nullptr;
  descriptor.output = nullptr;
}

Runtime::Impl::Settled Runtime::Impl::settleAnnouncement(std::vector<const Request*>& fresh) {
  Announcement& a = *announcing_;
  shm::Announcements& board = shm_->announcements();
  std::optional<Clock::duration> waited;  // the clock is read only when someone has not announced yet
  const auto may_answer = [&](int member) {
    // A look is a fraction of a microsecond, a clock read a good part of one: every 16th look reads it.
    if (++a.looks % 16 != 0) return false;
    if (!waited) {
      const auto now = Clock::now();
      if (!a.started) a.started = now;
      waited = now - *a.started;
    }
    return *waited >= (board.busy(member) ? kBusyGrace : grace_);
  };
  Announcer::Settle settle;
  while ((settle = announcer_.settleStep(board, may_answer)) == Announcer::Settle::kOpen) {
  }
  if (settle == Announcer::Settle::kWaiting) return Settled::kOpen;
  const AloneRecord& alone = *a.alone;
  const Key& key = alone.first;
  announcing_.reset();
  Entry* e = find(key.first, key.second);
  if (!e || settle != Announcer::Settle::kAgreed) shm_->unstage();
  if (!e) return Settled::kAgreed;  // failed meanwhile (the job stopped); nothing to run
  if (settle == Announcer::Settle::kAgreed) {
    // Every rank runs the same remembered response (execute() does not remember an agreed one anew, so the
    // reference stays valid).
    const Response& s = alone.second.first;
    if (options_.log_level <= LogLevel::kTrace) {
      log(LogLevel::kTrace,
          detail::concat("'", key.second, "' (response cache id ", announcer_.value(), ") agreed in round ",
                         announcer_.completeRound(), " without the coordinator"));
    }
    agreed_.fetch_add(1, std::memory_order_relaxed);
    {
      // For the execution only, however it ends. A broadcast this round agreed on may find its message staged
      // (runtime/shm/transport.h).
      struct Agreed {
        Impl& impl;
        Agreed(Impl& i, uint32_t round) : impl(i) {
          impl.agreed_execution_ = true;
          impl.shm_->expectAgreed(round);
        }
        ~Agreed() {
          impl.agreed_execution_ = false;
          impl.shm_->expectAgreed(std::nullopt);
        }
      } agreed{*this, announcer_.completeRound()};
      execute(s);
    }
    staged_reads_.store(shm_->stagedReads(), std::memory_order_relaxed);
    return Settled::kAgreed;
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  fresh.insert(fresh.begin(), &e->request);
  return Settled::kRefused;
}

void Runtime::Impl::stageBroadcast(const Response& s, const Request& q) {
  // Only the root's message, and only on a transport that stages (HVD_SHM_EAGER_BROADCAST): the readers learn
  // whether it is there from the transport's word, not from the announcement, so a message not staged costs
  // nothing but the data round it would have had anyway.
  if (s.type != OpType::kBroadcast || s.root != options_.rank || s.counts.size() != 1) return;
  const void* message = q.input ? q.input : q.output;
  const size_t bytes = static_cast<size_t>(s.counts[0]) * gloo_backend::elementSize(s.dtype);
  if (message) shm_->stageBroadcast(message, bytes, announcer_.nextRound());
}

void Runtime::Impl::announceOrAnswer(std::vector<const Request*>& fresh, bool shutdown_requested,
                                     bool may_announce) {
  shm::Announcements& board = shm_->announcements();
  // Rounds that completed without this rank's own announcement (it answered, or was answered for).
  while (announcer_.catchUpStep(board)) {
  }
  announcer_.publishRead(board);
  // After a batch, an operation that is alone when it is taken is usually the first of the next batch:
  // agreed, it would run alone and the rest in a second data round, instead of one fused response.
  in_flight_peak_ = std::max(in_flight_peak_, table_.size());
  const bool lone = may_announce && !batched_ && fresh.size() == 1 && table_.size() == 1 &&
                    !shutdown_requested && !shutdown_sent_ && fresh[0]->process_set == 0 && onlyGlobalSet();
  if (lone) {
    const Request& q = *fresh[0];
    const auto it = alone_.find(viewOf(q));
    const auto peerBusy = [&] {
      for (int r = 0; r < options_.size; ++r) {
        if (r != options_.rank && board.busy(r)) return true;
      }
      return false;
    };
    bool announceable = it != alone_.end() && sameDescriptor(it->second.second, q);
    if (announceable && peerBusy()) {
      // Usually a peer finishing the operation that this rank just finished too, at the coordinator: it clears
      // its word a moment after its data round, which ended with this rank's. A peer that shares this core
      // clears it only once this thread lets it run, and without the yield every rank would find the other
      // busy after each operation that went to the coordinator, and send the next one there too.
      ::sched_yield();
      announceable = !peerBusy();
    }
    if (announceable) {
      stageBroadcast(it->second.first, q);
      if (announcer_.announce(board, it->second.first.cache_ids[0])) {
        announcing_ = Announcement{&*it, std::nullopt, 0};
        fresh.clear();
        settleAnnouncement(fresh);  // the others may have announced already
        return;
      }
      // Answered for already in this round: it goes to the coordinator.
      shm_->unstage();
    }
  }
  if (!busy_shown_) return;
  // An announcer waiting on this rank settles at once rather than after kBusyGrace.
  for (int r = 0; r < options_.size; ++r) {
    if (announcer_.asked(board, r)) {
      announcer_.answerNo(board);
      return;
    }
  }
}

}  // namespace hvd::runtime
