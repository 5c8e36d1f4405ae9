"""horovod.torch.elastic.sampler on hvd: hvd.torch.elastic.sampler's ElasticSampler."""

from hvd.torch.elastic.sampler import ElasticSampler  # noqa: F401
