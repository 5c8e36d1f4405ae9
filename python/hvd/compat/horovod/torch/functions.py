"""horovod.torch.functions on hvd: the broadcast and object helpers."""

from hvd.torch.functions import (  # noqa: F401
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
