"""hvd.train: Ray Train's HorovodTrainer workflow (Trainer, report, checkpoints, restarts, dataset shards) on
hvd.executor.Executor, without Ray.

    import hvd.train as train
    import hvd.torch as hvd

    def train_loop_per_worker(config):
        hvd.init()
        shard = train.get_dataset_shard("train")
        ...
        train.report({"loss": loss}, checkpoint=train.Checkpoint.from_directory(tmpdir))

    result = train.Trainer(train_loop_per_worker, train_loop_config={"lr": 0.01},
                           scaling_config=train.ScalingConfig(num_workers=2),
                           datasets={"train": [{"x": 1.0, "y": 2.0}]}).fit()

HorovodTrainer is another name for Trainer.
"""

from hvd.train.checkpoint import Checkpoint, latest_checkpoint
from hvd.train.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from hvd.train.dataset import DatasetShard
from hvd.train.session import (
    TrainContext,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    report,
)
from hvd.train.trainer import HorovodTrainer, Result, Trainer, TrainingFailedError

__all__ = ["Checkpoint", "CheckpointConfig", "DatasetShard", "FailureConfig", "HorovodTrainer", "Result", "RunConfig",
           "ScalingConfig", "TrainContext", "Trainer", "TrainingFailedError", "get_checkpoint", "get_context",
           "get_dataset_shard", "latest_checkpoint", "report"]
