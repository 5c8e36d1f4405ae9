"""The two errors of hvd.Executor: WorkerError (a rank's function raised; the workers are alive) and
ExecutorError (the executor is unusable: a worker died, the engine ended, start failed)."""

import pickle


class WorkerError(RuntimeError):
    """A function raised on a worker. The workers are still running and the executor can be used again.

    rank: the rank whose failure reached the driver first; type_name: the exception's qualified type name;
    message: str() of the exception; traceback: the worker's formatted traceback (starting in the user's
    function); cause: the exception itself when it unpickles in the driver, else None (also __cause__).
    others: (rank, type_name, message) of the ranks that failed in the same call after the first one."""

    def __init__(self, rank: int, type_name: str, message: str, traceback: str, cause: BaseException = None,
                 others: list = ()):
        self.rank = rank
        self.type_name = type_name
        self.message = message
        self.traceback = traceback
        self.cause = cause
        self.others = list(others)
        lines = [f"rank {rank} raised {type_name}: {message}", f"rank {rank}'s traceback:", traceback.rstrip("\n")]
        for other_rank, other_type, other_message in self.others:
            lines.append(f"rank {other_rank} also raised {other_type}: {other_message}")
        super().__init__("\n".join(lines))
        if cause is not None:
            self.__cause__ = cause

    @classmethod
    def from_record(cls, rank: int, record: dict) -> "WorkerError":
        """Builds the error from a failure record of hvd.run_task._failure."""
        cause = None
        if record.get("exception") is not None:
            try:
                cause = pickle.loads(record["exception"])
            except Exception:
                cause = None
        return cls(rank, str(record.get("type")), str(record.get("message")), str(record.get("traceback", "")),
                   cause)

    def with_others(self, others: list) -> "WorkerError":
        """The same error naming the other ranks that failed too."""
        return WorkerError(self.rank, self.type_name, self.message, self.traceback, self.cause, others)

    def __reduce__(self):
        return (WorkerError, (self.rank, self.type_name, self.message, self.traceback, None, self.others))


class ExecutorError(RuntimeError):
    """The executor cannot be used any more: a worker process died or lost its connection, the engine that hosts
    the workers ended, or start() failed. The message says what happened; start a new Executor (or call start()
    again on this one)."""
