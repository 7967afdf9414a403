"""Fusing a convolution or linear layer with the batch norm and relu after it
(MegEngine 1.13's ``megengine.utils.bn_fusion``): :func:`fuse_conv_bn_relu_module` and
:func:`fuse_linear_bn_relu_module` make the fused module (``ConvBnRelu2d``, ``LinearBn1d``...);
in evaluation mode the batch norm is folded into the weight and bias
(:func:`fold_weight_bias`)."""
from copy import deepcopy

from ..functional import ones, sqrt, zeros
from ..module import (
    BatchNorm1d, BatchNorm2d, Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d, ConvTranspose2d,
    ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d, Linear, LinearBn1d,
    LinearBnRelu1d, LinearRelu, ReLU,
)
from ..tensor import Parameter

__all__ = ["fold_weight_bias", "fuse_conv_bn_relu_module", "fuse_linear_bn_relu_module"]

# (layer, bn, relu, training) -> the fused module; in evaluation mode the bn is folded away.
_MAP_TO_FUSED_MODULE = {
    (Conv2d, BatchNorm2d, ReLU, False): ConvRelu2d,
    (Conv2d, BatchNorm2d, ReLU, True): ConvBnRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, False): ConvTransposeRelu2d,
    (ConvTranspose2d, BatchNorm2d, ReLU, True): ConvTransposeBnRelu2d,
    (Conv2d, BatchNorm2d, False): Conv2d,
    (Conv2d, BatchNorm2d, True): ConvBn2d,
    (Conv2d, ReLU): ConvRelu2d,
    (ConvTranspose2d, BatchNorm2d, False): ConvTranspose2d,
    (ConvTranspose2d, BatchNorm2d, True): ConvTransposeBn2d,
    (ConvTranspose2d, ReLU): ConvTransposeRelu2d,
    (Linear, BatchNorm1d, ReLU, False): LinearRelu,
    (Linear, BatchNorm1d, ReLU, True): LinearBnRelu1d,
    (Linear, BatchNorm1d, False): Linear,
    (Linear, BatchNorm1d, True): LinearBn1d,
    (Linear, ReLU): LinearRelu,
}


def _or(value, make):
    return make() if value is None else value


def _fold_conv(weight, bias, gamma, beta, mean, var, eps, transpose):
    shape = (1, -1, 1, 1) if transpose else (-1, 1, 1, 1)
    ks = weight.shape
    if len(ks) == 5:
        groups, per_group = ks[0], (ks[2] if transpose else ks[1])
    else:
        groups, per_group = 1, (ks[1] if transpose else ks[0])
    oc = groups * per_group
    gamma = _or(gamma, lambda: ones((oc,), dtype="float32")).reshape(1, -1, 1, 1)
    beta = _or(beta, lambda: zeros((oc,), dtype="float32")).reshape(1, -1, 1, 1)
    mean = _or(mean, lambda: zeros((1, oc, 1, 1), dtype="float32"))
    var = _or(var, lambda: ones((1, oc, 1, 1), dtype="float32"))
    bias = _or(bias, lambda: zeros((1, oc, 1, 1), dtype="float32"))
    istd = 1.0 / sqrt(var + eps)
    factor = gamma * istd
    w_fold = weight * (factor.reshape(*shape) if groups == 1
                       else factor.reshape(groups, *shape))
    return w_fold, beta + gamma * (bias - mean) * istd


def _fold_linear(weight, bias, gamma, beta, mean, var, eps):
    n = weight.shape[0]
    wshape = [1] * len(weight.shape)
    wshape[0] = -1
    gamma = _or(gamma, lambda: ones((n,), dtype="float32")).reshape(-1)
    beta = _or(beta, lambda: zeros((n,), dtype="float32")).reshape(-1)
    mean = _or(mean, lambda: zeros((n,), dtype="float32")).reshape(-1)
    var = _or(var, lambda: ones((n,), dtype="float32")).reshape(-1)
    bias = _or(bias, lambda: zeros((n,), dtype="float32")).reshape(-1)
    istd = 1.0 / sqrt(var + eps)
    return weight * (gamma * istd).reshape(*wshape), beta + gamma * (bias - mean) * istd


def fold_weight_bias(weight, bias, gamma, beta, bn_mean, bn_var, eps=1e-5, transpose=False):
    r"""The weight and bias of a convolution (``transpose``: a transposed one) or linear layer
    with the batch norm ``(gamma, beta, bn_mean, bn_var, eps)`` after it folded in:
    ``w * gamma / sqrt(var + eps)`` per output channel and
    ``beta + gamma * (bias - mean) / sqrt(var + eps)``."""
    if weight.ndim != 2:
        return _fold_conv(weight, bias, gamma, beta, bn_mean, bn_var, eps, transpose)
    return _fold_linear(weight, bias, gamma, beta, bn_mean, bn_var, eps)


def fuse_conv_bn_relu_module(conv: Conv2d, bn: BatchNorm2d, relu: ReLU):
    r"""The fused module of ``conv`` (a ``Conv2d`` or ``ConvTranspose2d``), ``bn`` and ``relu``
    (either may be None).  In training mode it keeps a copy of ``bn`` (``ConvBn2d``...); in
    evaluation mode ``bn`` is folded into the weight and bias (``Conv2d``/``ConvRelu2d``...)."""
    key = tuple(type(m) for m in (conv, bn, relu) if m)
    if bn:
        assert conv.training == bn.training, \
            "Conv and BN both must be in the same mode (train or eval)."
        assert bn.num_features == conv.out_channels, \
            "Output channel of Conv2d must match num_features of BatchNorm2d"
        key = key + (conv.training,)
    module = _MAP_TO_FUSED_MODULE[key](
        in_channels=conv.in_channels, out_channels=conv.out_channels,
        kernel_size=conv.kernel_size, stride=conv.stride, padding=conv.padding,
        dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
        conv_mode=conv.conv_mode, compute_mode=conv.compute_mode, name=conv.name)
    transpose = isinstance(conv, ConvTranspose2d)
    if transpose:
        module.output_padding = conv.output_padding
        new_conv = module if bn is None or not conv.training else module.conv_transpose2d
    else:
        new_conv = module if bn is None or not conv.training else module.conv
    weight, bias = conv.weight, conv.bias
    if not conv.training and bn is not None:
        weight, bias = fold_weight_bias(weight, bias, bn.weight, bn.bias, bn.running_mean,
                                        bn.running_var, bn.eps, transpose=transpose)
    new_conv.weight = Parameter(weight)
    if bias is not None:
        new_conv.bias = Parameter(bias)
    if bn is not None and conv.training:
        module.bn = deepcopy(bn)
    new_conv.training = conv.training
    return module


def fuse_linear_bn_relu_module(linear: Linear, bn: BatchNorm1d, relu: ReLU):
    r"""The fused module of ``linear``, ``bn`` and ``relu`` (either may be None), as
    :func:`fuse_conv_bn_relu_module` does for convolutions."""
    key = tuple(type(m) for m in (linear, bn, relu) if m)
    if bn:
        assert linear.training == bn.training, \
            "Linear and BN both must be in the same mode (train or eval)."
        assert bn.num_features == linear.out_features, \
            "Output channel of Linear must match num_features of BatchNorm1d"
        key = key + (linear.training,)
    module = _MAP_TO_FUSED_MODULE[key](
        in_features=linear.in_features, out_features=linear.out_features,
        bias=linear.bias is not None, compute_mode=linear.compute_mode, name=linear.name)
    new_linear = module if bn is None or not linear.training else module.linear
    weight, bias = linear.weight, linear.bias
    if not linear.training and bn is not None:
        weight, bias = fold_weight_bias(weight, bias, bn.weight, bn.bias, bn.running_mean,
                                        bn.running_var, bn.eps)
    new_linear.weight = Parameter(weight)
    if bias is not None:
        new_linear.bias = Parameter(bias)
    if bn is not None and linear.training:
        module.bn = deepcopy(bn)
    new_linear.training = linear.training
    return module
