"""One trial of a search: a distributed job of its own (an hvd.Executor of workers_per_trial ranks on the slots the
pool gave it) that runs train_fn(config) on every rank, records rank 0's reports in the trial's directory and is
retried, from its latest checkpoint, up to max_failures times.

Contract. TrialRunner(trial, payload, settings).start() runs the trial in a thread of its own and
puts events on the tuner's queue, in order: ("report", trial, row, held) per report (row: the metrics plus
training_iteration, timestamp, time_this_iter_s, time_total_s, checkpoint_dir_name, as hvd.train records them),
("retry", trial, error) per failed attempt that is retried, then exactly one ("end", trial, error) (error None
when train_fn returned on every rank). stop() ends the trial's job at once (its executor's shutdown: every rank
ends within a second, its slots are free once "end" arrived) and marks the end as a stop, not a failure.
restart(payload, checkpoint) ends the current job and starts the trial again on its slots with a new training
function and config, from that checkpoint (population-based training's exploit; not a failure, no retry). With
settings.hold (synchronous population-based training), a report for which hold(trial, row) is True holds the
trial: its "report" event says so, its job is stopped at once, its later reports of that job are dropped, and the
runner waits, its slots kept, until restart() says how to go on (or stop() ends it). The executor comes from
Workers, which hands a finished trial's healthy executor to the next trial of the same placement (Tune's
reuse_actors).

The trial's directory holds output.log (the job's output, tagged by rank; for ranks hosted in Dask worker
processes, what they print from Python), progress.jsonl (one line per report), params.json (the config),
error.txt (the last failure with its traceback) and checkpoint_NNNNNN/ directories (hvd.train's format and retention).
Threading: the runner thread owns the executor; stop() and restart() may be called from the tuner's thread.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from hvd.train.checkpoint import CheckpointManager, json_keys, pack_directory, to_json
from hvd.train.config import CheckpointConfig
from hvd.train.session import run_training
from hvd.train.trainer import _Recorder

RUNNING, TERMINATED, ERROR, PRUNED, PENDING = "RUNNING", "TERMINATED", "ERROR", "PRUNED", "PENDING"


class Trial:
    """What the tuner knows of one trial."""

    def __init__(self, number: int, index: int, config: Dict[str, Any], directory: str):
        self.number = number          # Optuna's trial number: the trial's id in the study
        self.index = index            # its place in the search's plan
        self.config = config
        self.directory = directory
        self.status = PENDING
        self.history: List[Dict[str, Any]] = []
        self.error: Optional[str] = None
        self.attempts = 0
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.pruned_at: Optional[float] = None
        self.placement = None
        self.optuna_trial = None
        self.manager: Optional[CheckpointManager] = None

    @property
    def trial_id(self) -> str:
        return f"{self.number:05d}"

    @property
    def wall_s(self) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    def last(self, metric: Optional[str]) -> Any:
        for row in reversed(self.history):
            if metric in row:
                return row[metric]
        return None

    def best(self, metric: Optional[str], mode: str) -> Any:
        values = [row[metric] for row in self.history if isinstance(row.get(metric), (int, float))]
        if not values:
            return None
        return min(values) if mode == "min" else max(values)


class Workers:
    """The started executors of a search (Tune's reuse_actors): a trial that ended well hands its executor back, and
    the next trial given the same placement takes it instead of starting a job (no process start, no rendezvous;
    the ranks' modules and hvd stay initialised, as an actor's do). acquire() gives a started executor for a
    trial (its output, where it has a file, redirected to the trial's output.log); release() keeps a healthy one
    or shuts it down. Idle executors of other placements are shut down when a new one starts, so that idle ranks
    never pile up on the slots. Thread-safe."""

    def __init__(self, make: Callable[[Trial], Any], reuse: bool, start_lock=None):
        self._make = make
        self._reuse = reuse
        self._start_lock = start_lock
        self._lock = threading.Lock()
        self._idle: Dict[tuple, List[Any]] = {}

    @staticmethod
    def _key(trial: Trial) -> tuple:
        return tuple(trial.placement)

    def acquire(self, trial: Trial, on_made: Callable[[Any], None]):
        """A started executor for the trial; on_made(executor) is called before a new one starts (so that it can
        be stopped while it starts)."""
        with self._lock:
            idle = self._idle.get(self._key(trial))
            executor = idle.pop() if idle else None
            others = [] if executor is not None else [e for k, v in self._idle.items() for e in v]
            if executor is None:
                self._idle.clear()
        for other in others:
            other.shutdown()
        if executor is not None:
            on_made(executor)
            executor.redirect_output(os.path.join(trial.directory, "output.log"))
            return executor
        executor = self._make(trial)
        on_made(executor)
        if self._start_lock is not None:
            with self._start_lock:
                executor.start()
        else:
            executor.start()
        return executor

    def release(self, trial: Trial, executor, healthy: bool) -> None:
        if healthy and self._reuse and executor.usable:
            with self._lock:
                self._idle.setdefault(self._key(trial), []).append(executor)
            return
        executor.shutdown()

    def close(self) -> None:
        with self._lock:
            idle = [e for v in self._idle.values() for e in v]
            self._idle.clear()
        for executor in idle:
            executor.shutdown()


@dataclasses.dataclass(frozen=True)
class RunnerSettings:
    """What every TrialRunner of one search shares. workers: the search's executors; max_failures: the retries
    of a trial; checkpoint_config: the retention of each trial's checkpoints; experiment: the search's name (what
    get_context().get_experiment_name() answers in the training function); events: the tuner's queue; hold:
    called in the runner's thread with each recorded report, True to hold the trial there."""

    workers: Workers
    max_failures: int
    checkpoint_config: CheckpointConfig
    experiment: str
    events: Any
    hold: Optional[Callable[[Trial, Dict[str, Any]], bool]] = None


class TrialRunner:
    def __init__(self, trial: Trial, payload: bytes, settings: RunnerSettings):
        self.trial = trial
        self._payload = payload
        self._settings = settings
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # restart() or stop() while the trial is held
        self._executor = None
        self._stopping = False
        self._held = False
        self._restart: Optional[tuple] = None
        os.makedirs(trial.directory, exist_ok=True)
        with open(os.path.join(trial.directory, "params.json"), "w", encoding="utf-8") as f:
            json.dump(json_keys(trial.config), f, default=to_json, indent=1)
        trial.manager = CheckpointManager(trial.directory, settings.checkpoint_config)
        self._recorder = _Recorder(trial.directory, trial.manager)
        self._thread = threading.Thread(target=self._run, name=f"hvd-tune-trial-{trial.trial_id}", daemon=True)

    def start(self) -> None:
        self.trial.status = RUNNING
        self.trial.started = time.time()
        self._thread.start()

    def stop(self) -> None:
        """Ends the trial's job now (pruned, or the search stops)."""
        with self._lock:
            self._stopping = True
            executor = self._executor
            self._changed.notify_all()
        if executor is not None:
            executor.shutdown()

    def restart(self, payload: bytes, checkpoint: bytes) -> bool:
        """Ends the trial's current job and runs it again, on the same slots, with payload (the pickled training
        function and its new config) from checkpoint (pack_directory's bytes), as population-based training's
        exploit does. False when the trial is stopping or already restarting: nothing changes."""
        with self._lock:
            if self._stopping or self._restart is not None:
                return False
            self._restart = (payload, checkpoint)
            # A held trial's own thread is already stopping its job: a second shutdown() here would only wait
            # for that one, in the tuner's thread.
            executor = None if self._held else self._executor
            self._changed.notify_all()
        if executor is not None:
            executor.shutdown()
        return True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _on_report(self, attempt: int, value: Any) -> None:
        if self._held:
            return  # the job runs on until it is stopped: what it reports past the point is not the trial's
        before = len(self._recorder.history)
        self._recorder.on_report(attempt, value)
        if len(self._recorder.history) == before:
            return
        row = dict(self._recorder.history[-1])
        hold = self._settings.hold is not None and self._settings.hold(self.trial, row)
        if hold:
            with self._lock:
                self._held = True
                executor = self._executor
        self._settings.events.put(("report", self.trial, row, hold))
        if hold and executor is not None:
            executor.shutdown()

    def _await_decision(self, restart: Optional[tuple]) -> Optional[tuple]:
        """A held trial whose job has ended: the next job's payload and checkpoint, restart when restart() gave
        them before the job ended, else once restart() gives them; None when stop() comes first. The wait lasts
        as long as the slowest trial of the population takes to reach the point; stop() ends it."""
        with self._lock:
            while restart is None and self._restart is None and not self._stopping:
                self._changed.wait()
            if restart is None:
                restart, self._restart = self._restart, None
            self._held = False
            return None if self._stopping else restart

    def _made(self, executor) -> None:
        with self._lock:
            self._executor = executor
            # A restart asked for between two jobs ends the new one too: it ran the old config.
            ending = self._stopping or self._restart is not None
        if ending:
            executor.shutdown()

    def _run(self) -> None:
        error: Optional[BaseException] = None
        resume = None
        failures = run = 0
        while True:
            run += 1
            self.trial.attempts = failures + 1
            error = None
            executor = None
            try:
                if self._stopping:
                    break
                self._recorder.begin(run)
                executor = self._settings.workers.acquire(self.trial, self._made)
                executor.run(run_training,
                             args=(self._payload, list(sys.path), {}, resume, self._settings.experiment, None),
                             callbacks=[lambda value, r=run: self._on_report(r, value)])
            except Exception as e:  # a rank's failure, a lost job, or an executor that could not start: the trial's
                error = e
            finally:
                self._recorder.close()
                with self._lock:
                    self._executor = None
                    restart, self._restart = self._restart, None
                    held = self._held
                if executor is not None:
                    healthy = error is None and not self._stopping and restart is None and not held
                    self._settings.workers.release(self.trial, executor, healthy=healthy)
            if self._recorder.error is not None and error is None:
                error = self._recorder.error
            if held and self._recorder.error is None:
                # Held at the point: whatever ended the job after that (the stop, or its own end) is not the
                # trial's; the decision says how it goes on.
                restart = self._await_decision(restart)
                if restart is None:
                    break
                self._payload, resume = restart
                continue
            if self._stopping:
                break
            if restart is not None and self._recorder.error is None:
                # An exploit: the job was ended on purpose, not a failure (a job that ended well before it was
                # ended starts again too: the exploit was decided on one of its reports).
                self._payload, resume = restart
                continue
            if error is None:
                break
            failures += 1
            with open(os.path.join(self.trial.directory, "error.txt"), "w", encoding="utf-8") as f:
                f.write(f"attempt {failures}: {error}\n")
                # A rank's own failure (an ExecutorError that ended the job carries it as its cause).
                traceback = getattr(error, "traceback", "") or getattr(error.__cause__, "traceback", "")
                if traceback:
                    f.write(traceback)
            if failures > self._settings.max_failures:
                break
            self._settings.events.put(("retry", self.trial, error, failures))
            latest = self.trial.manager.latest
            resume = pack_directory(latest.path) if latest is not None else resume
        # The tuner's thread builds trial.history from the "report" events, which come before this one.
        self._settings.events.put(("end", self.trial, None if self._stopping else error))

    @property
    def restarting(self) -> bool:
        return self._restart is not None

    @property
    def stopping(self) -> bool:
        return self._stopping
