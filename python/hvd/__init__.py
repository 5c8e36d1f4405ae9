"""hvd: Horovod's Python API on libhvd (the runtime of hvdrun).

    import hvd.torch as hvd          # Horovod's horovod.torch API
    import hvd.numpy                 # the same collectives on NumPy arrays
    hvd.run(fn, np=2)                # horovod.run: a function on N ranks through hvdrun
    hvd.Executor(num_workers=2)      # persistent workers driven from this program (hvd.executor)
    hvd.train.Trainer(...)           # Ray Train's workflow; hvd.tune.run(...): Ray Tune's (imported on first use)

Every collective runs in libhvd (the C library every hvdrun worker links): this package maps arguments,
handles and errors, nothing more.
"""

__version__ = "0.1.0"

# Horovod's version, for scripts that check it (the API this package follows).
horovod_version = "0.28.1"


def run(*args, **kwargs):
    """horovod.run: see hvd.runner.run."""
    from hvd.runner import run as _run

    return _run(*args, **kwargs)


# The public subpackages, imported on first use (hvd.train, hvd.tune, ...): `import hvd` itself imports none of
# them, nor torch, numpy, pandas, optuna or distributed, which they pull in.
_SUBMODULES = ("compat", "executor", "numpy", "torch", "train", "tune")


def __getattr__(name):
    """hvd.train, hvd.tune and the other public subpackages, and hvd.Executor (and ExecutorSettings), imported on
    first use."""
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"hvd.{name}")
    if name in ("Executor", "ExecutorSettings"):
        return getattr(importlib.import_module("hvd.executor"), name)
    raise AttributeError(f"module 'hvd' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | {"Executor", "ExecutorSettings"})
