"""hvd.torch.SyncBatchNorm on CPU tensors (hvdrun, np 1, 2 and 3): forward, running statistics and
backward equal torch's BatchNorm applied to the batch concatenated from every rank."""

import pytest

from conftest import EXPECT_ERROR, assert_ok

WORKER = EXPECT_ERROR + r"""
import torch
from torch.nn.modules.batchnorm import _BatchNorm
import hvd.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
TOL = dict(rtol=1e-5, atol=1e-5)


def close(a, b, what):
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert torch.allclose(a, b, **TOL), (what, (a - b).abs().max())


def check(tail, rows, iterations=2, **options):
    C = 4
    g = torch.Generator().manual_seed(len(tail) * 100 + sum(rows))
    # Every rank builds every rank's batch (an offset mean tests the variance's numerical stability).
    xs = [torch.randn(n, C, *tail, generator=g) * 3 + 5 for n in rows]
    gys = [torch.randn(n, C, *tail, generator=g) for n in rows]
    start = sum(rows[:R])
    mine = slice(start, start + rows[R])

    sbn = hvd.SyncBatchNorm(C, **options)
    assert isinstance(sbn, _BatchNorm)
    if sbn.affine:
        with torch.no_grad():
            sbn.weight.copy_(torch.rand(C, generator=g) + 0.5)
            sbn.bias.copy_(torch.randn(C, generator=g))
    bn = (torch.nn.BatchNorm2d if len(tail) == 2 else torch.nn.BatchNorm1d)(C, **options)
    bn.load_state_dict(sbn.state_dict())  # the same parameters and buffers, under the same keys

    for it in range(iterations):
        x = xs[R].clone().requires_grad_()
        x_full = torch.cat(xs).clone().requires_grad_()
        y = sbn(x)
        y_full = bn(x_full)
        close(y, y_full[mine], ("output", tail, it))
        (y * gys[R]).sum().backward()
        (y_full * torch.cat(gys)).sum().backward()
        close(x.grad, x_full.grad[mine], ("input grad", tail, it))
        if sbn.affine:
            # Each rank holds its share of the weight and bias gradients; their sum is the full batch's.
            close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, ("weight grad", tail, it))
            close(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), bn.bias.grad, ("bias grad", tail, it))
            sbn.weight.grad = sbn.bias.grad = bn.weight.grad = bn.bias.grad = None
        if sbn.track_running_stats:
            close(sbn.running_mean, bn.running_mean, ("running mean", tail, it))
            close(sbn.running_var, bn.running_var, ("running var", tail, it))
            assert int(sbn.num_batches_tracked) == int(bn.num_batches_tracked) == it + 1
        else:
            assert sbn.running_mean is None and sbn.running_var is None

    sbn.eval()
    bn.eval()
    if sbn.track_running_stats:
        # Local normalization with the running statistics.
        close(sbn(xs[R]), bn(xs[R]), ("eval", tail))
    else:
        # No running statistics: even in eval mode the statistics are the global batch's.
        close(sbn(xs[R]), bn(torch.cat(xs))[mine], ("eval without running stats", tail))


uneven = [2, 0, 4] if N == 3 else [2 + r for r in range(N)]
check((), [3 + r for r in range(N)])
check((3, 5), uneven, momentum=None, affine=False)
check((6,), [2 + 2 * r for r in range(N)], momentum=0.3, track_running_stats=False)
check((2, 2), [4] * N, iterations=3, eps=1e-3)

sbn = hvd.SyncBatchNorm(3)
expect_error(ValueError, "expected at least 2D input (got 1D input)", sbn, torch.randn(3))
expect_error(ValueError, "tensor on meta: hvd runs collectives on CPU and CUDA tensors", sbn,
             torch.empty(4, 3, device="meta"))
# One value per channel over all ranks cannot be normalized.
expect_error(ValueError, "Expected more than 1 value per channel when training", sbn,
             torch.randn(1 if R == 0 else 0, 3))
hvd.barrier()
print("OK")
"""


@pytest.mark.parametrize("np", [1, 2, 3])
def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch(hvdrun, np):
    job = hvdrun(np, WORKER, timeout=90)
    assert_ok(job, np)
