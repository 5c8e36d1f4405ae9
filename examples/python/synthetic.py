"""What train.py and elastic_torch_train.py share: their common options, the generated data set, one
training step, and the bit-for-bit comparison of the final parameters with rank 0's. Each script imports it
from its own folder."""

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import hvd.torch as hvd


def training_parser(description, epochs, samples, features, batch_size):
    """A parser with the options of every training example, with these defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--samples", type=int, default=samples, help="size of the whole data set")
    parser.add_argument("--features", type=int, default=features)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="per rank (scaled by the number of ranks)")
    parser.add_argument("--seed", type=int, default=42)
    return parser


def make_data(samples, features, seed):
    """The same data on every rank: y = tanh(x @ w) @ v + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 8, generator=g) / features ** 0.5
    v = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w) @ v + 0.05 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def train_step(model, optimizer, x, y):
    """One optimizer step on the batch's mean squared error; returns that loss (from before the step)."""
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def compare_with_rank0(mine):
    """Compares this rank's flat parameters with rank 0's bit for bit (as int32), a collective; returns whether
    this rank's differ (0 or 1) and on how many ranks they do."""
    reference = hvd.broadcast(mine, root_rank=0, name="final.parameters")
    differs = int(not torch.equal(mine.view(torch.int32), reference.view(torch.int32)))
    differing = int(hvd.allreduce(torch.tensor([differs]), op=hvd.Sum, name="final.differing").item())
    return differs, differing
