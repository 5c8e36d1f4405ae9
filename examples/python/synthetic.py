"""What train.py and elastic_torch_train.py share: their common options, the generated data set and the
model's parameters flattened for a bit-for-bit comparison. Each script imports it from its own folder."""

import argparse

import torch
from torch.utils.data import TensorDataset


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


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
