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
#include <exception>
#include <functional>
#include <list>
#include <new>
#include <optional>
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
class CommunicationError : public CollectiveError {  // a timeout expired, the backend failed
  using CollectiveError::CollectiveError;
};
class PeerLostError : public CommunicationError {  // a peer process died or became unreachable
  using CommunicationError::CommunicationError;
};
class StalledError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
class InitError : public CollectiveError {
  using CollectiveError::CollectiveError;
};
// Elastic jobs: the job's membership changed (hvd::elastic::State::commit); hvd::elastic::run resets.
class HostsUpdatedError : public CollectiveError {
  using CollectiveError::CollectiveError;
};

// Throws the exception matching a negative status (with hvd_error_text()); returns other values.
inline int check(int status) {
  if (status >= 0) return status;
  const std::string text = hvd_error_text();
  switch (status) {
    case HVD_ERR_NOT_INITIALIZED: throw NotInitializedError(status, text);
    case HVD_ERR_INVALID_ARGUMENT: throw InvalidArgumentError(status, text);
    case HVD_ERR_MISMATCH: throw MismatchError(status, text);
    case HVD_ERR_SHUT_DOWN: throw ShutDownError(status, text);
    case HVD_ERR_BACKEND: throw CommunicationError(status, text);
    case HVD_ERR_PEER_LOST: throw PeerLostError(status, text);
    case HVD_ERR_HOSTS_UPDATED: throw HostsUpdatedError(status, text);
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
  else if constexpr (std::is_same_v<U, int16_t>) return HVD_INT16;
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

// A process set: collectives among a subset of ranks (see hvd.h). ProcessSet() is the global set.
class ProcessSet {
 public:
  ProcessSet() = default;
  explicit ProcessSet(int id) : id_(id) {}
  // Registers a set of global ranks (collective over the whole job; needs HOROVOD_DYNAMIC_PROCESS_SETS=1).
  static ProcessSet add(const std::vector<int>& ranks) {
    return ProcessSet(check(hvd_add_process_set(ranks.data(), static_cast<int>(ranks.size()))), 0);
  }
  // Removes it (collective, as add).
  void remove() const { check(hvd_remove_process_set(id_)); }

  int id() const { return id_; }
  int size() const { return check(hvd_process_set_size(id_)); }
  // This rank's position in the set, -1 when not a member.
  int rank() const {
    int r = -1;
    check(hvd_process_set_rank(id_, &r));
    return r;
  }
  bool includes() const { return rank() >= 0; }
  std::vector<int> ranks() const {
    std::vector<int> out(static_cast<size_t>(size()));
    check(hvd_process_set_ranks(id_, out.data(), static_cast<int>(out.size())));
    return out;
  }

 private:
  ProcessSet(int id, int) : id_(id) {}
  int id_ = HVD_GLOBAL_PROCESS_SET;
};

namespace detail {
inline const char* nameOrNull(const std::string& name) { return name.empty() ? nullptr : name.c_str(); }
}  // namespace detail

// output = postscale * reduce(prescale * input); input and output may be the same span. An average divides
// by the size of the process set.
template <typename T>
Work allreduceAsync(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::kAverage,
                    const std::string& name = "", double prescale = 1.0, double postscale = 1.0,
                    ProcessSet set = ProcessSet()) {
  if (input.size() != output.size()) {
    throw InvalidArgumentError(HVD_ERR_INVALID_ARGUMENT, "allreduce '" + name + "': input has " +
                                                             std::to_string(input.size()) + " elements, output " +
                                                             std::to_string(output.size()));
  }
  hvd_request r = HVD_REQUEST_INIT;
  r.op = HVD_OP_ALLREDUCE;
  r.name = detail::nameOrNull(name);
  r.input = input.data();
  r.output = output.data();
  r.rows = input.size();
  r.dtype = dtypeOf<T>();
  r.reduce_op = static_cast<hvd_reduce_op>(op);
  r.prescale = prescale;
  r.postscale = postscale;
  r.process_set = set.id();
  return Work(check(hvd_enqueue(&r)));
}

// In place, synchronous.
template <typename T>
void allreduce(std::span<T> data, ReduceOp op = ReduceOp::kAverage, const std::string& name = "",
               ProcessSet set = ProcessSet()) {
  allreduceAsync<T>(std::span<const T>(data.data(), data.size()), data, op, name, 1.0, 1.0, set).wait();
}

// Broadcast from root_rank (a global rank, member of the set), in place.
template <typename T>
Work broadcastAsync(std::span<T> data, int root_rank, const std::string& name = "", ProcessSet set = ProcessSet()) {
  hvd_request r = HVD_REQUEST_INIT;
  r.op = HVD_OP_BROADCAST;
  r.name = detail::nameOrNull(name);
  r.output = data.data();
  r.rows = data.size();
  r.dtype = dtypeOf<T>();
  r.root_rank = root_rank;
  r.process_set = set.id();
  return Work(check(hvd_enqueue(&r)));
}

template <typename T>
void broadcast(std::span<T> data, int root_rank, const std::string& name = "", ProcessSet set = ProcessSet()) {
  broadcastAsync<T>(data, root_rank, name, set).wait();
}

// Allgather of rows (each row_elements long; rows may differ between ranks). Returns every member's rows in
// set-rank order.
template <typename T>
std::vector<T> allgather(std::span<const T> input, size_t row_elements = 1, const std::string& name = "",
                         ProcessSet set = ProcessSet()) {
  hvd_request r = HVD_REQUEST_INIT;
  r.op = HVD_OP_ALLGATHER;
  r.name = detail::nameOrNull(name);
  r.input = input.data();
  r.rows = row_elements ? input.size() / row_elements : 0;
  r.row_elements = row_elements;
  r.dtype = dtypeOf<T>();
  r.process_set = set.id();
  const int h = hvd_enqueue(&r);
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

inline void barrier(ProcessSet set = ProcessSet()) {
  hvd_request r = HVD_REQUEST_INIT;
  r.op = HVD_OP_BARRIER;
  r.process_set = set.id();
  const int h = hvd_enqueue(&r);
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

// Elastic jobs (see hvd.h): a State of registered buffers, and run(), Horovod's elastic loop.
//
//   std::vector<float> w(n);
//   int64_t step = 0;
//   hvd::elastic::State state;
//   state.add("w", w);
//   state.add("step", step);
//   hvd::elastic::run(state, [&] {
//     for (; step < steps; ++step) {
//       ... hvd::allreduce ...
//       if (step % 10 == 0) state.commit();   // throws HostsUpdatedError when the job re-forms
//     }
//   });
namespace elastic {

inline bool enabled() { return hvd_elastic_enabled() == 1; }
// The round this process runs in; -1 when not initialized or not elastic.
inline long long round() { return hvd_elastic_round(); }

// Collective (see hvd_elastic_check_host_updates): the changes (HVD_HOSTS_REMOVED | HVD_HOSTS_ADDED) when a
// newer round began, nullopt when not.
inline std::optional<int> checkHostUpdates() {
  int changes = 0;
  if (check(hvd_elastic_check_host_updates(&changes)) == 0) return std::nullopt;
  return changes;
}

class State;
inline void run(State& state, const std::function<void()>& train);

// Owns an hvd_state. Registered buffers must outlive the State and keep their size (a registered vector
// must not be resized). Not thread-safe.
class State {
 public:
  State() : state_(hvd_state_create()) {
    if (!state_) throw std::bad_alloc();
  }
  ~State() { hvd_state_free(state_); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Registers bytes at data; their current contents are the first commit. Throws InvalidArgumentError for a
  // null pointer, an empty or duplicate name.
  void add(const std::string& name, void* data, size_t bytes) { check(hvd_state_add(state_, name.c_str(), data, bytes)); }
  // The elements of v.
  template <typename T>
  void add(const std::string& name, std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>, "state buffers are copied bytewise");
    static unsigned char none;  // an empty vector may have no storage; zero bytes at a valid address
    add(name, v.empty() ? static_cast<void*>(&none) : static_cast<void*>(v.data()), v.size() * sizeof(T));
  }
  // One value (a step counter, a struct of plain fields).
  template <typename T>
  void add(const std::string& name, T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "state buffers are copied bytewise");
    add(name, static_cast<void*>(&value), sizeof(T));
  }

  // Copies every buffer, then checks for host updates (collective): throws HostsUpdatedError when the job
  // re-forms, or the check's error.
  void commit() { check(hvd_state_commit(state_)); }
  // Copies the last commit back.
  void restore() { check(hvd_state_restore(state_)); }
  // Broadcasts every buffer from rank 0 (collective), then commits locally.
  void sync() { check(hvd_state_sync(state_)); }
  // Called after every reset of run(), in registration order. An exception it throws ends run() with it.
  void onReset(std::function<void()> fn) {
    callbacks_.push_back({std::move(fn), this});
    check(hvd_state_on_reset(state_, &State::callReset, &callbacks_.back()));
  }

  hvd_state* get() const { return state_; }

 private:
  friend void run(State& state, const std::function<void()>& train);
  struct Callback {
    std::function<void()> fn;
    State* owner;
  };
  static void callReset(void* p) {
    auto* c = static_cast<Callback*>(p);
    try {
      c->fn();
    } catch (...) {
      if (!c->owner->reset_error_) c->owner->reset_error_ = std::current_exception();
    }
  }

  hvd_state* state_;
  std::list<Callback> callbacks_;  // stable addresses: the C callbacks point at them
  std::exception_ptr reset_error_;  // thrown by an onReset callback; run() rethrows it
};

// Horovod's elastic loop (hvd_elastic_run): sync, then train(); after a PeerLostError, CommunicationError or
// ShutDownError restore the last commit, after a HostsUpdatedError keep the state; then reset (re-init into
// the next round, onReset callbacks) and go again. Any other exception from train() ends the loop and is
// rethrown as it is; so is the failing sync's or init's error (InitError). A static job resets nothing.
inline void run(State& state, const std::function<void()>& train) {
  struct Context {
    const std::function<void()>* train;
    State* state;
    std::exception_ptr error;  // what the last train() threw
    int status = HVD_SUCCESS;  // and the status it became
  } context{&train, &state, nullptr, HVD_SUCCESS};
  const auto trampoline = [](hvd_state*, void* p) -> int {
    auto* c = static_cast<Context*>(p);
    c->error = nullptr;
    try {
      if (c->state->reset_error_) std::rethrow_exception(std::exchange(c->state->reset_error_, nullptr));
      (*c->train)();
      c->status = HVD_SUCCESS;
    } catch (const CollectiveError& e) {
      c->error = std::current_exception();
      c->status = e.status();
    } catch (...) {
      // Not libhvd's: the loop must end, and the exception leaves from run() (never through C frames).
      c->error = std::current_exception();
      c->status = HVD_ERR_INTERNAL;
    }
    return c->status;
  };
  const int status = hvd_elastic_run(state.get(), trampoline, &context);
  // train()'s own exception when its status ended the loop (a reset's failure returns another status).
  if (status != HVD_SUCCESS && status == context.status && context.error) std::rethrow_exception(context.error);
  if (state.reset_error_) std::rethrow_exception(std::exchange(state.reset_error_, nullptr));
  check(status);
}

}  // namespace elastic

}  // namespace hvd
