"""Lifecycle, topology and build probes (Horovod's horovod.common.basics, on libhvd)."""

import atexit
import os
from typing import Callable

from hvd import _core
from hvd.common import process_sets as _ps
from hvd.common.exceptions import InitError

# What every framework module (hvd.torch, hvd.numpy) exports from here, as Horovod's do; is_homogeneous and
# device are reached through the module (horovod.torch exports is_homogeneous only from mpi_ops).
__all__ = ["ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "init",
           "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
           "nccl_built", "rank", "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline"]

_NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."
_atexit_registered = False
# Called after shutdown() (the framework layers drop their handle maps).
_shutdown_hooks = []


def init(comm=None, process_sets=None):
    """Joins the job (hvd_init) and registers static process sets.

    comm: None (every rank). MPI communicators and rank lists need Horovod built with MPI: hvd runs on
    Gloo, so both raise ValueError; use process sets for subsets of ranks.
    process_sets: None, a list of ProcessSet (registered with ids 1, 2, ... in that order), or "dynamic"
    (sets HOROVOD_DYNAMIC_PROCESS_SETS=1, so add_process_set/remove_process_set work later).
    A second init() while initialized does nothing. Raises ValueError when joining fails (with libhvd's
    reason)."""
    global _atexit_registered
    if comm is not None:
        raise ValueError("init(comm=...) needs Horovod built with MPI; hvd runs on Gloo: start every rank "
                         "with hvdrun and use process_sets for subsets of ranks")
    static_sets = []
    if process_sets == "dynamic":
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    elif process_sets is not None:
        seen = []
        for ps in process_sets:
            if not isinstance(ps, _ps.ProcessSet):
                raise ValueError(f"init(process_sets=...): {ps!r} is not a ProcessSet")
            if ps is _ps.global_process_set:
                continue
            if any(ps.ranks == other.ranks for other in seen):
                raise ValueError(f"init(process_sets=...): {ps} is a duplicate")
            seen.append(ps)
        static_sets = seen
    if _core.is_initialized():
        return
    try:
        if static_sets:
            _core.init_process_sets([ps.ranks for ps in static_sets])
        else:
            _core.init()
    except InitError as e:
        raise ValueError(f"Horovod initialization failed: {e}") from e
    except ValueError as e:  # a bad static process set
        raise ValueError(f"Horovod initialization failed: {e}") from e
    _ps._on_init(static_sets)
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered = True


def shutdown():
    """Leaves the job with every other rank; init() may be called again afterwards."""
    if _core.is_initialized():
        _core.shutdown()
        _ps._on_shutdown()
    for hook in _shutdown_hooks:
        hook()


def is_initialized():
    return _core.is_initialized()


def _topology(name: str, doc: str) -> Callable[[], int]:
    """The accessor `name`(): libhvd's number of the same name (_core.`name`()); ValueError while Horovod is not
    initialized (libhvd answers -1 then)."""

    def accessor() -> int:
        value = getattr(_core, name)()
        if value < 0:
            raise ValueError(_NOT_INITIALIZED)
        return value

    accessor.__name__ = accessor.__qualname__ = name
    accessor.__doc__ = doc
    return accessor


rank = _topology("rank", "This process's rank among all ranks of the job.")
size = _topology("size", "Number of ranks in the job.")
local_rank = _topology("local_rank", "This process's rank among the ranks on its host.")
local_size = _topology("local_size", "Number of ranks on this process's host.")
cross_rank = _topology("cross_rank", "This process's rank among the ranks with the same local_rank.")
cross_size = _topology("cross_size", "Number of ranks with the same local_rank as this process.")


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    n = size()
    return n % local_size() == 0 and cross_size() * local_size() == n


def device():
    """The CUDA device libhvd pinned this rank to at init, or -1 (CPU or not initialized)."""
    return _core.device()


# Build and runtime probes: libhvd runs collectives on CPU memory over Gloo and links no CUDA, so
# cuda_built() is False; hvd.torch still takes CUDA tensors, staging them through pinned host memory.
def mpi_built():
    return False


def gloo_built():
    return True


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def mpi_enabled():
    return False


def gloo_enabled():
    return True


def mpi_threads_supported():
    if not _core.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    raise ValueError("MPI is not enabled: hvd runs on Gloo (mpi_threads_supported needs MPI)")


def start_timeline(file_path, mark_cycles=False):
    """Horovod starts a timeline at run time; libhvd writes one when HOROVOD_TIMELINE is set at init."""
    if not _core.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    raise ValueError("hvd writes the timeline named by HOROVOD_TIMELINE at init (hvdrun --timeline-filename); "
                     "starting one at run time is not supported")


def stop_timeline():
    if not _core.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
