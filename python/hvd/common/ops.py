"""What every framework module (hvd.torch, hvd.numpy) passes to libhvd: the reduce operations, with
Horovod's values (exported by those modules), libhvd's operation codes (hvd._core.OPS), dtype_code() (a
value's libhvd dtype, or the ValueError) and enqueue() (hvd._core.enqueue with Horovod's error before init)."""

from hvd import _core
from hvd.common.basics import _NOT_INITIALIZED
from hvd.common.exceptions import HorovodInternalError

# Reduce operations, with Horovod's values.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

__all__ = ["Average", "Sum", "Adasum", "Min", "Max", "Product"]

ALLREDUCE = _core.OPS["allreduce"]
ALLGATHER = _core.OPS["allgather"]
BROADCAST = _core.OPS["broadcast"]
ALLTOALL = _core.OPS["alltoall"]
REDUCESCATTER = _core.OPS["reducescatter"]
BARRIER = _core.OPS["barrier"]
JOIN = _core.OPS["join"]

NOT_INITIALIZED = _NOT_INITIALIZED  # Horovod's words for an operation before init


def dtype_code(value, kind, dtypes, unsupported, what=None):
    """The libhvd dtype code of value, an instance of kind, looked up by value.dtype in dtypes. ValueError
    naming value's type when it is not a kind, or with the message unsupported(value) when its dtype has no
    code; what, when given, starts either message."""
    prefix = f"{what}: " if what else ""
    if not isinstance(value, kind):
        raise ValueError(f"{prefix}expected a {kind.__module__}.{kind.__qualname__}, got {type(value).__name__}")
    code = dtypes.get(value.dtype)
    if code is None:
        raise ValueError(prefix + unsupported(value))
    return code


def enqueue(*args):
    """hvd._core.enqueue, with Horovod's error (HorovodInternalError) for use before init."""
    try:
        return _core.enqueue(*args)
    except _core.NotInitializedError:
        raise HorovodInternalError(NOT_INITIALIZED) from None
