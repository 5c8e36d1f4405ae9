// GlooTransport: the Transport over one Gloo context (gloo_backend::Communicator, TCP pairs between the
// members). Works for any placement of ranks; the only transport between hosts.
#pragma once

#include <memory>

#include "gloo_backend/communicator.h"
#include "runtime/transport.h"

namespace hvd::runtime {

class GlooTransport final : public Transport {
 public:
  explicit GlooTransport(std::shared_ptr<gloo_backend::Communicator> comm) : comm_(std::move(comm)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  const char* path() const override { return "GLOO"; }
  gloo_backend::Communicator& communicator() { return *comm_; }

  void allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    comm_->allreduce(data, count, type, op);
  }
  std::byte* stagingBuffer(size_t bytes) override { return comm_->stagingBuffer(bytes); }
  void broadcast(void* data, size_t bytes, int root) override { comm_->broadcast(data, bytes, root); }
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override {
    comm_->allgatherv(in, out, bytesPerRank);
  }
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override {
    comm_->alltoallv(in, sendBytes, out, recvBytes);
  }
  void reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) override {
    comm_->reduceScatter(data, counts, type, op);
  }
  void barrier() override { comm_->barrier(); }
  void close(bool orderly) noexcept override { comm_->close(orderly); }
  bool failed() const override { return comm_->failed(); }

 private:
  std::shared_ptr<gloo_backend::Communicator> comm_;
};

}  // namespace hvd::runtime
