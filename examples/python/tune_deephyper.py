#!/usr/bin/python3
"""A DeepHyper-style search with hvd.tune: each evaluation is a data-parallel hvd.torch job on NODES nodes x
RANKS ranks per node of one allocation, many evaluations side by side; the hyperparameters are the ones DeepHyper
exposes for data parallelism (a base learning rate scaled linearly with the number of ranks, its warm-up, the
per-rank batch size) plus the model's width.

    # inside `salloc --nodes=4 --ntasks-per-node=2`: 2-node evaluations, two at a time
    PYTHONPATH=build/python /usr/bin/python3 examples/python/tune_deephyper.py --nodes-per-eval 2 --ranks-per-node 2
    # on this machine: 1-node evaluations of 2 ranks on 4 slots
    PYTHONPATH=build/python /usr/bin/python3 examples/python/tune_deephyper.py --hosts localhost:4 --evals 6

DeepHyper's names: --num-nodes-per-eval is nodes_per_trial, --num-ranks-per-node is workers_per_trial divided by
it, the evaluator's `run(config)` is train_fn, its objective (maximised) is `objective` here, mode "max".
"""

import argparse
import tempfile

import hvd.tune as tune


def run(config):
    """One evaluation: trains a small regression MLP with hvd.torch; reports the objective (-validation MSE)."""
    import torch

    import hvd.torch as hvd

    hvd.init()
    torch.manual_seed(1234 + hvd.rank())
    x = torch.linspace(-2, 2, 512).unsqueeze(1)
    y = torch.sin(2 * x)
    shard = slice(hvd.rank(), None, hvd.size())
    xs, ys = x[shard], y[shard]
    model = torch.nn.Sequential(torch.nn.Linear(1, config["width"]), torch.nn.Tanh(),
                                torch.nn.Linear(config["width"], 1))
    lr = config["lr"] * hvd.size()  # the linear scaling rule
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    batch = config["batch_size"]
    for epoch in range(config["epochs"]):
        warm = min(1.0, (epoch + 1) / max(1, config["warmup_epochs"]))
        for group in optimizer.param_groups:
            group["lr"] = lr * warm
        for i in range(0, len(xs), batch):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xs[i:i + batch]), ys[i:i + batch])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            mse = torch.nn.functional.mse_loss(model(x), y)
        tune.report(objective=-float(hvd.allreduce(mse, name="mse")), epoch=epoch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes-per-eval", type=int, default=None, help="DeepHyper's --num-nodes-per-eval")
    ap.add_argument("--ranks-per-node", type=int, default=2, help="DeepHyper's --num-ranks-per-node")
    ap.add_argument("--evals", type=int, default=8, help="evaluations in all")
    ap.add_argument("--hosts", default=None, help="outside an allocation: slots, e.g. localhost:4")
    ap.add_argument("--storage-path", default=tempfile.gettempdir())
    args = ap.parse_args()
    nodes = args.nodes_per_eval
    space = {"lr": tune.loguniform(1e-3, 5e-2), "warmup_epochs": tune.randint(1, 4),
             "batch_size": tune.choice([16, 32, 64]), "width": tune.choice([16, 32, 64]), "epochs": 8}
    analysis = tune.run(run, space, num_samples=args.evals, metric="objective", mode="max", search_alg="optuna",
                        scheduler="median", workers_per_trial=args.ranks_per_node * (nodes or 1),
                        nodes_per_trial=nodes, hosts=args.hosts, storage_path=args.storage_path, seed=0)
    print("best objective", analysis.best_result["objective"], "with", analysis.best_config)


if __name__ == "__main__":
    main()
