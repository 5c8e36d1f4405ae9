"""horovod.torch on hvd: Horovod 0.28.1's horovod.torch names, bound to hvd.torch's objects.

As in Horovod, is_homogeneous is only in horovod.torch.mpi_ops and HostsUpdatedInterrupt only in
horovod.common.exceptions. `elastic` is hvd.torch.elastic's API (horovod.torch.elastic).
"""

# hvd.torch's objects under Horovod's names (hvd.torch.__all__), and horovod.torch.elastic, the compatibility
# package's own module over hvd.torch.elastic.
from hvd.torch import *  # noqa: F401,F403
from horovod.torch import elastic  # noqa: F401
