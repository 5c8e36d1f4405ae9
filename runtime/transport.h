// Transport: the data path of one group of ranks (a process set, the ranks of one host, the whole
// job). The runtime negotiates what runs; a Transport moves and reduces the bytes. Implementations:
//   GlooTransport           Gloo's TCP pairs (any placement; the only one across hosts)
//   shm::Transport          one shared-memory segment per host (runtime/shm/transport.h)
//   HierarchicalTransport   shared memory within each host, Gloo between hosts (runtime/hierarchical.h)
//
// Contract shared by every implementation:
//   - Collective: every member calls the same operations with the same arguments (counts, types, root)
//     in the same order; results are bit-identical on every member.
//   - kAverage reduces as kSum: the caller divides through its postscale.
//   - A failed operation throws hvd::BackendError naming the operation, this rank and, where known, the
//     rank that was lost (hvd::PeerLostError when a member died or its connection closed); the transport
//     is unusable afterwards (failed() turns true).
//   - Used by one thread at a time (the runtime's background thread).
#pragma once

#include <cstddef>
#include <vector>

#include "gloo_backend/types.h"

namespace hvd::runtime {

using gloo_backend::DataType;
using gloo_backend::ReduceOp;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The data path's name, upper case: the timeline's activity prefix ("SHM" -> "SHM_ALLREDUCE") and the
  // word --verbose logs.
  virtual const char* path() const = 0;
  // The path operation op (the timeline's name: "ALLREDUCE", "ALLGATHER", ...) takes; path() unless the
  // transport routes operations differently.
  virtual const char* pathOf(const char* op) const {
    (void)op;
    return path();
  }

  // In place, count elements.
  virtual void allreduce(void* data, size_t count, DataType type, ReduceOp op) = 0;
  // A buffer of at least `bytes` that allreduce() reduces without a copy in and out of the transport's
  // own staging area, or nullptr where there is none. Clobbered by every operation.
  virtual std::byte* stagingBuffer(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // One tensor of a fused allreduce: count elements read from in, the result written to out (in itself or
  // elsewhere).
  struct Part {
    const void* in;
    void* out;
    size_t count;
  };
  // Allreduces the concatenation of parts as one operation without packing them into a fusion buffer, where
  // the transport can (true); false (the same on every member): nothing done, the caller packs them.
  virtual bool allreduceParts(const std::vector<Part>& parts, DataType type, ReduceOp op) {
    (void)parts, (void)type, (void)op;
    return false;
  }
  // In place, from root (a rank of this group).
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Rank r contributes bytesPerRank[r] bytes from in; out receives every contribution in rank order.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) = 0;
  // Rank r sends sendBytes[p] bytes (consecutive in `in`) to each p and receives recvBytes[p] from p into
  // consecutive ranges of out.
  virtual void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                         const std::vector<size_t>& recvBytes) = 0;
  // In place: data holds sum(counts) elements in blocks by rank; block p ends up reduced over every rank
  // on rank p; other blocks are clobbered.
  virtual void reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) = 0;
  // Out of place, where the transport can: in (laid out as for reduceScatter) is left as it is, out receives
  // block rank(). false (the same on every member): not supported, nothing done; use reduceScatter.
  virtual bool reduceScatterInto(const void* in, void* out, const std::vector<size_t>& counts, DataType type,
                                 ReduceOp op) {
    (void)in, (void)out, (void)counts, (void)type, (void)op;
    return false;
  }
  virtual void barrier() = 0;

  // Releases the transport. orderly=false: the job is being aborted, peers still waiting on this rank
  // are told to fail rather than wait for it. Idempotent, never throws.
  virtual void close(bool orderly = true) noexcept = 0;
  virtual bool failed() const = 0;
};

}  // namespace hvd::runtime
