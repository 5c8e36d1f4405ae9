// libhvd C++ API (C++20): RAII session, typed spans, Work handles whose wait() rethrows a typed
// exception. Header-only over the C API (hvd/hvd.h), so the library's ABI is the C one.
//
//   hvd::Session session;                              // hvd_init(); hvd_shutdown() at scope exit
//   std::vector<float> grad(n);
//   hvd::allreduce<float>(grad, hvd::ReduceOp::kAverage, "grad");    // in place, synchronous
//   auto work = hvd::allreduceAsync<float>(grad, grad, hvd::ReduceOp::kSum, "g2");
//   work.wait();                                       // throws hvd::MismatchError, ...
//
// Threading: as the C API (any thread).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hvd/hvd.h"

namespace hvd {

// Exceptions, one per hvd_status.
class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};
class NotInitializedError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class InvalidArgumentError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class MismatchError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class ShutDownError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class CommunicationError : public CollectiveError {  // a peer died, a timeout expired
  using CollectiveError::CollectiveError;
};
class StalledError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class InitError : public CollectiveError {
  using CollectiveError::CollectiveError;
};

// Throws the exception matching status (with hvd_error_text()) unless it is HVD_SUCCESS.
inline void check(int status) {
  if (status >= 0) return;
  const std::string text = hvd_error_text();
  switch (status) {
    case HVD_ERR_NOT_INITIALIZED: throw NotInitializedError(status, text);
    case HVD_ERR_INVALID_ARGUMENT: throw InvalidArgumentError(status, text);
    case HVD_ERR_MISMATCH: throw MismatchError(status, text);
    case HVD_ERR_SHUT_DOWN: throw ShutDownError(status, text);
    case HVD_ERR_BACKEND: throw CommunicationError(status, text);
    case HVD_ERR_STALLED: throw StalledError(status, text);
    case HVD_ERR_INIT: throw InitError(status, text);
    default: throw CollectiveError(status, text);
  }
}

enum class ReduceOp { kAverage = HVD_AVERAGE, kSum = HVD_SUM, kMin = HVD_MIN, kMax = HVD_MAX, kProduct = HVD_PRODUCT };

// 16-bit floating point types, stored as their bit patterns.
struct float16 {
  uint16_t bits;
};
struct bfloat16 {
  uint16_t bits;
};

template <typename T>
constexpr hvd_dtype dtypeOf() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, uint8_t>) return HVD_UINT8;
  else if constexpr (std::is_same_v<U, int8_t>) return HVD_INT8;
  else if constexpr (std::is_same_v<U, int32_t>) return HVD_INT32;
  else if constexpr (std::is_same_v<U, int64_t>) return HVD_INT64;
  else if constexpr (std::is_same_v<U, float16>) return HVD_FLOAT16;
  else if constexpr (std::is_same_v<U, bfloat16>) return HVD_BFLOAT16;
  else if constexpr (std::is_same_v<U, float>) return HVD_FLOAT32;
  else if constexpr (std::is_same_v<U, double>) return HVD_FLOAT64;
  else if constexpr (std::is_same_v<U, bool>) return HVD_BOOL;
  else static_assert(sizeof(U) == 0, "libhvd has no dtype for this element type");
}

// One submitted operation. Move-only; the destructor waits (ignoring errors) so buffers are never
// used after the caller's scope ended.
class Work {
 public:
  explicit Work(int handle) : handle_(handle) {}
  Work(Work&& other) noexcept : handle_(std::exchange(other.handle_, -1)) {}
  Work& operator=(Work&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, -1);
    }
    return *this;
  }
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work() { reset(); }

  // True when finished (successfully or not).
  bool poll() const { return handle_ < 0 || hvd_poll(handle_) == 1; }
  // Blocks until finished; throws the operation's error.
  void wait() {
    if (handle_ < 0) return;
    const int status = hvd_wait(std::exchange(handle_, -1));
    check(status);
  }

 private:
  void reset() {
    if (handle_ >= 0) hvd_wait(std::exchange(handle_, -1));
  }
  int handle_;
};

// RAII: hvd_init() (throws InitError) ... hvd_shutdown().
class Session {
 public:
  Session() { check(hvd_init()); }
  ~Session() { hvd_shutdown(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const { return hvd_rank(); }
  int size() const { return hvd_size(); }
  int localRank() const { return hvd_local_rank(); }
  int localSize() const { return hvd_local_size(); }
  int crossRank() const { return hvd_cross_rank(); }
  int crossSize() const { return hvd_cross_size(); }
  int device() const { return hvd_device(); }
};

// output = postscale * reduce(prescale * input); input and output may be the same span.
template <typename T>
Work allreduceAsync(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::kAverage,
                    const std::string& name = "", double prescale = 1.0, double postscale = 1.0) {
  if (input.size() != output.size()) {
    throw InvalidArgumentError(HVD_ERR_INVALID_ARGUMENT, "allreduce '" + name + "': input has " +
                                                             std::to_string(input.size()) + " elements, output " +
                                                             std::to_string(output.size()));
  }
  const int h = hvd_allreduce_async(name.empty() ? nullptr : name.c_str(), input.data(), output.data(),
                                    input.size(), dtypeOf<T>(), static_cast<hvd_reduce_op>(op), prescale, postscale);
  check(h);
  return Work(h);
}

// In place, synchronous.
template <typename T>
void allreduce(std::span<T> data, ReduceOp op = ReduceOp::kAverage, const std::string& name = "") {
  allreduceAsync<T>(std::span<const T>(data.data(), data.size()), data, op, name).wait();
}

template <typename T>
Work broadcastAsync(std::span<T> data, int root_rank, const std::string& name = "") {
  const int h = hvd_broadcast_async(name.empty() ? nullptr : name.c_str(), data.data(), data.size(), dtypeOf<T>(),
                                    root_rank);
  check(h);
  return Work(h);
}

template <typename T>
void broadcast(std::span<T> data, int root_rank, const std::string& name = "") {
  broadcastAsync<T>(data, root_rank, name).wait();
}

// Allgather of rows (each row_elements long; rows may differ between ranks). Returns all ranks' rows.
template <typename T>
std::vector<T> allgather(std::span<const T> input, size_t row_elements = 1, const std::string& name = "") {
  const size_t rows = row_elements ? input.size() / row_elements : 0;
  const int h = hvd_allgather_async(name.empty() ? nullptr : name.c_str(), input.data(), rows, row_elements,
                                    dtypeOf<T>());
  check(h);
  const int status = hvd_wait(h);
  if (status != HVD_SUCCESS) {
    hvd_release(h);  // succeeds, so hvd_error_text() still describes the failure
    check(status);
  }
  const void* data = nullptr;
  size_t out_rows = 0;
  hvd_result(h, &data, &out_rows);
  const T* begin = static_cast<const T*>(data);
  std::vector<T> out(begin, begin + out_rows * row_elements);
  hvd_release(h);
  return out;
}

inline void barrier() {
  const int h = hvd_barrier_async();
  check(h);
  check(hvd_wait(h));
}

// Returns the last rank to join.
inline int join() {
  const int h = hvd_join_async();
  check(h);
  const int status = hvd_wait(h);
  if (status != HVD_SUCCESS) {
    hvd_release(h);
    check(status);
  }
  int64_t last = -1;
  hvd_result_int(h, &last);
  hvd_release(h);
  return static_cast<int>(last);
}

}  // namespace hvd
