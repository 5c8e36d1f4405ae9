#include "runtime/hierarchical.h"

#include <cstring>
#include <numeric>

namespace hvd::runtime {

const char* HierarchicalTransport::pathOf(const char* op) const {
  if ((allreduce_ && std::strcmp(op, "ALLREDUCE") == 0) || (allgather_ && std::strcmp(op, "ALLGATHER") == 0)) {
    return path();
  }
  return flat_->pathOf(op);
}

void HierarchicalTransport::allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  if (!allgather_) return flat_->allgatherv(in, out, bytesPerRank);
  const int local_size = local_->size(), hosts = cross_->size();
  const int me = local_->rank();
  // Contribution of (host h, local rank l) is bytesPerRank[h * local_size + l].
  auto bytesOf = [&](int h, int l) { return bytesPerRank[static_cast<size_t>(h * local_size + l)]; };
  std::vector<size_t> across(hosts), within(local_size, 0);
  for (int h = 0; h < hosts; ++h) across[h] = bytesOf(h, me);
  for (int l = 0; l < local_size; ++l) {
    for (int h = 0; h < hosts; ++h) within[l] += bytesOf(h, l);
  }
  const size_t mine = within[me];
  const size_t total = std::accumulate(within.begin(), within.end(), size_t{0});
  if (across_.size() < mine) across_.resize(mine);
  if (within_.size() < total) within_.resize(total);
  // 1. Across hosts, among the ranks of this local rank: host h's contribution at offset sum(across[<h]).
  cross_->allgatherv(in, across_.data(), across);
  // 2. Within the host: local rank l's block holds every host's contribution of local rank l.
  local_->allgatherv(across_.data(), within_.data(), within);
  // 3. Into the job's order: rank h * local_size + l.
  std::vector<size_t> out_offset(bytesPerRank.size());
  for (size_t r = 1; r < bytesPerRank.size(); ++r) out_offset[r] = out_offset[r - 1] + bytesPerRank[r - 1];
  auto* dst = static_cast<std::byte*>(out);
  size_t src = 0;
  for (int l = 0; l < local_size; ++l) {
    for (int h = 0; h < hosts; ++h) {
      const size_t n = bytesOf(h, l);
      if (n) std::memcpy(dst + out_offset[static_cast<size_t>(h * local_size + l)], within_.data() + src, n);
      src += n;
    }
  }
}

void HierarchicalTransport::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  if (!allreduce_) return flat_->allreduce(data, count, type, op);
  const int n = local_->size();
  const int me = local_->rank();
  const size_t es = gloo_backend::elementSize(type);
  std::vector<size_t> counts(n), bytes(n);
  size_t first = 0;
  for (int k = 0; k < n; ++k) {
    counts[k] = count / n + (static_cast<size_t>(k) < count % n ? 1 : 0);
    bytes[k] = counts[k] * es;
    if (k < me) first += counts[k];
  }
  auto* base = static_cast<std::byte*>(data);
  local_->reduceScatter(data, counts, type, op);
  if (counts[me]) cross_->allreduce(base + first * es, counts[me], type, op);
  local_->allgatherv(base + first * es, data, bytes);
}

// The collectives without a hierarchical algorithm run on the flat path.

void HierarchicalTransport::broadcast(void* data, size_t bytes, int root) {
  flat_->broadcast(data, bytes, root);
}

void HierarchicalTransport::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                                      const std::vector<size_t>& recvBytes) {
  flat_->alltoallv(in, sendBytes, out, recvBytes);
}

void HierarchicalTransport::reduceScatter(void* data, const std::vector<size_t>& counts, DataType type,
                                          ReduceOp op) {
  flat_->reduceScatter(data, counts, type, op);
}

void HierarchicalTransport::barrier() { flat_->barrier(); }

}  // namespace hvd::runtime
