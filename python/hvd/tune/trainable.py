"""DistributedTrainableCreator: Ray Tune's Horovod integration's way of saying how big each trial's job is.

    trainable = DistributedTrainableCreator(training_function, num_slots=2)
    analysis = hvd.tune.run(trainable, config={...}, num_samples=2, metric="loss", mode="min")

A DistributedTrainable carries the function and its resources; hvd.tune.run takes it where it takes a function:
workers_per_trial = num_hosts x num_slots (or num_workers), nodes_per_trial = num_hosts, cpus_per_worker =
num_cpus_per_slot, use_gpu. timeout_s becomes the trial jobs' ExecutorSettings.timeout_s. replicate_pem has no
meaning here (hvdrun's ssh reads keys from files) and is refused when true. Bad values: ValueError naming them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional


@dataclasses.dataclass(repr=False, eq=False)
class DistributedTrainable:
    func: Callable
    workers: int
    nodes: Optional[int]
    cpus: float
    use_gpu: bool
    timeout_s: float

    def __post_init__(self) -> None:
        self.__name__ = getattr(self.func, "__name__", "trainable")
        self.__qualname__ = getattr(self.func, "__qualname__", self.__name__)

    def __call__(self, config):
        return self.func(config)

    def __repr__(self) -> str:
        return (f"DistributedTrainable({self.__qualname__}, workers={self.workers}, nodes={self.nodes}, "
                f"cpus={self.cpus:g}, use_gpu={self.use_gpu})")


def _positive(value, name):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: expected an int >= 1")
    return value


def DistributedTrainableCreator(func: Callable, use_gpu: bool = False, num_hosts: Optional[int] = None,
                                num_workers: Optional[int] = None, num_slots: Optional[int] = None,
                                num_cpus_per_worker: float = 1, num_cpus_per_slot: Optional[float] = None,
                                timeout_s: float = 30, replicate_pem: bool = False) -> DistributedTrainable:
    """A trainable whose every trial is a job of num_hosts x num_slots ranks (or num_workers ranks)."""
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    _positive(num_hosts, "num_hosts")
    _positive(num_workers, "num_workers")
    _positive(num_slots, "num_slots")
    if num_workers is not None and num_slots is not None:
        raise ValueError(f"num_workers={num_workers} and num_slots={num_slots}: pass one of them")
    if replicate_pem:
        raise ValueError("replicate_pem=True: hvdrun reaches hosts with its own ssh, which reads keys from files; "
                         "pass ExecutorSettings(ssh_identity_file=...) to hvd.tune.run instead")
    cpus = num_cpus_per_slot if num_cpus_per_slot is not None else num_cpus_per_worker
    if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus < 1:
        raise ValueError(f"num_cpus_per_slot={cpus!r}: expected a number >= 1")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s < 1:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a number >= 1")
    per_host = num_slots or num_workers or 1
    workers = per_host * (num_hosts or 1)
    return DistributedTrainable(func, workers, num_hosts, cpus, bool(use_gpu), timeout_s)
