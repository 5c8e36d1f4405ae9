// hvd::runtime::Runtime: one member of a job -- its Gloo contexts, its control-plane connection and
// the background thread that negotiates and runs its collectives.
//
// Several Runtimes can live in one process (tests run ranks as threads over a MemoryStore); the C API
// wraps one global instance.
//
// Invariant (what lets ranks submit in different orders): every rank executes collectives only from
// the coordinator's ResponseLists, and every rank receives the same lists in the same order, so every
// Gloo context sees the same sequence of operations on every rank. The one exception keeps the sequence
// the same: in a job on one host, a response cache hit that is the only pending operation of every rank
// is agreed on in the shared-memory segment instead, which happens only while no list is in flight to
// anyone (runtime/agreement.cc).
//
// Threading: enqueue()/shutdown() and the getters are safe from any thread. Works complete on the
// background thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"
#include "runtime/options.h"
#include "runtime/work.h"

namespace hvd::rendezvous {
class HttpStore;
}  // namespace hvd::rendezvous

namespace hvd::runtime {

class Runtime {
 public:
  // Joins the job: rendezvous of the global, local_<host> and cross_<local_rank> Gloo contexts and of
  // the control plane through store, then starts the background thread. Blocks until every rank has
  // joined or options.rendezvousTimeout() expires (the Gloo timeout; an elastic job's elastic timeout).
  // Throws UsageError / StoreError / NetworkError / BackendError (PeerLostError: a peer's connection closed
  // during setup) naming the cause.
  Runtime(RuntimeOptions options, std::shared_ptr<rendezvous::Store> store);

  // The store the options name: HttpStore for HOROVOD_GLOO_RENDEZVOUS_ADDR (in an elastic job seen through
  // the round's scopes, whose waits end when a later round begins: elastic::RoundWatchStore), else a
  // MemoryStore (size 1).
  static std::shared_ptr<rendezvous::Store> makeStore(const RuntimeOptions& options);

  // The options' rendezvous server, unscoped (for the elastic job's rounds). UsageError when none is set.
  static std::shared_ptr<rendezvous::HttpStore> server(const RuntimeOptions& options);

  // Elastic jobs: `options` with this slot's place in the first round after `after`, waiting up to
  // options.elastic_timeout for the driver to form it. Throws BackendError when the round leaves the slot
  // out, RendezvousTimeout when no round comes, StoreError when the server is not an elastic job's.
  // `until_taken_in` (a standby process's first init): rounds that leave the slot out are passed over
  // until one takes it in or the timeout passes (RendezvousTimeout).
  static RuntimeOptions nextElasticRound(RuntimeOptions options, uint64_t after, bool until_taken_in = false);

  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeOptions& options() const;
  int rank() const { return options().rank; }
  int size() const { return options().size; }
  int localRank() const { return options().local_rank; }
  int localSize() const { return options().local_size; }
  int crossRank() const { return options().cross_rank; }
  int crossSize() const { return options().cross_size; }
  // CUDA device pinned at init, -1: CPU.
  int device() const;
  // Response cache hits this rank ran without asking the coordinator, agreed with the other ranks in the
  // shared-memory segment (HVD_FAST_PATH; see the invariant above).
  uint64_t agreedOperations() const;
  // This rank's announcements that the other ranks did not all make (its operation then went to rank 0).
  uint64_t refusedAnnouncements() const;
  // Agreed broadcasts this rank read from the message its root staged in the shared-memory segment before the
  // operation was agreed (HVD_SHM_EAGER_BROADCAST; runtime/shm/transport.h).
  uint64_t stagedBroadcastReads() const;

  // Queues a collective. Rejects bad arguments (including a process set that is unknown or does not
  // include this rank) and a name already in flight in its process set on this rank with UsageError,
  // and anything after shutdown with ShutDownError. An empty name gets "<op>.noname.<n>", n counting
  // this rank's unnamed submissions of that operation on that process set (Horovod counts every
  // submission of every kind, so ranks that differ in any operation, such as the non-members of a
  // process set, fall out of step).
  std::shared_ptr<Work> enqueue(Request request);

  // Queues requests as one group (negotiated as a unit: the members run together, allreduces fused where
  // the threshold allows). All of one operation type and process set. All queued, or none (UsageError).
  std::vector<std::shared_ptr<Work>> enqueueGroup(std::vector<Request> requests);

  // Process sets. Registration is collective over the whole job (every rank adds or removes the same
  // set, in the same order) and negotiated like a collective; the Work finishes once the set is usable
  // here, with its id in Work::result_int. Needs options().dynamic_process_sets unless is_static (sets
  // registered at init, which cannot be removed). UsageError at once for ranks out of range or repeated;
  // through the Work for a duplicate of an existing set (UsageError) or ranks that disagree
  // (MismatchError).
  std::shared_ptr<Work> addProcessSet(std::vector<int> ranks, bool is_static = false);
  std::shared_ptr<Work> removeProcessSet(int32_t id);
  // The sorted global ranks of a registered set; nullopt for an unknown id.
  std::optional<std::vector<int>> processSetRanks(int32_t id) const;
  std::vector<int32_t> processSetIds() const;  // ascending, 0 first

  // Orderly shutdown of the whole job (Horovod semantics: every rank leaves together; operations still
  // pending fail with ShutDownError). Blocks until this rank's background thread has stopped; at once when
  // it stopped already (a lost peer: pending operations failed with PeerLostError). Idempotent.
  void shutdown();

  // True once the background thread stopped (shutdown, a lost peer, a stall shutdown).
  bool stopped() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::runtime
