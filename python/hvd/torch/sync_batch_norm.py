"""SyncBatchNorm: batch normalization with statistics over the whole batch of every rank."""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.torch import mpi_ops
from hvd.torch.mpi_ops import Sum, allgather_async, allreduce_async, size, synchronize

# Statistics travel and are combined in float64, whatever the input's dtype: they are a few numbers per
# channel, and combining per-rank means and variances in low precision loses digits.
_STATS_DTYPE = torch.float64


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose training statistics are those of the concatenated batches of all ranks.

    Drop-in for Horovod's SyncBatchNorm (and for torch.nn.BatchNorm*d): same constructor, same running
    statistics, same results as BatchNorm over the batch gathered from every rank, in rank order.

    Unlike Horovod, whose kernels are CUDA-only and which raises "SyncBatchNorm expected input tensor to be
    on GPU" for any CPU input, this SyncBatchNorm runs on CPU and CUDA tensors (the statistics are computed
    on the input's device; the collectives stage CUDA tensors through host memory). Also unlike Horovod,
    momentum=None gives the cumulative moving average, as in torch.nn.BatchNorm.

    Forward (training, or no running statistics): each rank computes its per-channel count, mean and
    sum of squared deviations; one allgather brings every rank's values, which are combined exactly
    (Chan's parallel variance). Backward: one allreduce (Sum) of the per-channel sums of dy and of
    dy * (x - mean) gives each rank the gradient of the global loss with respect to its input. The weight
    and bias gradients are this rank's share (the sum over ranks is the full-batch gradient), left to the
    DistributedOptimizer to reduce. In eval mode with running statistics, normalization is local. With
    size() == 1 it is plain batch normalization. Collectives use the global process set.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        mpi_ops._check_device(input)  # the collectives' error, also where size() == 1 needs none
        self._check_input_dim(input)

        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum

        if not self.training and self.track_running_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        if size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, True, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean, running_var, self.eps,
                                            factor)


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        x = x.contiguous()
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        count = x.numel() // channels if channels else 0
        if count > 0:
            var, mean = torch.var_mean(x, dim=dims, unbiased=False)
            mean = mean.to(_STATS_DTYPE)
            m2 = var.to(_STATS_DTYPE) * count
        else:  # an empty batch on this rank contributes nothing
            mean = torch.zeros(channels, dtype=_STATS_DTYPE, device=x.device)
            m2 = torch.zeros(channels, dtype=_STATS_DTYPE, device=x.device)
        row = torch.cat([torch.tensor([float(count)], dtype=_STATS_DTYPE, device=x.device), mean, m2]).unsqueeze(0)
        stats = synchronize(allgather_async(row, name="sync_batch_norm.stats"))
        counts = stats[:, :1]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got {int(total)} over all "
                             f"ranks (input size {list(x.shape)} on this rank)")
        means = stats[:, 1:channels + 1]
        m2s = stats[:, channels + 1:]
        global_mean = (counts * means).sum(0) / total
        global_m2 = (m2s + counts * (means - global_mean) ** 2).sum(0)
        invstd = torch.rsqrt(global_m2 / total + eps)

        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = global_m2 / (total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        shape = _channel_shape(x)
        mean_x = global_mean.to(x.dtype)
        invstd_x = invstd.to(x.dtype)
        out = (x - mean_x.view(shape)) * invstd_x.view(shape)
        if weight is not None:
            out = out * weight.view(shape)
        if bias is not None:
            out = out + bias.view(shape)
        ctx.save_for_backward(x, weight, mean_x, invstd_x)
        ctx.total = total
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        dy = grad_output.contiguous()
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = _channel_shape(x)
        xmu = x - mean.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)

        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            local = torch.cat([sum_dy.to(_STATS_DTYPE), sum_dy_xmu.to(_STATS_DTYPE)])
            reduced = synchronize(allreduce_async(local, name="sync_batch_norm.sum_dy", op=Sum))
            mean_dy = (reduced[:channels] / ctx.total).to(x.dtype)
            mean_dy_xmu = (reduced[channels:] / ctx.total).to(x.dtype)
            scale = invstd if weight is None else invstd * weight
            grad_input = (dy - mean_dy.view(shape) - xmu * (invstd * invstd * mean_dy_xmu).view(shape)) \
                * scale.view(shape)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xmu * invstd
        if ctx.needs_input_grad[2]:
            grad_bias = sum_dy
        return grad_input, grad_weight, grad_bias, None, None, None, None
