"""horovod.torch.elastic on hvd: elastic training is not supported yet.

The module imports (Horovod's horovod.torch imports it), but using any of its names (run, TorchState,
ElasticSampler, ...) raises NotImplementedError saying so.
"""


def __getattr__(name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"horovod.torch.elastic.{name}: elastic training is not supported by hvd yet; "
                              "run with a fixed number of ranks (hvdrun -np N)")
