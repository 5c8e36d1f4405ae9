"""horovod.torch.compression on hvd."""

from hvd.torch.compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401
