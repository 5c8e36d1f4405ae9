// The coordinator's bookkeeping (runs on rank 0's background thread; pure logic, no I/O).
//
// Every rank reports the requests it submitted; a name becomes ready when every member of its process
// set reported it (for the global set: every rank that has not joined). Names are scoped per process
// set. The members of a group (hvd_enqueue_group) become ready together. next() turns the ready names, in the
// order they became ready, into the ResponseList every rank executes in the same order: compatible allreduces
// fused up to the fusion threshold, mismatches (operation, dtype, shape, reduce op, scale factors, root)
// turned into one error response naming the tensor, the values and the ranks that sent each value.
//
// Process sets are registered here first (kProcessSet requests, collective over the global set): the
// coordinator checks that every rank asked for the same set and that it is not a duplicate, and gives
// it the next id. Every rank then learns the id from the response.
//
// The steady state has a path of its own. A name every member submits unchanged (a worker's response cache
// hit, or a request equal to the descriptor cached for that rank) is counted in its cache entry: no copy of
// the request, no lookup by name, no validation (the descriptors passed it together when they were cached,
// and the ids are never reused), and next() adds the response built then. Such counts go to the general
// bookkeeping, as the requests they stand for, when someone submits the name changed, when a rank joins, and
// once they are older than kHitsAge (or the stall warning time, if shorter): stall warnings, waits and the
// deadlock check see them there. Everything a caller observes is the same on either path.
//
// Stall inspection (Horovod's Gloo controller never reports which ranks are missing):
// checkStalls() names the tensors some ranks have submitted for longer than the warning time and the
// ranks still missing; past the shutdown time (when set) it makes next() shut the job down. waits() lists
// the same kind of names at any age, for the worker's reports (runtime/reporter.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/report.h"
#include "runtime/negotiation_options.h"
#include "runtime/wire.h"

namespace hvd::runtime {

struct CoordinatorOptions : NegotiationOptions {
  int size = 1;
  // false: every submission takes the general path, hits included (tests compare the two paths).
  bool count_hits = true;
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Coordinator(CoordinatorOptions options);

  // Records rank's request (its descriptor fields). A join marks the rank as joined.
  void add(int rank, const Request& request, Clock::time_point now);
  // Registers a static process set (every rank registers the same ones at init, before any request).
  void addStaticSet(int32_t id, std::vector<int> ranks);
  // Records rank's response cache hit: the name cached under id, as cachedRequest(id, rank) describes it.
  // Throws BackendError as cachedRequest() does.
  void addCached(int rank, uint32_t id, Clock::time_point now);
  // The request a response cache hit of rank's stands for (the name cached under id, with rank's descriptor).
  // Throws BackendError for an id that was never assigned, or that rank never submitted under it.
  const Request& cachedRequest(uint32_t id, int rank) const;
  // Rank asks the job to shut down (hvd_shutdown()).
  void requestShutdown(int rank);
  // What rank's user threads are blocked waiting for (process set, name); replaces what it said before.
  void setWaiting(int rank, std::vector<std::pair<int32_t, std::string>> names);

  // Responses for every name ready now, and the shutdown decision. Empty list when nothing is ready.
  ResponseList next();

  // Warning text (empty: nothing newly stalled) for names pending on some ranks for longer than the
  // warning time; each name is reported once. Arms the stall shutdown when its time has passed.
  // Deadlock: when every rank is blocked (setWaiting) on names that are pending, missing ranks that are
  // themselves blocked, and no name is ready, nothing can ever complete; once that has lasted the warning
  // time, the job shuts down and every pending operation fails with a message naming, per rank, what it
  // waits for and which ranks never submitted it (stall checks off: never). First, with stall checks on or
  // off, hits older than their age limit go to the general bookkeeping (see above).
  std::string checkStalls(Clock::time_point now);
  // When checkStalls() should run next: for a stall check, or for hits to reach their age limit (nullopt:
  // neither is due).
  std::optional<Clock::time_point> nextStallCheck() const;

  bool idle() const { return pending_.empty() && ready_.empty() && hit_ids_.empty(); }

  // Names answered so far because every member hit (for the debug log, and tests).
  uint64_t answeredByHits() const { return answered_by_hits_; }

  // How long cache hits wait for the other members before they go to the general bookkeeping.
  static constexpr std::chrono::milliseconds kHitsAge{100};

  // The names some ranks submitted and others have not, submitted at least min_age before now: the oldest
  // first, at most `limit`. Each names its operation (name(OpType)), its process set, the ranks that
  // submitted it and the ranks it waits for (joined ranks are not waited for), and its age in seconds.
  // Names that every rank submitted but wait for the rest of their group are not listed.
  std::vector<CollectiveWait> waits(Clock::time_point now, Clock::duration min_age, size_t limit) const;

  // Autotune: fuse up to this many bytes from the next response list on.
  void setFusionThreshold(size_t bytes) { options_.fusion_threshold = bytes; }

  // Fusion window: while names are ready but others are still arriving (submitted by some ranks), the
  // ready ones wait up to `window` from the moment the first of them became ready, so one response
  // fuses them all. Returns when to call next() at the latest, or nullopt to call it now. A lone
  // operation never waits: with nothing else pending there is nothing to wait for.
  std::optional<Clock::time_point> holdUntil(Clock::time_point now, std::chrono::microseconds window) const;

 private:
  // A name within its process set.
  using Key = std::pair<int32_t, std::string>;
  struct Pending {
    std::vector<std::optional<Request>> by_rank;  // by global rank
    int reported = 0;
    Clock::time_point first_seen;
    bool warned = false;
    bool queued = false;  // complete: in ready_, or in its group's list
  };
  struct Group {
    int32_t size = 0;
    std::vector<Key> complete;  // members complete so far, in completion order
  };

  // A name that became ready: by hits (hit: its cache id; key unused), or pending_'s (or the join's) key.
  struct Ready {
    uint32_t hit = 0;
    Key key;
  };

  // The general path of add(): the request joins pending_ (id: the name's cache id, 0 if none).
  void addPending(int rank, Key key, uint32_t id, const Request& request, Clock::time_point now,
                  Clock::time_point first_seen);
  void markReadyIfComplete(const Key& key, Pending& p);
  // Whether a submission of cache entry id may count as a hit, and counting one.
  bool mayHit(uint32_t id) const;
  void hit(int rank, uint32_t id, Clock::time_point now);
  // Moves id's counted hits into pending_, as the requests they stand for.
  void demote(uint32_t id, Clock::time_point now);
  // Clears id's counted hits and takes it out of hit_ids_.
  void forgetHits(uint32_t id);
  void demoteHits(Clock::time_point now, Clock::duration min_age);
  Clock::duration hitsAge() const;
  // Erases a name from pending_ (next() answered it).
  void erasePending(std::map<Key, Pending>::iterator it);
  // The ranks of set id (empty when unknown).
  const std::vector<int>& members(int32_t id) const;
  std::optional<std::string> validate(const Key& key, const Pending& p) const;
  Response build(const Key& key, const Pending& p) const;
  // Registers or removes a set: the response every rank executes, or an error response.
  Response processSet(const Key& key, const Pending& p);

  CoordinatorOptions options_;
  std::map<Key, Pending> pending_;
  std::map<Key, Group> groups_;     // by (process set, group name)
  std::vector<Ready> ready_;        // in the order names became ready; an empty name: every rank joined
  std::map<int32_t, std::vector<int>> sets_;  // process set id -> sorted global ranks (0: all)
  int32_t next_set_id_ = 1;
  Clock::time_point ready_since_;   // when ready_ became non-empty
  Clock::time_point last_add_;
  std::set<int> joined_;
  int last_joined_ = -1;
  Clock::time_point join_since_;    // when the first rank of the pending join joined
  bool join_warned_ = false;        // the stall inspector has logged the pending join
  bool join_stalled_ = false;       // the stall shutdown fails the pending join
  std::optional<std::string> shutdown_reason_;
  std::vector<Key> stalled_names_;  // to fail with the stall shutdown
  std::vector<std::vector<Key>> waiting_;            // by rank: what its user threads are blocked on
  std::optional<Clock::time_point> deadlock_since_;  // since when every rank has been blocked so
  // The deadlock's description when every rank is blocked on pending names (see checkStalls), else nullopt.
  std::optional<std::string> deadlock() const;
  // Response cache: names by id - 1, with their descriptors: one, the same on every rank, or one per rank for
  // allgather and alltoall, whose rows differ by rank (each rank's stays the same from step to step). Ids
  // are never reused or evicted (when full, new names are simply not cached), so every rank's copy stays
  // valid.
  struct Cached {
    Key key;
    std::vector<std::optional<Request>> descriptors;  // one, or by global rank
    // The response of the name alone, built when the descriptors were last validated (with cache_ids {id}),
    // and whether hits may complete the name (not for a group's member, which waits for its group).
    Response response;
    bool may_hit = false;
    bool in_pending = false;      // pending_ holds the name: hits are not counted meanwhile
    std::vector<uint8_t> hit_by;  // by global rank: 1 where a hit is counted
    int hits = 0;
    size_t hit_slot = 0;  // where hit_ids_ holds this id while hits > 0
    Clock::time_point first_hit;
  };
  std::vector<Cached> cache_;
  std::vector<uint32_t> hit_ids_;  // the entries with hits counted, short of every member's
  uint64_t answered_by_hits_ = 0;
  std::unordered_map<Key, uint32_t, SetNameHash, SetNameEqual> cache_ids_;
};

// "[0, 2-5, 7]"
std::string formatRanks(const std::vector<int>& ranks);

}  // namespace hvd::runtime
