// shm::Transport: the collectives of the ranks of one host over one shared-memory segment.
//
// Layout (Segment, see segment.h): a control block, one counter per rank, the ranks' pids, then the data
// area: two parities of `size` slots of chunk bytes (one slot per rank), and two result areas of chunk
// bytes. The default chunk (256 KiB) was chosen by measurement (bench/ceilings/shm_allreduce, see
// docs/runtime.md): big enough that a round's fixed cost is small, small enough that what one rank wrote
// is still in a shared cache when the others read it.
//
// Rounds. Every operation is a sequence of rounds, numbered across operations (the same on every rank,
// since every rank runs the same operations). In round k a rank writes its slot of parity k % 2, publishes
// (its counter becomes k + 1, a futex wake only when someone sleeps on it), waits until the peers it reads
// from have published k + 1, and reads. The rule that makes reuse safe: a slot is read only in the round
// it was written, and a result area only in that round or the next, after which every reader has
// published again; a writer of round k + 2 has seen those publishes (every round ends with a wait for all
// the readers it has), so nothing is overwritten while someone reads it.
//
// Waiting: poll the peer's counter with a CPU pause between polls for `spin` polls (a peer that is running
// arrives within that: about 15-30 us), then with a sched_yield between polls for `yielding`, then sleep on
// it with FUTEX_WAIT in ticks of 10 ms. The yielding polls give the core to any other thread that has work
// on it, typically this rank's own training thread, whose backward pass the rounds run beside: a peer that
// is late is usually one that is not running, and polling with pauses then only takes a core from the
// computation that both ranks wait for (a 0.5 ms pause-poll per wait cost ResNet-18 training 10-17 % of its
// step at np=2 on 2 cores). Where the host has fewer cores than ranks, no poll pauses and the yielding is
// short, so that an oversubscribed host does not starve the rank being waited for. A peer that last published
// from the waiter's own CPU cannot publish again before the waiter lets go of it: that wait skips the pauses
// (and, with Options::move_off_peers, moves the waiter to another CPU). Each tick checks:
//   - the peer's liveness (a pidfd, polled): a rank that died makes every other fail at its next tick,
//     naming it, with PeerLostError; a stopped rank (SIGSTOP) is alive and is waited for;
//   - the group's abort word, set by a rank that found a peer dead or gave up, so that ranks waiting on
//     a survivor fail too instead of waiting for the timeout;
//   - the timeout (HOROVOD_GLOO_TIMEOUT_SECONDS, as for Gloo).
//
// Single copy. Allgathers, alltoalls and reducescatters whose largest block has kSingleCopyBytes or more
// skip the slots: one round shares each rank's buffer address (and an alltoall's offsets) through the
// slots, each rank reads what it needs straight from the peers' buffers into its output (cross-memory
// attach, process_vm_readv; memcpy between ranks that are threads of one process), and a closing round
// tells every owner that nobody reads its buffer any more. One copy of the peers' bytes instead of two,
// and two rounds instead of one per chunk. A reducescatter reads block `rank` of each peer a chunk at a
// time into private staging and reduces in rank order, as on the segment. At connect every member
// tries to read a word of every other's memory and publishes the outcome in its counter; the group
// reads peers only if every member could and none has it off (Options::single_copy,
// HVD_SHM_SINGLE_COPY=0), so the choice is the same everywhere. Where a seccomp filter or the ptrace
// policy denies process_vm_readv (EPERM, ENOSYS), everything stays on the segment. A peer that dies
// while being read fails the reader with PeerLostError naming it. Broadcast stays on the segment: the
// kernel's copy (about 10 GB/s here, against 15 for memcpy) loses to the root and the readers copying
// through the slots at the same time. Measured in docs/runtime.md.
//
// Eager broadcast (Options::eager_broadcast, HVD_SHM_EAGER_BROADCAST=1; off by default). The root copies its
// chunk into its slot, publishes and goes on without waiting for its readers, which publish, wait for the
// root and copy. Its round ends without the wait for everyone that makes reuse safe, so every write into a
// slot first checks that every member has published the round before it (writable(): every member has then
// read the slots of two rounds back); after a round that ended with that wait, as every round but an eager
// broadcast's does, the check is one comparison. A root may also stage a broadcast of one chunk before the
// operation is agreed (stageBroadcast): it copies the message into the next round's slot, when that slot is
// free, and names the (announcement round, data round) in a word beside its counter before it announces. A
// reader running that agreed operation in that data round finds the word (expectAgreed) and copies without
// waiting for the root's data round: the root's release of the word orders its copy before the reader's
// read. Anything else (a refused announcement, another operation in that round) leaves the word unmatched
// and the broadcast runs as above. Measured floors: bench/ceilings/shm_broadcast.cc.
//
// Announcements: a second sequence of rounds beside the data rounds, in which the members agree on the next
// operation without a coordinator (announcements.h); their words sit beside the counters.
//
// Results are bit-identical on every rank: every element is reduced once, by one rank, in rank order
// (allreduce of more than two ranks and reducescatter), or by every rank with the same operands in the
// same order (allreduce of two ranks, or of any number up to kDirectBytes: fewer rounds).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/store.h"
#include "runtime/shm/announcements.h"
#include "runtime/shm/segment.h"
#include "runtime/thread_moves.h"
#include "runtime/transport.h"

namespace hvd::runtime::shm {

// Allgathers, alltoalls and reducescatters whose largest block has at least this many bytes read the
// peers' buffers directly where the group can (single copy, see above). Measured at np=2: no slower at
// 64 KiB, twice as fast from 256 KiB; below it, a single round through the slots stays.
inline constexpr size_t kSingleCopyBytes = 64 * 1024;

struct Options {
  std::string scope = "shm_localhost";  // store prefix of the segment's rendezvous
  int rank = 0;
  int size = 1;
  int job_rank = -1;  // this member's rank in the job, which messages name; -1: the same as rank
  std::chrono::milliseconds timeout{rendezvous::Store::kDefaultTimeout};
  // Sharing the segment at connect() (elastic jobs: HOROVOD_ELASTIC_TIMEOUT); unset: timeout.
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  size_t chunk_bytes = 256 * 1024;  // a multiple of 64
  // More members than cores for them (runtime/host_cores.h); unset: more members than the CPUs the
  // connecting thread may run on (ownCpus()).
  std::optional<bool> oversubscribed;
  long spin = -1;                   // polls with a CPU pause; -1: 512, or 0 when oversubscribed
  // Then polls that yield the core, for this long, before sleeping; -1: 200 us, or 20 us when oversubscribed.
  std::chrono::microseconds yielding{-1};
  bool single_copy = true;           // false: never read a peer's memory (HVD_SHM_SINGLE_COPY=0)
  size_t single_copy_bytes = kSingleCopyBytes;
  bool eager_broadcast = false;      // a broadcast root returns without waiting for its readers (see above)
  // A member that waits for a peer which last published from the waiter's own CPU moves off that CPU, at most
  // once per 10 ms (runtime/thread_moves.h; HVD_MOVE_THREADS).
  bool move_off_peers = false;
};

// Allreduces up to this many bytes reduce everything on every rank (one round) at any group size.
inline constexpr size_t kDirectBytes = 64 * 1024;

class Transport final : public runtime::Transport {
 public:
  // Collective over the group (see Segment::share). Throws BackendError / StoreError naming the cause.
  static std::unique_ptr<Transport> connect(const std::shared_ptr<rendezvous::Store>& store, Options options);
  ~Transport() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  const char* path() const override { return "SHM"; }

  void allreduce(void* data, size_t count, DataType type, ReduceOp op) override;
  // Where every rank reduces everything (two ranks, or kDirectBytes in all): each chunk's slot is filled from
  // the parts' inputs and reduced straight into their outputs, with no fusion buffer in between.
  bool allreduceParts(const std::vector<Part>& parts, DataType type, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override;
  void reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) override;
  bool reduceScatterInto(const void* in, void* out, const std::vector<size_t>& counts, DataType type,
                         ReduceOp op) override;
  void barrier() override;
  // Eager broadcast only (see above): this member, the root of the broadcast that announcement round `tag`
  // will agree on, copies its message into the next data round's slot. False, and nothing staged, where it
  // cannot at once: eager broadcast off, more than a chunk, a member still reading that slot.
  bool stageBroadcast(const void* data, size_t bytes, uint32_t tag);
  // The staged message will not be broadcast (its announcement was refused).
  void unstage() noexcept;
  // The operations run until the next call are the one agreed in announcement round `tag` (nullopt: none).
  void expectAgreed(std::optional<uint32_t> tag) { expected_tag_ = tag; }
  // Broadcasts whose reader found its message staged (counted on the readers), for the logs and tests.
  uint64_t stagedReads() const { return staged_reads_.load(std::memory_order_relaxed); }
  void close(bool orderly) noexcept override;
  // Before an abortive close: this rank leaves because the job lost a peer (another member, or a rank
  // elsewhere), so the members still waiting on it fail with PeerLostError rather than BackendError.
  void leavingAfterLostPeer() noexcept { left_after_lost_peer_ = true; }
  bool failed() const override { return failed_; }
  // Whether the group reads its peers' buffers directly, and why not: one line for the logs.
  bool singleCopy() const { return single_copy_; }
  // The group's announcement words (announcements.h).
  Announcements& announcements() { return announcements_; }
  const std::string& singleCopyNote() const { return single_copy_note_; }
  // How often this member moved off a peer's CPU (Options::move_off_peers).
  uint64_t threadMoves() const { return moves_.load(std::memory_order_relaxed); }

 private:
  struct Layout;
  Transport(Options options, Segment segment);
  template <typename F>
  void guarded(const char* what, F&& body);

  // Round primitives (see the header comment).
  uint32_t publish();                         // ends this rank's writes of the current round; returns it
  void awaitPeer(int peer, uint32_t round);   // until peer published `round`
  void awaitAll(uint32_t round);
  // The round this member writes next, once every member has published the round before it.
  uint32_t writable();
  std::byte* slot(uint32_t round, int rank) const;
  std::byte* result(uint32_t round) const;
  // out = the count elements at byte `offset` of every rank's slot of `round`, reduced in rank order (slot 0
  // op slot 1 op ...): the same operands in the same order wherever it runs, so the same bits.
  void reduceSlots(uint32_t round, size_t offset, void* out, size_t count, DataType type, ReduceOp op) const;
  // Fails this rank's operation and sets the group's abort word, so that every member fails: `rank` died
  // (PeerLostError here and on the others), or this rank gave up (`rank` is its own; BackendError).
  [[noreturn]] void fail(int rank, bool died, const std::string& why);
  void checkPeer(int peer, uint32_t round);
  // Throws what a member that failed recorded in the abort word (naming the rank lost), if one did.
  void throwIfAborted();
  std::string who(int rank) const;
  // Single copy (see the header comment).
  void probeSingleCopy();
  bool singleCopy(size_t bytes) const;                      // for an operation whose largest block is bytes
  uint32_t exchange(const std::vector<uint64_t>& words);    // a round that shares words through the slots
  uint64_t word(uint32_t round, int rank, size_t i) const;  // word i that rank shared in round
  void readPeer(int peer, uint64_t at, std::byte* to, size_t bytes);  // peer's memory at `at`

  Options options_;
  Segment segment_;
  std::unique_ptr<Layout> layout_;
  Announcements announcements_{nullptr, 0, 0};  // over layout_'s words, once it is set
  std::vector<int> pidfds_;  // -1: no pidfd (this process, or pidfd_open unavailable)
  std::vector<pid_t> pids_;
  uint64_t probe_word_ = 0;  // what peers read at connect to learn whether they can read this process
  bool single_copy_ = false;
  std::string single_copy_note_;
  std::vector<std::byte> staging_;  // reduceScatter's single-copy operands
  uint32_t round_ = 0;       // the next round this rank publishes
  uint32_t settled_ = UINT32_MAX;  // the last round this rank saw every member publish (awaitAll)
  std::optional<std::pair<uint32_t, uint32_t>> staged_;  // this root's staged (tag, round)
  std::optional<uint32_t> expected_tag_;
  std::atomic<uint64_t> staged_reads_{0};
  const char* op_ = "";      // the operation in progress, for messages
  bool oversubscribed_ = false;
  MovePacer move_pacer_;            // Options::move_off_peers
  std::atomic<uint64_t> moves_{0};  // moves off a peer's CPU
  bool failed_ = false;
  bool closed_ = false;
  bool left_after_lost_peer_ = false;
};

}  // namespace hvd::runtime::shm
