"""The worker side of hvd.train: report, get_checkpoint, get_context and get_dataset_shard inside the training
function, and the entry function every rank runs for Trainer.fit.

These functions work only while the training function runs on a worker started by Trainer.fit (elsewhere
they raise RuntimeError saying so). The session is per process: the training function runs in the worker's
main thread.

report(metrics, checkpoint) on rank 0 sends the metrics, and the checkpoint directory packed into bytes, to
the driver, which records and persists them in the order they were sent; on the other ranks report checks its
arguments and counts the iteration but sends nothing: rank 0's metrics and checkpoint are the run's (every
rank usually holds the same model after an allreduce-averaged step). report does not synchronize the ranks.
The checkpoint directory is packed before report returns, so it may be deleted right after.
"""

import inspect
import os
import pickle
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional

from hvd.train.checkpoint import Checkpoint, pack_directory, unpack_directory
from hvd.train.dataset import DatasetShard

_session: Optional["_Session"] = None


def _session_number(name: str, attribute: str, doc: str) -> Callable[["TrainContext"], int]:
    """The TrainContext method `name`: returns the session's `attribute`, one of the worker's ranks and sizes."""

    def getter(self) -> int:
        return getattr(self._session, attribute)

    getter.__name__ = name
    getter.__qualname__ = f"TrainContext.{name}"
    getter.__doc__ = doc
    return getter


class TrainContext:
    """Where this worker stands in the run (Ray Train's TrainContext)."""

    def __init__(self, session: "_Session") -> None:
        self._session = session

    get_world_rank = _session_number("get_world_rank", "world_rank",
                                     "This worker's rank among all workers (HOROVOD_RANK).")
    get_world_size = _session_number("get_world_size", "world_size", "Number of workers (HOROVOD_SIZE).")
    get_local_rank = _session_number("get_local_rank", "local_rank",
                                     "This worker's rank among the workers of its host (HOROVOD_LOCAL_RANK).")
    get_local_world_size = _session_number("get_local_world_size", "local_size",
                                           "Number of workers on this worker's host (HOROVOD_LOCAL_SIZE).")
    get_node_rank = _session_number("get_node_rank", "node_rank",
                                    "The index of this worker's host among the hosts of the run (HOROVOD_CROSS_RANK).")

    def get_experiment_name(self) -> str:
        """The run's name (RunConfig.name)."""
        return self._session.experiment_name


class _Session:
    def __init__(self, config: Dict[str, Any], dataset_specs: Dict[str, tuple], checkpoint: Optional[bytes],
                 experiment_name: str, score_attribute: Optional[str]) -> None:
        env = os.environ
        self.world_rank = int(env.get("HOROVOD_RANK", "0"))
        self.world_size = int(env.get("HOROVOD_SIZE", "1"))
        self.local_rank = int(env.get("HOROVOD_LOCAL_RANK", "0"))
        self.local_size = int(env.get("HOROVOD_LOCAL_SIZE", "1"))
        self.node_rank = int(env.get("HOROVOD_CROSS_RANK", "0"))
        self.config = config
        self.dataset_specs = dataset_specs
        self.checkpoint_bytes = checkpoint
        self.experiment_name = experiment_name
        self.score_attribute = score_attribute
        self.iteration = 0
        self.shards: Dict[str, DatasetShard] = {}
        self.checkpoint: Optional[Checkpoint] = None
        self.temp_dirs = []

    def cleanup(self) -> None:
        for path in self.temp_dirs:
            shutil.rmtree(path, ignore_errors=True)


def _current(what: str) -> _Session:
    if _session is None:
        raise RuntimeError(f"hvd.train.{what}: called outside a training function run by hvd.train.Trainer.fit")
    return _session


def report(metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None) -> None:
    """Reports one iteration's metrics (a dict of str to picklable values) and optionally a checkpoint.

    Rank 0's report goes to the driver, which appends the metrics (plus training_iteration and timestamp) to
    the run's history and persists the checkpoint; the other ranks' reports are accepted and not sent.
    TypeError for metrics that are not a dict of picklable values or a checkpoint that is not a Checkpoint;
    ValueError when a checkpoint comes without the CheckpointConfig's score attribute as a number.
    """
    session = _current("report")
    if not isinstance(metrics, dict):
        raise TypeError(f"hvd.train.report: metrics must be a dict, got {type(metrics).__name__}")
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"hvd.train.report: metric names must be str, got {type(key).__name__} {key!r}")
        try:
            pickle.dumps(value)
        except Exception as e:
            raise TypeError(f"hvd.train.report: metric {key!r} holds a {type(value).__name__} that cannot be "
                            f"pickled ({e})") from None
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"hvd.train.report: checkpoint must be an hvd.train.Checkpoint, got "
                        f"{type(checkpoint).__name__}")
    attribute = session.score_attribute
    if checkpoint is not None and attribute is not None:
        score = metrics.get(attribute)
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise ValueError(f"hvd.train.report: checkpoint_score_attribute {attribute!r} must be a number in "
                             f"the metrics reported with a checkpoint, got {score!r}")
    session.iteration += 1
    if session.world_rank != 0:
        return
    packed = pack_directory(checkpoint.path) if checkpoint is not None else None
    from hvd.executor import send

    send(("report", dict(metrics), packed, session.iteration))


def get_checkpoint() -> Optional[Checkpoint]:
    """The checkpoint to resume from, unpacked into a local temporary directory on every rank: the latest
    persisted checkpoint after a restart, else Trainer's resume_from_checkpoint; None when there is none."""
    session = _current("get_checkpoint")
    if session.checkpoint_bytes is None:
        return None
    if session.checkpoint is None:
        path = tempfile.mkdtemp(prefix="hvd-train-resume-")
        session.temp_dirs.append(path)
        unpack_directory(session.checkpoint_bytes, path)
        session.checkpoint = Checkpoint(path)
    return session.checkpoint


def get_context() -> TrainContext:
    """This worker's TrainContext (ranks and sizes)."""
    return TrainContext(_current("get_context"))


def get_dataset_shard(name: str) -> DatasetShard:
    """This rank's shard of Trainer(datasets={name: ...}); ValueError naming an unknown name."""
    session = _current("get_dataset_shard")
    if name not in session.dataset_specs:
        raise ValueError(f"hvd.train.get_dataset_shard: no dataset named {name!r} (the Trainer has "
                         f"{sorted(session.dataset_specs) or 'none'})")
    if name not in session.shards:
        session.shards[name] = DatasetShard(session.dataset_specs[name])
    return session.shards[name]


def takes_config(fn: Callable) -> bool:
    """True when the training function takes the config argument, False when it takes none; ValueError when
    it needs more than one argument or a keyword-only one."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    name = getattr(fn, "__qualname__", repr(fn))
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    keyword_only = [p.name for p in parameters if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if len(required) > 1 or keyword_only:
        raise ValueError(f"train_loop_per_worker {name} needs the arguments "
                         f"{[p.name for p in required] + keyword_only}: it must take none or one (the "
                         "train_loop_config)")
    return bool(positional) or any(p.kind == p.VAR_POSITIONAL for p in parameters)


def run_training(payload: bytes, sys_path: List[str], dataset_specs: Dict[str, list],
                 checkpoint: Optional[bytes], experiment_name: str, score_attribute: Optional[str]) -> int:
    """The function Trainer.fit runs on every rank. payload: the pickled (training function, config), loaded
    after the driver's sys.path entries are added to this process's (so the function's module imports as in
    the driver); sets up the session (this rank's dataset shards, the checkpoint to resume from), calls
    fn(config) or fn(), and returns the number of reports this rank made."""
    global _session
    for entry in sys_path:
        if entry not in sys.path:
            sys.path.append(entry)
    fn, config = pickle.loads(payload)
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    specs = {name: shards[rank] for name, shards in dataset_specs.items()}
    session = _Session(dict(config or {}), specs, checkpoint, experiment_name, score_attribute)
    _session = session
    try:
        if takes_config(fn):
            fn(session.config)
        else:
            fn()
        return session.iteration
    finally:
        _session = None
        session.cleanup()
