"""horovod.torch.elastic on hvd: hvd.torch.elastic's run, TorchState and ElasticSampler."""

from hvd.torch.elastic import ElasticSampler, TorchState, run  # noqa: F401

__all__ = [
    "TorchState",
    "ElasticSampler",
    "run",
]
