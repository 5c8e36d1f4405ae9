// One Gloo context (a full mesh of TCP pairs between the members of a scope) and the collectives the
// runtime runs on it.
//
// Rendezvous keeps Horovod's keys and lifecycle, so it runs through horovodrun's server
// as well as ours: <scope>/<r> holds rank r's pair addresses, a barrier makes sure nobody finalizes before
// every peer has connected, then DELETE <scope>/<r> (the server's scope finalize). Per rank that is 1 PUT, 2
// sliced multi-key fetches (3 for IPv6) of every rank's key (its own included, so that every member asks for
// the same list and the server parses it once): every list's 20-byte peer prefix (one range, the same on
// every rank, so the server builds that answer once for all; a second fetch of the whole fixed-size headers
// only when a peer's address is IPv6, which the prefix cannot hold) and this rank's column (its own entry in
// every list, at header + rank x entry), then 1 DELETE: about N x (prefix + entry) bytes per rank. The value
// is the address list of address_list.h, not connectFullMesh's 136 bytes per peer: a member of this scope
// must be a libhvd of the same layout version (Horovod's own Gloo workers cannot share a scope with ours).
// It replaces connectFullMesh itself, which costs more: that one publishes <scope>/rank_<r> host names that
// every rank reads for all lower ranks, one blocking GET each (O(size^2) requests per job, for
// Pair::setLocalRank, which the TCP transport never reads), and fetches the peers' values one GET at a
// time; the device loop ticks while the pairs connect (device.h).
//
// Orderly close (why close() runs a barrier; our reading of Gloo's pair.cc, see docs/runtime.md): Gloo's
// TCP pair turns EOF on a socket into an IoException ("Connection closed by peer") that it stores in the
// pair and hands to every operation still outstanding on it. Operations the device loop thread drives by
// itself (a send released by the peer's ready-to-receive notification: Pair::handleRemotePendingRecv ->
// sendAsyncMode -> throwIfException) rethrow it on that thread, where nothing can catch it and the
// process aborts (exit 134). A rank must therefore close its sockets only when no peer has anything
// outstanding with it: close() runs a final barrier -- its last messages are read by every rank before
// it leaves -- and only then destroys the pairs. EOF seen on an idle pair is harmless (stored, never
// thrown).
//
// Threading: a Communicator is used by one thread at a time (the runtime's background thread), except that
// the AbortSignal of its options may be raised from any thread (abort_signal.h).
// Errors: Gloo failures are rethrown naming the scope, the operation and this rank: hvd::PeerLostError
// where a peer's connection closed or was reset (the peer died or its host went away), hvd::BackendError
// for the rest (timeouts included); an operation failed by the AbortSignal rethrows the signal's error
// (with the same context); the context is unusable afterwards.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gloo_backend/abort_signal.h"
#include "gloo_backend/device.h"
#include "gloo_backend/types.h"
#include "rendezvous/store.h"

namespace gloo {
class Algorithm;
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace hvd::gloo_backend {

struct CommunicatorOptions {
  std::string scope = "global";  // "global", "local_<host>", "cross_<local_rank>"
  int rank = 0;
  int size = 1;
  // Every collective (HOROVOD_GLOO_TIMEOUT_SECONDS), and the rendezvous waits unless rendezvous_timeout is set.
  std::chrono::milliseconds timeout{rendezvous::Store::kDefaultTimeout};
  // The store waits of connect() for the peers' addresses, where they may come later than a collective's
  // timeout allows (elastic jobs: HOROVOD_ELASTIC_TIMEOUT); unset: timeout.
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  // Raised by another thread when the job lost a peer: fails the operation in flight and every later one
  // (abort_signal.h). Null: operations end only by completing, by Gloo's own errors or by the timeout.
  std::shared_ptr<AbortSignal> abort;
};

// Message sizes (bytes) up to which allreduce uses the latency-optimised algorithms; see allreduce().
inline constexpr size_t kSmallAllreduceBytes = 256 * 1024;
inline constexpr size_t kLegacyRingBytes = 1024 * 1024;

class Communicator {
 public:
  // Rendezvous of one scope through store (unscoped; the scope prefix is added here). Blocks until
  // every member has connected or options.timeout expires (RendezvousTimeout / BackendError).
  // A scope of size 1 has no peers: it returns at once, without any store traffic.
  static std::unique_ptr<Communicator> connect(std::shared_ptr<rendezvous::Store> store,
                                               std::shared_ptr<Device> device, const CommunicatorOptions& options);
  ~Communicator();  // close(); never throws
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const std::string& scope() const { return options_.scope; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // In-place allreduce of count elements. kAverage sums (the caller divides through its postscale).
  // Results are bit-identical on every rank.
  // Algorithm by size: on 2 ranks, up to kLegacyRingBytes of float32/float64/int32/int64, Gloo's legacy
  // AllreduceRing on a fixed staging buffer (pre-registered buffers: data goes straight into the peer's
  // registered inbox, with no ready-to-send/receive notifications; instances are cached per element
  // count, type and op). Other small ones: Gloo's bcube (log2(size) rounds). Above the limit: our ring,
  // a reduce-scatter then an allgather of the same blocks (bandwidth optimal: each rank sends 2(n-1)/n of
  // the data), on buffers the abort signal reaches (Gloo's own ring keeps a scratch buffer it cannot).
  //
  // Why only 2 ranks, and why a warm-up: Gloo's tcp::Pair sets SO_SNDBUF to the size of the first
  // legacy-buffer message it sends on a pair (and never again), which also turns off the kernel's
  // send-buffer autotuning for that socket. A first message of a few bytes leaves the socket with the
  // kernel's minimum (4.5 KiB), and every later large transfer on it crawls (a 16 MiB allreduce went
  // from 14 to 320 ms). So the first legacy ring of a communicator is preceded by one of
  // kLegacyRingBytes, which asks for 1 MiB (the kernel doubles it to 2 MiB; where net.core.wmem_max is
  // lower it caps the request, 416 KiB with Debian's default, still far above 4.5 KiB). On 3+ ranks the ring's first message to
  // the left neighbour is a 4-byte notification, which no warm-up can precede; and there the legacy
  // ring only ever served integers and min/max (float sums would differ per rank in the last bits).
  void allreduce(void* data, size_t count, DataType type, ReduceOp op);

  // A buffer of at least `bytes` (kLegacyRingBytes) that allreduce() reduces without copying in and out
  // of the legacy ring's registered staging buffer, because it is that buffer; nullptr above
  // kLegacyRingBytes. For callers that pack (the fusion buffer): pack here, then allreduce(buffer, ...).
  // Valid until the Communicator is closed; its contents are clobbered by every allreduce.
  std::byte* stagingBuffer(size_t bytes);

  // In-place broadcast of bytes from root (binomial tree).
  void broadcast(void* data, size_t bytes, int root);

  // Rank r contributes bytesPerRank[r] bytes from in; out receives all contributions in rank order.
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank);

  // Rank r sends sendBytes[p] bytes (consecutive in `in`) to each p and receives recvBytes[p] from p
  // into consecutive ranges of out.
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes);

  // Ring reduce-scatter, in place: data holds sum(counts) elements, block p (counts[p] elements, blocks
  // consecutive in rank order) ends up reduced over every rank on rank p; other blocks are clobbered.
  // Each rank sends and receives (n-1)/n of the data, half of what an allreduce moves. kAverage sums.
  void reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op);

  void barrier();

  // Final barrier, then closes every pair (see the header comment). Idempotent. When the barrier fails
  // (a peer already died) the pairs are closed anyway: there is nobody left to protect. orderly=false
  // skips the barrier: the job is being aborted because a peer was lost, and waiting for it would only
  // add the Gloo timeout.
  void close(bool orderly = true) noexcept;

  // True once an operation failed: Gloo pairs are closed after any error, so the context is dead.
  bool failed() const { return failed_; }

 private:
  Communicator(CommunicatorOptions options, std::shared_ptr<Device> device, std::shared_ptr<gloo::Context> context);
  uint32_t nextTag() { return tag_++; }
  template <typename F>
  void guarded(const char* what, F&& body);
  // An unbound buffer over [ptr, ptr + bytes), attached to options_.abort through watched for as long as
  // watched lives (abort_signal.h); every operation gives Gloo its buffers through this or Watched::watch.
  class Watched;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer(Watched& watched, const void* ptr, size_t bytes);

  // The legacy small-message path (see allreduce()). Instances are created and evicted in the same
  // order on every rank (every rank runs the same operations), so their Gloo slots agree.
  bool allreduceSmall(void* data, size_t count, DataType type, ReduceOp op);
  // The ring over blocks of counts[p] elements (consecutive in rank order): reduce-scatter, then with
  // gather an allgather of the reduced blocks (an allreduce). Runs inside guarded().
  void ring(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op, bool gather);
  struct SmallAlgorithm {
    size_t count;
    DataType type;
    ReduceOp op;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  static constexpr size_t kMaxSmallAlgorithms = 32;
  std::vector<std::byte> small_buffer_;         // kLegacyRingBytes, never reallocated
  std::vector<std::byte> inbox_;                // reduceScatter's receive block, grown on demand
  std::list<SmallAlgorithm> small_algorithms_;  // most recently used first
  bool warmed_up_ = false;                      // the pair's SO_SNDBUF was set by a large first message

  CommunicatorOptions options_;
  std::shared_ptr<Device> device_;  // ticks while the pairs close (see device.h)
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
  bool failed_ = false;
};

}  // namespace hvd::gloo_backend
