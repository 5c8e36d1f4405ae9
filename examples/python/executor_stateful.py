"""hvd.Executor, stateful: every worker keeps a model object, trained by repeated execute() calls
(RayExecutor's second pattern).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/executor_stateful.py [--num-workers 2] [--steps 5]

start(executable_cls=LinearTrainer) makes one LinearTrainer on each worker; execute(fn) calls fn(trainer) on
every worker. Each train() call is one SGD step on the worker's own batch, with the gradients averaged over the
workers by hvd.torch's DistributedOptimizer, so every worker holds the same weights afterwards. Rank 0 reports
each step's loss to this process through hvd.executor.send and the callbacks.
"""

import argparse

import torch

import hvd.executor
from hvd.executor import Executor


class LinearTrainer:
    """y = 2x + 1 from noisy samples; the worker's shard is chosen by its rank."""

    def __init__(self, lr):
        import hvd.torch as hvd

        hvd.init()
        torch.manual_seed(0)
        self.model = torch.nn.Linear(1, 1)
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        self.optimizer = hvd.DistributedOptimizer(torch.optim.SGD(self.model.parameters(), lr=lr),
                                                  named_parameters=self.model.named_parameters())
        g = torch.Generator().manual_seed(hvd.rank())
        self.x = torch.rand(64, 1, generator=g) * 4 - 2
        self.y = 2 * self.x + 1 + 0.01 * torch.randn(64, 1, generator=g)
        self.steps = 0

    def train(self):
        self.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        hvd.executor.send({"step": self.steps, "loss": float(loss)})
        return float(loss)

    def get_weights(self):
        return {name: p.detach().clone() for name, p in self.model.named_parameters()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    executor = Executor(Executor.create_settings(timeout_s=30), num_workers=args.num_workers)
    executor.start(executable_cls=LinearTrainer, executable_kwargs={"lr": args.lr})
    try:
        for _ in range(args.steps):
            executor.execute(lambda worker: worker.train(),
                             callbacks=[lambda report: print(f"step {report['step']}: loss {report['loss']:.4f}")])
        weights = executor.execute(lambda worker: worker.get_weights())
    finally:
        executor.shutdown()
    assert all(torch.equal(w[name], weights[0][name]) for w in weights for name in w), "the workers differ"
    print(f"{len(weights)} identical copies: weight {weights[0]['weight'].item():.4f}, "
          f"bias {weights[0]['bias'].item():.4f}")


if __name__ == "__main__":
    main()
