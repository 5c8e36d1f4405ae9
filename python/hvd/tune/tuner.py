"""hvd.tune.run: a hyperparameter search whose every trial is a distributed job (Ray Tune's
DistributedTrainableCreator, DeepHyper's nodes per evaluation), packed onto the free slots of localhost, hosts=,
a Slurm allocation or a Dask cluster, with Optuna's samplers, pruners and storage.

Contract. run() plans the trials (space.plan: the grid times num_samples) and keeps them in an Optuna study: the
first driver of an experiment enqueues every planned trial (WAITING, with its plan index); every driver then takes
trials with study.ask(), which hands each waiting trial to exactly one driver, also across machines sharing a
PostgreSQL storage. A trial's config is the plan's spec with its domains drawn: by a seeded random draw per plan
index (search_alg "random", the default; "grid" is the same with nothing left to draw), or by the Optuna sampler
(search_alg "optuna": TPE; or any optuna.samplers.BaseSampler). While slots are free and fewer than
max_concurrent_trials run, a trial is started (trial.TrialRunner: an hvd.Executor of workers_per_trial ranks on
the slots pool.Pool gave it); its reports are recorded, passed to the pruner (scheduler "asha": Optuna's
successive halving; "median"; or any optuna.pruners.BasePruner), and a pruned trial's job is stopped at once.
With scheduler "pbt" (hvd.tune.pbt) a report may instead restart its trial from a better trial's checkpoint with
that trial's config, mutated.
A trial's result is its last value of `metric`; the study is told COMPLETE (that value), PRUNED or FAIL.

Resume. With resume=True the experiment's study is loaded: trials that completed, were pruned or failed for good
are kept (and shown in the Analysis); those an earlier driver left running, or that were interrupted, are run
again with the same config. Without it, an existing experiment of the same name is a ValueError (pass resume=True
or another name).

Faults. A trial whose job fails is retried max_failures times, then recorded as ERROR with the rank's traceback
(error.txt in its directory); its slots are freed and the search goes on. Ctrl-C (KeyboardInterrupt) stops every
trial's job, marks them interrupted in the study and re-raises: a later resume=True runs them again. Bad input is
a ValueError or TypeError naming the value, before anything runs; a metric that no trial reported is a ValueError
at the end naming the keys that were reported (the Analysis is still written to the experiment directory).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import random
import shutil
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from hvd.common.cpus import usable_cpus
from hvd.tune import pool as pools
from hvd.tune import space
from hvd.tune.analysis import Analysis
from hvd.tune.pbt import PopulationBasedTraining, changes
from hvd.tune.progress import Progress, describe, plot, prepare_plot
from hvd.tune.trainable import DistributedTrainable
from hvd.tune.trial import ERROR, PRUNED, TERMINATED, RunnerSettings, Trial, TrialRunner, Workers

DEFAULT_STORAGE_PATH = "~/hvd_results"
_SEARCH_ALGS = ("random", "grid", "optuna")
_SCHEDULERS = ("asha", "median", "pbt")
_POLL_S = 0.2
# What hvd.train adds to every report.
_RECORDED = {"training_iteration", "timestamp", "time_this_iter_s", "time_total_s", "checkpoint_dir_name"}


def _check_int(value, name: str, minimum: int, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}: expected an int >= {minimum}")
    return value


def _sampler(search_alg, seed: int, metric: Optional[str]):
    import optuna

    if search_alg is None or search_alg in ("random", "grid"):
        return "random", optuna.samplers.RandomSampler(seed=seed)
    if isinstance(search_alg, str):
        if search_alg not in _SEARCH_ALGS:
            raise ValueError(f"search_alg={search_alg!r}: choose from {', '.join(map(repr, _SEARCH_ALGS))} or pass an "
                             "optuna sampler")
        if metric is None:
            raise ValueError("search_alg='optuna' needs metric= (the value it optimises)")
        return "optuna", optuna.samplers.TPESampler(seed=seed)
    if isinstance(search_alg, optuna.samplers.BaseSampler):
        if metric is None:
            raise ValueError(f"search_alg={type(search_alg).__name__}: an Optuna sampler needs metric=")
        return "optuna", search_alg
    raise TypeError(f"search_alg must be 'random', 'grid', 'optuna' or an optuna sampler, got "
                    f"{type(search_alg).__name__}")


def _scheduler(scheduler, metric: Optional[str]) -> "tuple[Any, Optional[PopulationBasedTraining]]":
    """(Optuna pruner, population-based training or None) for run()'s scheduler argument."""
    import optuna

    if scheduler is None:
        return optuna.pruners.NopPruner(), None
    if metric is None:
        raise ValueError(f"scheduler={scheduler!r} needs metric= (the value it compares)")
    if isinstance(scheduler, str):
        if scheduler == "asha":
            return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=4), None
        if scheduler == "median":
            return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1), None
        if scheduler == "pbt":
            return optuna.pruners.NopPruner(), PopulationBasedTraining()
        raise ValueError(f"scheduler={scheduler!r}: choose from {', '.join(map(repr, _SCHEDULERS))}, pass an optuna "
                         "pruner or a PopulationBasedTraining")
    if isinstance(scheduler, PopulationBasedTraining):
        return optuna.pruners.NopPruner(), scheduler
    if isinstance(scheduler, optuna.pruners.BasePruner):
        return scheduler, None
    raise TypeError(f"scheduler must be 'asha', 'median', 'pbt', an optuna pruner or a PopulationBasedTraining, got "
                    f"{type(scheduler).__name__}")


def _make_pool(hosts, hostfile, client, cpus_per_worker, gpus):
    from hvd.executor.engine import parse_hostfile, parse_hosts

    if sum(x is not None for x in (hosts, hostfile, client)) > 1:
        raise ValueError(f"hosts={hosts!r}, hostfile={hostfile!r}, client={client!r}: pass at most one of them")
    if client is not None:
        from hvd.executor.dask_engine import _check_client, survey

        _check_client(client)
        _, eligible, _ = survey(client, cpus_per_worker, gpus)
        return pools.Pool([("dask", len(eligible))], "dask",
                          f"the Dask cluster at {client.scheduler.address} ({len(eligible)} eligible worker processes)")
    if hosts is not None:
        return pools.Pool(parse_hosts(hosts), "hosts", f"hosts={hosts!r}")
    if hostfile is not None:
        return pools.Pool(parse_hostfile(hostfile), "hosts", f"hostfile={os.fspath(hostfile)!r}")
    if os.environ.get("SLURM_JOB_ID"):
        return pools.slurm_pool(os.environ)
    count = usable_cpus()
    return pools.Pool([("localhost", count)], "hosts", f"localhost ({count} CPUs)")


class _Search:
    """The driver's view of one experiment: its study, the trials it knows, the runners it owns."""

    def __init__(self, study, specs, mode_kind, seed, experiment_dir, population=None, train_fn=None):
        self.study = study
        self.population = population  # pbt.Population when the scheduler is population-based training
        self.train_fn = train_fn
        self.specs = specs
        self.kind = mode_kind
        self.seed = seed
        self.experiment_dir = experiment_dir
        self.trials: Dict[int, Trial] = {}
        self.runners: Dict[int, TrialRunner] = {}
        self.distributions = space.to_optuna(specs[0]) if mode_kind == "optuna" and specs else {}

    def waiting(self) -> int:
        import optuna

        return len(self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    def next_trial(self) -> Optional[Trial]:
        """The next waiting trial of the study, with its config drawn, or None when none waits."""
        import optuna

        while self.waiting():
            ot = self.study.ask(self.distributions or None)
            index = ot.user_attrs.get("index")
            if index is None:
                # Another driver took the last waiting trial between the look and the ask: this one is no trial
                # of the plan.
                self.study.tell(ot, state=optuna.trial.TrialState.FAIL)
                continue
            spec = self.specs[index]
            if self.kind == "optuna":
                config = space.from_params(spec, ot.params)
            else:
                config = space.resolve(spec, random.Random(self.seed * 1_000_003 + index))
            ot.set_user_attr("config", json.dumps(config, default=repr))
            directory = os.path.join(self.experiment_dir, f"trial_{ot.number:05d}")
            trial = Trial(ot.number, index, config, directory)
            trial.optuna_trial = ot
            self.trials[ot.number] = trial
            return trial
        return None


def _experiment(name: Optional[str], storage_path) -> "tuple[str, str]":
    if storage_path is not None and not isinstance(storage_path, (str, os.PathLike)):
        raise TypeError(f"storage_path must be a folder's path, got {type(storage_path).__name__}")
    base = os.path.abspath(os.path.expanduser(os.fspath(storage_path or DEFAULT_STORAGE_PATH)))
    if name is None:
        name = f"tune_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name={name!r}: expected a non-empty str without '/'")
    return name, os.path.join(base, name)


def run(train_fn: Callable, config: Optional[Dict[str, Any]] = None, *, num_samples: int = 1,
        metric: Optional[str] = None, mode: Optional[str] = None, search_alg=None, scheduler=None,
        workers_per_trial: int = 1, nodes_per_trial: Optional[int] = None, cpus_per_worker: float = 1,
        use_gpu: bool = False, gpus_per_worker: Optional[float] = None,
        max_concurrent_trials: Optional[int] = None, max_failures: int = 0, hosts: Optional[str] = None,
        hostfile=None, client=None, name: Optional[str] = None, storage_path=None, storage: Optional[str] = None,
        resume: bool = False, seed: Optional[int] = None, verbose: Optional[bool] = None,
        env: Optional[Dict[str, str]] = None, num_to_keep: Optional[int] = None, settings=None,
        reuse_actors: bool = True) -> Analysis:
    """Runs the search (see the module docstring) and returns its Analysis.

    train_fn(config): runs on every rank of a trial (hvd.torch or hvd.numpy inside, hvd.tune.report to report);
    or a DistributedTrainableCreator(...) trainable, whose sizes replace workers_per_trial, nodes_per_trial,
    cpus_per_worker and use_gpu.
    config: the search space (hvd.tune.space). num_samples: how often the grid is repeated (each repetition
    draws the other domains anew). metric/mode ("min" or "max", default "min"): what the search optimises and
    prunes on. search_alg: "random" (default), "grid", "optuna" (TPE) or an optuna sampler. scheduler: "asha",
    "median" or an optuna pruner (early stopping on the reports), or "pbt" or a PopulationBasedTraining
    (population-based training: see hvd.tune.pbt; its metric and mode may stand in for metric= and mode=).
    workers_per_trial: ranks per trial;
    nodes_per_trial: spread them over that many whole nodes (DeepHyper's nodes per evaluation);
    cpus_per_worker: slots a rank takes; use_gpu / gpus_per_worker as for hvd.Executor;
    max_concurrent_trials: at most that many trials at once (default: as many as the slots allow).
    max_failures: retries of a failing trial (from its latest checkpoint). hosts / hostfile / client: the
    pool (default: the Slurm allocation inside one, else this machine's CPUs). name / storage_path: the
    experiment directory storage_path/name (default ~/hvd_results/tune_<time>). storage: an Optuna storage URL
    ("postgresql://user@host/db", "sqlite:////path/study.db"; default an SQLite file in the experiment
    directory). resume: continue the experiment of that name. seed: of the random draws and samplers.
    verbose: the live table (default: when stdout is a terminal). env: the ranks' base environment.
    num_to_keep: checkpoints kept per trial. settings: hvd.Executor's ExecutorSettings. reuse_actors: a trial that
    ended well hands its started workers to the next trial placed on the same slots (Tune's default for function
    trainables: no job start per trial; the ranks' module state carries over); False: a fresh job per trial.
    """
    import optuna

    from hvd.executor import Executor, ExecutorSettings
    from hvd.executor.engine import check_env
    from hvd.run_task import _pickler
    from hvd.train.config import CheckpointConfig
    from hvd.train.session import takes_config

    # ---- arguments, all checked before anything runs
    if settings is not None and not isinstance(settings, ExecutorSettings):
        raise TypeError(f"settings must be an hvd.executor.ExecutorSettings, got {type(settings).__name__}")
    if isinstance(train_fn, DistributedTrainable):
        # Ray Tune's form: the trainable says how big a trial's job is.
        workers_per_trial, nodes_per_trial = train_fn.workers, train_fn.nodes
        cpus_per_worker, use_gpu = train_fn.cpus, train_fn.use_gpu
        settings = dataclasses.replace(settings or ExecutorSettings(), timeout_s=train_fn.timeout_s)
        train_fn = train_fn.func
    if not callable(train_fn):
        raise TypeError(f"train_fn must be callable, got {type(train_fn).__name__}")
    takes_config(train_fn)
    config = {} if config is None else config
    space.check(config)
    _check_int(num_samples, "num_samples", 1)
    if isinstance(scheduler, PopulationBasedTraining):
        # Ray Tune's form: the scheduler may carry the metric and mode.
        for what, ours, its in (("metric", metric, scheduler.metric), ("mode", mode, scheduler.mode)):
            if ours is not None and its is not None and ours != its:
                raise ValueError(f"{what}={ours!r} and the scheduler's {what}={its!r} differ: pass one of them")
        metric = metric if metric is not None else scheduler.metric
        mode = mode if mode is not None else scheduler.mode
    mode = "min" if mode is None else mode
    if mode not in ("min", "max"):
        raise ValueError(f"mode={mode!r}: choose 'min' or 'max'")
    if metric is not None and not isinstance(metric, str):
        raise TypeError(f"metric must be a str, got {type(metric).__name__}")
    _check_int(workers_per_trial, "workers_per_trial", 1)
    _check_int(nodes_per_trial, "nodes_per_trial", 1, allow_none=True)
    if nodes_per_trial is not None and workers_per_trial % nodes_per_trial:
        raise ValueError(f"workers_per_trial={workers_per_trial} is not a multiple of nodes_per_trial={nodes_per_trial}")
    _check_int(max_concurrent_trials, "max_concurrent_trials", 1, allow_none=True)
    _check_int(max_failures, "max_failures", 0)
    _check_int(num_to_keep, "num_to_keep", 1, allow_none=True)
    if not isinstance(reuse_actors, bool):
        raise TypeError(f"reuse_actors must be True or False, got {reuse_actors!r}")
    if isinstance(cpus_per_worker, bool) or not isinstance(cpus_per_worker, (int, float)) or cpus_per_worker < 1:
        raise ValueError(f"cpus_per_worker={cpus_per_worker!r}: expected a number >= 1")
    seed = random.SystemRandom().randrange(2 ** 31) if seed is None else _check_int(seed, "seed", 0)
    kind, sampler = _sampler(search_alg, seed, metric)
    pruner, pbt = _scheduler(scheduler, metric)
    if pbt is not None:
        config = pbt.complete(config)
    if gpus_per_worker is not None and not use_gpu:
        raise ValueError(f"gpus_per_worker={gpus_per_worker!r} without use_gpu=True")
    check_env(env)
    gpus = (gpus_per_worker or 0) if use_gpu else 0
    pool = _make_pool(hosts, hostfile, client, cpus_per_worker, gpus)
    per_rank = 1 if pool.kind == "dask" else pools.slots_per_rank(cpus_per_worker)
    why = pool.capacity_error(per_rank, workers_per_trial, nodes_per_trial)
    if why:
        raise ValueError(why)
    if pool.kind == "dask" and nodes_per_trial is not None:
        raise ValueError(f"nodes_per_trial={nodes_per_trial} with client=: Dask places the ranks itself")
    try:
        _pickler.dumps((train_fn, None))
    except Exception as e:
        raise ValueError(f"train_fn {getattr(train_fn, '__qualname__', '?')} cannot be pickled: "
                         f"{type(e).__name__}: {e}") from None
    specs = space.plan(config, num_samples)
    name, experiment_dir = _experiment(name, storage_path)
    if storage is not None and not isinstance(storage, str):
        raise TypeError(f"storage must be an Optuna storage URL (str), got {type(storage).__name__}")
    if os.path.exists(experiment_dir) and not resume and storage is None:
        raise ValueError(f"the experiment {experiment_dir} exists: pass resume=True to continue it, or another name")
    made_dir = not os.path.exists(experiment_dir)
    os.makedirs(experiment_dir, exist_ok=True)
    url = storage or f"sqlite:///{os.path.join(experiment_dir, 'study.db')}"
    checkpoint_config = CheckpointConfig(num_to_keep=num_to_keep)

    # ---- the study: created and planned by the first driver
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = "minimize" if mode == "min" else "maximize"
    try:
        storage_obj = _open_storage(url)
        try:
            study = optuna.create_study(study_name=name, storage=storage_obj, sampler=sampler, pruner=pruner,
                                        direction=direction)
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=name, storage=storage_obj, sampler=sampler, pruner=pruner)
            created = False
        except Exception as e:
            raise ValueError(f"storage={url!r}: {type(e).__name__}: {e}") from None
    except BaseException:
        # Nothing was run: a corrected call must not find an experiment to resume.
        if made_dir:
            shutil.rmtree(experiment_dir, ignore_errors=True)
        raise
    if created:
        study.set_user_attr("seed", seed)
        study.set_user_attr("trials", len(specs))
        for index in range(len(specs)):
            study.enqueue_trial({}, user_attrs={"index": index})
        study.set_user_attr("planned", True)
    else:
        deadline = time.monotonic() + 60
        while not study.user_attrs.get("planned"):
            if time.monotonic() > deadline:
                raise ValueError(f"the study {name!r} in {url} was created but never planned (its driver died?); "
                                 "remove it or pass another name")
            time.sleep(0.2)
            study = optuna.load_study(study_name=name, storage=storage_obj, sampler=sampler, pruner=pruner)
        if study.user_attrs.get("trials") != len(specs):
            raise ValueError(f"the experiment {name!r} was planned with {study.user_attrs.get('trials')} trials; this "
                             f"config and num_samples give {len(specs)}: pass the same search space to resume it")
        seed = study.user_attrs["seed"]
        if resume:
            _requeue_unfinished(study)
    population = pbt.population(specs[0], metric, mode, seed, os.path.join(experiment_dir, "pbt_global.txt")) \
        if pbt is not None else None
    search = _Search(study, specs, kind, seed, experiment_dir, population, train_fn)
    _load_finished(search)

    events: "queue.SimpleQueue" = queue.SimpleQueue()
    base_env = env

    # A trial is one job: when one rank fails, the others are not waited for.
    trial_settings = dataclasses.replace(settings or ExecutorSettings(), failure_grace_s=0)

    def make_executor(trial: Trial):
        kwargs = dict(num_workers=workers_per_trial, cpus_per_worker=cpus_per_worker, use_gpu=use_gpu,
                      gpus_per_worker=gpus_per_worker, settings=trial_settings, env=base_env)
        if pool.kind == "dask":
            return Executor(client=client, output=os.path.join(trial.directory, "output.log"), **kwargs)
        hosts_arg = ",".join(f"{h}:{n}" for h, n in trial.placement)
        return Executor(hosts=hosts_arg, output=os.path.join(trial.directory, "output.log"),
                        launcher="slurm" if pool.kind == "slurm" else None, **kwargs)

    # Dask places an executor's ranks on the workers that are free when it starts: one start at a time.
    start_lock = threading.Lock() if pool.kind == "dask" else None
    workers = Workers(make_executor, reuse_actors, start_lock)
    hold = population.hold if population is not None and population.synch else None
    runner_settings = RunnerSettings(workers, max_failures, checkpoint_config, name, events, hold)
    progress = Progress(metric, mode, len(specs), live=verbose)
    started = time.time()
    limit = max_concurrent_trials or len(specs)
    exhausted = False
    events_seen = plot_prepared = False
    ctrl_c = _DeferredInterrupt()
    try:
        while True:
            ctrl_c.check()
            running = len(search.runners)
            started_now = False
            while not exhausted and running < limit:
                placement = pool.take(per_rank, workers_per_trial, nodes_per_trial)
                if placement is None:
                    break
                trial = search.next_trial()
                if trial is None:
                    pool.give(placement, per_rank, nodes_per_trial)
                    exhausted = True
                    break
                trial.placement = placement
                runner = TrialRunner(trial, _pickler.dumps((train_fn, trial.config)), runner_settings)
                search.runners[trial.number] = runner
                runner.start()
                running += 1
                where = ", ".join(f"{h}:{n}" for h, n in placement)
                progress.event(f"trial {trial.trial_id} ({describe(trial.config)}) started on {where}",
                               _ordered(search))
                started_now = True
            if started_now and events_seen and metric is not None and not plot_prepared:
                # The plot's import, while trials that just started run and the driver waits for them: at the
                # start it would compete with the first workers' start, next to an event with its handling.
                prepare_plot()
                plot_prepared = True
            if not search.runners:
                break
            try:
                event = events.get(timeout=_POLL_S)
            except queue.Empty:
                if progress.live:
                    progress.table(_ordered(search))
                continue
            _handle(event, search, pool, per_rank, nodes_per_trial, metric, progress)
            events_seen = True
    except KeyboardInterrupt:
        ctrl_c.restore()  # a second Ctrl-C while the trials are stopped interrupts that too
        _interrupt(search)
        raise
    finally:
        ctrl_c.restore()
        for runner in list(search.runners.values()):
            runner.stop()
        workers.close()
    trials = _ordered(search)
    progress.finish(trials)
    analysis = Analysis(trials, metric, mode, experiment_dir)
    _write_results(analysis, experiment_dir)
    if metric is not None:
        problem = plot(trials, metric, started, os.path.join(experiment_dir, f"{metric}.png"))
        if problem:
            sys.stderr.write(f"hvd.tune: {problem}\n")
        if trials and not any(t.last(metric) is not None for t in trials):
            reported = sorted({k for t in trials for row in t.history for k in row} - _RECORDED)
            raise ValueError(f"metric={metric!r}: no trial reported it (the reports held {reported or 'nothing'}); "
                             f"the results are in {experiment_dir}")
    return analysis


def _open_storage(url: str):
    """Optuna's RDB storage at url. Two drivers starting on a fresh database both create its tables; the one that
    loses that race finds them made by the other a moment later."""
    import optuna

    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as e:
            if attempt == 4 or "already exists" not in str(e) and "UniqueViolation" not in str(e) and \
                    "IntegrityError" not in type(e).__name__:
                raise ValueError(f"storage={url!r}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
            time.sleep(0.5)


def _ordered(search: _Search) -> List[Trial]:
    return sorted(search.trials.values(), key=lambda t: t.number)


def _handle(event, search: _Search, pool, per_rank, nodes, metric, progress) -> None:
    import optuna

    kind, trial = event[0], event[1]
    runner = search.runners.get(trial.number)
    if kind == "report":
        row = event[2]
        trial.history.append(row)
        value = row.get(metric) if metric else None
        if search.population is not None and search.population.synch:
            if event[3]:
                _synchronize(search, progress)
        elif search.population is not None and runner is not None and not runner.stopping and \
                not runner.restarting:
            _perturb(search, runner, row, progress)
        if runner is not None and not runner.stopping and isinstance(value, (int, float)):
            ot = trial.optuna_trial
            ot.report(float(value), step=row["training_iteration"])
            if ot.should_prune():
                trial.status = PRUNED
                trial.pruned_at = time.time()
                runner.stop()
                progress.event(f"trial {trial.trial_id} pruned at iteration {row['training_iteration']} "
                               f"({metric}={value:.4g})", _ordered(search))
        return
    if kind == "retry":
        progress.event(f"trial {trial.trial_id} failed (attempt {event[3]}), retrying: "
                       f"{_first_line(event[2])}", _ordered(search))
        return
    # "end"
    error = event[2]
    search.runners.pop(trial.number, None)
    if search.population is not None:
        search.population.forget(trial)
        if search.population.synch:
            _synchronize(search, progress)  # the others may all be waiting for this trial alone
    pool.give(trial.placement, per_rank, nodes)
    trial.ended = time.time()
    ot = trial.optuna_trial
    ot.set_user_attr("attempts", trial.attempts)
    if trial.status == PRUNED:
        search.study.tell(ot, state=optuna.trial.TrialState.PRUNED)
        return
    if error is not None:
        trial.status = ERROR
        trial.error = _first_line(error)
        ot.set_user_attr("error", trial.error)
        ot.set_user_attr("final", True)
        search.study.tell(ot, state=optuna.trial.TrialState.FAIL)
        progress.event(f"trial {trial.trial_id} ERROR: {trial.error}", _ordered(search))
        return
    trial.status = TERMINATED
    value = trial.last(metric) if metric else None
    if isinstance(value, (int, float)):
        search.study.tell(ot, float(value))
    else:
        ot.set_user_attr("no_metric", True)
        ot.set_user_attr("final", True)
        search.study.tell(ot, state=optuna.trial.TrialState.FAIL)
    progress.event(f"trial {trial.trial_id} done" + (f": {metric}={value:.4g}" if isinstance(value, (int, float))
                                                     else ""), _ordered(search))


def _perturb(search: _Search, runner, row, progress) -> None:
    """Population-based training at one report: a trial in the worst quantile at its perturbation point takes the
    latest checkpoint of one in the best and that trial's config, explored (see hvd.tune.pbt)."""
    from hvd.run_task import _pickler
    from hvd.train.checkpoint import pack_directory

    trial = runner.trial
    population = [r.trial for r in search.runners.values() if not r.stopping]
    decision = search.population.on_report(trial, row, population)
    if decision is None:
        return
    donor, config = decision
    checkpoint = donor.manager.latest
    try:
        packed = pack_directory(checkpoint.path)
    except (OSError, ValueError):
        return  # the donor's checkpoint was replaced by a newer one while it was read: the next point decides
    if not runner.restart(_pickler.dumps((search.train_fn, config)), packed):
        return
    _exploited(search, trial, donor, config, row.get(search.population.pbt.time_attr),
               os.path.basename(checkpoint.path), progress)


def _synchronize(search: _Search, progress) -> None:
    """Synchronous population-based training: once every running trial holds at the point, each one's job starts
    again from the checkpoint the decision names (its own, or its donor's) with its config (see hvd.tune.pbt)."""
    from hvd.run_task import _pickler
    from hvd.train.checkpoint import pack_directory

    steps = search.population.synchronize([r.trial for r in search.runners.values() if not r.stopping])
    if steps is None:
        return
    # Every held checkpoint is read before any job starts again: a donor's next reports would make retention
    # remove the checkpoint it held.
    packed = {}
    for step in steps:
        path = os.path.join(step.source.directory, step.checkpoint)
        try:
            packed[step.trial.number] = pack_directory(path)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"hvd.tune: trial {step.trial.trial_id} holds at checkpoint {path!r}, which cannot be "
                               f"read: {e}") from None
    for step in steps:
        runner = search.runners[step.trial.number]
        if runner.restart(_pickler.dumps((search.train_fn, step.config)), packed[step.trial.number]) and \
                step.donor is not None:
            _exploited(search, step.trial, step.donor, step.config, step.time, step.checkpoint, progress)


def _exploited(search: _Search, trial, donor, config, now, checkpoint: str, progress) -> None:
    """An exploit has restarted trial from donor's checkpoint with config: the trial's config, params.json, the
    study, pbt_global.txt and the progress say so."""
    from hvd.train.checkpoint import json_keys, to_json

    old, trial.config = trial.config, config
    with open(os.path.join(trial.directory, "params.json"), "w", encoding="utf-8") as f:
        json.dump(json_keys(config), f, default=to_json, indent=1)
    trial.optuna_trial.set_user_attr("config", json.dumps(config, default=repr))
    search.population.log(trial, donor, now, checkpoint, old, config)
    progress.event(f"trial {trial.trial_id} exploits trial {donor.trial_id} ({checkpoint}) at "
                   f"{search.population.pbt.time_attr} {now}: {changes(old, config)}", _ordered(search))


class _DeferredInterrupt:
    """Ctrl-C in the driver's loop, raised as KeyboardInterrupt at check(), between two steps of the loop, rather
    than wherever the main thread is: one raised inside a write to the study's storage can leave its SQLite
    connection holding the database's write lock, and marking the running trials interrupted then fails with
    "database is locked" (measured: 2 of 12 interrupts at random moments of a loop of reports). The loop comes to
    check() at least every _POLL_S. A second Ctrl-C before that raises at once. Only where signal handlers can be
    set (the main thread); elsewhere Ctrl-C is left as it is."""

    def __init__(self) -> None:
        import signal

        self._signal = signal
        self._pending = False
        self._previous = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame) -> None:
        if self._pending:
            raise KeyboardInterrupt
        self._pending = True

    def check(self) -> None:
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def restore(self) -> None:
        if self._previous is not None:
            self._signal.signal(self._signal.SIGINT, self._previous)
            self._previous = None


def _interrupt(search: _Search) -> None:
    """Ctrl-C: every running trial's job is stopped and its study trial marked interrupted (resume runs it again)."""
    import optuna

    runners = list(search.runners.values())
    for runner in runners:
        runner.stop()
    for runner in runners:
        runner.join(15)
        ot = runner.trial.optuna_trial
        try:
            ot.set_user_attr("interrupted", True)
            search.study.tell(ot, state=optuna.trial.TrialState.FAIL)
        except Exception as e:  # the interrupt goes on for the other trials; a resume cannot rerun this one
            print(f"hvd.tune: trial {runner.trial.trial_id} could not be marked interrupted in the study: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
    search.runners.clear()


def _requeue_unfinished(study) -> None:
    """resume=True: trials left RUNNING by a driver that died, and interrupted ones, are enqueued again (once: the
    new trial names the one it replaces in requeue_of)."""
    import optuna

    state = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    replaced = {t.user_attrs.get("requeue_of") for t in trials}
    for t in trials:
        if "index" not in t.user_attrs or t.number in replaced:
            continue
        if t.state == state.RUNNING:
            study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            study.tell(t.number, state=state.FAIL)
        elif not (t.state == state.FAIL and t.user_attrs.get("interrupted")):
            continue
        study.enqueue_trial(dict(t.params), user_attrs={"index": t.user_attrs["index"], "requeue_of": t.number})


def _load_finished(search: _Search) -> None:
    """The trials earlier drivers finished (resume): shown in the Analysis, not run again."""
    import optuna

    from hvd.train.checkpoint import CheckpointManager
    from hvd.train.config import CheckpointConfig

    state = optuna.trial.TrialState
    for t in search.study.get_trials(deepcopy=False):
        if "index" not in t.user_attrs or "config" not in t.user_attrs:
            continue
        if t.state not in (state.COMPLETE, state.PRUNED, state.FAIL) or t.user_attrs.get("interrupted"):
            continue
        directory = os.path.join(search.experiment_dir, f"trial_{t.number:05d}")
        trial = Trial(t.number, t.user_attrs["index"], json.loads(t.user_attrs["config"]), directory)
        trial.status = {state.COMPLETE: TERMINATED, state.PRUNED: PRUNED}.get(t.state, ERROR)
        if t.state == state.COMPLETE and t.user_attrs.get("no_metric"):
            trial.status = TERMINATED
        trial.error = t.user_attrs.get("error")
        trial.attempts = t.user_attrs.get("attempts", 1)
        trial.started = t.datetime_start.timestamp() if t.datetime_start else None
        trial.ended = t.datetime_complete.timestamp() if t.datetime_complete else None
        try:
            with open(os.path.join(directory, "progress.jsonl"), encoding="utf-8") as f:
                trial.history = [json.loads(line) for line in f if line.strip()]
        except OSError:
            pass
        if os.path.isdir(directory):
            trial.manager = CheckpointManager(directory, CheckpointConfig())
        search.trials[t.number] = trial


def _write_results(analysis: Analysis, experiment_dir: str) -> None:
    try:
        analysis.results.to_csv(os.path.join(experiment_dir, "results.csv"), index=False)
    except Exception as e:
        sys.stderr.write(f"hvd.tune: results.csv not written: {type(e).__name__}: {e}\n")
    best = analysis.get_best_trial() if analysis.metric else None
    summary = {"best_trial": best.trial_id if best else None, "best_config": best.config if best else None,
               "metric": analysis.metric, "mode": analysis.mode}
    temp = os.path.join(experiment_dir, f".summary.json.{os.getpid()}")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(summary, f, default=repr, indent=1)
    os.replace(temp, os.path.join(experiment_dir, "summary.json"))


def _first_line(error: BaseException) -> str:
    """A rank's own failure when the job's end carries it ("rank 1 raised ..."), else the error's first line."""
    from hvd.executor import WorkerError

    from hvd.train.trainer import _first_line as first_line

    if not isinstance(error, WorkerError) and isinstance(error.__cause__, WorkerError):
        error = error.__cause__
    return first_line(error)
