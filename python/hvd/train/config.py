"""Configuration objects of hvd.train (Ray Train's ScalingConfig, RunConfig, CheckpointConfig, FailureConfig).

Every field is checked when the object is made: a bad value raises a one-line ValueError or TypeError that
names the value, in the driver, before any worker starts.
"""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

# Keys of ScalingConfig.resources_per_worker that map onto the Executor's cpus_per_worker / gpus_per_worker.
_RESOURCES = ("CPU", "GPU")


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


@dataclass
class ScalingConfig:
    """How many workers run the training function and what each one gets.

    num_workers: number of ranks (>= 1). use_gpu: give each rank a GPU (the rank's CUDA device is its local
    rank). resources_per_worker: {"CPU": n, "GPU": m} (other keys are a ValueError): CPU becomes the Executor's
    cpus_per_worker, GPU its gpus_per_worker (GPU needs use_gpu=True).

    Beyond Ray's fields: hosts ("host1:2,host2:2") or hostfile (a path; lines "host slots=N") place the ranks on
    ssh hosts through hvdrun (default: every rank on this host, or the Slurm allocation when the driver runs in
    one); client, a distributed.Client, runs the ranks in a Dask cluster instead of through hvdrun.
    """

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, Union[int, float]]] = None
    hosts: Optional[str] = None
    hostfile: Optional[Union[str, os.PathLike]] = None
    client: Any = None

    def __post_init__(self) -> None:
        _check_int(self.num_workers, "ScalingConfig.num_workers", 1)
        if not isinstance(self.use_gpu, bool):
            raise TypeError(f"ScalingConfig.use_gpu must be a bool, got {type(self.use_gpu).__name__} "
                            f"{self.use_gpu!r}")
        if self.resources_per_worker is not None:
            if not isinstance(self.resources_per_worker, dict):
                raise TypeError("ScalingConfig.resources_per_worker must be a dict like {'CPU': 1}, got "
                                f"{type(self.resources_per_worker).__name__} {self.resources_per_worker!r}")
            for key, amount in self.resources_per_worker.items():
                if key not in _RESOURCES:
                    raise ValueError(f"ScalingConfig.resources_per_worker: unknown resource {key!r} "
                                     f"(hvd.train knows {', '.join(_RESOURCES)})")
                if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                    raise ValueError(f"ScalingConfig.resources_per_worker[{key!r}] must be a number >= 0, "
                                     f"got {amount!r}")
            if self.resources_per_worker.get("GPU") and not self.use_gpu:
                raise ValueError(f"ScalingConfig.resources_per_worker['GPU']="
                                 f"{self.resources_per_worker['GPU']!r} needs use_gpu=True")
        if self.hosts is not None and (not isinstance(self.hosts, str) or not self.hosts):
            raise ValueError(f"ScalingConfig.hosts must be a string like 'host1:2,host2:2', got {self.hosts!r}")
        if self.hostfile is not None and not isinstance(self.hostfile, (str, os.PathLike)):
            raise TypeError(f"ScalingConfig.hostfile must be a path, got {type(self.hostfile).__name__} "
                            f"{self.hostfile!r}")
        if self.hosts is not None and self.hostfile is not None:
            raise ValueError(f"ScalingConfig: hosts={self.hosts!r} and hostfile={self.hostfile!r}: pass only one")
        if self.client is not None and (self.hosts is not None or self.hostfile is not None):
            raise ValueError("ScalingConfig: client (a Dask cluster) places the workers itself: pass no hosts "
                             f"or hostfile, got hosts={self.hosts!r} hostfile={self.hostfile!r}")

    def executor_kwargs(self) -> Dict[str, Any]:
        """The keyword arguments of hvd.executor.Executor that this configuration stands for."""
        resources = self.resources_per_worker or {}
        cpus = resources.get("CPU", 1)
        kwargs: Dict[str, Any] = {"num_workers": self.num_workers, "use_gpu": self.use_gpu,
                                  "cpus_per_worker": max(1, int(cpus))}
        if "GPU" in resources and self.use_gpu:
            kwargs["gpus_per_worker"] = resources["GPU"]
        if self.hosts is not None:
            kwargs["hosts"] = self.hosts
        if self.hostfile is not None:
            kwargs["hostfile"] = os.fspath(self.hostfile)
        if self.client is not None:
            kwargs["client"] = self.client
        return kwargs


@dataclass
class CheckpointConfig:
    """Which persisted checkpoints stay on disk.

    num_to_keep: None keeps every checkpoint; n >= 1 keeps the n best (by checkpoint_score_attribute, a key of
    the reported metrics, in checkpoint_score_order "max" or "min"), or the n latest when no attribute is
    given. The latest checkpoint is always kept as well, whatever its score, because a restart after a failure
    resumes from it: at most num_to_keep + 1 checkpoints are on disk at once.
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"

    def __post_init__(self) -> None:
        if self.num_to_keep is not None:
            _check_int(self.num_to_keep, "CheckpointConfig.num_to_keep", 1)
        if self.checkpoint_score_attribute is not None and (
                not isinstance(self.checkpoint_score_attribute, str) or not self.checkpoint_score_attribute):
            raise ValueError("CheckpointConfig.checkpoint_score_attribute must be a non-empty metric name, got "
                             f"{self.checkpoint_score_attribute!r}")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError("CheckpointConfig.checkpoint_score_order must be 'max' or 'min', got "
                             f"{self.checkpoint_score_order!r}")


@dataclass
class FailureConfig:
    """How often a failed run restarts: max_failures restarts of the whole worker group (0: none, -1:
    unlimited), each from the latest persisted checkpoint."""

    max_failures: int = 0

    def __post_init__(self) -> None:
        _check_int(self.max_failures, "FailureConfig.max_failures", -1)


@dataclass
class RunConfig:
    """Where a run's results go and how checkpoints and failures are handled.

    name: the run's directory under storage_path (default "HorovodTrainer_<YYYY-MM-DD_HH-MM-SS>");
    storage_path: default ~/hvd_results (both on the driver's file system: checkpoints travel from rank 0 to
    the driver). checkpoint_config and failure_config default to CheckpointConfig() and FailureConfig().
    """

    name: Optional[str] = None
    storage_path: Optional[Union[str, os.PathLike]] = None
    checkpoint_config: Optional[CheckpointConfig] = field(default=None)
    failure_config: Optional[FailureConfig] = field(default=None)

    def __post_init__(self) -> None:
        if self.name is not None:
            if not isinstance(self.name, str) or not self.name or self.name in (".", "..") or "/" in self.name \
                    or os.sep in self.name:
                raise ValueError(f"RunConfig.name must be a non-empty directory name without '/', got "
                                 f"{self.name!r}")
        if self.storage_path is not None and not isinstance(self.storage_path, (str, os.PathLike)):
            raise TypeError(f"RunConfig.storage_path must be a path, got {type(self.storage_path).__name__} "
                            f"{self.storage_path!r}")
        if self.storage_path is not None and os.path.exists(os.path.expanduser(os.fspath(self.storage_path))) and \
                not os.path.isdir(os.path.expanduser(os.fspath(self.storage_path))):
            raise ValueError(f"RunConfig.storage_path={os.fspath(self.storage_path)!r} is a file, not a folder")
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        elif not isinstance(self.checkpoint_config, CheckpointConfig):
            raise TypeError("RunConfig.checkpoint_config must be a CheckpointConfig, got "
                            f"{type(self.checkpoint_config).__name__}")
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        elif not isinstance(self.failure_config, FailureConfig):
            raise TypeError("RunConfig.failure_config must be a FailureConfig, got "
                            f"{type(self.failure_config).__name__}")
