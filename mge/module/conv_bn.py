"""``ConvBn2d`` and ``ConvBnRelu2d``: MegEngine 1.13's fused float modules (``conv`` then ``bn``),
the float counterparts of the QAT modules MegEngine's quantization swaps them for."""
from ..functional import relu
from .batchnorm import BatchNorm2d
from .conv import Conv2d
from .module import Module

__all__ = ["ConvBn2d", "ConvBnRelu2d"]


class _ConvBnActivation2d(Module):
    # MegEngine's structure: a ``conv`` (Conv2d) and a ``bn`` (BatchNorm2d) submodule, so the
    # state-dict keys are ``conv.weight``, ``conv.bias``, ``bn.weight``, ``bn.running_mean``...
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 eps=1e-5, momentum=0.9, affine=True, track_running_stats=True,
                 padding_mode="zeros", **kwargs):
        super().__init__(**kwargs)
        self.conv = Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                           groups, bias, conv_mode, compute_mode, padding_mode, **kwargs)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvBn2d(_ConvBnActivation2d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.Conv2d` then
    :class:`~mge.module.BatchNorm2d` (``bn(conv(x))``; batch statistics in training, running
    statistics in evaluation).

    Takes :class:`~mge.module.Conv2d`'s arguments, then ``eps``, ``momentum``, ``affine`` and
    ``track_running_stats`` of :class:`~mge.module.BatchNorm2d`, then ``padding_mode``.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.ConvBn2d(3, 8, 3, padding=1)
        >>> m(mge.tensor(np.random.rand(2, 3, 5, 5).astype("float32"))).shape
        (2, 8, 5, 5)
    """

    def forward(self, inp):
        return self.bn(self.conv(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.Conv2d`,
    :class:`~mge.module.BatchNorm2d` and :func:`~mge.functional.relu`
    (``relu(bn(conv(x)))``); the arguments of :class:`ConvBn2d`."""

    def forward(self, inp):
        return relu(self.bn(self.conv(inp)))
