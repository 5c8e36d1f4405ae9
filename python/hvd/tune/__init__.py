"""hvd.tune: hyperparameter searches whose every trial is a distributed job (Ray Tune's Horovod integration and
DeepHyper's nodes-per-evaluation searches, on hvdrun's launchers, Slurm and Dask, with Optuna underneath).

    import hvd.tune as tune
    analysis = tune.run(train_fn, config={"lr": tune.loguniform(1e-4, 1e-1), "epochs": tune.grid_search([1, 2])},
                        num_samples=2, metric="loss", mode="min", workers_per_trial=2)
    print(analysis.best_config)

See hvd.tune.tuner for the search's semantics, hvd.tune.space for the search spaces, hvd.tune.pbt for
population-based training (scheduler="pbt").
"""

from hvd.tune.analysis import Analysis
from hvd.tune.pbt import PopulationBasedTraining
from hvd.tune.session import get_checkpoint, report
from hvd.tune.space import choice, grid_search, loguniform, quniform, randint, uniform
from hvd.tune.trainable import DistributedTrainableCreator
from hvd.tune.tuner import run

__all__ = ["Analysis", "DistributedTrainableCreator", "PopulationBasedTraining", "choice", "get_checkpoint",
           "grid_search", "loguniform", "quniform", "randint", "report", "run", "uniform"]
