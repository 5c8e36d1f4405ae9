// The C API (hvd/hvd.h): one global Runtime, int handles, exceptions turned into hvd_status codes and
// a per-thread error text. This is the only place where exceptions become status codes.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "hvd/hvd.h"
#include "runtime/runtime.h"

namespace {

using hvd::runtime::OpType;
using hvd::runtime::Request;
using hvd::runtime::Runtime;
using hvd::runtime::Work;

static_assert(HVD_UINT8 == static_cast<int>(hvd::gloo_backend::DataType::kUInt8));
static_assert(HVD_FLOAT16 == static_cast<int>(hvd::gloo_backend::DataType::kFloat16));
static_assert(HVD_BOOL == static_cast<int>(hvd::gloo_backend::DataType::kBool));
static_assert(HVD_AVERAGE == static_cast<int>(hvd::gloo_backend::ReduceOp::kAverage));
static_assert(HVD_PRODUCT == static_cast<int>(hvd::gloo_backend::ReduceOp::kProduct));

thread_local std::string last_error;

// The global runtime and the handle table. The runtime pointer is read under the mutex and used
// through a shared_ptr copy, so hvd_shutdown() on one thread cannot free it under another's call.
std::mutex state_mutex;
std::shared_ptr<Runtime> runtime;
struct Handle {
  std::shared_ptr<Work> work;
  bool keeps_result = false;
};
std::map<int, Handle> handles;
int next_handle = 0;

std::shared_ptr<Runtime> current() {
  std::lock_guard lock(state_mutex);
  return runtime;
}

int fail(int status, std::string text) {
  last_error = std::move(text);
  return status;
}

// Maps the exception in flight to a status (and sets the error text).
int statusOf(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const hvd::runtime::MismatchError& e) {
    return fail(HVD_ERR_MISMATCH, e.what());
  } catch (const hvd::runtime::ShutDownError& e) {
    return fail(HVD_ERR_SHUT_DOWN, e.what());
  } catch (const hvd::runtime::StalledError& e) {
    return fail(HVD_ERR_STALLED, e.what());
  } catch (const hvd::UsageError& e) {
    return fail(HVD_ERR_INVALID_ARGUMENT, e.what());
  } catch (const hvd::Error& e) {
    return fail(HVD_ERR_BACKEND, e.what());
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INTERNAL, e.what());
  }
}

int submit(Request request, bool keeps_result) {
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, "libhvd has not been initialized; call hvd_init() first");
  try {
    auto work = rt->enqueue(std::move(request));
    std::lock_guard lock(state_mutex);
    const int id = next_handle;
    next_handle = next_handle == INT32_MAX ? 0 : next_handle + 1;
    handles[id] = {std::move(work), keeps_result};
    return id;
  } catch (...) {
    return statusOf(std::current_exception());
  }
}

std::shared_ptr<Work> lookup(int handle, bool* keeps_result = nullptr) {
  std::lock_guard lock(state_mutex);
  auto it = handles.find(handle);
  if (it == handles.end()) return nullptr;
  if (keeps_result) *keeps_result = it->second.keeps_result;
  return it->second.work;
}

int unknownHandle(int handle) {
  return fail(HVD_ERR_INVALID_ARGUMENT, "unknown handle " + std::to_string(handle) +
                                            " (never returned, or already released by hvd_wait/hvd_release)");
}

// For the functions that read a finished operation's results: the handle's work, or the status to
// return (unknown handle; HVD_IN_PROGRESS naming the operation while it still runs).
int finished(int handle, std::shared_ptr<Work>* work) {
  *work = lookup(handle);
  if (!*work) return unknownHandle(handle);
  if (!(*work)->poll()) return fail(HVD_IN_PROGRESS, "operation '" + (*work)->name() + "' has not finished");
  return HVD_SUCCESS;
}

std::string nameOf(const char* name) { return name ? std::string(name) : std::string(); }

template <typename F>
int identity(F f) {
  auto rt = current();
  return rt ? f(*rt) : -1;
}

}  // namespace

extern "C" {

int hvd_init(void) {
  std::lock_guard lock(state_mutex);
  if (runtime) return HVD_SUCCESS;
  try {
    auto options = hvd::runtime::RuntimeOptions::fromEnvironment();
    runtime = std::make_shared<Runtime>(options, Runtime::makeStore(options));
    return HVD_SUCCESS;
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INIT, std::string("hvd_init failed: ") + e.what());
  }
}

void hvd_shutdown(void) {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard lock(state_mutex);
    rt = std::move(runtime);
  }
  if (rt) rt->shutdown();
}

int hvd_is_initialized(void) { return current() ? 1 : 0; }
int hvd_rank(void) { return identity([](Runtime& r) { return r.rank(); }); }
int hvd_size(void) { return identity([](Runtime& r) { return r.size(); }); }
int hvd_local_rank(void) { return identity([](Runtime& r) { return r.localRank(); }); }
int hvd_local_size(void) { return identity([](Runtime& r) { return r.localSize(); }); }
int hvd_cross_rank(void) { return identity([](Runtime& r) { return r.crossRank(); }); }
int hvd_cross_size(void) { return identity([](Runtime& r) { return r.crossSize(); }); }
int hvd_device(void) { return identity([](Runtime& r) { return r.device(); }); }

int hvd_allreduce_async(const char* name, const void* input, void* output, size_t count, hvd_dtype dtype,
                        hvd_reduce_op op, double prescale, double postscale) {
  Request r;
  r.type = OpType::kAllreduce;
  r.name = nameOf(name);
  r.input = input;
  r.output = output;
  r.rows = static_cast<int64_t>(count);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  r.op = static_cast<hvd::runtime::ReduceOp>(op);
  r.prescale = prescale;
  r.postscale = postscale;
  return submit(std::move(r), false);
}

int hvd_broadcast_async(const char* name, void* data, size_t count, hvd_dtype dtype, int root_rank) {
  Request r;
  r.type = OpType::kBroadcast;
  r.name = nameOf(name);
  r.input = data;
  r.output = data;
  r.rows = static_cast<int64_t>(count);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  r.root = root_rank;
  return submit(std::move(r), false);
}

int hvd_allgather_async(const char* name, const void* input, size_t rows, size_t row_elements, hvd_dtype dtype) {
  Request r;
  r.type = OpType::kAllgather;
  r.name = nameOf(name);
  r.input = input;
  r.rows = static_cast<int64_t>(rows);
  r.row_elements = static_cast<int64_t>(row_elements);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  return submit(std::move(r), true);
}

int hvd_alltoall_async(const char* name, const void* input, size_t rows, size_t row_elements, hvd_dtype dtype,
                       const int64_t* splits) {
  Request r;
  r.type = OpType::kAlltoall;
  r.name = nameOf(name);
  r.input = input;
  r.rows = static_cast<int64_t>(rows);
  r.row_elements = static_cast<int64_t>(row_elements);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  if (splits) {
    const int size = hvd_size();
    if (size > 0) r.splits.assign(splits, splits + size);
  }
  return submit(std::move(r), true);
}

int hvd_reducescatter_async(const char* name, const void* input, size_t rows, size_t row_elements,
                            hvd_dtype dtype, hvd_reduce_op op, double prescale, double postscale) {
  Request r;
  r.type = OpType::kReducescatter;
  r.name = nameOf(name);
  r.input = input;
  r.rows = static_cast<int64_t>(rows);
  r.row_elements = static_cast<int64_t>(row_elements);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  r.op = static_cast<hvd::runtime::ReduceOp>(op);
  r.prescale = prescale;
  r.postscale = postscale;
  return submit(std::move(r), true);
}

int hvd_barrier_async(void) {
  Request r;
  r.type = OpType::kBarrier;
  return submit(std::move(r), false);
}

int hvd_join_async(void) {
  Request r;
  r.type = OpType::kJoin;
  return submit(std::move(r), true);
}

int hvd_poll(int handle) {
  auto work = lookup(handle);
  if (!work) return unknownHandle(handle);
  return work->poll() ? 1 : 0;
}

int hvd_wait(int handle) {
  bool keeps = false;
  auto work = lookup(handle, &keeps);
  if (!work) return unknownHandle(handle);
  int status = HVD_SUCCESS;
  try {
    work->wait();
  } catch (...) {
    status = statusOf(std::current_exception());
  }
  if (!keeps) hvd_release(handle);
  return status;
}

int hvd_result(int handle, const void** data, size_t* rows) {
  std::shared_ptr<Work> work;
  if (int status = finished(handle, &work); status != HVD_SUCCESS) return status;
  if (data) *data = work->result.data();
  if (rows) *rows = static_cast<size_t>(work->result_rows);
  return HVD_SUCCESS;
}

int hvd_received_splits(int handle, const int64_t** splits, size_t* count) {
  std::shared_ptr<Work> work;
  if (int status = finished(handle, &work); status != HVD_SUCCESS) return status;
  if (splits) *splits = work->received_splits.data();
  if (count) *count = work->received_splits.size();
  return HVD_SUCCESS;
}

int hvd_result_int(int handle, int64_t* value) {
  std::shared_ptr<Work> work;
  if (int status = finished(handle, &work); status != HVD_SUCCESS) return status;
  if (value) *value = work->result_int;
  return HVD_SUCCESS;
}

int hvd_release(int handle) {
  std::lock_guard lock(state_mutex);
  if (handles.erase(handle) == 0) return unknownHandle(handle);
  return HVD_SUCCESS;
}

const char* hvd_error_text(void) { return last_error.c_str(); }

}  // extern "C"
