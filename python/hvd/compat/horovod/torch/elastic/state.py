"""horovod.torch.elastic.state on hvd: hvd.torch.elastic.state's classes and handler registry."""

from hvd.torch.elastic.state import (  # noqa: F401
    LRSchedulerStateHandler,
    ModelStateHandler,
    OptimizerStateHandler,
    SamplerStateHandler,
    StateHandler,
    TorchState,
    get_handler_registry,
    set_handler_registry,
)
