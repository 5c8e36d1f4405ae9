"""Horovod's horovod.torch API on libhvd: `import hvd.torch as hvd` in place of `import horovod.torch as hvd`.

Differences from Horovod are listed in docs/python.md.
"""

import types as _types

from hvd.common.exceptions import HorovodInternalError  # noqa: F401
from hvd.torch.compression import Compression  # noqa: F401
from hvd.torch.mpi_ops import (  # noqa: F401
    Adasum,
    Average,
    Max,
    Min,
    Product,
    ProcessSet,
    Sum,
    add_process_set,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    global_process_set,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    init,
    is_initialized,
    join,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    poll,
    rank,
    reducescatter,
    reducescatter_async,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    sparse_allreduce_async,
    start_timeline,
    stop_timeline,
    synchronize,
)

try:
    from hvd.torch.functions import (  # noqa: F401
        allgather_object,
        broadcast_object,
        broadcast_optimizer_state,
        broadcast_parameters,
    )
    from hvd.torch.optimizer import DistributedOptimizer  # noqa: F401
    from hvd.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
except ImportError as _e:  # pragma: no cover - while those modules are being written
    if "hvd.torch." not in str(_e):
        raise

# hvd.elastic after `import hvd.torch as hvd`, as horovod.torch exports its elastic module.
from hvd.torch import elastic  # noqa: F401,E402

# What `from hvd.torch import *` gives, and what the horovod.torch compatibility package re-exports: the names
# above, without the submodules.
__all__ = sorted(n for n, v in globals().items() if not n.startswith("_") and not isinstance(v, _types.ModuleType))
