// The C API (hvd/hvd.h): one global Runtime, int handles, exceptions turned into hvd_status codes and
// a per-thread error text. This is the only place where exceptions become status codes (elastic_state.cc,
// the state API over the functions here, uses them through runtime/c_api.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "hvd/hvd.h"
#include "runtime/c_api.h"
#include "runtime/elastic.h"
#include "runtime/runtime.h"
#include "runtime/spare_node.h"

namespace {

using hvd::runtime::OpType;
using hvd::runtime::Request;
using hvd::runtime::Runtime;
using hvd::runtime::Work;

// The C API passes dtypes, reductions and operation types to the runtime by cast: the C enum's values, in
// declaration order, must equal the runtime enum's (two lists of different lengths do not compile).
template <typename Enum, size_t N>
constexpr bool sameValues(const int (&c_values)[N], const Enum (&values)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (c_values[i] != static_cast<int>(values[i])) return false;
  }
  return true;
}
using DataType = hvd::gloo_backend::DataType;
using ReduceOp = hvd::gloo_backend::ReduceOp;
static_assert(sameValues<DataType>({HVD_UINT8, HVD_INT8, HVD_INT32, HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16,
                                    HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL, HVD_INT16},
                                   {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64,
                                    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                    DataType::kFloat64, DataType::kBool, DataType::kInt16}));
static_assert(sameValues<ReduceOp>({HVD_AVERAGE, HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT},
                                   {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct}));
static_assert(sameValues<OpType>({HVD_OP_ALLREDUCE, HVD_OP_ALLGATHER, HVD_OP_BROADCAST, HVD_OP_ALLTOALL,
                                  HVD_OP_REDUCESCATTER, HVD_OP_BARRIER, HVD_OP_JOIN},
                                 {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast,
                                  OpType::kAlltoall, OpType::kReducescatter, OpType::kBarrier,
                                  OpType::kJoin}));
static_assert(HVD_HOSTS_REMOVED == hvd::rendezvous::kRoundRemoved &&
                  HVD_HOSTS_ADDED == hvd::rendezvous::kRoundAdded,
              "hvd_elastic_check_host_updates passes the server's round changes through");

thread_local std::string last_error;

// The global runtime and the handle table. The runtime pointer is read under the mutex and used
// through a shared_ptr copy, so hvd_shutdown() on one thread cannot free it under another's call.
std::mutex state_mutex;
std::shared_ptr<Runtime> runtime;
std::optional<uint64_t> elastic_round;  // elastic jobs: the round of the last successful init
struct Handle {
  std::shared_ptr<Work> work;
  bool keeps_result = false;
};
std::unordered_map<int, Handle> handles;  // looked up, added and released once per operation
// The node of the last handle released, reused by the next one: no allocation per operation.
std::unordered_map<int, Handle>::node_type spare_handle;
int next_handle = 1;  // Horovod's handles start at 1 too
bool handles_wrapped = false;  // next_handle went past INT32_MAX: a new handle's number may still be in use

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
  } catch (const hvd::PeerLostError& e) {
    return fail(HVD_ERR_PEER_LOST, e.what());
  } catch (const hvd::Error& e) {
    return fail(HVD_ERR_BACKEND, e.what());
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INTERNAL, e.what());
  }
}

constexpr const char* kNotInitialized = "libhvd has not been initialized; call hvd_init() first";

// Operations whose result lives in the Work (read with hvd_result*, freed by hvd_release).
bool keepsResult(OpType type) {
  return type == OpType::kAllgather || type == OpType::kAlltoall || type == OpType::kReducescatter ||
         type == OpType::kJoin;
}

int addHandle(std::shared_ptr<Work> work, bool keeps_result) {  // requires state_mutex
  const int id = next_handle;
  handles_wrapped = handles_wrapped || next_handle == INT32_MAX;
  next_handle = next_handle == INT32_MAX ? 1 : next_handle + 1;
  if (handles_wrapped) handles.erase(id);  // a handle never released under this number is replaced
  Handle h{std::move(work), keeps_result};
  const auto fill = [&](std::unordered_map<int, Handle>::node_type& node) {
    node.key() = id;
    node.mapped() = std::move(h);
  };
  hvd::runtime::insertThrough(handles, spare_handle, fill,
                              [&] { return std::pair<const int, Handle>(id, std::move(h)); });
  return id;
}

int submit(Request request, bool keeps_result) {
  // One look at the state for the runtime and the handle: enqueue() only queues, so holding the lock across it
  // delays a concurrent call by a fraction of a microsecond (hvd_shutdown() takes the runtime out under it
  // before it shuts it down).
  std::lock_guard lock(state_mutex);
  if (!runtime) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  try {
    return addHandle(runtime->enqueue(std::move(request)), keeps_result);
  } catch (...) {
    return statusOf(std::current_exception());
  }
}

// The runtime Request for a C request. Throws UsageError for an unknown operation.
Request toRequest(const hvd_request& c, int set_size) {
  HVD_CHECK(c.op >= HVD_OP_ALLREDUCE && c.op <= HVD_OP_JOIN, hvd::UsageError, "invalid operation ",
            static_cast<int>(c.op));
  Request r;
  r.type = static_cast<OpType>(c.op);
  r.name = c.name ? std::string(c.name) : std::string();
  r.input = c.input;
  r.output = c.output;
  r.rows = static_cast<int64_t>(c.rows);
  r.row_elements = static_cast<int64_t>(c.row_elements);
  r.dtype = static_cast<hvd::runtime::DataType>(c.dtype);
  r.op = static_cast<hvd::runtime::ReduceOp>(c.reduce_op);
  r.prescale = c.prescale;
  r.postscale = c.postscale;
  r.root = c.root_rank;
  r.process_set = c.process_set;
  HVD_CHECK(c.device >= HVD_CPU_DEVICE, hvd::UsageError, hvd::runtime::name(r.type), " '", r.name,
            "': device ", c.device, " is neither HVD_CPU_DEVICE (-1) nor a CUDA device ordinal");
  r.device = c.device;
  if (r.type == OpType::kBroadcast) r.input = r.output;
  if (r.type == OpType::kAllreduce || r.type == OpType::kBroadcast) {
    HVD_CHECK(c.row_elements == 1 || c.rows == 0, hvd::UsageError, hvd::runtime::name(r.type), " '", r.name,
              "' takes an element count in rows, with row_elements 1 (got ", c.rows, "x", c.row_elements, ")");
  }
  if (r.type == OpType::kAlltoall && c.splits && set_size > 0) r.splits.assign(c.splits, c.splits + set_size);
  if (c.ndim >= 0) {
    HVD_CHECK(c.ndim == 0 || c.shape != nullptr, hvd::UsageError, hvd::runtime::name(r.type), " '", r.name, "': ndim ",
              c.ndim, " without a shape");
    r.has_shape = true;
    r.shape.assign(c.shape, c.shape + c.ndim);
    int64_t product = 1;
    for (const int64_t d : r.shape) product *= d;
    HVD_CHECK(product == r.rows * r.row_elements, hvd::UsageError, hvd::runtime::name(r.type), " '", r.name,
              "': its shape holds ", product, " elements, its rows x row_elements ", r.rows, "x", r.row_elements);
  }
  return r;
}

// Runs a blocking process-set registration; returns the set's id or a status.
int waitForSet(std::shared_ptr<Work> work) {
  try {
    work->wait();
    return static_cast<int>(work->result_int);
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

namespace hvd::runtime::capi {
int fail(int status, std::string text) { return ::fail(status, std::move(text)); }
int statusOf(std::exception_ptr error) { return ::statusOf(std::move(error)); }
}  // namespace hvd::runtime::capi

extern "C" {

int hvd_init(void) {
  std::lock_guard lock(state_mutex);
  if (runtime) return HVD_SUCCESS;
  try {
    auto options = hvd::runtime::RuntimeOptions::fromEnvironment();
    // An elastic worker initializing again (after a failed collective and hvd_shutdown()) joins the next
    // round, with the place the driver gave its slot there; the first init takes the environment's, except
    // in a standby process, which waits for a round that takes it in. Either goes on to a later round when
    // its round ends before init finished.
    auto after = options.elastic ? elastic_round : std::nullopt;
    if (!after && options.elastic_standby) after = options.elastic_round;
    runtime = hvd::runtime::elastic::start(options, after);
    if (options.elastic) elastic_round = runtime->options().elastic_round;
    return HVD_SUCCESS;
  } catch (const std::exception& e) {
    return fail(HVD_ERR_INIT, std::string("hvd_init failed: ") + e.what());
  }
}

int hvd_init_process_sets(const int* ranks, const int* sizes, int count) {
  if (count < 0 || (count > 0 && (!ranks || !sizes))) {
    return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_init_process_sets: " + std::to_string(count) +
                                              " process sets with a null ranks or sizes array");
  }
  if (hvd_is_initialized()) {
    return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_init_process_sets: libhvd is already initialized (static process "
                                          "sets are registered by the call that initializes it)");
  }
  if (int status = hvd_init(); status != HVD_SUCCESS) return status;
  auto rt = current();
  int offset = 0;
  for (int i = 0; i < count; ++i) {
    int id = HVD_ERR_INVALID_ARGUMENT;
    try {
      HVD_CHECK(sizes[i] > 0, hvd::UsageError, "static process set ", i, " is empty");
      id = waitForSet(rt->addProcessSet(std::vector<int>(ranks + offset, ranks + offset + sizes[i]), true));
    } catch (...) {
      id = statusOf(std::current_exception());
    }
    if (id < 0) {
      const std::string text = "static process set " + std::to_string(i) + ": " + hvd_error_text();
      hvd_shutdown();
      return fail(id, text);
    }
    offset += sizes[i];
  }
  return HVD_SUCCESS;
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

namespace {

// What every convenience form below sets; each adds its operation's own fields.
Request basicRequest(OpType type, const char* name, const void* input, size_t rows, size_t row_elements,
                     hvd_dtype dtype) {
  Request r;
  r.type = type;
  r.name = nameOf(name);
  r.input = input;
  r.rows = static_cast<int64_t>(rows);
  r.row_elements = static_cast<int64_t>(row_elements);
  r.dtype = static_cast<hvd::runtime::DataType>(dtype);
  return r;
}

}  // namespace

int hvd_allreduce_async(const char* name, const void* input, void* output, size_t count, hvd_dtype dtype,
                        hvd_reduce_op op, double prescale, double postscale) {
  Request r = basicRequest(OpType::kAllreduce, name, input, count, 1, dtype);
  r.output = output;
  r.op = static_cast<hvd::runtime::ReduceOp>(op);
  r.prescale = prescale;
  r.postscale = postscale;
  return submit(std::move(r), false);
}

int hvd_broadcast_async(const char* name, void* data, size_t count, hvd_dtype dtype, int root_rank) {
  Request r = basicRequest(OpType::kBroadcast, name, data, count, 1, dtype);
  r.output = data;
  r.root = root_rank;
  return submit(std::move(r), false);
}

int hvd_allgather_async(const char* name, const void* input, size_t rows, size_t row_elements, hvd_dtype dtype) {
  return submit(basicRequest(OpType::kAllgather, name, input, rows, row_elements, dtype), true);
}

int hvd_alltoall_async(const char* name, const void* input, size_t rows, size_t row_elements, hvd_dtype dtype,
                       const int64_t* splits) {
  Request r = basicRequest(OpType::kAlltoall, name, input, rows, row_elements, dtype);
  if (splits) {
    const int size = hvd_size();
    if (size > 0) r.splits.assign(splits, splits + size);
  }
  return submit(std::move(r), true);
}

int hvd_reducescatter_async(const char* name, const void* input, size_t rows, size_t row_elements,
                            hvd_dtype dtype, hvd_reduce_op op, double prescale, double postscale) {
  Request r = basicRequest(OpType::kReducescatter, name, input, rows, row_elements, dtype);
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

int hvd_add_process_set(const int* ranks, int count) {
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  if (count <= 0 || !ranks) {
    return fail(HVD_ERR_INVALID_ARGUMENT, "a process set needs at least one rank (got " + std::to_string(count) + ")");
  }
  try {
    return waitForSet(rt->addProcessSet(std::vector<int>(ranks, ranks + count)));
  } catch (...) {
    return statusOf(std::current_exception());
  }
}

int hvd_remove_process_set(int process_set) {
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  try {
    const int id = waitForSet(rt->removeProcessSet(process_set));
    return id < 0 ? id : HVD_SUCCESS;
  } catch (...) {
    return statusOf(std::current_exception());
  }
}

namespace {
// The ranks of a registered set, or nullopt with the error text set.
std::optional<std::vector<int>> setRanks(int process_set, int* status) {
  auto rt = current();
  if (!rt) {
    *status = fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
    return std::nullopt;
  }
  auto ranks = rt->processSetRanks(process_set);
  if (!ranks) *status = fail(HVD_ERR_INVALID_ARGUMENT, "process set " + std::to_string(process_set) + " is not registered");
  return ranks;
}
}  // namespace

int hvd_process_set_size(int process_set) {
  int status = HVD_SUCCESS;
  auto ranks = setRanks(process_set, &status);
  return ranks ? static_cast<int>(ranks->size()) : status;
}

int hvd_process_set_rank(int process_set, int* set_rank) {
  int status = HVD_SUCCESS;
  auto ranks = setRanks(process_set, &status);
  if (!ranks) return status;
  const auto it = std::lower_bound(ranks->begin(), ranks->end(), hvd_rank());
  if (set_rank) *set_rank = it != ranks->end() && *it == hvd_rank() ? static_cast<int>(it - ranks->begin()) : -1;
  return HVD_SUCCESS;
}

int hvd_process_set_ranks(int process_set, int* out, int capacity) {
  int status = HVD_SUCCESS;
  auto ranks = setRanks(process_set, &status);
  if (!ranks) return status;
  for (int i = 0; i < capacity && i < static_cast<int>(ranks->size()); ++i) out[i] = (*ranks)[i];
  return static_cast<int>(ranks->size());
}

int hvd_process_set_ids(int* ids, int capacity) {
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  const auto all = rt->processSetIds();
  for (int i = 0; i < capacity && i < static_cast<int>(all.size()); ++i) ids[i] = all[i];
  return static_cast<int>(all.size());
}

int hvd_enqueue(const hvd_request* request) {
  if (!request) return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_enqueue: null request");
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  try {
    const int set_size = request->op == HVD_OP_ALLTOALL ? hvd_process_set_size(request->process_set) : 0;
    Request r = toRequest(*request, set_size);
    const bool keeps = keepsResult(r.type);
    return submit(std::move(r), keeps);
  } catch (...) {
    return statusOf(std::current_exception());
  }
}

int hvd_enqueue_group(const hvd_request* requests, int count, int* out) {
  if (count <= 0 || !requests || !out) {
    return fail(HVD_ERR_INVALID_ARGUMENT, "hvd_enqueue_group: a group of " + std::to_string(count) +
                                              " operations (needs at least one, and non-null arrays)");
  }
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  try {
    std::vector<Request> batch;
    for (int i = 0; i < count; ++i) {
      const int set_size = requests[i].op == HVD_OP_ALLTOALL ? hvd_process_set_size(requests[i].process_set) : 0;
      batch.push_back(toRequest(requests[i], set_size));
    }
    const bool keeps = keepsResult(batch[0].type);
    auto works = rt->enqueueGroup(std::move(batch));
    std::lock_guard lock(state_mutex);
    for (size_t i = 0; i < works.size(); ++i) out[i] = addHandle(std::move(works[i]), keeps);
    return HVD_SUCCESS;
  } catch (...) {
    return statusOf(std::current_exception());
  }
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
  auto node = handles.extract(handle);
  if (node.empty()) return unknownHandle(handle);
  node.mapped().work.reset();
  if (!spare_handle) spare_handle = std::move(node);
  return HVD_SUCCESS;
}

const char* hvd_error_text(void) { return last_error.c_str(); }

int hvd_elastic_enabled(void) {
  if (auto rt = current()) return rt->options().elastic ? 1 : 0;
  try {
    return hvd::runtime::RuntimeOptions::fromEnvironment().elastic ? 1 : 0;
  } catch (const std::exception&) {
    // Another variable is malformed (hvd_init's error to report): HOROVOD_ELASTIC=1 alone decides here.
    const char* v = std::getenv("HOROVOD_ELASTIC");
    return v && std::strcmp(v, "1") == 0 ? 1 : 0;
  }
}

long long hvd_elastic_round(void) {
  auto rt = current();
  if (!rt || !rt->options().elastic) return -1;
  return static_cast<long long>(rt->options().elastic_round);
}

int hvd_elastic_check_host_updates(int* changes) {
  if (changes) *changes = 0;
  auto rt = current();
  if (!rt) return fail(HVD_ERR_NOT_INITIALIZED, kNotInitialized);
  const auto& options = rt->options();
  if (!options.elastic) return 0;
  // {status on rank 0, the latest round, the changes since this process's round}, broadcast from rank 0 so
  // that every rank answers alike (and resets at the same step).
  int64_t news[3] = {HVD_SUCCESS, static_cast<int64_t>(options.elastic_round), 0};
  if (rt->rank() == 0) {
    try {
      const auto n = Runtime::server(options)->roundNews(options.elastic_round);
      news[1] = static_cast<int64_t>(n.round);
      news[2] = static_cast<int64_t>(n.changes);
    } catch (...) {
      news[0] = statusOf(std::current_exception());
      last_error = "hvd_elastic_check_host_updates: " + last_error;
    }
  }
  try {
    Request r;
    r.type = OpType::kBroadcast;
    r.name = "hvd.elastic.host_updates";
    r.input = news;
    r.output = news;
    r.rows = 3;
    r.dtype = hvd::runtime::DataType::kInt64;
    r.root = 0;
    rt->enqueue(std::move(r))->wait();
  } catch (...) {
    return statusOf(std::current_exception());
  }
  if (news[0] != HVD_SUCCESS) {
    const int status = static_cast<int>(news[0]);
    if (rt->rank() == 0) return status;
    return fail(status, "hvd_elastic_check_host_updates: rank 0 could not read the elastic job's rounds from the "
                        "rendezvous server (status " + std::to_string(status) + "; rank 0's error text names the cause)");
  }
  if (news[1] <= static_cast<int64_t>(options.elastic_round)) return 0;
  if (changes) *changes = static_cast<int>(news[2]);
  return 1;
}

}  // extern "C"
