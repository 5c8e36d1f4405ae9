"""Search spaces of hvd.tune (Ray Tune's): grid_search, choice, uniform, loguniform, randint, quniform, fixed values,
nested dicts.

    config = {"lr": loguniform(1e-4, 1e-1), "model": {"width": choice([64, 128])},
              "epochs": grid_search([1, 2, 3]), "batch": 32}

Contract. plan(config, num_samples) is the list of trial specs Tune would run: the cartesian product of every
grid_search (in key order, the first key varying slowest), repeated num_samples times; each spec keeps the other
domains unresolved. resolve(spec, rng) draws them (random search); to_optuna(spec) gives Optuna's distributions of
the unresolved ones, keyed by their path ("model/width"), and from_params(spec, params) puts Optuna's values back.
Domains follow Tune's bounds: uniform [low, high), loguniform [low, high) on a log scale, randint [low, high)
(upper bound excluded), quniform values rounded to multiples of q, choice of a non-empty list.

Errors: ValueError naming the key path and the value, raised by check(config) before anything runs: a bad bound
(low >= high, loguniform low <= 0, q <= 0, an empty choice or grid), or a value that is a search space of a kind
hvd.tune does not know (a function, as Tune's sample_from; an Optuna distribution; a {"grid_search": ...} whose
values are not a list).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Dict, Iterator, List, Tuple


class Domain:
    """A dimension of the search space, drawn once per trial."""

    def sample(self, rng: random.Random) -> Any:
        raise NotImplementedError

    def to_optuna(self):
        raise NotImplementedError

    def from_optuna(self, value: Any) -> Any:
        return value


class _Float(Domain):
    def __init__(self, low: float, high: float, log: bool = False, q: "float | None" = None):
        self.log, self.q = log, q
        for name, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{self._name()}: {name}={v!r} is not a finite number")
        if not low < high:
            raise ValueError(f"{self._name()}({low!r}, {high!r}): low must be below high")
        if log and low <= 0:
            raise ValueError(f"{self._name()}({low!r}, {high!r}): a log scale needs low > 0")
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float)) or not q > 0):
            raise ValueError(f"{self._name()}: q={q!r} must be a number > 0")
        self.low, self.high, self.log, self.q = float(low), float(high), log, q

    def _name(self) -> str:
        return "quniform" if self.q is not None else ("loguniform" if self.log else "uniform")

    def sample(self, rng: random.Random) -> float:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return self._round(value)

    def _round(self, value: float) -> float:
        if self.q is None:
            return value
        return min(max(round(value / self.q) * self.q, self.low), self.high)

    def to_optuna(self):
        import optuna
        if self.q is not None:
            return optuna.distributions.FloatDistribution(self.low, self.high, step=self.q)
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log)

    def __repr__(self) -> str:
        q = f", {self.q!r}" if self.q is not None else ""
        return f"{self._name()}({self.low!r}, {self.high!r}{q})"


class _RandInt(Domain):
    def __init__(self, low: int, high: int):
        for name, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"randint: {name}={v!r} is not an int")
        if not low < high:
            raise ValueError(f"randint({low!r}, {high!r}): low must be below high (high is excluded)")
        self.low, self.high = low, high

    def sample(self, rng: random.Random) -> int:
        return rng.randrange(self.low, self.high)

    def to_optuna(self):
        import optuna
        return optuna.distributions.IntDistribution(self.low, self.high - 1)

    def __repr__(self) -> str:
        return f"randint({self.low!r}, {self.high!r})"


class _Choice(Domain):
    def __init__(self, categories):
        if not isinstance(categories, (list, tuple)) or not categories:
            raise ValueError(f"choice: categories must be a non-empty list, got {categories!r}")
        self.categories = list(categories)

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.categories)

    def to_optuna(self):
        import optuna
        # Optuna stores categories it can compare and persist; others are chosen by index.
        if all(c is None or isinstance(c, (bool, int, float, str)) for c in self.categories):
            return optuna.distributions.CategoricalDistribution(self.categories)
        return optuna.distributions.CategoricalDistribution(list(range(len(self.categories))))

    def from_optuna(self, value: Any) -> Any:
        if all(c is None or isinstance(c, (bool, int, float, str)) for c in self.categories):
            return value
        return self.categories[value]

    def __repr__(self) -> str:
        return f"choice({self.categories!r})"


class GridSearch:
    """grid_search(values): every value is run (times num_samples)."""

    def __init__(self, values):
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"grid_search: values must be a non-empty list, got {values!r}")
        self.values = list(values)

    def __repr__(self) -> str:
        return f"grid_search({self.values!r})"


def uniform(low: float, high: float) -> Domain:
    """A float drawn uniformly from [low, high)."""
    return _Float(low, high)


def loguniform(low: float, high: float) -> Domain:
    """A float drawn uniformly on a log scale from [low, high); low > 0."""
    return _Float(low, high, log=True)


def quniform(low: float, high: float, q: float) -> Domain:
    """uniform(low, high) rounded to a multiple of q."""
    return _Float(low, high, q=q)


def randint(low: int, high: int) -> Domain:
    """An int drawn uniformly from [low, high) (high excluded, as in Tune)."""
    return _RandInt(low, high)


def choice(categories) -> Domain:
    """One of categories, drawn uniformly."""
    return _Choice(categories)


def grid_search(values) -> GridSearch:
    """Every value, each in its own trials (times num_samples)."""
    return GridSearch(values)


# ----------------------------------------------------------------------------------------------- walking

def _walk(config: Dict[str, Any], prefix: str = "") -> Iterator[Tuple[str, Any]]:
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and not _is_tune_grid(value):
            yield from _walk(value, path + "/")
        else:
            yield path, value


def _is_tune_grid(value: Any) -> bool:
    """Ray Tune's own spelling, {"grid_search": [...]}, is accepted as well."""
    return isinstance(value, dict) and list(value) == ["grid_search"]


def _set(config: Dict[str, Any], path: str, value: Any) -> None:
    keys = path.split("/")
    for key in keys[:-1]:
        config = config[key]
    config[keys[-1]] = value


def _copy(config: Any) -> Any:
    if isinstance(config, dict) and not _is_tune_grid(config):
        return {k: _copy(v) for k, v in config.items()}
    return config


def check(config: Any) -> None:
    """ValueError naming the key path of a value that is no known search space but looks like one."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    for path, value in _walk(config):
        if any(not isinstance(k, str) or "/" in k for k in path.split("/")):
            raise ValueError(f"config key {path!r}: keys must be str without '/'")
        if _is_tune_grid(value):
            GridSearch(value["grid_search"])
            continue
        if isinstance(value, (Domain, GridSearch)):
            continue
        kind = type(value)
        if callable(value) and not isinstance(value, type):
            raise ValueError(f"config[{path!r}] = {value!r}: unknown search space type {kind.__name__} (a function, "
                             "as Tune's sample_from; use choice, uniform, loguniform, randint, quniform or "
                             "grid_search)")
        if kind.__module__.startswith(("optuna", "ray")) or hasattr(value, "sample") and hasattr(value, "low"):
            raise ValueError(f"config[{path!r}] = {value!r}: unknown search space type {kind.__module__}."
                             f"{kind.__qualname__} (use hvd.tune's choice, uniform, loguniform, randint, quniform or "
                             "grid_search)")


def _grid(value: Any) -> "List[Any] | None":
    if isinstance(value, GridSearch):
        return value.values
    if _is_tune_grid(value):
        return list(value["grid_search"])
    return None


def plan(config: Dict[str, Any], num_samples: int) -> List[Dict[str, Any]]:
    """The trial specs: every grid point, num_samples times over (see the module docstring)."""
    grids = [(path, _grid(value)) for path, value in _walk(config) if _grid(value) is not None]
    points = list(itertools.product(*(values for _, values in grids))) or [()]
    specs = []
    for _ in range(num_samples):
        for point in points:
            spec = _copy(config)
            for (path, _), value in zip(grids, point):
                _set(spec, path, value)
            specs.append(spec)
    return specs


def domains(spec: Dict[str, Any]) -> Dict[str, Domain]:
    """The unresolved dimensions of a spec, by key path."""
    return {path: value for path, value in _walk(spec) if isinstance(value, Domain)}


def resolve(spec: Dict[str, Any], rng: random.Random) -> Dict[str, Any]:
    """spec with every domain drawn (random search)."""
    config = _copy(spec)
    for path, domain in domains(spec).items():
        _set(config, path, domain.sample(rng))
    return config


def to_optuna(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Optuna's distributions of spec's domains, by key path."""
    return {path: domain.to_optuna() for path, domain in domains(spec).items()}


def from_params(spec: Dict[str, Any], params: Dict[str, Any]) -> Dict[str, Any]:
    """spec with its domains set from Optuna's params (by key path)."""
    config = _copy(spec)
    for path, domain in domains(spec).items():
        _set(config, path, domain.from_optuna(params[path]))
    return config


def flatten(config: Dict[str, Any]) -> Dict[str, Any]:
    """{"model/width": 64, ...}: a config's values by key path (for tables)."""
    return dict(_walk(config))
