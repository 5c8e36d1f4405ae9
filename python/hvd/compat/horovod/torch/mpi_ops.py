"""horovod.torch.mpi_ops on hvd: every public name of hvd.torch.mpi_ops (the collectives, init/rank/size,
is_homogeneous, the reduce-op constants, ProcessSet, ...)."""

from hvd.torch.mpi_ops import *  # noqa: F401,F403
from hvd.torch.mpi_ops import handle_average_backwards_compatibility, is_homogeneous  # noqa: F401
