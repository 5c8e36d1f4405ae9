"""Data-parallel training with hvd.torch (Horovod's API) on generated data.

    hvdrun -np 2 -H localhost:2 python3 examples/python/train.py [--epochs 8]

Every rank builds the same synthetic regression data set, trains a small MLP on its shard of each epoch
(DistributedSampler), starts from rank 0's parameters and optimizer state, and averages gradients through
hvd.DistributedOptimizer. Rank 0 prints the mean loss over all ranks each epoch. At the end every rank
compares its parameters bit for bit with rank 0's (through a broadcast and an allreduce) and prints one
line; the script exits 1 on every rank if any rank differs.
"""

import sys

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import hvd.torch as hvd
from synthetic import compare_with_rank0, flat_parameters, make_data, train_step, training_parser


def parse_args():
    return training_parser(__doc__.splitlines()[0], epochs=8, samples=2048, features=16, batch_size=32).parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)  # one core per rank: the ranks of a host share its cores

    data = make_data(args.samples, args.features, args.seed)
    sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    # Each rank starts from different random parameters: the broadcast below makes them rank 0's.
    torch.manual_seed(args.seed + hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(args.features, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    loss = float("nan")
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for x, y in loader:
            total += train_step(model, optimizer, x, y)
            batches += 1
        loss = hvd.allreduce(torch.tensor(total / batches), name="epoch_loss").item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.6f}", flush=True)

    # Bit-identical parameters: compare the bits (as int32) with rank 0's, and count the ranks that differ.
    mine = flat_parameters(model)
    differs, differing = compare_with_rank0(mine)
    verdict = "bit-identical to rank 0's" if differing == 0 else f"DIFFERENT on {differing} rank(s)"
    print(f"rank {hvd.rank()} of {hvd.size()}: final loss {loss:.6f}, {mine.numel()} parameters {verdict}",
          flush=True)
    return 0 if differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
