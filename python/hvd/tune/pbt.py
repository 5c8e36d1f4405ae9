"""Population-based training for hvd.tune (Ray Tune's PopulationBasedTraining): the trials of a search run at
once; at every perturbation interval a trial in the worst quantile of the population takes the latest checkpoint
of a trial in the best quantile (exploit) and that trial's config, mutated (explore), and goes on training from
there. The schedule of hyperparameters a trial ends with is found while it trains.

    pbt = tune.PopulationBasedTraining(perturbation_interval=4,
                                       hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1)})
    analysis = tune.run(train_fn, {"lr": tune.loguniform(1e-4, 1e-1)}, num_samples=4, metric="acc", mode="max",
                        scheduler=pbt)

scheduler="pbt" is PopulationBasedTraining() with its defaults: every domain of the config is mutated.

Contract. The population is the trials running at the same time (PBT wants num_samples trials on the slots at
once; trials that wait for slots join when they start, finished ones leave). A trial's score is its last
reported value of the search's metric. When a trial reports a value of time_attr (default training_iteration,
the trial's report count, which goes on across exploits) at least perturbation_interval past its last
perturbation point, and at least burn_in_period, that report is its perturbation point: when it ranks in the
bottom quantile_fraction of the population (at most half of it) and a trial of the top quantile has a persisted
checkpoint, it exploits one of those trials, drawn at random: its job is stopped and started again (on the same
slots) with the donor's latest checkpoint as the one hvd.tune.get_checkpoint() returns, and the donor's config
explored: each mutated key is, with resample_probability (or when its value is not one of a list's), drawn anew
from its mutation (a list or tuple of values, an hvd.tune domain, or a function returning a value); otherwise a
list's value moves to a neighbour and a number is multiplied by one of perturbation_factors (ints stay ints,
quniform values stay on their grid; values may leave the domain's bounds, as in Ray Tune). custom_explore_fn(config)
then returns the config to use. A training function that never reports a checkpoint is never a donor, so PBT
needs `report(..., checkpoint=...)`, and a trial must load get_checkpoint() when it starts.

Keys the mutations name that the config lacks are added to it, drawn from their mutation when a trial starts (a
function mutation cannot be drawn before the search: ValueError). Every exploit is a line of pbt_global.txt in the
experiment directory (JSON: trial, donor, time, the donor's checkpoint, old and new config) and a line of the
search's progress; the trial's config (params.json, the Analysis) is the one it ran last.

Asynchronous (synch=False, the default). A trial decides at its own perturbation point, against whatever the
others have reported by then: no trial ever waits, but which trials rank where at that moment, and so how many
exploits happen and from which donor, depends on the schedule (on a busy machine the same seed gives another
search). What holds for every schedule: a trial never exploits itself, a donor has reported a checkpoint (the one
taken is its latest), and the new config is the donor's, explored.

Synchronous (synch=True, Ray Tune's PopulationBasedTraining(synch=True)). The perturbation points are shared:
the first is max(perturbation_interval, burn_in_period) of time_attr, the next one interval later (or at the
furthest time a trial had reached, when that is later, as in Ray Tune). A trial's first report at or past the
point that carries a checkpoint and a number for the metric holds it: its job is stopped at once and its later
reports of that job are dropped, so what it holds is exactly that report's score and checkpoint. When every trial
running (not stopping) holds, the decision is made for all of them at once, in trial order, with the seeded
random draw: the bottom quantile exploits the top one (the donor's held checkpoint, its config explored), every
other trial goes on with its own config from its own held checkpoint; every job then starts again. A trial that
ends without reaching the point leaves the population, and a trial that never reports a checkpoint or the metric
never holds, so the others wait for its end. The outcome depends only on the reports' values: a deterministic
training function with the same seed gives the same exploits, however the trials are scheduled, when the whole
population runs at once (num_samples trials on the slots at once; a trial that starts later, in slots another
one left, joins the wait at whatever point the others are). The price: every trial's job starts again at every
point, and the fastest trials wait for the slowest. Use it where reproducibility matters more than throughput.

Differences from Ray Tune: time_attr defaults to training_iteration and perturbation_interval to 4 (Ray Tune:
time_total_s and 60 s); there is no time-multiplexing of a population larger than the slots; in synchronous mode a
trial that starts late is waited for at the next point (Ray Tune can decide as soon as that trial passes its own
first interval, comparing it with trials far ahead). resume=True runs an interrupted trial again from its first
config.

Bad arguments are a ValueError or TypeError naming the value, raised when the scheduler is made or when run()
checks it against the config, before anything runs.
"""

from __future__ import annotations

import json
import math
import numbers
import random
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hvd.tune import space


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _flatten(mutations: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested mutations ({"model": {"width": [...]}}) by key path ("model/width")."""
    flat = {}
    for key, value in mutations.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(f"hyperparam_mutations key {prefix + str(key)!r}: keys must be non-empty str without "
                             "'/'")
        path = prefix + key
        if isinstance(value, dict):
            if not value:
                raise ValueError(f"hyperparam_mutations[{path!r}] = {{}}: an empty dict mutates nothing")
            flat.update(_flatten(value, path + "/"))
        elif isinstance(value, (list, tuple)):
            if not value:
                raise ValueError(f"hyperparam_mutations[{path!r}] = {value!r}: an empty list has nothing to draw")
            flat[path] = list(value)
        elif isinstance(value, space.Domain) or callable(value):
            flat[path] = value
        else:
            raise ValueError(f"hyperparam_mutations[{path!r}] = {value!r}: expected a list of values, an hvd.tune "
                             "domain (uniform, loguniform, choice, ...) or a function returning a value")
    return flat


class PopulationBasedTraining:
    """The PBT scheduler (see the module docstring). Every argument is checked here."""

    def __init__(self, time_attr: str = "training_iteration", perturbation_interval: float = 4,
                 burn_in_period: float = 0, hyperparam_mutations: Optional[Dict[str, Any]] = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 perturbation_factors: Tuple[float, float] = (1.2, 0.8),
                 custom_explore_fn: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
                 metric: Optional[str] = None, mode: Optional[str] = None, synch: bool = False) -> None:
        if not isinstance(time_attr, str) or not time_attr:
            raise TypeError(f"time_attr must be a non-empty str, got {time_attr!r}")
        if not _number(perturbation_interval) or not math.isfinite(perturbation_interval) \
                or perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval={perturbation_interval!r}: expected a number > 0")
        if not _number(burn_in_period) or not math.isfinite(burn_in_period) or burn_in_period < 0:
            raise ValueError(f"burn_in_period={burn_in_period!r}: expected a number >= 0")
        if not _number(quantile_fraction) or not 0 < quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction={quantile_fraction!r}: expected a number in (0, 0.5]")
        if not _number(resample_probability) or not 0 <= resample_probability <= 1:
            raise ValueError(f"resample_probability={resample_probability!r}: expected a number in [0, 1]")
        if not isinstance(perturbation_factors, (list, tuple)) or len(perturbation_factors) != 2 or \
                not all(_number(f) and math.isfinite(f) and f > 0 for f in perturbation_factors):
            raise ValueError(f"perturbation_factors={perturbation_factors!r}: expected two numbers > 0")
        if hyperparam_mutations is not None and not isinstance(hyperparam_mutations, dict):
            raise TypeError(f"hyperparam_mutations must be a dict, got {type(hyperparam_mutations).__name__}")
        if custom_explore_fn is not None and not callable(custom_explore_fn):
            raise TypeError(f"custom_explore_fn must be callable, got {type(custom_explore_fn).__name__}")
        if metric is not None and not isinstance(metric, str):
            raise TypeError(f"metric must be a str, got {type(metric).__name__}")
        if mode not in (None, "min", "max"):
            raise ValueError(f"mode={mode!r}: choose 'min' or 'max'")
        if not isinstance(synch, bool):
            raise TypeError(f"synch must be a bool, got {type(synch).__name__} {synch!r}")
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.mutations = _flatten(hyperparam_mutations) if hyperparam_mutations is not None else None
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.perturbation_factors = tuple(perturbation_factors)
        self.custom_explore_fn = custom_explore_fn
        self.metric = metric
        self.mode = mode
        self.synch = synch

    def __repr__(self) -> str:
        keys = sorted(self.mutations) if self.mutations is not None else "the config's domains"
        return (f"PopulationBasedTraining({self.time_attr}, interval={self.perturbation_interval:g}, "
                f"mutations={keys}{', synch' if self.synch else ''})")

    def complete(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The search space with the keys the mutations name and it lacks added (drawn when a trial starts);
        ValueError when there is nothing to mutate or a function mutation names a missing key."""
        known = space.flatten(config)
        if self.mutations is None:
            if not space.domains(config) and self.custom_explore_fn is None:
                raise ValueError("scheduler='pbt': the config has no domain (uniform, loguniform, choice, ...) to "
                                 "mutate; pass PopulationBasedTraining(hyperparam_mutations=...)")
            return config
        config = space._copy(config)
        for path, mutation in self.mutations.items():
            if path in known:
                continue
            if isinstance(mutation, list):
                mutation = space.choice(mutation)
            elif not isinstance(mutation, space.Domain):
                raise ValueError(f"hyperparam_mutations[{path!r}] is a function and the config has no {path!r}: give "
                                 "the key a value or a domain in the config")
            node = config
            for key in path.split("/")[:-1]:
                child = node.setdefault(key, {})
                if not isinstance(child, dict):
                    raise ValueError(f"hyperparam_mutations[{path!r}]: config[{key!r}] = {child!r} is not a dict")
                node = child
            node[path.split("/")[-1]] = mutation
        return config

    def population(self, spec: Dict[str, Any], metric: str, mode: str, seed: int,
                   log_path: str) -> "Population":
        """The search's state of this scheduler: spec is one planned trial's (for the mutations by default)."""
        mutations = self.mutations if self.mutations is not None else space.domains(spec)
        return Population(self, mutations, metric, mode, random.Random(seed * 7_919 + 17), log_path)


class _Member:
    __slots__ = ("score", "last_perturbation")

    def __init__(self) -> None:
        self.score: Optional[float] = None  # larger is better, whatever the mode
        self.last_perturbation: float = 0


class _Held:
    """A trial held at the synchronous mode's point: the report's time, score and checkpoint directory name."""

    __slots__ = ("time", "score", "checkpoint")

    def __init__(self, time: float, score: float, checkpoint: str) -> None:
        self.time = time
        self.score = score
        self.checkpoint = checkpoint


class Step:
    """The synchronous mode's decision for one held trial, which held at `time`: go on from `checkpoint` (a
    directory name of the donor's, or of the trial's own when donor is None) with `config`."""

    __slots__ = ("trial", "time", "donor", "checkpoint", "config")

    def __init__(self, trial, time: float, donor, checkpoint: str, config: Dict[str, Any]) -> None:
        self.trial = trial
        self.time = time
        self.donor = donor
        self.checkpoint = checkpoint
        self.config = config

    @property
    def source(self):
        """The trial whose checkpoint the trial goes on from."""
        return self.donor if self.donor is not None else self.trial


class Population:
    """One search's PBT state: each trial's last score and perturbation point, used by the tuner's thread; in
    synchronous mode also the shared point and the trials held at it, which hold() fills from the trials' runner
    threads (under the lock)."""

    def __init__(self, pbt: PopulationBasedTraining, mutations: Dict[str, Any], metric: str, mode: str,
                 rng: random.Random, log_path: str) -> None:
        self.pbt = pbt
        self.mutations = mutations
        self.metric = metric
        self.sign = 1.0 if mode == "max" else -1.0
        self.rng = rng
        self.log_path = log_path
        self.members: Dict[int, _Member] = {}
        self._lock = threading.Lock()
        self.point = max(pbt.perturbation_interval, pbt.burn_in_period)  # the synchronous mode's next point
        self._held: Dict[int, _Held] = {}

    @property
    def synch(self) -> bool:
        return self.pbt.synch

    def hold(self, trial, row: Dict[str, Any]) -> bool:
        """Synchronous mode, in the trial's runner thread, for each recorded report: True when this report holds
        the trial at the point (its job is then stopped and its later reports dropped)."""
        value, now, checkpoint = row.get(self.metric), row.get(self.pbt.time_attr), row.get("checkpoint_dir_name")
        if not (_number(value) and math.isfinite(value) and _number(now) and checkpoint):
            return False
        with self._lock:
            if now < self.point:
                return False
            self._held[trial.number] = _Held(now, self.sign * float(value), checkpoint)
            return True

    def synchronize(self, population: Sequence[Any]) -> "Optional[List[Step]]":
        """Synchronous mode: when every trial of population (the trials running, not stopping) is held, the step
        of each, in trial order, and the next point; else None."""
        with self._lock:
            if not population or any(t.number not in self._held for t in population):
                return None
            order = sorted(population, key=lambda t: t.number)
            held = {t.number: self._held.pop(t.number) for t in order}
            for t in order:  # the scores _quantiles ranks by: those held at this point
                self.members.setdefault(t.number, _Member()).score = held[t.number].score
            lower, upper = self._quantiles(order)
            steps = []
            for t in order:
                donors = [d for d in upper if d is not t]
                if t in lower and donors:
                    donor = self.rng.choice(donors)
                    steps.append(Step(t, held[t.number].time, donor, held[donor.number].checkpoint,
                                      self.explore(donor.config)))
                else:
                    steps.append(Step(t, held[t.number].time, None, held[t.number].checkpoint, t.config))
            self.point = max(self.point + self.pbt.perturbation_interval, max(h.time for h in held.values()))
            return steps

    def on_report(self, trial, row: Dict[str, Any], population: Sequence[Any]) -> "Optional[Tuple[Any, dict]]":
        """Asynchronous mode: (donor trial, new config) when this report is trial's perturbation point and it
        should exploit, else None. population: the trials running now (trial among them)."""
        member = self.members.setdefault(trial.number, _Member())
        value, now = row.get(self.metric), row.get(self.pbt.time_attr)
        if _number(value) and math.isfinite(value):
            member.score = self.sign * float(value)
        if not _number(now) or member.score is None or now < self.pbt.burn_in_period:
            return None
        if now - member.last_perturbation < self.pbt.perturbation_interval:
            return None
        member.last_perturbation = now
        lower, upper = self._quantiles(population)
        if trial not in lower:
            return None
        donors = [t for t in upper if t is not trial and t.manager is not None and t.manager.latest is not None]
        if not donors:
            return None
        donor = self.rng.choice(donors)
        # The trial now holds the donor's state: until it reports again it ranks as the donor did (a trial kept at
        # its old score while its job restarts would stay the worst and shield the others from exploitation).
        member.score = self.members[donor.number].score
        return donor, self.explore(donor.config)

    def forget(self, trial) -> None:
        self.members.pop(trial.number, None)
        with self._lock:
            self._held.pop(trial.number, None)

    def _quantiles(self, population: Sequence[Any]) -> "Tuple[List[Any], List[Any]]":
        scored = [t for t in population if t.number in self.members and self.members[t.number].score is not None]
        if len(scored) <= 1:
            return [], []
        scored.sort(key=lambda t: self.members[t.number].score)
        count = min(int(math.ceil(len(scored) * self.pbt.quantile_fraction)), len(scored) // 2)
        return scored[:count], scored[-count:]

    def explore(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """config with every mutated key resampled or perturbed, then custom_explore_fn's."""
        new = space._copy(config)
        for path, mutation in self.mutations.items():
            try:
                current = _get(new, path)
            except KeyError:
                continue
            space._set(new, path, self._mutate(mutation, current))
        if self.pbt.custom_explore_fn is not None:
            explored = self.pbt.custom_explore_fn(new)
            if not isinstance(explored, dict):
                raise TypeError(f"custom_explore_fn returned {type(explored).__name__}, not the config (a dict)")
            new = explored
        return new

    def _mutate(self, mutation: Any, current: Any) -> Any:
        rng = self.rng
        resample = rng.random() < self.pbt.resample_probability
        categories = mutation if isinstance(mutation, list) else \
            mutation.categories if isinstance(mutation, space._Choice) else None
        if categories is not None:
            if resample or current not in categories:
                return rng.choice(categories)
            index = categories.index(current) + rng.choice((-1, 1))
            return categories[min(max(index, 0), len(categories) - 1)]
        if resample or not _number(current):
            return mutation.sample(rng) if isinstance(mutation, space.Domain) else mutation()
        value = current * rng.choice(self.pbt.perturbation_factors)
        if isinstance(mutation, space._RandInt) or isinstance(current, int):
            return int(round(value))
        if isinstance(mutation, space._Float) and mutation.q is not None:
            return round(value / mutation.q) * mutation.q
        return value

    def log(self, trial, donor, now: Any, checkpoint: str, old: Dict[str, Any], new: Dict[str, Any]) -> None:
        """One exploit as a line of pbt_global.txt."""
        line = {"trial": trial.trial_id, "donor": donor.trial_id, self.pbt.time_attr: now, "checkpoint": checkpoint,
                "old_config": old, "new_config": new}
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=repr) + "\n")


def _get(config: Dict[str, Any], path: str) -> Any:
    for key in path.split("/"):
        if not isinstance(config, dict):
            raise KeyError(path)
        config = config[key]
    return config


def changes(old: Dict[str, Any], new: Dict[str, Any]) -> str:
    """'lr 0.01 -> 0.012, width 64 -> 128': what an exploit changed, for the progress line."""
    before, after = space.flatten(old), space.flatten(new)
    parts = [f"{k} {_short(before.get(k))} -> {_short(v)}" for k, v in after.items() if before.get(k) != v]
    return ", ".join(parts) or "config unchanged"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value)
