// HierarchicalTransport: allreduce in three steps for jobs with several ranks on each of several hosts
// (HOROVOD_HIERARCHICAL_ALLREDUCE=1):
//   1. reduce-scatter within the host over shared memory: local rank k ends up with block k of the
//      buffer reduced over its host (blocks: count / local_size elements, the first count % local_size
//      one more);
//   2. allreduce of block k across hosts over Gloo, in the context of the ranks with local rank k
//      (cross_<k>), so every local rank carries 1/local_size of the traffic between hosts, in parallel;
//   3. allgather within the host over shared memory.
// Every block is reduced in the same order on every host's rank k, then by one Gloo allreduce that is
// bit-identical across its members, so results are bit-identical on every rank, as on the flat path.
//
// Allgather (HOROVOD_HIERARCHICAL_ALLGATHER=1), in two steps plus a reordering copy:
//   1. allgather across hosts over Gloo in cross_<k>: each rank exchanges only its own contribution with
//      the ranks of its local rank, so the traffic between hosts is spread over the local ranks as above;
//   2. allgather within the host over shared memory of what step 1 gathered;
//   3. a copy from local-rank-major order into the job's rank order.
// It needs the job's ranks numbered host by host (rank = cross_rank * local_size + local_rank), which
// the runtime checks with the rest.
//
// Needs the same number of ranks on every host (the runtime checks this on every rank together and
// falls back to the flat path otherwise). The other collectives, and those of the two above that are
// not switched on, run on the flat path.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/transport.h"

namespace hvd::runtime {

class HierarchicalTransport final : public Transport {
 public:
  // local: the ranks of this host; cross: the ranks with this local rank, one per host; flat: the job.
  // allreduce, allgather: which of the two take the hierarchical path.
  HierarchicalTransport(std::shared_ptr<Transport> local, std::shared_ptr<Transport> cross,
                        std::shared_ptr<Transport> flat, bool allreduce, bool allgather)
      : local_(std::move(local)), cross_(std::move(cross)), flat_(std::move(flat)), allreduce_(allreduce),
        allgather_(allgather) {}

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  const char* path() const override { return "HIERARCHICAL"; }
  const char* pathOf(const char* op) const override;

  void allreduce(void* data, size_t count, DataType type, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override;
  // On the flat path.
  void broadcast(void* data, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override;
  void reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) override;
  void barrier() override;
  // The parts are closed by their owner (the runtime closes each context once, in rendezvous order).
  void close(bool) noexcept override {}
  bool failed() const override { return local_->failed() || cross_->failed() || flat_->failed(); }

 private:
  std::shared_ptr<Transport> local_, cross_, flat_;
  const bool allreduce_, allgather_;
  std::vector<std::byte> across_, within_;  // allgather's intermediate results, reused
};

}  // namespace hvd::runtime
