"""horovod.runner on hvd: run() starts the function's ranks with hvdrun (see hvd.runner.run)."""

from hvd.runner import run  # noqa: F401
