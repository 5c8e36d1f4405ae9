#!/usr/bin/python3
"""Horovod's Ray Tune example ("Distributed Hyperparameter Search") in hvd form: every trial is a 2-rank job.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/tune_simple.py [--hosts localhost:4]

What changed from the Ray version: `import hvd.tune as tune` instead of `from ray import tune`, `hvd.torch`
instead of `horovod.torch`, and metric/mode given to tune.run (best_config needs them, as in Tune). No Ray cluster:
the trials are hvdrun jobs on this machine's slots (or --hosts, or the Slurm allocation the script runs in).
"""

import argparse
import tempfile
import time
from typing import Dict

import hvd.torch as hvd
import hvd.tune as tune
from hvd.tune import DistributedTrainableCreator


def training_function(config: Dict):
    hvd.init()
    for i in range(config["epochs"]):
        time.sleep(1)
        tune.report(test=1, rank=hvd.rank(), loss=1.0 / (i + 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default=None, help="slots to pack the trials on, e.g. localhost:4")
    ap.add_argument("--use-gpu", action="store_true")
    ap.add_argument("--storage-path", default=tempfile.gettempdir())
    args = ap.parse_args()

    trainable = DistributedTrainableCreator(training_function, num_slots=2, use_gpu=args.use_gpu)
    analysis = tune.run(trainable, num_samples=2, config={"epochs": tune.grid_search([1, 2, 3])},
                        metric="loss", mode="min", hosts=args.hosts, storage_path=args.storage_path)
    print(analysis.best_config)


if __name__ == "__main__":
    main()
