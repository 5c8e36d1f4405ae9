"""Python objects through collectives: broadcast_object and allgather_object (pickled with cloudpickle when
it is installed, else pickle, and sent as uint8 tensors)."""

import io

import torch

from hvd.torch.mpi_ops import allgather_async, broadcast_async_, global_process_set, rank, synchronize

try:
    import cloudpickle as _pickler
except ImportError:  # Debian's python3-cloudpickle is optional; plain pickle cannot serialize lambdas
    import pickle as _pickler


def _dumps(obj):
    buffer = io.BytesIO()
    _pickler.dump(obj, buffer)
    return buffer.getvalue()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (any picklable object, serialized with cloudpickle) on every rank of the set.

    root_rank is a global rank. The root returns `obj` itself, the others an unpickled copy. Two
    broadcasts are made: the length as int32 (`<name>.sz`) and the bytes as uint8 (`<name>.t`). name
    defaults to "broadcast_object" on every rank, so ranks may pass objects of different types (such as
    None where they are not the root)."""
    if name is None:
        name = "broadcast_object"
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int32)
        synchronize(broadcast_async_(length, root_rank, f"{name}.sz", process_set))
        synchronize(broadcast_async_(payload, root_rank, f"{name}.t", process_set))
        return obj
    length = torch.zeros(1, dtype=torch.int32)
    synchronize(broadcast_async_(length, root_rank, f"{name}.sz", process_set))
    payload = torch.empty(int(length.item()), dtype=torch.uint8)
    synchronize(broadcast_async_(payload, root_rank, f"{name}.t", process_set))
    return _pickler.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None):
    """A list of every rank's `obj` (any picklable object), indexed by rank. Two allgathers over the global
    set: the lengths (`<name>.sz`) and the bytes (`<name>.t`). name defaults to "allgather_object" on
    every rank, so the objects' types may differ between ranks."""
    if name is None:
        name = "allgather_object"
    payload = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    length = torch.tensor([payload.numel()], dtype=torch.int32)
    lengths = synchronize(allgather_async(length, name=f"{name}.sz")).tolist()
    gathered = synchronize(allgather_async(payload, name=f"{name}.t")).numpy().tobytes()
    objects, offset = [], 0
    for n in lengths:
        objects.append(_pickler.loads(gathered[offset:offset + n]))
        offset += n
    return objects
