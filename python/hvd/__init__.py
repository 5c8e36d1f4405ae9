"""hvd: Horovod's Python API on libhvd (the runtime of hvdrun).

    import hvd.torch as hvd          # Horovod's horovod.torch API
    import hvd.numpy                 # the same collectives on NumPy arrays
    hvd.run(fn, np=2)                # horovod.run: a function on N ranks through hvdrun
    hvd.Executor(num_workers=2)      # persistent workers driven from this program (hvd.executor)

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


def __getattr__(name):
    """hvd.Executor (and ExecutorSettings), imported on first use: see hvd.executor."""
    if name in ("Executor", "ExecutorSettings"):
        import hvd.executor

        return getattr(hvd.executor, name)
    raise AttributeError(f"module 'hvd' has no attribute {name!r}")
