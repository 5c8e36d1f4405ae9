"""hvd.train.Trainer: Ray Train's HorovodTrainer workflow on hvd.executor.Executor.

    trainer = Trainer(train_loop_per_worker, train_loop_config={...},
                      scaling_config=ScalingConfig(num_workers=3),
                      run_config=RunConfig(storage_path="/tmp/results", name="mlp",
                                           checkpoint_config=CheckpointConfig(num_to_keep=2),
                                           failure_config=FailureConfig(max_failures=1)),
                      datasets={"train": [{"x": 1.0, "y": 2.0}, ...]})
    result = trainer.fit()

fit() starts an Executor with ScalingConfig's workers and runs the training function on every rank (the
function calls hvd.torch.init() itself and hvd.train.report / get_checkpoint / get_dataset_shard). Rank 0's
reports reach the driver while the function runs; each one is appended to the history (with
training_iteration, timestamp, time_this_iter_s, time_total_s and checkpoint_dir_name) and its checkpoint
persisted atomically under <storage_path>/<name> before the next report is handled. The run directory also
gets progress.jsonl (one JSON line per report, written as it arrives) and result.json (at the end).

Failures: when a rank raises or a worker process dies, the executor is shut down and, up to
FailureConfig.max_failures times (-1: no limit), a new one runs the whole group again from the latest
persisted checkpoint (get_checkpoint() returns it; resume_from_checkpoint when none was persisted yet). When
the failures exceed max_failures, fit() raises TrainingFailedError: its message says how many attempts failed
and includes the last failure (rank, exception, traceback), which is also its __cause__; its .result is the
Result so far (metrics, checkpoint, path, error). A successful fit() returns a Result whose error is None.

All arguments are checked when the Trainer is made: a bad one is a one-line TypeError or ValueError naming it.
"""

import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - python3-cloudpickle is a dependency
    import pickle as _pickler

from hvd.train.checkpoint import Checkpoint, CheckpointManager, json_keys, pack_directory, to_json
from hvd.train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from hvd.train.dataset import prepare_datasets
from hvd.train.session import run_training, takes_config

DEFAULT_STORAGE_PATH = "~/hvd_results"


class TrainingFailedError(RuntimeError):
    """fit() failed more often than FailureConfig.max_failures allows. __cause__: the last failure (an
    hvd.executor WorkerError or ExecutorError); result: the Result so far, its error set."""

    def __init__(self, message: str, result: Optional["Result"] = None) -> None:
        super().__init__(message)
        self.result = result


@dataclasses.dataclass(repr=False, eq=False)
class Result:
    """The outcome of Trainer.fit.

    metrics: the last reported metrics (None when nothing was reported); checkpoint: the latest persisted
    Checkpoint or None; path: the run directory <storage_path>/<name>; best_checkpoints: (Checkpoint, metrics)
    of every checkpoint still on disk, best first by CheckpointConfig's score attribute (in report order without
    one); metrics_history: every reported metrics dict in order; metrics_dataframe: the same as a pandas
    DataFrame; error: None after a successful fit (the failure when carried by TrainingFailedError.result);
    attempts: how many times the worker group was started.
    """

    metrics: Optional[Dict[str, Any]]
    checkpoint: Optional[Checkpoint]
    path: str
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]]
    metrics_history: List[Dict[str, Any]]
    error: Optional[BaseException] = None
    attempts: int = 1

    @property
    def metrics_dataframe(self) -> Any:
        """The metrics history as a pandas DataFrame, one row per report."""
        import pandas

        return pandas.DataFrame(self.metrics_history)

    def __repr__(self) -> str:
        return (f"Result(metrics={self.metrics!r}, checkpoint={self.checkpoint!r}, path={self.path!r}, "
                f"error={self.error!r})")


def _import_pandas_meanwhile(num_workers: int) -> None:
    """Imports pandas (when installed) in a daemon thread while the workers train and this process only waits,
    so that Result.metrics_dataframe after fit() does not spend a third of a second importing it. Only with a
    CPU to spare beside the workers (on this host): otherwise the import takes its CPU time from the training
    (3 workers on 2 CPUs: fit() 0.15 s longer, for 0.3 s saved after it), and a run that never asks for the
    frame would pay that too."""
    import importlib.util

    from hvd.common.cpus import usable_cpus

    if usable_cpus() <= num_workers or "pandas" in sys.modules or importlib.util.find_spec("pandas") is None:
        return

    def load() -> None:
        try:
            import pandas  # noqa: F401
        except Exception:  # metrics_dataframe raises it again, where the user asked for pandas
            pass

    threading.Thread(target=load, name="hvd-train-import-pandas", daemon=True).start()


class _Recorder:
    """The driver's side of rank 0's reports: history, progress.jsonl and the checkpoint store. The Executor
    calls on_report in fit()'s thread, inside Executor.run, in the order rank 0 sent the reports; the lock and
    the attempt number also keep a report that would arrive from another thread after its attempt ended out of
    the history."""

    def __init__(self, run_dir: str, manager: CheckpointManager) -> None:
        self.run_dir = run_dir
        self.manager = manager
        self.history: List[Dict[str, Any]] = []
        self.error: Optional[BaseException] = None
        self.lock = threading.Lock()
        self.attempt = 0
        self.open = False
        self.started = time.time()
        self.last_time = self.started

    def begin(self, attempt: int) -> Callable[[Any], None]:
        with self.lock:
            self.attempt = attempt
            self.open = True
        return lambda value: self.on_report(attempt, value)

    def close(self) -> None:
        """Ends the current attempt: waits for a report being persisted and drops later ones."""
        with self.lock:
            self.open = False

    def on_report(self, attempt: int, value: Any) -> None:
        if not (isinstance(value, tuple) and len(value) == 4 and value[0] == "report"):
            return  # a value the training function sent itself: not a report
        _, metrics, packed, _ = value
        with self.lock:
            if not self.open or attempt != self.attempt or self.error is not None:
                return
            try:
                now = time.time()
                row = dict(metrics)
                row.update(training_iteration=len(self.history) + 1, timestamp=int(now),
                           time_this_iter_s=now - self.last_time, time_total_s=now - self.started,
                           checkpoint_dir_name=None)
                self.last_time = now
                if packed is not None:
                    checkpoint = self.manager.persist(packed, row)
                    row["checkpoint_dir_name"] = os.path.basename(checkpoint.path)
                self.history.append(row)
                with open(os.path.join(self.run_dir, "progress.jsonl"), "a", encoding="utf-8") as f:
                    f.write(json.dumps(json_keys(row), default=to_json) + "\n")
            except BaseException as e:  # raised by fit() once the attempt ends
                self.error = e


def _argument(name: str, value: Any, kind: type, default: Optional[Callable[[], Any]] = None) -> Any:
    """Trainer's argument `name`: None stays None (or becomes default() where there is one); any other value
    must be a `kind` (TypeError naming the argument otherwise)."""
    if value is None:
        return None if default is None else default()
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value


class Trainer:
    """Runs train_loop_per_worker on ScalingConfig.num_workers ranks (Ray Train's HorovodTrainer); see the
    module docstring for fit()'s semantics.

    train_loop_per_worker: a picklable function taking no argument or one (train_loop_config, a dict, {} when
    None). datasets: {name: dataset} (see hvd.train.dataset for the accepted types), each split into one
    shard per rank (get_dataset_shard(name)). resume_from_checkpoint: a Checkpoint the first attempt starts
    from.
    """

    def __init__(self, train_loop_per_worker: Callable, *, train_loop_config: Optional[Dict[str, Any]] = None,
                 scaling_config: Optional[ScalingConfig] = None, run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None) -> None:
        if not callable(train_loop_per_worker):
            raise TypeError(f"train_loop_per_worker must be callable, got "
                            f"{type(train_loop_per_worker).__name__}")
        takes_config(train_loop_per_worker)
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = _argument("train_loop_config", train_loop_config, dict)
        self.scaling_config = _argument("scaling_config", scaling_config, ScalingConfig, ScalingConfig)
        self.run_config = _argument("run_config", run_config, RunConfig, RunConfig)
        self.resume_from_checkpoint = _argument("resume_from_checkpoint", resume_from_checkpoint, Checkpoint)
        if resume_from_checkpoint is not None and not os.path.isdir(resume_from_checkpoint.path):
            raise ValueError(f"resume_from_checkpoint: {resume_from_checkpoint.path!r} is not a directory")
        try:
            self._payload = _pickler.dumps((train_loop_per_worker, train_loop_config))
        except Exception as e:
            raise ValueError(f"train_loop_per_worker {getattr(train_loop_per_worker, '__qualname__', '?')} and "
                             f"train_loop_config must be picklable: {type(e).__name__}: {e}") from None
        self._datasets = prepare_datasets(datasets)
        from hvd.executor import Executor

        Executor(**self.scaling_config.executor_kwargs())  # checks the hosts and the client now; starts nothing

    def _run_dir(self) -> Tuple[str, str]:
        storage = os.path.abspath(os.path.expanduser(os.fspath(self.run_config.storage_path
                                                               or DEFAULT_STORAGE_PATH)))
        name = self.run_config.name
        if name is None:
            base = f"HorovodTrainer_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
            name, n = base, 1
            while os.path.exists(os.path.join(storage, name)):
                n += 1
                name = f"{base}_{n}"
        return name, os.path.join(storage, name)

    def fit(self) -> Result:
        """Runs the training to its end (restarting after failures as FailureConfig allows) and returns the
        Result; TrainingFailedError when it failed more than max_failures times."""
        from hvd.executor import Executor, ExecutorError, WorkerError

        checkpoint_config: CheckpointConfig = self.run_config.checkpoint_config
        failure_config: FailureConfig = self.run_config.failure_config
        name, run_dir = self._run_dir()
        manager = CheckpointManager(run_dir, checkpoint_config)
        recorder = _Recorder(run_dir, manager)
        num_workers = self.scaling_config.num_workers
        specs = {key: source.shards(num_workers) for key, source in self._datasets.items()}
        resume = pack_directory(self.resume_from_checkpoint.path) if self.resume_from_checkpoint else None
        failures = 0
        attempt = 0
        while True:
            attempt += 1
            error: Optional[BaseException] = None
            executor = Executor(**self.scaling_config.executor_kwargs())
            try:
                callback = recorder.begin(attempt)
                executor.start()
                if attempt == 1:
                    _import_pandas_meanwhile(num_workers)
                executor.run(run_training, args=(self._payload, list(sys.path), specs, resume, name,
                                                 checkpoint_config.checkpoint_score_attribute),
                             callbacks=[callback])
            except (WorkerError, ExecutorError) as e:
                error = e
            finally:
                recorder.close()
                executor.shutdown()
            if recorder.error is not None:
                raise recorder.error
            if error is None:
                break
            failures += 1
            limit = failure_config.max_failures
            if limit != -1 and failures > limit:
                result = self._result(recorder, run_dir, error, attempt)
                self._write_result(run_dir, result, failures)
                raise TrainingFailedError(
                    f"hvd.train: training failed {failures} time(s), more than max_failures={limit} allows; "
                    f"the last failure: {error}", result) from error
            latest = manager.latest
            if latest is not None:
                resume = pack_directory(latest.path)
            origin = latest.path if latest is not None else (
                self.resume_from_checkpoint.path if self.resume_from_checkpoint else "the start")
            sys.stderr.write(f"hvd.train: attempt {attempt} failed ({_first_line(error)}); restarting "
                             f"({failures} of {'unlimited' if limit == -1 else limit} restarts) from "
                             f"{origin}\n")
            sys.stderr.flush()
        result = self._result(recorder, run_dir, None, attempt)
        self._write_result(run_dir, result, failures)
        return result

    @staticmethod
    def _result(recorder: _Recorder, run_dir: str, error: Optional[BaseException], attempts: int) -> Result:
        with recorder.lock:
            history = list(recorder.history)
        return Result(metrics=history[-1] if history else None, checkpoint=recorder.manager.latest, path=run_dir,
                      best_checkpoints=recorder.manager.best_checkpoints(), metrics_history=history,
                      error=error, attempts=attempts)

    @staticmethod
    def _write_result(run_dir: str, result: Result, failures: int) -> None:
        summary = {"metrics": result.metrics,
                   "checkpoint": result.checkpoint.path if result.checkpoint else None,
                   "best_checkpoints": [[c.path, m] for c, m in result.best_checkpoints],
                   "attempts": result.attempts, "failures": failures,
                   "error": str(result.error) if result.error is not None else None}
        temp = os.path.join(run_dir, f".result.json.{os.getpid()}")
        with open(temp, "w", encoding="utf-8") as f:
            json.dump(json_keys(summary), f, default=to_json, indent=1)
        os.replace(temp, os.path.join(run_dir, "result.json"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


HorovodTrainer = Trainer
