"""Batch-norm folding shared by the fused QAT modules (conv + bn, conv-transpose + bn,
linear + bn), as MegEngine 1.13 folds: ``w_fold = w * gamma / sqrt(var + eps)`` along the
output channels and ``b_fold = beta + gamma * (b - mean) / sqrt(var + eps)``."""
from ... import functional as F

__all__ = []


def _ones(n):
    return F.ones((n,), dtype="float32")


def _zeros(n):
    return F.zeros((n,), dtype="float32")


def gamma_beta(bn):
    """``bn``'s weight and bias flat (ones / zeros when not affine)."""
    n = bn.num_features
    gamma = bn.weight.reshape(-1) if bn.weight is not None else _ones(n)
    beta = bn.bias.reshape(-1) if bn.bias is not None else _zeros(n)
    return gamma, beta


def batch_mean_var(inp):
    """Per-channel (axis 1) mean and biased variance of ``inp``, keeping dims, computed as
    MegEngine does (sums of ``x`` and ``x ** 2``)."""
    axes = [0] + list(range(2, inp.ndim))
    sum1, sum2 = inp, inp ** 2
    for a in axes:
        sum1 = F.sum(sum1, axis=a, keepdims=True)
        sum2 = F.sum(sum2, axis=a, keepdims=True)
    reduce_size = inp.size / inp.shape[1]
    mean = sum1 / reduce_size
    var = (sum2 - sum1 ** 2 / reduce_size) / reduce_size
    return mean, var


def update_running(bn, mean, var, num_elements_per_channel):
    """Update ``bn``'s running statistics with a batch's (unbiased variance, no gradient)."""
    mean = mean.detach().reshape(bn.running_mean.shape)
    var = (var.detach() * num_elements_per_channel
           / (num_elements_per_channel - 1)).reshape(bn.running_var.shape)
    factor = 1 - bn.momentum
    bn.running_mean *= bn.momentum
    bn.running_mean += factor * mean
    bn.running_var *= bn.momentum
    bn.running_var += factor * var


def scale_factor(bn, var):
    """``gamma / sqrt(var + eps)`` flat, and ``1 / sqrt(var + eps)`` flat."""
    gamma, _ = gamma_beta(bn)
    istd = 1.0 / F.sqrt(var.reshape(-1) + bn.eps)
    return gamma * istd, istd


def folded_bias(bn, bias, mean, var):
    """``beta + gamma * (bias - mean) / sqrt(var + eps)`` flat."""
    gamma, beta = gamma_beta(bn)
    istd = 1.0 / F.sqrt(var.reshape(-1) + bn.eps)
    b = bias.reshape(-1) if bias is not None else _zeros(bn.num_features)
    return beta + gamma * (b - mean.reshape(-1)) * istd
