#include "runtime/shm/transport.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <random>

#include "base/cpu_relax.h"
#include "base/error.h"
#include "runtime/host_cores.h"

namespace hvd::runtime::shm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMagic = 0x68766473686d3031ull;  // "hvdshm01"
constexpr size_t kLine = 64;

struct alignas(kLine) Control {
  uint64_t magic;
  // 0; else abortWord(rank, kind): the rank that was lost (kAbortDied), gave up (kAbortGaveUp: a timeout,
  // an abortive close), or left because the job lost a peer elsewhere (kAbortLeft). One word, so that a
  // reader never sees the rank without its kind.
  std::atomic<int32_t> abort;
};

enum AbortKind : int32_t { kAbortDied = 1, kAbortGaveUp = 2, kAbortLeft = 3 };
int32_t abortWord(int rank, AbortKind kind) { return (kind << 24) | (rank + 1); }

struct alignas(kLine) Counter {
  std::atomic<uint32_t> seq;      // rounds published
  std::atomic<uint32_t> waiters;  // ranks asleep on seq (FUTEX_WAIT)
  std::atomic<int32_t> pid;       // the member's pid, written when it attaches
  std::atomic<int32_t> job_rank;  // the member's rank in the job, for messages
  // The single-copy probe (connect): the address of a word in the member's own memory and its value, and
  // what the member found reading the others' words: 1 it read them all, 0 it was told not to try
  // (Options::single_copy), -errno a read failed (-EFAULT: a wrong value).
  std::atomic<uint64_t> probe_at;
  std::atomic<uint64_t> probe_value;
  std::atomic<int32_t> single_copy;
  // Eager broadcast: the (announcement round << 32 | data round) whose message this member staged in its slot.
  std::atomic<uint64_t> staged;
  // The CPU the member last published from (-1: not yet). A member that waits for it on that same CPU does
  // not pause between polls (the member cannot publish while the waiter holds the CPU), and moves off it
  // where Options::move_off_peers says so.
  std::atomic<int32_t> cpu;
};

uint64_t stagedWord(uint32_t tag, uint32_t round) { return static_cast<uint64_t>(tag) << 32 | round; }

size_t align(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool reached(uint32_t seq, uint32_t target) { return static_cast<int32_t>(seq - target) >= 0; }

long futexWait(std::atomic<uint32_t>* word, uint32_t expected, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, timeout, nullptr, 0);
}

void futexWake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int pidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// Reads `bytes` at `remote` in process pid into `local` (cross-memory attach); 0 or an errno.
int readProcess(pid_t pid, const std::byte* remote, std::byte* local, size_t bytes) {
  while (bytes > 0) {
    iovec to{local, bytes};
    iovec from{const_cast<std::byte*>(remote), bytes};
    const ssize_t got = ::process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? errno : EFAULT;
    local += got;
    remote += got;
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace

struct Transport::Layout {
  Layout(std::byte* base, int size) {
    control = reinterpret_cast<Control*>(base);
    counters = reinterpret_cast<Counter*>(base + sizeof(Control));
    announcements = reinterpret_cast<AnnouncementWords*>(base + sizeof(Control) +
                                                     sizeof(Counter) * static_cast<size_t>(size));
    data = base + header(size);
  }
  static size_t header(int size) {
    return align(sizeof(Control) + (sizeof(Counter) + sizeof(AnnouncementWords)) * static_cast<size_t>(size),
                 4096);
  }
  static size_t bytes(int size, size_t chunk) {
    return header(size) + (2 * static_cast<size_t>(size) + 2) * chunk;
  }
  Control* control;
  Counter* counters;
  AnnouncementWords* announcements;  // one per member (announcements.h)
  std::byte* data;
};

std::unique_ptr<Transport> Transport::connect(const std::shared_ptr<rendezvous::Store>& store, Options options) {
  HVD_INTERNAL_ASSERT(options.size >= 1 && options.rank >= 0 && options.rank < options.size &&
                          options.chunk_bytes >= kLine && options.chunk_bytes % kLine == 0,
                      "bad shared-memory options: rank ", options.rank, ", size ", options.size, ", chunk ",
                      options.chunk_bytes);
  SegmentOptions s;
  s.scope = options.scope;
  s.rank = options.rank;
  s.size = options.size;
  s.bytes = Layout::bytes(options.size, options.chunk_bytes);
  s.timeout = options.rendezvous_timeout.value_or(options.timeout);
  auto segment = Segment::share(store, s);
  return std::unique_ptr<Transport>(new Transport(std::move(options), std::move(segment)));
}

Transport::Transport(Options options, Segment segment)
    : options_(std::move(options)), segment_(std::move(segment)) {
  layout_ = std::make_unique<Layout>(segment_.data(), options_.size);
  oversubscribed_ = options_.oversubscribed.value_or(options_.size > countCpus(ownCpus()));
  if (options_.spin < 0) options_.spin = oversubscribed_ ? 0 : 512;
  if (options_.yielding.count() < 0)
    options_.yielding = std::chrono::microseconds(oversubscribed_ ? 20 : 200);
  if (options_.rank == 0) {
    layout_->control->magic = kMagic;
  }
  layout_->counters[options_.rank].pid.store(::getpid(), std::memory_order_relaxed);
  layout_->counters[options_.rank].cpu.store(-1, std::memory_order_relaxed);
  layout_->counters[options_.rank].job_rank.store(options_.job_rank < 0 ? options_.rank : options_.job_rank,
                                                  std::memory_order_relaxed);
  probe_word_ = std::random_device{}() * 0x100000001ull ^ kMagic;
  layout_->counters[options_.rank].probe_at.store(reinterpret_cast<uint64_t>(&probe_word_),
                                                  std::memory_order_relaxed);
  layout_->counters[options_.rank].probe_value.store(probe_word_, std::memory_order_relaxed);
  announcements_ = Announcements(layout_->announcements, options_.size, options_.rank);
  announcements_.reset();
  pidfds_.assign(options_.size, -1);
  pids_.assign(options_.size, 0);
  // Round 0 tells everyone every pid and job rank is written (and rank 0's magic).
  guarded("setup", [&] {
    publish();
    awaitAll(0);
  });
  HVD_CHECK(layout_->control->magic == kMagic, BackendError, "shared memory of scope '", options_.scope,
            "' holds no hvd segment");
  for (int r = 0; r < options_.size; ++r) {
    const pid_t pid = pids_[r] = layout_->counters[r].pid.load(std::memory_order_relaxed);
    if (pid == ::getpid()) continue;  // ranks as threads of this process
    pidfds_[r] = pidfdOpen(pid);      // -1 (no pidfd support, another pid namespace): the timeout decides
  }
  probeSingleCopy();
}

// Round 1: every member tries to read every other's probe word; single copy only if all of them could,
// which every member learns from the same counters.
void Transport::probeSingleCopy() {
  int32_t verdict = options_.single_copy ? 1 : 0;
  for (int r = 0; r < options_.size && verdict == 1; ++r) {
    if (pids_[r] == ::getpid()) continue;  // this process: memcpy
    const Counter& c = layout_->counters[r];
    uint64_t value = 0;
    const int err =
        readProcess(pids_[r], reinterpret_cast<const std::byte*>(c.probe_at.load(std::memory_order_relaxed)),
                    reinterpret_cast<std::byte*>(&value), sizeof value);
    if (err != 0 || value != c.probe_value.load(std::memory_order_relaxed))
      verdict = -(err != 0 ? err : EFAULT);
  }
  layout_->counters[options_.rank].single_copy.store(verdict, std::memory_order_relaxed);
  guarded("setup", [&] { awaitAll(publish()); });
  single_copy_ = true;
  single_copy_note_ = detail::concat("single copy (process_vm_readv) for messages of ",
                                     options_.single_copy_bytes, " bytes or more");
  for (int r = 0; r < options_.size && single_copy_; ++r) {
    const int32_t v = layout_->counters[r].single_copy.load(std::memory_order_relaxed);
    if (v == 1) continue;
    single_copy_ = false;
    single_copy_note_ =
        v == 0 ? detail::concat("copies through the segment: HVD_SHM_SINGLE_COPY=0 on ", who(r))
               : detail::concat("copies through the segment: ", who(r),
                                " cannot read its peers' memory (process_vm_readv: ", errnoText(-v), ")");
  }
}

Transport::~Transport() { close(true); }

void Transport::close(bool orderly) noexcept {
  if (closed_) return;
  closed_ = true;
  if (!orderly && !failed_) {
    // Peers still waiting for this rank fail now rather than at the timeout.
    int32_t expected = 0;
    const AbortKind kind = left_after_lost_peer_ ? kAbortLeft : kAbortGaveUp;
    if (layout_->control->abort.compare_exchange_strong(expected, abortWord(options_.rank, kind))) {
      for (int r = 0; r < options_.size; ++r) futexWake(&layout_->counters[r].seq);
    }
  }
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  pidfds_.clear();
}

std::string Transport::who(int rank) const {
  const Counter& c = layout_->counters[rank];
  if (c.pid.load(std::memory_order_relaxed) == 0) return detail::concat("local rank ", rank, " (not attached yet)");
  return detail::concat("rank ", c.job_rank.load(std::memory_order_relaxed), " (pid ",
                        c.pid.load(std::memory_order_relaxed), ")");
}

template <typename F>
void Transport::guarded(const char* what, F&& body) {
  HVD_CHECK(!failed_ && !closed_, BackendError, "shared memory of scope '", options_.scope, "' on ", who(options_.rank),
            " is unusable after an earlier failure (", what, ")");
  op_ = what;
  try {
    body();
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void Transport::fail(int rank, bool died, const std::string& why) {
  failed_ = true;
  int32_t expected = 0;
  if (layout_->control->abort.compare_exchange_strong(expected, abortWord(rank, died ? kAbortDied : kAbortGaveUp))) {
    for (int r = 0; r < options_.size; ++r) futexWake(&layout_->counters[r].seq);
  }
  const std::string message = detail::concat("shared-memory ", op_, " on scope '", options_.scope, "' failed on ",
                                             who(options_.rank), ": ", why);
  if (died) throw PeerLostError(message);
  throw BackendError(message);
}

uint32_t Transport::publish() {
  Counter& mine = layout_->counters[options_.rank];
  const uint32_t round = round_++;
  // Written only when it changed: a second store to the line the peers poll would cost each of them a
  // transfer.
  if (const int cpu = ::sched_getcpu(); mine.cpu.load(std::memory_order_relaxed) != cpu) {
    mine.cpu.store(cpu, std::memory_order_relaxed);
  }
  mine.seq.store(round + 1, std::memory_order_seq_cst);
  if (mine.waiters.load(std::memory_order_seq_cst) != 0) futexWake(&mine.seq);
  return round;
}

// What a waiting rank checks every tick: the abort word, the peer's liveness, the timeout.
void Transport::checkPeer(int peer, uint32_t round) {
  throwIfAborted();
  if (pidfds_[peer] >= 0) {
    pollfd p{pidfds_[peer], POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) fail(peer, true, detail::concat(who(peer), " died or was killed (round ", round, ")"));
  }
}

void Transport::throwIfAborted() {
  const int32_t abort = layout_->control->abort.load(std::memory_order_acquire);
  if (abort != 0) {
    failed_ = true;
    const int lost = (abort & 0xffffff) - 1;
    const int32_t kind = abort >> 24;
    const std::string message = detail::concat(
        "shared-memory ", op_, " on scope '", options_.scope, "' failed on ", who(options_.rank), ": ", who(lost),
        kind == kAbortDied   ? " is gone (it died or was killed)"
        : kind == kAbortLeft ? " left after the job lost a peer"
                             : " gave up after a failure");
    if (kind == kAbortDied || kind == kAbortLeft) throw PeerLostError(message);
    throw BackendError(message);
  }
}

void Transport::awaitPeer(int peer, uint32_t round) {
  Counter& theirs = layout_->counters[peer];
  const uint32_t target = round + 1;
  if (reached(theirs.seq.load(std::memory_order_acquire), target)) return;
  long spin = options_.spin;
  if (const int here = ::sched_getcpu(); here >= 0 && theirs.cpu.load(std::memory_order_relaxed) == here) {
    spin = 0;  // the peer cannot publish before this thread lets go of the CPU
    if (options_.move_off_peers && move_pacer_.due() && moveOff(here)) {
      moves_.fetch_add(1, std::memory_order_relaxed);
      Counter& mine = layout_->counters[options_.rank];
      mine.cpu.store(::sched_getcpu(), std::memory_order_relaxed);  // where the peer finds it next
    }
  }
  for (long i = 0; i < spin; ++i) {
    cpuRelax();
    if (reached(theirs.seq.load(std::memory_order_acquire), target)) return;
  }
  if (options_.yielding.count() > 0) {
    const auto until = Clock::now() + options_.yielding;
    do {
      ::sched_yield();
      if (reached(theirs.seq.load(std::memory_order_acquire), target)) return;
    } while (Clock::now() < until);
  }
  const auto deadline = Clock::now() + options_.timeout;
  theirs.waiters.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    Counter& c;
    ~Leave() { c.waiters.fetch_sub(1, std::memory_order_relaxed); }
  } leave{theirs};
  for (;;) {
    const uint32_t seen = theirs.seq.load(std::memory_order_seq_cst);
    if (reached(seen, target)) return;
    checkPeer(peer, round);
    if (Clock::now() > deadline) {
      fail(options_.rank, false, detail::concat("timed out after ", options_.timeout.count(), " ms waiting for ", who(peer),
                                         " (round ", round, ")"));
    }
    const timespec tick{0, 10 * 1000 * 1000};
    futexWait(&theirs.seq, seen, &tick);
  }
}

void Transport::awaitAll(uint32_t round) {
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank) awaitPeer(r, round);
  }
  settled_ = round;
}

uint32_t Transport::writable() {
  // Every member published round_ - 1, so it read the slots of round_ - 2, the ones this write reuses.
  if (round_ != settled_ + 1) awaitAll(round_ - 1);
  return round_;
}

std::byte* Transport::slot(uint32_t round, int rank) const {
  return layout_->data + ((round & 1) * static_cast<size_t>(options_.size) + static_cast<size_t>(rank)) *
                             options_.chunk_bytes;
}

std::byte* Transport::result(uint32_t round) const {
  return layout_->data + (2 * static_cast<size_t>(options_.size) + (round & 1)) * options_.chunk_bytes;
}

void Transport::reduceSlots(uint32_t round, size_t offset, void* out, size_t count, DataType type,
                            ReduceOp op) const {
  gloo_backend::reduce(type, op, out, slot(round, 0) + offset, slot(round, 1) + offset, count);
  for (int r = 2; r < options_.size; ++r) {
    gloo_backend::reduce(type, op, out, out, slot(round, r) + offset, count);
  }
}

bool Transport::singleCopy(size_t bytes) const { return single_copy_ && bytes >= options_.single_copy_bytes; }

uint32_t Transport::exchange(const std::vector<uint64_t>& words) {
  const uint32_t round = writable();
  std::memcpy(slot(round, options_.rank), words.data(), words.size() * sizeof(uint64_t));
  publish();
  awaitAll(round);
  return round;
}

uint64_t Transport::word(uint32_t round, int rank, size_t i) const {
  uint64_t w;
  std::memcpy(&w, slot(round, rank) + i * sizeof w, sizeof w);
  return w;
}

void Transport::readPeer(int peer, uint64_t at, std::byte* to, size_t bytes) {
  const auto* from = reinterpret_cast<const std::byte*>(at);
  if (pids_[peer] == ::getpid()) {  // ranks as threads of this process
    std::memcpy(to, from, bytes);
    return;
  }
  const int err = readProcess(pids_[peer], from, to, bytes);
  if (err == 0) return;
  bool gone = err == ESRCH;
  if (pidfds_[peer] >= 0) {
    pollfd p{pidfds_[peer], POLLIN, 0};
    gone = gone || ::poll(&p, 1, 0) > 0;
  }
  if (gone)
    fail(peer, true, detail::concat(who(peer), " died or was killed (while this rank read its memory)"));
  // A peer that failed (it found a third rank dead, say) may have let go of the buffer this rank was reading:
  // then the failure it recorded is the cause, and names the rank that was lost.
  throwIfAborted();
  fail(options_.rank, false,
       detail::concat("reading ", bytes, " bytes at ", static_cast<const void*>(from), " of ", who(peer),
                      "'s memory failed: ", errnoText(err)));
}

void Transport::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  guarded("allreduce", [&] {
    const size_t es = gloo_backend::elementSize(type);
    const int n = options_.size;
    const int me = options_.rank;
    const size_t per = options_.chunk_bytes / es;
    const bool direct = n == 2 || count * es <= kDirectBytes;
    auto* bytes = static_cast<std::byte*>(data);
    for (size_t at = 0; at < count; at += per) {
      const size_t m = std::min(per, count - at);
      std::byte* mine = bytes + at * es;
      const uint32_t round = writable();
      std::memcpy(slot(round, me), mine, m * es);
      publish();
      awaitAll(round);
      if (direct) {
        // Every rank: slot 0 op slot 1 op ... in rank order, the same operands everywhere.
        reduceSlots(round, 0, mine, m, type, op);
        continue;
      }
      // This rank's share of the chunk, reduced once into the result area; everyone copies all shares.
      const size_t lo = m * static_cast<size_t>(me) / n, hi = m * static_cast<size_t>(me + 1) / n;
      std::byte* out = result(round) + lo * es;
      if (hi > lo) {
        reduceSlots(round, lo * es, out, hi - lo, type, op);
      }
      awaitAll(publish());
      std::memcpy(mine, result(round), m * es);
    }
  });
}

bool Transport::allreduceParts(const std::vector<Part>& parts, DataType type, ReduceOp op) {
  const size_t es = gloo_backend::elementSize(type);
  size_t total = 0;
  for (const auto& p : parts) total += p.count;
  const int n = options_.size;
  if (!(n == 2 || total * es <= kDirectBytes)) return false;  // the same answer on every member
  if (n == 1) {
    for (const auto& p : parts) {
      if (p.count && p.in != p.out) std::memcpy(p.out, p.in, p.count * es);
    }
    return true;
  }
  guarded("allreduce", [&] {
    const int me = options_.rank;
    const size_t per = options_.chunk_bytes / es;
    size_t part = 0, within = 0;  // where the next chunk starts
    for (size_t at = 0; at < total; at += per) {
      const size_t m = std::min(per, total - at);
      const uint32_t round = writable();
      // Fill this rank's slot from the parts (a chunk may span several, and a part several chunks).
      size_t p = part, w = within;
      for (size_t filled = 0; filled < m;) {
        const size_t take = std::min(parts[p].count - w, m - filled);
        const auto* in = static_cast<const std::byte*>(parts[p].in) + w * es;
        if (take) std::memcpy(slot(round, me) + filled * es, in, take * es);
        filled += take;
        w += take;
        if (w == parts[p].count) ++p, w = 0;
      }
      publish();
      awaitAll(round);
      // Every rank: slot 0 op slot 1 op ... in rank order, as allreduce() does, into the parts' outputs.
      for (size_t done = 0; done < m;) {
        const size_t take = std::min(parts[part].count - within, m - done);
        auto* out = static_cast<std::byte*>(parts[part].out) + within * es;
        if (take) reduceSlots(round, done * es, out, take, type, op);
        done += take;
        within += take;
        if (within == parts[part].count) ++part, within = 0;
      }
    }
  });
  return true;
}

void Transport::broadcast(void* data, size_t bytes, int root) {
  HVD_CHECK(root >= 0 && root < options_.size, UsageError, "broadcast root ", root, " out of range for scope '",
            options_.scope, "' of size ", options_.size);
  guarded("broadcast", [&] {
    auto* p = static_cast<std::byte*>(data);
    const bool eager = options_.eager_broadcast;
    // The agreed operation of a staged announcement round, if this is it (one chunk, staged in this round).
    const bool agreed = eager && expected_tag_ && bytes <= options_.chunk_bytes;
    for (size_t at = 0; at < bytes; at += options_.chunk_bytes) {
      const size_t m = std::min(options_.chunk_bytes, bytes - at);
      if (!eager) {
        const uint32_t round = writable();
        // Everyone waits for everyone, not only for the root: every round must end so (transport.h).
        if (options_.rank == root) std::memcpy(slot(round, root), p + at, m);
        awaitAll(publish());
        if (options_.rank != root) std::memcpy(p + at, slot(round, root), m);
        continue;
      }
      if (options_.rank == root) {
        if (!(agreed && staged_ == std::make_pair(*expected_tag_, round_))) {
          std::memcpy(slot(writable(), root), p + at, m);
        }
        publish();
        continue;
      }
      const uint32_t round = publish();
      if (agreed && layout_->counters[root].staged.load(std::memory_order_acquire) ==
                        stagedWord(*expected_tag_, round)) {
        staged_reads_.fetch_add(1, std::memory_order_relaxed);
      } else {
        awaitPeer(root, round);
      }
      std::memcpy(p + at, slot(round, root), m);
    }
    staged_.reset();
  });
}

bool Transport::stageBroadcast(const void* data, size_t bytes, uint32_t tag) {
  if (!options_.eager_broadcast || failed_ || closed_ || bytes > options_.chunk_bytes) return false;
  const uint32_t round = round_;
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank && !reached(layout_->counters[r].seq.load(std::memory_order_acquire), round)) return false;
  }
  settled_ = round - 1;
  if (bytes) std::memcpy(slot(round, options_.rank), data, bytes);
  staged_ = std::make_pair(tag, round);
  layout_->counters[options_.rank].staged.store(stagedWord(tag, round), std::memory_order_release);
  return true;
}

void Transport::unstage() noexcept {
  if (!staged_) return;
  staged_.reset();
  // A refused announcement round is never run as agreed; the word is cleared so that no later round whose
  // numbers wrap around to the same pair could match it either.
  layout_->counters[options_.rank].staged.store(0, std::memory_order_relaxed);
}

void Transport::allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  HVD_INTERNAL_ASSERT(static_cast<int>(bytesPerRank.size()) == options_.size, "allgatherv counts for ",
                      bytesPerRank.size(), " ranks, scope size ", options_.size);
  guarded("allgather", [&] {
    const int n = options_.size;
    const int me = options_.rank;
    std::vector<size_t> offset(n + 1, 0);
    for (int r = 0; r < n; ++r) offset[r + 1] = offset[r] + bytesPerRank[r];
    const size_t longest = *std::max_element(bytesPerRank.begin(), bytesPerRank.end());
    auto* o = static_cast<std::byte*>(out);
    // In place (in is this rank's block of out) needs no copy.
    if (bytesPerRank[me] && in != o + offset[me]) std::memcpy(o + offset[me], in, bytesPerRank[me]);
    if (singleCopy(longest)) {
      const uint32_t round = exchange({reinterpret_cast<uint64_t>(in)});
      for (int k = 1; k < n; ++k) {
        const int r = (me + k) % n;  // not all from rank 0 first
        if (bytesPerRank[r]) readPeer(r, word(round, r, 0), o + offset[r], bytesPerRank[r]);
      }
      awaitAll(publish());  // this rank's input is read by now
      return;
    }
    for (size_t at = 0; at < longest; at += options_.chunk_bytes) {
      const uint32_t round = writable();
      auto piece = [&](int r) { return at < bytesPerRank[r] ? std::min(options_.chunk_bytes, bytesPerRank[r] - at) : 0; };
      if (const size_t m = piece(me)) std::memcpy(slot(round, me), static_cast<const std::byte*>(in) + at, m);
      publish();
      awaitAll(round);
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        if (const size_t m = piece(r)) std::memcpy(o + offset[r] + at, slot(round, r), m);
      }
    }
  });
}

void Transport::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                          const std::vector<size_t>& recvBytes) {
  const int n = options_.size;
  HVD_INTERNAL_ASSERT(static_cast<int>(sendBytes.size()) == n && static_cast<int>(recvBytes.size()) == n,
                      "alltoallv counts for ", sendBytes.size(), "/", recvBytes.size(), " ranks, scope size ", n);
  guarded("alltoall", [&] {
    const int me = options_.rank;
    std::vector<size_t> send_at(n + 1, 0), recv_at(n + 1, 0);
    for (int p = 0; p < n; ++p) {
      send_at[p + 1] = send_at[p] + sendBytes[p];
      recv_at[p + 1] = recv_at[p] + recvBytes[p];
    }
    const auto* src = static_cast<const std::byte*>(in);
    auto* dst = static_cast<std::byte*>(out);
    HVD_CHECK(sendBytes[me] == recvBytes[me], BackendError, "alltoall on scope '", options_.scope, "': rank ", me,
              " sends itself ", sendBytes[me], " bytes but expects ", recvBytes[me]);
    if (sendBytes[me]) std::memcpy(dst + recv_at[me], src + send_at[me], sendBytes[me]);
    // Every rank must run the same number of rounds; each knows only its own row of the matrix, so the
    // first round tells the others the longest message each rank sends, with, where the slot has room, the
    // address of `in` and where each destination's bytes start (single copy). The rest of that round's slot
    // carries each destination's first bytes: a small alltoall is one round.
    const size_t own_longest = *std::max_element(sendBytes.begin(), sendBytes.end());
    const size_t header = align((n + 3) * sizeof(uint64_t), kLine);
    const bool room = header <= options_.chunk_bytes;
    const uint32_t first_round = writable();
    std::byte* mine = slot(first_round, me);
    const uint64_t head[2] = {own_longest, reinterpret_cast<uint64_t>(in)};
    std::memcpy(mine, head, sizeof(uint64_t) * (room ? 2 : 1));
    if (room) std::memcpy(mine + 2 * sizeof(uint64_t), send_at.data(), (n + 1) * sizeof(uint64_t));
    // Sub-slots of the first round, after the header: none where this rank alone already makes it a
    // single-copy alltoall (its bytes would be copied for nothing).
    const size_t first =
        room && !singleCopy(own_longest) ? (options_.chunk_bytes - header) / n / kLine * kLine : 0;
    // Each slot of the later rounds holds one sub-slot per destination.
    const size_t sub = options_.chunk_bytes / static_cast<size_t>(n) / kLine * kLine;
    auto pieceOf = [&](size_t bytes, size_t at, size_t most) {
      return at < bytes ? std::min(most, bytes - at) : 0;
    };
    for (int p = 0; p < n; ++p) {
      if (const size_t m = p == me ? 0 : pieceOf(sendBytes[p], 0, first)) {
        std::memcpy(mine + header + p * first, src + send_at[p], m);
      }
    }
    publish();
    awaitAll(first_round);
    size_t longest = 0;
    for (int r = 0; r < n; ++r) longest = std::max<size_t>(longest, word(first_round, r, 0));
    if (room && singleCopy(longest)) {
      for (int k = 1; k < n; ++k) {
        const int q = (me + k) % n;
        const uint64_t lo = word(first_round, q, 2 + me), hi = word(first_round, q, 3 + me);
        if (hi - lo != recvBytes[q]) {
          fail(me, false,
               detail::concat(who(q), " sends ", hi - lo, " bytes to rank ", me, ", which expects ",
                              recvBytes[q]));
        }
        if (recvBytes[q]) readPeer(q, word(first_round, q, 1) + lo, dst + recv_at[q], recvBytes[q]);
      }
      awaitAll(publish());  // this rank's input is read by now
      return;
    }
    // Not a single copy: `first` is the same on every rank, and what it left goes in rounds of `sub`.
    for (int q = 0; q < n; ++q) {
      if (const size_t m = q == me ? 0 : pieceOf(recvBytes[q], 0, first)) {
        std::memcpy(dst + recv_at[q], slot(first_round, q) + header + me * first, m);
      }
    }
    for (size_t at = first; at < longest; at += sub) {
      const uint32_t round = writable();
      for (int p = 0; p < n; ++p) {
        if (const size_t m = p == me ? 0 : pieceOf(sendBytes[p], at, sub)) {
          std::memcpy(slot(round, me) + p * sub, src + send_at[p] + at, m);
        }
      }
      publish();
      awaitAll(round);
      for (int q = 0; q < n; ++q) {
        if (const size_t m = q == me ? 0 : pieceOf(recvBytes[q], at, sub)) {
          std::memcpy(dst + recv_at[q] + at, slot(round, q) + me * sub, m);
        }
      }
    }
  });
}

void Transport::reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) {
  size_t before = 0;  // block `rank` starts after the blocks of the ranks below it
  for (int p = 0; p < options_.rank && p < static_cast<int>(counts.size()); ++p) before += counts[p];
  reduceScatterInto(data, static_cast<std::byte*>(data) + before * gloo_backend::elementSize(type), counts,
                    type, op);
}

bool Transport::reduceScatterInto(const void* in, void* out, const std::vector<size_t>& counts, DataType type,
                                  ReduceOp op) {
  const int n = options_.size;
  HVD_INTERNAL_ASSERT(static_cast<int>(counts.size()) == n, "reducescatter counts for ", counts.size(),
                      " ranks, scope size ", n);
  const size_t es = gloo_backend::elementSize(type);
  if (n == 1) {
    if (counts[0] && in != out) std::memcpy(out, in, counts[0] * es);
    return true;
  }
  guarded("reducescatter", [&] {
    const int me = options_.rank;
    std::vector<size_t> first(n + 1, 0);
    for (int p = 0; p < n; ++p) first[p + 1] = first[p] + counts[p];
    const size_t longest = *std::max_element(counts.begin(), counts.end());
    const auto* src = static_cast<const std::byte*>(in);
    auto* dst = static_cast<std::byte*>(out);
    if (singleCopy(longest * es)) {
      // Block me of every rank, in rank order: this rank's from in, the others' read into staging (a chunk
      // at a time, so that the reduction finds them in cache).
      const uint32_t round = exchange({reinterpret_cast<uint64_t>(in)});
      staging_.resize(2 * options_.chunk_bytes);
      std::byte* acc = staging_.data();
      std::byte* theirs = acc + options_.chunk_bytes;
      const size_t per = options_.chunk_bytes / es;
      for (size_t at = 0; at < counts[me]; at += per) {
        const size_t m = std::min(per, counts[me] - at);
        const size_t within = (first[me] + at) * es;
        auto operand = [&](int r, std::byte* into) -> const std::byte* {
          if (r == me) return src + within;
          readPeer(r, word(round, r, 0) + within, into, m * es);
          return into;
        };
        const std::byte* a = operand(0, acc);
        for (int r = 1; r < n; ++r) {
          const std::byte* b = operand(r, theirs);
          gloo_backend::reduce(type, op, r == n - 1 ? dst + at * es : acc, a, b, m);
          a = acc;
        }
      }
      awaitAll(publish());  // this rank's input is read by now
      return;
    }
    // One sub-slot per block: rank me reduces sub-slot me of every rank, in rank order. In place (out is
    // block me of in), each piece of block me is in the slot before it is overwritten.
    const size_t sub = options_.chunk_bytes / static_cast<size_t>(n) / kLine * kLine / es;
    for (size_t at = 0; at < longest; at += sub) {
      const uint32_t round = writable();
      for (int p = 0; p < n; ++p) {
        if (at < counts[p]) {
          std::memcpy(slot(round, me) + p * sub * es, src + (first[p] + at) * es,
                      std::min(sub, counts[p] - at) * es);
        }
      }
      publish();
      awaitAll(round);
      if (at < counts[me]) {
        const size_t m = std::min(sub, counts[me] - at);
        std::byte* o = dst + at * es;
        const size_t within = me * sub * es;
        reduceSlots(round, within, o, m, type, op);
      }
    }
  });
  return true;
}

void Transport::barrier() {
  guarded("barrier", [&] { awaitAll(publish()); });
}

}  // namespace hvd::runtime::shm
