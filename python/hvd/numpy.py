"""Horovod's collectives on NumPy arrays, on libhvd: `import hvd.numpy as hvdnp`.

The functions follow hvd.torch's (Horovod's horovod.torch): the same names, the same reduce operations
(Average, Sum, Min, Max, Product), the same `name`, `op`, `prescale_factor`, `postscale_factor` and
`process_set` parameters, the same async handles (`*_async` returns an int handle; poll() and
synchronize() take it) and the same errors. Lifecycle and topology (init, shutdown, rank, size, ...) and
process sets are re-exported from hvd.common, so one init() serves hvd.numpy and hvd.torch alike.

Arrays go to libhvd through the buffer protocol, without a copy when they are C-contiguous:

* out-of-place operations (allreduce, allgather, broadcast, alltoall, reducescatter) accept any array;
  a non-contiguous one is copied to a contiguous array first, and the result is a new C-contiguous array
  of the input's dtype;
* in-place operations (allreduce_, broadcast_ and their async forms) write into the array itself, so it
  must be C-contiguous and writable (else ValueError), and they return that same array.

Supported dtypes: uint8, int8, int16, int32, int64, float16, float32, float64 and bool (native byte
order); any other dtype is a ValueError naming it. Which operations accept which dtype is libhvd's
decision (an unsupported combination raises libhvd's ValueError when it is queued).

An array passed to an async operation must not be modified or resized until its handle is synchronized;
the module keeps a reference to it until then.

Differences from hvd.torch: no autograd, no compression, no deprecated `average=` argument, no grouped
operations, and Adasum is not supported (NotImplementedError, as in hvd.torch).
"""

import numpy as _np

# Re-exported: basics.__all__, HorovodInternalError, process_sets.__all__ (ProcessSet, global_process_set,
# add/remove) and the reduce operations (Average, Sum, Adasum, Min, Max, Product).
from hvd.common.basics import *  # noqa: F401,F403
from hvd.common.basics import is_homogeneous  # noqa: F401
from hvd.common.exceptions import HorovodInternalError  # noqa: F401
from hvd.common.ops import *  # noqa: F401,F403
from hvd.common.process_sets import *  # noqa: F401,F403

# Private.
from hvd import _core
from hvd.common import basics as _basics
from hvd.common import ops as _ops
from hvd.common.ops import ALLGATHER as _ALLGATHER, ALLREDUCE as _ALLREDUCE, ALLTOALL as _ALLTOALL
from hvd.common.ops import BARRIER as _BARRIER, BROADCAST as _BROADCAST, REDUCESCATTER as _REDUCESCATTER
from hvd.common.ops import enqueue as _enqueue
from hvd.common.process_sets import _id_of

_OP = _core.OPS

# NumPy dtype (native byte order) -> libhvd dtype code. NumPy has no bfloat16.
_DTYPES = {_np.dtype(name): code for name, code in _core.DTYPES.items() if name != "bfloat16"}
_SUPPORTED = ", ".join(str(d) for d in _DTYPES)


# handle -> (objects kept alive until synchronize, finisher(handle) -> the value synchronize returns)
_handle_map = {}
_basics._shutdown_hooks.append(_handle_map.clear)


# --- argument checks -------------------------------------------------------------------------------------

def _check_array(array, what):
    """The libhvd dtype code of array; ValueError for anything that is not an ndarray of a supported dtype."""
    return _ops.dtype_code(array, _np.ndarray, _DTYPES,
                           lambda a: f"array dtype {a.dtype} is not supported (supported: {_SUPPORTED})", what)


def _check_in_place(array, what):
    """The dtype code of an array an in-place operation writes into; ValueError unless it can be written
    where it is (C-contiguous, writable)."""
    code = _check_array(array, what)
    if not array.flags.c_contiguous:
        raise ValueError(f"{what}: the array must be C-contiguous to be written in place "
                         f"(shape {array.shape}, strides {array.strides}); pass np.ascontiguousarray(array) "
                         f"or use the out-of-place {what.rstrip('_')}")
    if not array.flags.writeable:
        raise ValueError(f"{what}: the array is read-only and cannot be written in place")
    return code


def _contiguous(array):
    """array itself when C-contiguous, else a C-contiguous copy (same shape, including 0-d)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _rows(array, what):
    """(rows, elements per row) of an array split along its first dimension."""
    if array.ndim == 0:
        raise ValueError(f"{what} of a 0-dimensional array: use arrays with at least one dimension")
    rows = array.shape[0]
    row_elements = 1
    for d in array.shape[1:]:
        row_elements *= d
    return rows, row_elements


def _address(array, writable):
    return _core.buffer_address(array, writable)[0]


_name = _ops.operation_name


def _reduce_op(op):
    return Average if op is None else _ops.reduce_op(op)


def _scale(value, what):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def _set_size(process_set):
    return len(_core.process_set_ranks(_id_of(process_set)) or [])


def _kept_result(handle, dtype, tail):
    """A new array holding the result kept with handle, shaped (rows, *tail); releases the handle."""
    rows = _core.result_rows(handle)
    out = _np.empty((rows, *tail), dtype=dtype)
    if out.size:
        _core.copy_result(handle, _address(out, True), out.nbytes)
    _core.release(handle)
    return out


# --- allreduce -------------------------------------------------------------------------------------------

def _allreduce_async(array, output, name, op, prescale_factor, postscale_factor, process_set, code):
    handle = _enqueue(_ALLREDUCE, _name("allreduce", name), _address(array, False), _address(output, True),
                      array.size, 1, code, _reduce_op(op), _scale(prescale_factor, "prescale_factor"),
                      _scale(postscale_factor, "postscale_factor"), 0, None, _id_of(process_set), array.shape)
    _handle_map[handle] = ((array, output), lambda h: output)
    return handle


def allreduce_async(array, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of array into a new array; synchronize(handle) returns it.

    op: Average (default when None), Sum, Min, Max or Product. The result is
    postscale_factor * reduce(prescale_factor * array); Average also divides by the process set's size."""
    code = _check_array(array, "allreduce")
    array = _contiguous(array)
    output = _np.empty_like(array, order="C")
    return _allreduce_async(array, output, name, op, prescale_factor, postscale_factor, process_set, code)


def allreduce_async_(array, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce (array must be C-contiguous and writable); synchronize returns array."""
    code = _check_in_place(array, "allreduce_")
    return _allreduce_async(array, array, name, op, prescale_factor, postscale_factor, process_set, code)


def allreduce(array, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """The reduction of array over the ranks of process_set, as a new array (see allreduce_async)."""
    return synchronize(allreduce_async(array, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_(array, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns array."""
    return synchronize(allreduce_async_(array, name, op, prescale_factor, postscale_factor, process_set))


# --- allgather -------------------------------------------------------------------------------------------

def allgather_async(array, name=None, process_set=global_process_set):
    """Starts an allgather: the rows (dim 0) of every member's array, concatenated in set-rank order.
    Only dim 0 may differ between ranks."""
    code = _check_array(array, "allgather")
    array = _contiguous(array)
    rows, row_elements = _rows(array, "allgather")
    tail, dtype = array.shape[1:], array.dtype
    handle = _enqueue(_ALLGATHER, _name("allgather", name), _address(array, False), 0, rows, row_elements, code,
                      0, 1.0, 1.0, 0, None, _id_of(process_set), array.shape)
    _handle_map[handle] = ((array,), lambda h: _kept_result(h, dtype, tail))
    return handle


def allgather(array, name=None, process_set=global_process_set):
    """Every member's array concatenated along dim 0 in set-rank order, as a new array."""
    return synchronize(allgather_async(array, name, process_set))


# --- broadcast -------------------------------------------------------------------------------------------

def _broadcast_async(output, root_rank, name, process_set, code, keep):
    if isinstance(root_rank, bool) or not isinstance(root_rank, (int, _np.integer)):
        raise ValueError(f"root_rank must be an int (a global rank), got {root_rank!r}")
    handle = _enqueue(_BROADCAST, _name("broadcast", name), 0, _address(output, True), output.size, 1, code, 0,
                      1.0, 1.0, int(root_rank), None, _id_of(process_set), output.shape)
    _handle_map[handle] = (keep, lambda h: output)
    return handle


def broadcast_async(array, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's array (root_rank is a global rank) into a new array."""
    code = _check_array(array, "broadcast")
    output = _np.array(array, order="C", copy=True)
    return _broadcast_async(output, root_rank, name, process_set, code, (array, output))


def broadcast_async_(array, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast into array (C-contiguous, writable); the root's array is unchanged."""
    code = _check_in_place(array, "broadcast_")
    return _broadcast_async(array, root_rank, name, process_set, code, (array,))


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """root_rank's array on every member of process_set, as a new array."""
    return synchronize(broadcast_async(array, root_rank, name, process_set))


def broadcast_(array, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns array."""
    return synchronize(broadcast_async_(array, root_rank, name, process_set))


# --- alltoall --------------------------------------------------------------------------------------------

def _split_list(splits, process_set):
    if isinstance(splits, _np.ndarray):
        if splits.ndim != 1:
            raise ValueError(f"splits must be 1-dimensional, got shape {splits.shape}")
        if splits.dtype.kind not in "iu":
            raise ValueError(f"splits must hold integers, got dtype {splits.dtype}")
        values = splits.tolist()
    else:
        try:
            values = list(splits)
        except TypeError:
            raise ValueError(f"splits must be a list or a 1-D integer array, got {type(splits).__name__}") from None
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, _np.integer)):
                raise ValueError(f"splits must hold integers, got {v!r}")
    values = [int(v) for v in values]
    n = _set_size(process_set)
    if len(values) != n:
        raise ValueError(f"Number of entries in splits ({len(values)}) does not equal number of workers ({n})")
    return values


def alltoall_async(array, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: splits[i] rows (dim 0) of array go to set rank i, and this rank receives the rows
    the others send it, in set-rank order. splits: None (dim 0 split evenly over the set), or one integer
    per member of the set. synchronize returns the received array, or (array, received_splits) when splits
    were given (received_splits: an int32 array, the rows received from each member)."""
    code = _check_array(array, "alltoall")
    array = _contiguous(array)
    rows, row_elements = _rows(array, "alltoall")
    split_list = None if splits is None else _split_list(splits, process_set)
    tail, dtype = array.shape[1:], array.dtype
    handle = _enqueue(_ALLTOALL, _name("alltoall", name), _address(array, False), 0, rows, row_elements, code, 0,
                      1.0, 1.0, 0, split_list, _id_of(process_set), array.shape)
    with_splits = splits is not None

    def finish(h):
        received = _np.array(_core.received_splits(h), dtype=_np.int32)
        out = _kept_result(h, dtype, tail)
        return (out, received) if with_splits else out

    _handle_map[handle] = ((array,), finish)
    return handle


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of array to the members of process_set and gathers theirs (see alltoall_async).
    Returns the received array, or (array, received_splits) when splits were given."""
    return synchronize(alltoall_async(array, splits, name, process_set))


# --- reducescatter ---------------------------------------------------------------------------------------

def reducescatter_async(array, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: the reduction over the set (Average or Sum), of which set rank r receives its
    block of dim-0 rows (the first rows % size members get one extra row). Note Horovod's parameter order:
    process_set before the scale factors."""
    code = _check_array(array, "reducescatter")
    array = _contiguous(array)
    rows, row_elements = _rows(array, "reducescatter")
    op = Average if op is None else op
    if isinstance(op, bool) or op not in (Average, Sum):
        if op in (Min, Max, Product, Adasum):
            raise HorovodInternalError("Reducescatter currently only supports AVERAGE and SUM.")
        raise ValueError(f"unknown reduce operation {op!r}: reducescatter takes Average or Sum")
    tail, dtype = array.shape[1:], array.dtype
    handle = _enqueue(_REDUCESCATTER, _name("reducescatter", name), _address(array, False), 0, rows, row_elements,
                      code, op, _scale(prescale_factor, "prescale_factor"),
                      _scale(postscale_factor, "postscale_factor"), 0, None, _id_of(process_set), array.shape)
    _handle_map[handle] = ((array,), lambda h: _kept_result(h, dtype, tail))
    return handle


def reducescatter(array, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This rank's block of the reduction of array over the set, as a new array (see reducescatter_async)."""
    return synchronize(reducescatter_async(array, name, op, process_set, prescale_factor, postscale_factor))


# --- barrier, poll, synchronize --------------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Blocks until every member of process_set arrives. Returns None."""
    handle = _enqueue(_BARRIER, None, 0, 0, 0, 1, 0, 0, 1.0, 1.0, 0, None, _id_of(process_set))
    _handle_map[handle] = ((), lambda h: None)
    synchronize(handle)


def poll(handle):
    """True when the operation finished. ValueError for a handle never created or already synchronized."""
    if handle not in _handle_map:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    return _core.poll(handle)


def synchronize(handle):
    """Waits for handle (the GIL released) and returns its output: the new or in-place array, alltoall's
    (array, received_splits) when splits were given, None for barrier; None for an unknown or already
    synchronized handle. Raises the operation's error: HorovodInternalError (or a subclass), or ValueError
    for bad arguments."""
    entry = _handle_map.pop(handle, None)
    if entry is None:
        return None
    try:
        _core.wait(handle)
    except Exception:
        try:
            _core.release(handle)
        except ValueError:
            pass  # already released by wait (operations without kept results)
        raise
    return entry[1](handle)
