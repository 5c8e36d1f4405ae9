"""What every framework module (hvd.torch, hvd.numpy) passes to libhvd: the reduce operations, with
Horovod's values (exported by those modules), libhvd's operation codes (hvd._core.OPS), dtype_code() (a
value's libhvd dtype, or the ValueError), reduce_op() and operation_name() (the checks of those arguments) and
enqueue() (hvd._core.enqueue with Horovod's error before init)."""

import numbers

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


def reduce_op(op):
    """op as libhvd takes it. ValueError naming op unless it is one of the operations above (an int: 1.0 or an
    array is not one); NotImplementedError for Adasum."""
    if isinstance(op, bool) or not isinstance(op, numbers.Integral) or op not in (Average, Sum, Adasum, Min, Max,
                                                                                      Product):
        raise ValueError(f"unknown reduce operation {op!r}: use Average, Sum, Min, Max or Product")
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by hvd: use Average or Sum")
    return int(op)


def operation_name(op, name):
    """The name libhvd gets for a user's `name` of an `op` ("allreduce.grad"), None for None; ValueError naming
    a name that is not a str (Horovod fails on it with an AttributeError)."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise ValueError(f"name must be a str or None, got {name!r}")
    return f"{op}.{name}"


def enqueue(*args):
    """hvd._core.enqueue, with Horovod's error (HorovodInternalError) for use before init."""
    try:
        return _core.enqueue(*args)
    except _core.NotInitializedError:
        raise HorovodInternalError(NOT_INITIALIZED) from None
