"""Ray Train's HorovodTrainer quickstart on hvd.train: a 1-15-1 MLP learns y = x + 1 on 3 workers.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_quickstart.py [--storage-path DIR]

Each worker trains on its shard of the 32 rows with hvd.torch's DistributedOptimizer (gradients averaged over
the workers), and rank 0 reports every epoch's loss with a checkpoint of the model. The run's directory
(checkpoints, progress.jsonl, result.json) goes under --storage-path, a new temporary directory by default.

The same training function runs as a plain hvdrun job, without Trainer, for comparison:

    build/hvdrun -np 3 -H localhost:3 /usr/bin/python3 examples/python/train_quickstart.py --plain
"""

import argparse
import os
import sys
import tempfile

import torch
import torch.nn as nn

import hvd.torch as hvd
import hvd.train as train
from hvd.train import Checkpoint, RunConfig, ScalingConfig, Trainer

input_size = 1
layer_size = 15
output_size = 1
num_epochs = 3
num_workers = 3


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(input_size, layer_size)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(layer_size, output_size)

    def forward(self, input):
        return self.layer2(self.relu(self.layer1(input)))


def train_epochs(dataset_shard, report):
    """The training itself: every rank starts from rank 0's parameters, and rank 0's model is checkpointed
    after each epoch through report(metrics, checkpoint)."""
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    model = NeuralNetwork()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # Horovod: wrap the optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)

    for epoch in range(num_epochs):
        model.train()
        for batch in dataset_shard.iter_torch_batches(batch_size=4, dtypes=torch.float):
            inputs, labels = torch.unsqueeze(batch["x"], 1), torch.unsqueeze(batch["y"], 1)
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with tempfile.TemporaryDirectory() as tmpdir:
            torch.save(model.state_dict(), os.path.join(tmpdir, "model.pt"))
            report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(tmpdir))


def train_loop_per_worker():
    train_epochs(train.get_dataset_shard("train"), train.report)


def items():
    return [{"x": x, "y": x + 1} for x in range(32)]


def main_trainer(storage_path):
    trainer = Trainer(
        train_loop_per_worker=train_loop_per_worker,
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=False),
        run_config=RunConfig(storage_path=storage_path, name="quickstart"),
        datasets={"train": items()},
    )
    result = trainer.fit()
    print(f"metrics: {result.metrics}")
    print(f"losses: {[round(loss, 4) for loss in result.metrics_dataframe['loss']]}")
    print(f"checkpoint: {result.checkpoint.path}")
    with result.checkpoint.as_directory() as directory:
        model = NeuralNetwork()
        state = torch.load(os.path.join(directory, "model.pt"))
        model.load_state_dict(state)
    print(f"loaded {len(state)} tensors of rank 0's model from {result.checkpoint.path}")


def main_plain():
    """Run under hvdrun: the same training with this rank's shard made here and reports printed by rank 0."""
    from hvd.train.dataset import DatasetShard, prepare_datasets

    rank, size = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])
    shard = DatasetShard(prepare_datasets({"train": items()})["train"].shards(size)[rank])

    def report(metrics, checkpoint=None):
        if rank == 0:
            print(f"report: {metrics}", flush=True)

    train_epochs(shard, report)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: a new temporary directory")
    parser.add_argument("--plain", action="store_true", help="run as one rank of an hvdrun job")
    args = parser.parse_args()
    if args.plain:
        main_plain()
    else:
        main_trainer(args.storage_path or tempfile.mkdtemp(prefix="hvd-train-quickstart-"))
    sys.exit(0)
