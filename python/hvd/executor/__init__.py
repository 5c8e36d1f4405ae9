"""hvd.executor: persistent, stateful hvd workers driven from a Python program (Horovod's RayExecutor API).

    from hvd.executor import Executor
    with Executor(num_workers=2) as ex:
        ex.start()
        ex.run(fn)                  # fn on every rank, results in rank order

Executor, ExecutorSettings: hvd.executor.executor. WorkerError, ExecutorError: hvd.executor.errors. send(value),
called inside a worker's function, hands value to the driver's callbacks (hvd.executor.worker). Engine,
HvdrunEngine: how the ranks are started (hvd.executor.engine); the wire protocol is hvd.executor.protocol.
"""

from hvd.executor.engine import Engine, HvdrunEngine
from hvd.executor.errors import ExecutorError, WorkerError
from hvd.executor.executor import Executor, ExecutorSettings


def send(value) -> None:
    """Inside a function that Executor.run or Executor.execute runs: hands value to the driver, which calls each
    callback of that call with it (rank 0's values only). RuntimeError outside such a call, ValueError when value
    cannot be pickled."""
    from hvd.executor.worker import send as _send

    _send(value)

__all__ = ["Executor", "ExecutorSettings", "WorkerError", "ExecutorError", "send", "Engine", "HvdrunEngine"]
