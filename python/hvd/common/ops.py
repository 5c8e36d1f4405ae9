"""What every framework module (hvd.torch, hvd.numpy) passes to libhvd: the reduce operations, with
Horovod's values (exported by those modules), and libhvd's operation codes (hvd._core.OPS)."""

from hvd import _core

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
