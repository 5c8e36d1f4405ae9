// hvd._core: the Python binding of libhvd's C API (hvd/hvd.h). Thin on purpose: it maps arguments,
// handles and status codes, and nothing else; the semantics (names, negotiation, checks, errors) live in
// libhvd, so C, C++ and Python users see the same behaviour and the same messages.
//
// Buffers are passed as addresses (torch's data_ptr(), or the buffer protocol through buffer_address());
// the Python layer keeps the objects alive until their handle is synchronized, as Horovod's handle map
// does. Every call that can block (init, wait, process-set registration) releases the GIL.
//
// Errors: a negative status becomes the Python exception of its class, with libhvd's message:
//   HVD_ERR_INVALID_ARGUMENT  -> InvalidArgumentError (a ValueError, as Horovod raises ValueError)
//   HVD_ERR_NOT_INITIALIZED   -> NotInitializedError
//   HVD_ERR_MISMATCH          -> MismatchError
//   HVD_ERR_SHUT_DOWN         -> ShutDownError
//   HVD_ERR_BACKEND           -> CommunicationError
//   HVD_ERR_PEER_LOST         -> PeerLostError (a CommunicationError)
//   HVD_ERR_STALLED           -> StalledError
//   HVD_ERR_INIT              -> InitError
//   HVD_ERR_HOSTS_UPDATED     -> HostsUpdatedError
//   anything else             -> HorovodInternalError
// and every class but InvalidArgumentError derives from HorovodInternalError (a RuntimeError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace py = pybind11;

namespace {

struct Exceptions {
  PyObject* internal = nullptr;
  PyObject* invalid = nullptr;
  PyObject* not_initialized = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* shut_down = nullptr;
  PyObject* communication = nullptr;
  PyObject* peer_lost = nullptr;
  PyObject* stalled = nullptr;
  PyObject* init = nullptr;
  PyObject* hosts_updated = nullptr;
};
Exceptions exceptions;

PyObject* classOf(int status) {
  switch (status) {
    case HVD_ERR_INVALID_ARGUMENT: return exceptions.invalid;
    case HVD_ERR_NOT_INITIALIZED: return exceptions.not_initialized;
    case HVD_ERR_MISMATCH: return exceptions.mismatch;
    case HVD_ERR_SHUT_DOWN: return exceptions.shut_down;
    case HVD_ERR_BACKEND: return exceptions.communication;
    case HVD_ERR_PEER_LOST: return exceptions.peer_lost;
    case HVD_ERR_STALLED: return exceptions.stalled;
    case HVD_ERR_INIT: return exceptions.init;
    case HVD_ERR_HOSTS_UPDATED: return exceptions.hosts_updated;
    default: return exceptions.internal;
  }
}

// Raises the exception for a negative status (with the error text of this thread's last call).
[[noreturn]] void raise(int status) {
  PyErr_SetString(classOf(status), hvd_error_text());
  throw py::error_already_set();
}

int checked(int status) {
  if (status < 0) raise(status);
  return status;
}

// Runs f with the GIL released, then raises on a negative status. The error text is per thread, and
// the thread is the same before and after the release.
template <typename F>
int released(F f) {
  int status;
  {
    py::gil_scoped_release release;
    status = f();
  }
  return checked(status);
}

void* address(uintptr_t a) { return reinterpret_cast<void*>(a); }

hvd_request makeRequest(int op, const char* name, uintptr_t input, uintptr_t output,
                        size_t rows, size_t row_elements, int dtype, int reduce_op, double prescale,
                        double postscale, int root, int process_set) {
  hvd_request r = HVD_REQUEST_INIT;
  r.op = static_cast<hvd_op>(op);
  r.name = name;
  r.input = address(input);
  r.output = address(output);
  r.rows = rows;
  r.row_elements = row_elements;
  r.dtype = static_cast<hvd_dtype>(dtype);
  r.reduce_op = static_cast<hvd_reduce_op>(reduce_op);
  r.prescale = prescale;
  r.postscale = postscale;
  r.root_rank = root;
  r.process_set = process_set;
  return r;
}

// One operation as the Python layer describes it (see enqueue()).
struct Op {
  int op;
  std::optional<std::string> name;
  uintptr_t input, output;
  size_t rows, row_elements;
  int dtype, reduce_op;
  double prescale, postscale;
  int root;
  std::optional<std::vector<int64_t>> splits;
  int process_set;
  std::optional<std::vector<int64_t>> shape;
  int device;
};

PyObject* makeException(py::module_& m, const char* name, PyObject* base, const char* doc) {
  PyObject* type = PyErr_NewExceptionWithDoc((std::string("hvd._core.") + name).c_str(), doc, base, nullptr);
  if (!type) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

// A dict from names to the C API's codes (its enums as ints), for the Python side's lookup tables.
py::dict codeTable(std::initializer_list<std::pair<const char*, int>> entries) {
  py::dict table;
  for (const auto& [name, code] : entries) table[name] = code;
  return table;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "libhvd's C API for Python (use hvd.torch or hvd.numpy rather than this module)";

  exceptions.internal = makeException(m, "HorovodInternalError", PyExc_RuntimeError,
                                      "An operation failed inside libhvd (Horovod's HorovodInternalError).");
  exceptions.invalid = makeException(m, "InvalidArgumentError", PyExc_ValueError,
                                     "A bad argument, a duplicate name in flight, an unknown process set.");
  exceptions.not_initialized =
      makeException(m, "NotInitializedError", exceptions.internal, "libhvd has not been initialized.");
  exceptions.mismatch =
      makeException(m, "MismatchError", exceptions.internal, "Ranks disagree on an operation's parameters.");
  exceptions.shut_down = makeException(m, "ShutDownError", exceptions.internal, "libhvd was shut down.");
  exceptions.communication = makeException(m, "CommunicationError", exceptions.internal,
                                           "Communication failed: a timeout expired, the backend failed.");
  exceptions.peer_lost = makeException(m, "PeerLostError", exceptions.communication,
                                       "A peer process died or became unreachable; libhvd stopped (elastic jobs "
                                       "re-form).");
  exceptions.stalled =
      makeException(m, "StalledError", exceptions.internal, "Cancelled by the stall inspector's shutdown.");
  exceptions.init = makeException(m, "InitError", exceptions.internal, "hvd_init() failed.");
  exceptions.hosts_updated = makeException(m, "HostsUpdatedError", exceptions.internal,
                                           "Elastic jobs: an operation ended because the job's membership changed.");

  m.attr("GLOBAL_PROCESS_SET") = HVD_GLOBAL_PROCESS_SET;
  m.attr("IN_PROGRESS") = static_cast<int>(HVD_IN_PROGRESS);
  // clang-format off: the tables read best packed
  m.attr("DTYPES") = codeTable({{"uint8", HVD_UINT8}, {"int8", HVD_INT8}, {"int16", HVD_INT16},
                                {"int32", HVD_INT32}, {"int64", HVD_INT64}, {"float16", HVD_FLOAT16},
                                {"bfloat16", HVD_BFLOAT16}, {"float32", HVD_FLOAT32}, {"float64", HVD_FLOAT64},
                                {"bool", HVD_BOOL}});
  m.attr("OPS") = codeTable({{"allreduce", HVD_OP_ALLREDUCE}, {"allgather", HVD_OP_ALLGATHER},
                             {"broadcast", HVD_OP_BROADCAST}, {"alltoall", HVD_OP_ALLTOALL},
                             {"reducescatter", HVD_OP_REDUCESCATTER}, {"barrier", HVD_OP_BARRIER},
                             {"join", HVD_OP_JOIN}});
  m.attr("REDUCE_OPS") = codeTable({{"Average", HVD_AVERAGE}, {"Sum", HVD_SUM}, {"Min", HVD_MIN},
                                    {"Max", HVD_MAX}, {"Product", HVD_PRODUCT}});
  // clang-format on

  // Lifecycle and identity.
  m.def("init", [] { released([] { return hvd_init(); }); }, "hvd_init(); raises InitError");
  m.def(
      "init_process_sets",
      [](const std::vector<std::vector<int>>& sets) {
        std::vector<int> ranks, sizes;
        for (const auto& s : sets) {
          ranks.insert(ranks.end(), s.begin(), s.end());
          sizes.push_back(static_cast<int>(s.size()));
        }
        released([&] { return hvd_init_process_sets(ranks.data(), sizes.data(), static_cast<int>(sizes.size())); });
      },
      "hvd_init_process_sets(): init, then register static process sets (ids 1, 2, ... in order)");
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    hvd_shutdown();
  });
  m.def("is_initialized", [] { return hvd_is_initialized() != 0; });
  // -1 when not initialized (the Python layer raises Horovod's ValueError).
  m.def("rank", &hvd_rank);
  m.def("size", &hvd_size);
  m.def("local_rank", &hvd_local_rank);
  m.def("local_size", &hvd_local_size);
  m.def("cross_rank", &hvd_cross_rank);
  m.def("cross_size", &hvd_cross_size);
  m.def("device", &hvd_device);

  // Elastic jobs. elastic_round() is -1 when libhvd is not initialized or the job is not elastic.
  // elastic_check_host_updates() is a collective (every rank calls it at the same point): None when the
  // job has not re-formed since this process's round (and at once in a job that is not elastic), else
  // what changed (a bit set: HVD_HOSTS_REMOVED, HVD_HOSTS_ADDED; 0 when a newer round began without
  // either).
  m.attr("HOSTS_REMOVED") = HVD_HOSTS_REMOVED;
  m.attr("HOSTS_ADDED") = HVD_HOSTS_ADDED;
  m.def("elastic_enabled", [] { return hvd_elastic_enabled() != 0; });
  m.def("elastic_round", &hvd_elastic_round);
  m.def("elastic_check_host_updates", []() -> std::optional<int> {
    int changes = 0;
    if (released([&] { return hvd_elastic_check_host_updates(&changes); }) != 1) return std::nullopt;
    return changes;
  });

  // Process sets.
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    return released([&] { return hvd_add_process_set(ranks.data(), static_cast<int>(ranks.size())); });
  });
  m.def("remove_process_set", [](int id) { released([&] { return hvd_remove_process_set(id); }); });
  m.def("process_set_ranks", [](int id) -> std::optional<std::vector<int>> {
    const int n = hvd_process_set_ranks(id, nullptr, 0);
    if (n < 0) return std::nullopt;
    std::vector<int> ranks(static_cast<size_t>(n));
    hvd_process_set_ranks(id, ranks.data(), n);
    return ranks;
  });
  m.def("process_set_ids", [] {
    const int n = checked(hvd_process_set_ids(nullptr, 0));
    std::vector<int> ids(static_cast<size_t>(n));
    hvd_process_set_ids(ids.data(), n);
    return ids;
  });

  // Operations. enqueue(op, name, input, output, rows, row_elements, dtype, reduce_op, prescale,
  // postscale, root, splits, process_set[, shape[, device]]) -> handle; positional, because it is on every
  // step's path. shape: the tensor's dims, compared across ranks (Horovod's mismatched-shape errors).
  // device: -1 for a CPU tensor, else the CUDA ordinal of the tensor whose host copy input/output point to.
  m.def(
      "enqueue",
      [](int op, const std::optional<std::string>& name, uintptr_t input, uintptr_t output, size_t rows,
         size_t row_elements, int dtype, int reduce_op, double prescale, double postscale, int root,
         const std::optional<std::vector<int64_t>>& splits, int process_set,
         const std::optional<std::vector<int64_t>>& shape, int device) {
        hvd_request r = makeRequest(op, name ? name->c_str() : nullptr, input, output, rows, row_elements, dtype,
                                    reduce_op, prescale, postscale, root, process_set);
        if (splits) r.splits = splits->data();
        if (shape) {
          r.shape = shape->data();
          r.ndim = static_cast<int>(shape->size());
        }
        r.device = device;
        return checked(hvd_enqueue(&r));
      },
      py::arg("op"), py::arg("name"), py::arg("input"), py::arg("output"), py::arg("rows"), py::arg("row_elements"),
      py::arg("dtype"), py::arg("reduce_op"), py::arg("prescale"), py::arg("postscale"), py::arg("root"),
      py::arg("splits"), py::arg("process_set"), py::arg("shape") = py::none(),
      py::arg("device") = HVD_CPU_DEVICE);
  // The allreduce every training step issues, with nothing but what it needs (a third of enqueue()'s
  // argument conversions): enqueue_allreduce(name or None, input, output, count, dtype, reduce_op,
  // prescale, postscale, process_set) -> handle.
  m.def("enqueue_allreduce", [](const char* name, uintptr_t input, uintptr_t output, size_t count, int dtype,
                                int reduce_op, double prescale, double postscale, int process_set) {
    hvd_request r = makeRequest(HVD_OP_ALLREDUCE, name, input, output, count, 1, dtype, reduce_op, prescale,
                                postscale, 0, process_set);
    return checked(hvd_enqueue(&r));
  });
  // enqueue_group([(op, name, input, output, rows, row_elements, dtype, reduce_op, prescale, postscale, root,
  // splits, process_set[, shape[, device]]), ...]) -> [handle, ...]: negotiated as one unit; all queued or
  // none.
  m.def("enqueue_group", [](const std::vector<py::tuple>& tuples) {
    std::vector<Op> group;
    group.reserve(tuples.size());
    for (const auto& t : tuples) {
      if (t.size() < 13 || t.size() > 15)
        throw py::value_error("enqueue_group: each operation is a 13-tuple, a 14-tuple with its shape, or a "
                              "15-tuple with its shape and device; got a " +
                              std::to_string(t.size()) + "-tuple");
      group.push_back({t[0].cast<int>(), t[1].cast<std::optional<std::string>>(), t[2].cast<uintptr_t>(),
                       t[3].cast<uintptr_t>(), t[4].cast<size_t>(), t[5].cast<size_t>(), t[6].cast<int>(),
                       t[7].cast<int>(), t[8].cast<double>(), t[9].cast<double>(), t[10].cast<int>(),
                       t[11].cast<std::optional<std::vector<int64_t>>>(), t[12].cast<int>(),
                       t.size() >= 14 ? t[13].cast<std::optional<std::vector<int64_t>>>() : std::nullopt,
                       t.size() == 15 ? t[14].cast<int>() : HVD_CPU_DEVICE});
    }
    std::vector<hvd_request> requests;
    requests.reserve(group.size());
    for (const auto& o : group) {
      requests.push_back(makeRequest(o.op, o.name ? o.name->c_str() : nullptr, o.input, o.output, o.rows, o.row_elements, o.dtype, o.reduce_op,
                                     o.prescale, o.postscale, o.root, o.process_set));
      if (o.splits) requests.back().splits = o.splits->data();
      if (o.shape) {
        requests.back().shape = o.shape->data();
        requests.back().ndim = static_cast<int>(o.shape->size());
      }
      requests.back().device = o.device;
    }
    std::vector<int> handles(group.size());
    checked(hvd_enqueue_group(requests.data(), static_cast<int>(requests.size()), handles.data()));
    return handles;
  });
  m.def("poll", [](int handle) { return checked(hvd_poll(handle)) == 1; });
  // Waits with the GIL released; raises the operation's error. Releases handles without results.
  m.def("wait", [](int handle) { released([&] { return hvd_wait(handle); }); });
  m.def("release", [](int handle) { checked(hvd_release(handle)); });
  // Rows of a finished operation's kept result.
  m.def("result_rows", [](int handle) {
    size_t rows = 0;
    checked(hvd_result(handle, nullptr, &rows));
    return rows;
  });
  // Copies a finished operation's result (nbytes of it) to the address, with the GIL released.
  m.def("copy_result", [](int handle, uintptr_t out, size_t nbytes) {
    const void* data = nullptr;
    checked(hvd_result(handle, &data, nullptr));
    py::gil_scoped_release release;
    if (nbytes) std::memcpy(address(out), data, nbytes);
  });
  m.def("received_splits", [](int handle) {
    const int64_t* splits = nullptr;
    size_t count = 0;
    checked(hvd_received_splits(handle, &splits, &count));
    return std::vector<int64_t>(splits, splits + count);
  });
  m.def("result_int", [](int handle) {
    int64_t value = -1;
    checked(hvd_result_int(handle, &value));
    return value;
  });

  // The address and size of an object's buffer (the buffer protocol: NumPy arrays, bytearray, memoryview,
  // ...), for operations on it without a copy. C-contiguous only; writable when asked.
  m.def(
      "buffer_address",
      [](py::buffer b, bool writable) {
        Py_buffer view;
        const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(b.ptr(), &view, flags) != 0) throw py::error_already_set();
        const auto result = py::make_tuple(reinterpret_cast<uintptr_t>(view.buf), view.len);
        PyBuffer_Release(&view);
        return result;
      },
      py::arg("buffer"), py::arg("writable") = false);
}
