#include "runtime/hierarchical.h"

namespace hvd::runtime {

void HierarchicalTransport::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
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

}  // namespace hvd::runtime
