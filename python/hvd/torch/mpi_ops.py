"""Horovod's horovod.torch.mpi_ops on libhvd: collectives on CPU and CUDA tensors, async handles, autograd.

Every operation on CPU tensors is queued in libhvd with the tensor's address (no copy for contiguous
tensors); the tensors stay referenced in _handle_map until their handle is synchronized, as Horovod keeps
them. An operation on CUDA tensors runs on pinned host copies (hvd.torch.cuda_staging), and synchronize()
gives its result on the input's device; libhvd is told the device, so that ranks mixing CPU and GPU
tensors under one name get Horovod's mismatch error.
Names follow Horovod's: "<op>.<name>" for named operations, "<op>.noname.<n>" otherwise (n counts this
rank's unnamed operations, so ranks must issue unnamed operations in the same order), and
"grouped_<op>.<name>_<i>of<n>" for the members of a group.
"""

import warnings

import torch

# Re-exported, as Horovod exports them from mpi_ops: basics.__all__, process_sets.__all__ (ProcessSet,
# global_process_set, add/remove) and the reduce operations (Average, Sum, Adasum, Min, Max, Product).
from hvd.common.basics import *  # noqa: F401,F403
from hvd.common.basics import is_homogeneous  # noqa: F401
from hvd.common.ops import *  # noqa: F401,F403
from hvd.common.process_sets import *  # noqa: F401,F403

# Private.
from hvd import _core
from hvd.common import basics as _basics
from hvd.common import ops as _ops
from hvd.common import process_sets as _process_sets
from hvd.common.exceptions import HorovodInternalError
from hvd.common.ops import ALLGATHER as _ALLGATHER, ALLREDUCE as _ALLREDUCE, ALLTOALL as _ALLTOALL
from hvd.common.ops import BARRIER as _BARRIER, BROADCAST as _BROADCAST, JOIN as _JOIN
from hvd.common.ops import REDUCESCATTER as _REDUCESCATTER, enqueue as _enqueue
from hvd.torch import cuda_staging as _cuda

_OP = _core.OPS

_DTYPES = {getattr(torch, name): code for name, code in _core.DTYPES.items()}

# handle -> (objects kept alive, finisher(handle) -> the value synchronize() returns)
_handle_map = {}
_basics._shutdown_hooks.append(_handle_map.clear)
_grouped_unnamed = 0

_NOT_INITIALIZED = _ops.NOT_INITIALIZED


def _check_tensor(tensor, in_place):
    """The libhvd dtype code of tensor; ValueError for what libhvd cannot take."""
    code = _ops.dtype_code(tensor, torch.Tensor, _DTYPES, lambda t: f"Tensor type {t.type()} is not supported.")
    if tensor.device.type != "cpu":
        _check_device(tensor)
        # Every entry point stages a CUDA tensor first: libhvd must never get a device address.
        raise HorovodInternalError(f"internal error: a tensor on {tensor.device} reached libhvd without host "
                                   f"staging")
    if in_place and not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    if tensor.is_sparse:
        raise ValueError("sparse tensors go through sparse_allreduce_async")
    return code


def _check_device(tensor):
    """ValueError for a tensor on a device other than the CPU and CUDA (meta, mps, xpu...)."""
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"tensor on {tensor.device}: hvd runs collectives on CPU and CUDA tensors; move it with "
                         f".cpu()")


def _check_gpu_in_place(tensors):
    """What in-place operations refuse on the CPU, refused for CUDA tensors before they are copied."""
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("Tensor is required to be contiguous.")


def _contiguous(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    return tensor if tensor.is_contiguous() else tensor.contiguous()


_name = _ops.operation_name


_process_set_id = _process_sets._id_of


def _set_size(process_set):
    return len(_core.process_set_ranks(_process_set_id(process_set)) or [])


def handle_average_backwards_compatibility(op, average):
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning)
        return Average if average else Sum
    return Average


_reduce_op = _ops.reduce_op


def _returns_output(output):
    return lambda handle: output


def _via_host(tensors, start, into=None):
    """Starts an operation on CUDA tensors (one device): start(host copies, device ordinal) queues it on
    pinned host copies and returns its handle; synchronize() then gives the result on the tensors'
    device, copied into the tensors of `into` when given. A list result stays a list; of a tuple result
    (alltoall's output and received splits) the first item moves (the splits are already where Horovod
    puts them)."""
    device = tensors[0].device
    handle = start(_cuda.to_host(tensors), _cuda.device_id(tensors[0]))
    keep, finisher = _handle_map[handle]
    host_result = finisher if finisher is not None else (lambda h: keep)

    def on_device(h):
        result = host_result(h)
        if isinstance(result, list):
            return _cuda.to_device(result, device, into)
        if isinstance(result, tuple):
            return (_cuda.to_device(result[:1], device, into)[0],) + result[1:]
        return _cuda.to_device([result], device, into)[0]

    _handle_map[handle] = (keep, on_device)
    return handle


# --- allreduce -------------------------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set, device=-1):
    code = _check_tensor(tensor, True)
    handle = _enqueue(_ALLREDUCE, _name("allreduce", name), tensor.data_ptr(), output.data_ptr(), tensor.numel(),
                      1, code, _reduce_op(op), prescale_factor, postscale_factor, 0, None,
                      _process_set_id(process_set), tuple(tensor.shape), device)
    _handle_map[handle] = (output, None) if output is tensor else ((tensor, output), _returns_output(output))
    return handle


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of tensor into a new tensor; returns a handle for synchronize()."""
    op = handle_average_backwards_compatibility(op, average)
    tensor = _contiguous(tensor)
    if tensor.is_cuda:
        return _via_host([tensor], lambda hosts, device: _allreduce_async(
            hosts[0], hosts[0], name, op, prescale_factor, postscale_factor, process_set, device))
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


# Reduce operations the fast path takes (None: the default, Average).
_FAST_OPS = {None: Average, Average: Average, Sum: Sum, Min: Min, Max: Max, Product: Product}


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce; synchronize() returns tensor itself."""
    # Fast path, for what every training step submits (a plain contiguous CPU tensor of a known dtype):
    # the same checks as the general path, inlined, and one call into libhvd.
    if average is None and type(tensor) is torch.Tensor and (name is None or type(name) is str):
        code = _DTYPES.get(tensor.dtype)
        reduce_op = _FAST_OPS.get(op) if op is None or type(op) is int else None
        ps_id = getattr(process_set, "process_set_id", None)
        if (code is not None and reduce_op is not None and ps_id is not None and tensor.is_cpu
                and not tensor.is_sparse and tensor.is_contiguous()):
            ptr = tensor.data_ptr()
            try:
                handle = _core.enqueue_allreduce(None if name is None else "allreduce." + name, ptr, ptr,
                                                 tensor.numel(), code, reduce_op, prescale_factor, postscale_factor,
                                                 ps_id)
            except _core.NotInitializedError:
                raise HorovodInternalError(_NOT_INITIALIZED) from None
            _handle_map[handle] = (tensor, None)
            return handle
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        _check_gpu_in_place([tensor])
        return _via_host([tensor], lambda hosts, device: _allreduce_async(
            hosts[0], hosts[0], name, op, prescale_factor, postscale_factor, process_set, device), into=[tensor])
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce whose gradient is the allreduce of the incoming gradient with the same parameters."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average, ctx.op = average, op
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                           process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, average=ctx.average, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Allreduce (differentiable); returns a new tensor. Note Horovod's order: compression before op."""
    if compression is None:
        from hvd.torch.compression import Compression
        compression = Compression.none
    tensor_compressed, ctx = compression.compress(tensor)
    summed = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor, postscale_factor,
                                    process_set)
    return compression.decompress(summed, ctx)


# --- grouped allreduce -----------------------------------------------------------------------------------

def _group_names(kind, name, count):
    global _grouped_unnamed
    if name is None:
        base = f"grouped_{kind}.noname.{_grouped_unnamed}"
        _grouped_unnamed += 1
    else:
        base = f"grouped_{kind}.{name}"
    return [f"{base}_{i}of{count}" for i in range(1, count + 1)]


def _check_group(tensors):
    if not tensors:
        raise IndexError("list index out of range: a grouped operation needs at least one tensor")
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        raise HorovodInternalError("Tensors in list must be on same device.")


def _enqueue_group(ops, keep, finisher):
    """Queues a group; returns its first handle, whose synchronize() waits for every member and returns
    finisher(handles)."""
    try:
        handles = _core.enqueue_group(ops)
    except _core.NotInitializedError:
        raise HorovodInternalError(_NOT_INITIALIZED) from None
    for h in handles[1:]:
        _handle_map[h] = (keep, _group_member)
    _handle_map[handles[0]] = (keep, lambda _: finisher(handles))
    _group_members[handles[0]] = handles[1:]
    return handles[0]


def _group_member(handle):
    """The finisher of a group's other members: their results come through the group's first handle."""
    return None


# first handle of a group -> the other members' handles (waited for by synchronize(first))
_group_members = {}
_basics._shutdown_hooks.append(_group_members.clear)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set,
                             device=-1):
    _check_group(tensors)
    op = _reduce_op(op)
    ps_id = _process_set_id(process_set)
    names = _group_names("allreduce", name, len(tensors))
    ops = [(_ALLREDUCE, n, t.data_ptr(), o.data_ptr(), t.numel(), 1, _check_tensor(t, True), op, prescale_factor,
            postscale_factor, 0, None, ps_id, tuple(t.shape), device) for n, t, o in zip(names, tensors, outputs)]
    return _enqueue_group(ops, (tensors, outputs), lambda handles: list(outputs))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    op = handle_average_backwards_compatibility(op, average)
    tensors = [_contiguous(t) for t in tensors]
    _check_group(tensors)
    if tensors[0].is_cuda:
        return _via_host(tensors, lambda hosts, device: _grouped_allreduce_async(
            hosts, hosts, name, op, prescale_factor, postscale_factor, process_set, device))
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    _check_group(tensors)
    if tensors[0].is_cuda:
        _check_gpu_in_place(tensors)
        return _via_host(tensors, lambda hosts, device: _grouped_allreduce_async(
            hosts, hosts, name, op, prescale_factor, postscale_factor, process_set, device), into=tensors)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average, ctx.op = average, op
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                  prescale_factor=ctx.prescale_factor, postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of tensors as one negotiated, fused unit; returns a list (differentiable)."""
    if compression is None:
        from hvd.torch.compression import Compression
        compression = Compression.none
    _check_group(tensors)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    summed = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                           *compressed)
    return [compression.decompress(t, c) for t, c in zip(summed, ctxs)]


# --- sparse allreduce ------------------------------------------------------------------------------------

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Allreduce of a sparse COO tensor by allgathering its indices and values; returns a callable that
    waits and returns the reduced sparse tensor (Horovod's contract)."""
    t = tensor.coalesce()
    indices_handle = allgather_async(t.indices().t().contiguous(), name=f"{name}.indices", process_set=process_set)
    values = t.values()
    if op == Average:
        values = values / _set_size(process_set)
    values_handle = allgather_async(values.contiguous(), name=f"{name}.values", process_set=process_set)

    def finish():
        indices = synchronize(indices_handle).t()
        vals = synchronize(values_handle)
        return torch.sparse_coo_tensor(indices, vals, size=tensor.size()).coalesce()

    return finish


# --- allgather -------------------------------------------------------------------------------------------

def _row_elements(shape):
    n = 1
    for d in shape[1:]:
        n *= d
    return n


def _result_tensor(handle, like, shape_tail, pinned=False):
    """A new tensor holding the kept result of handle, shaped (rows, *shape_tail); releases the handle.
    pinned: in page-locked memory, for a result that goes on to a CUDA device."""
    rows = _core.result_rows(handle)
    out = torch.empty((rows, *shape_tail), dtype=like.dtype, pin_memory=pinned)
    _core.copy_result(handle, out.data_ptr(), out.numel() * out.element_size())
    _core.release(handle)
    return out


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: rows (dim 0) of every rank in set-rank order; only dim 0 may differ."""
    tensor = _contiguous(tensor)
    if tensor.is_cuda:
        return _via_host([tensor], lambda hosts, device: _allgather_async(hosts[0], name, process_set, device))
    return _allgather_async(tensor, name, process_set)


def _allgather_async(tensor, name, process_set, device=-1):
    code = _check_tensor(tensor, False)
    if tensor.dim() == 0:
        raise ValueError("allgather of a 0-dimensional tensor: gather tensors with at least one dimension")
    tail = tuple(tensor.shape[1:])
    handle = _enqueue(_ALLGATHER, _name("allgather", name), tensor.data_ptr(), 0, tensor.shape[0],
                      _row_elements(tensor.shape), code, 0, 1.0, 1.0, 0, None, _process_set_id(process_set),
                      tuple(tensor.shape), device)
    _handle_map[handle] = ((tensor,), lambda h: _result_tensor(h, tensor, tail, device >= 0))
    return handle


class HorovodAllgather(torch.autograd.Function):
    """Allgather; the gradient is this rank's rows of the average of the incoming gradients."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out = synchronize(allgather_async(tensor, name, process_set))  # checks the tensor first
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dims = synchronize(allgather_async(torch.tensor([ctx.dim], dtype=torch.int32),
                                           process_set=ctx.process_set)).tolist()
        ps_rank = ctx.process_set.rank() if ctx.process_set.process_set_id else rank()
        offset = sum(dims[:ps_rank])
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's tensor along dim 0, in rank order (differentiable)."""
    return HorovodAllgather.apply(tensor, name, process_set)


def _grouped_kept_async(kind, tensors, name, op, prescale_factor, postscale_factor, process_set):
    """A group of operations whose results libhvd keeps (allgather, reducescatter); synchronize() gives
    the list of result tensors."""
    _check_group(tensors)
    tensors = [_contiguous(t) for t in tensors]
    if tensors[0].is_cuda:
        return _via_host(tensors, lambda hosts, device: _grouped_kept_start(
            kind, hosts, name, op, prescale_factor, postscale_factor, process_set, device))
    return _grouped_kept_start(kind, tensors, name, op, prescale_factor, postscale_factor, process_set)


def _grouped_kept_start(kind, tensors, name, op, prescale_factor, postscale_factor, process_set, device=-1):
    ps_id = _process_set_id(process_set)
    names = _group_names(kind, name, len(tensors))
    ops = []
    for n, t in zip(names, tensors):
        code = _check_tensor(t, False)
        if t.dim() == 0:
            raise ValueError(f"{kind} of a 0-dimensional tensor: use tensors with at least one dimension")
        ops.append((_OP[kind], n, t.data_ptr(), 0, t.shape[0], _row_elements(t.shape), code, op, prescale_factor,
                    postscale_factor, 0, None, ps_id, tuple(t.shape), device))
    tails = [tuple(t.shape[1:]) for t in tensors]
    return _enqueue_group(ops, tensors, lambda handles: [_result_tensor(h, t, tail, device >= 0)
                                                         for h, t, tail in zip(handles, tensors, tails)])


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _grouped_kept_async("allgather", tensors, name, 0, 1.0, 1.0, process_set)


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=Average, process_set=ctx.process_set)
        dims = synchronize(allgather_async(torch.tensor(ctx.dims, dtype=torch.int32).reshape(1, -1),
                                           process_set=ctx.process_set))
        ps_rank = ctx.process_set.rank() if ctx.process_set.process_set_id else rank()
        offsets = dims[:ps_rank].sum(dim=0).tolist() if ps_rank else [0] * len(ctx.dims)
        return (None, None, *[g.narrow(0, o, d) for g, o, d in zip(grads, offsets, ctx.dims)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    _check_group(tensors)
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# --- broadcast -------------------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set, device=-1):
    code = _check_tensor(output, True)
    if output is not tensor:
        output.copy_(tensor)
    handle = _enqueue(_BROADCAST, _name("broadcast", name), 0, output.data_ptr(), output.numel(), 1, code, 0, 1.0,
                      1.0, root_rank, None, _process_set_id(process_set), tuple(output.shape), device)
    _handle_map[handle] = ((tensor, output), _returns_output(output))
    return handle


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's (global rank) tensor into a new tensor."""
    if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        return _via_host([tensor], lambda hosts, device: _broadcast_async(
            hosts[0], hosts[0], root_rank, name, process_set, device))
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        _check_gpu_in_place([tensor])
        return _via_host([tensor], lambda hosts, device: _broadcast_async(
            hosts[0], hosts[0], root_rank, name, process_set, device), into=[tensor])
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast; the gradient is the average of the incoming gradients on the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced *= 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank, as a new tensor (differentiable)."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


# --- alltoall --------------------------------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: splits[i] rows go to set rank i (even split when None)."""
    return _alltoall_start(tensor, splits, name, process_set, with_received=splits is not None)


def _alltoall_start(tensor, splits, name, process_set, with_received):
    """alltoall_async; synchronize() gives (output, received splits) when with_received, else output."""
    tensor = _contiguous(tensor)
    if tensor.is_cuda:
        return _via_host([tensor], lambda hosts, device: _alltoall_queue(hosts[0], splits, name, process_set,
                                                                         with_received, device))
    return _alltoall_queue(tensor, splits, name, process_set, with_received)


def _alltoall_queue(tensor, splits, name, process_set, with_received, device=-1):
    code = _check_tensor(tensor, False)
    if tensor.dim() == 0:
        raise ValueError("alltoall of a 0-dimensional tensor: exchange tensors with at least one dimension")
    split_list = None
    if splits is not None:
        if isinstance(splits, torch.Tensor):
            if splits.dim() != 1:
                raise ValueError(f"splits must be a 1-D tensor, got shape {tuple(splits.shape)}")
            if splits.dtype != torch.int32:
                raise ValueError(f"splits must be a tensor of 32-bit integers (torch.int32), got {splits.dtype}")
            split_list = [int(x) for x in splits.tolist()]
        else:
            split_list = [int(x) for x in splits]
        n = _set_size(process_set)
        if len(split_list) != n:
            raise ValueError(f"Number of entries in splits ({len(split_list)}) does not equal number of workers "
                             f"({n})")
    tail = tuple(tensor.shape[1:])
    handle = _enqueue(_ALLTOALL, _name("alltoall", name), tensor.data_ptr(), 0, tensor.shape[0],
                      _row_elements(tensor.shape), code, 0, 1.0, 1.0, 0, split_list, _process_set_id(process_set),
                      tuple(tensor.shape), device)

    def finish(h):
        # On the device of the splits given, else on the CPU, as Horovod gives them.
        received = torch.tensor(_core.received_splits(h), dtype=torch.int32,
                                device=splits.device if isinstance(splits, torch.Tensor) else "cpu")
        out = _result_tensor(h, tensor, tail, device >= 0)
        return (out, received) if with_received else out

    _handle_map[handle] = ((tensor,), finish)
    return handle


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall; the gradient goes back the way the rows came (alltoall with the received splits)."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        # What each rank sent here, also for an even split: ranks may hold different numbers of rows, and the
        # gradient goes back the way the rows came.
        out, received = synchronize(_alltoall_start(tensor, splits, name, process_set, with_received=True))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, grad_received):
        grad, _ = synchronize(alltoall_async(grad_output, splits=ctx.received, process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows to every rank and gathers theirs (differentiable). Returns output, or
    (output, received_splits) when splits were given."""
    out, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# --- reducescatter ---------------------------------------------------------------------------------------

def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise HorovodInternalError("Reducescatter currently only supports AVERAGE and SUM.")
    return op


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: reduces over ranks and gives set rank r its block of dim-0 rows (the first
    rows % n ranks one extra)."""
    tensor = _contiguous(tensor)
    if tensor.is_cuda:
        return _via_host([tensor], lambda hosts, device: _reducescatter_async(
            hosts[0], name, op, process_set, prescale_factor, postscale_factor, device))
    return _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)


def _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor, device=-1):
    code = _check_tensor(tensor, False)
    if tensor.dim() == 0:
        raise ValueError("reducescatter of a 0-dimensional tensor: use tensors with at least one dimension")
    _check_reducescatter_op(op)
    tail = tuple(tensor.shape[1:])
    handle = _enqueue(_REDUCESCATTER, _name("reducescatter", name), tensor.data_ptr(), 0, tensor.shape[0],
                      _row_elements(tensor.shape), code, op, prescale_factor, postscale_factor, 0, None,
                      _process_set_id(process_set), tuple(tensor.shape), device)
    _handle_map[handle] = ((tensor,), lambda h: _result_tensor(h, tensor, tail, device >= 0))
    return handle


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter; the gradient is the allgather of the incoming gradients (times the set size for Sum,
    and the scale factors)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.clone()
        if ctx.op == Sum:
            grad *= _set_size(ctx.process_set)
        grad *= ctx.prescale_factor * ctx.postscale_factor
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce over ranks, then this rank's block of rows (differentiable)."""
    if compression is None:
        from hvd.torch.compression import Compression
        compression = Compression.none
    compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _check_reducescatter_op(op)
    return _grouped_kept_async("reducescatter", tensors, name, op, prescale_factor, postscale_factor, process_set)


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                                             postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        factor = ctx.prescale_factor * ctx.postscale_factor * (_set_size(ctx.process_set) if ctx.op == Sum else 1)
        grads = grouped_allgather([g * factor for g in grad_output], process_set=ctx.process_set)
        return (None, None, None, None, None, *grads)


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    if compression is None:
        from hvd.torch.compression import Compression
        compression = Compression.none
    _check_group(tensors)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, ctxs)]


# --- barrier, join, poll, synchronize --------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Blocks until every member of the set arrives."""
    handle = _enqueue(_BARRIER, None, 0, 0, 0, 1, 0, 0, 1.0, 1.0, 0, None, _process_set_id(process_set))
    _handle_map[handle] = ((), lambda h: None)
    synchronize(handle)


def join(device=-1):
    """This rank has no more data: until every rank joined, it contributes zeros to the others' allreduces.
    Blocks until all joined; returns the last rank to join. `device` is accepted for Horovod's signature
    (zeros are made on the CPU)."""
    handle = _enqueue(_JOIN, None, 0, 0, 0, 1, 0, 0, 1.0, 1.0, 0, None, 0)

    def finish(h):
        value = _core.result_int(h)
        _core.release(h)
        return int(value)

    _handle_map[handle] = ((), finish)
    return synchronize(handle)


def poll(handle):
    """True when the operation finished. ValueError for a handle never created or already synchronized."""
    if handle not in _handle_map:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    return _core.poll(handle)


def synchronize(handle):
    """Waits for handle (GIL released) and returns its output; None for an unknown or used handle.
    Raises the operation's error (HorovodInternalError, or ValueError for bad arguments).

    _handle_map holds (output, None) for in-place operations, whose output is the tensor itself (the
    training step's path: one lookup and one wait), and (objects kept alive, finisher) otherwise."""
    entry = _handle_map.pop(handle, None)
    if entry is None:
        return None
    finisher = entry[1]
    if finisher is None:
        _core.wait(handle)  # libhvd releases the handle, also when the operation failed
        return entry[0]
    members = _group_members.pop(handle, None)
    if members is not None:
        return _synchronize_group(handle, members, finisher)
    try:
        _core.wait(handle)
    except Exception:
        _release_quietly(handle)
        raise
    return finisher(handle)


def _release_quietly(handle):
    try:
        _core.release(handle)
    except ValueError:
        pass  # already released by wait (operations without kept results)


def _synchronize_group(first, members, finisher):
    handles = [first] + members
    error = None
    for h in handles:
        _handle_map.pop(h, None)
        try:
            _core.wait(h)
        except Exception as e:  # wait for every member before raising, so none is left running
            _release_quietly(h)
            error = error or e
    if error is not None:
        raise error
    return finisher(first)
