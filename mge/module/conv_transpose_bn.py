"""``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d``: MegEngine 1.13's fused float modules
(``conv_transpose2d`` then ``bn``)."""
from ..functional import relu
from .batchnorm import BatchNorm2d
from .conv import ConvTranspose2d
from .module import Module

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]


class _ConvTransposeBnActivation2d(Module):
    # MegEngine's structure: ``conv_transpose2d`` (ConvTranspose2d) and ``bn`` (BatchNorm2d).
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, groups=1, bias=True,
                 conv_mode="cross_correlation", compute_mode="default", eps=1e-5, momentum=0.9,
                 affine=True, track_running_stats=True, **kwargs):
        super().__init__(**kwargs)
        self.conv_transpose2d = ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation,
            groups, bias, conv_mode, compute_mode, **kwargs)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.ConvTranspose2d` then
    :class:`~mge.module.BatchNorm2d` (``bn(conv_transpose2d(x))``).

    Takes :class:`~mge.module.ConvTranspose2d`'s arguments, then ``eps``, ``momentum``,
    ``affine`` and ``track_running_stats`` of :class:`~mge.module.BatchNorm2d`.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.ConvTransposeBn2d(3, 2, 3, stride=2)
        >>> m(mge.tensor(np.random.rand(2, 3, 4, 4).astype("float32"))).shape
        (2, 2, 9, 9)
    """

    def forward(self, inp):
        return self.bn(self.conv_transpose2d(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.ConvTranspose2d`,
    :class:`~mge.module.BatchNorm2d` and :func:`~mge.functional.relu`; the arguments of
    :class:`ConvTransposeBn2d`."""

    def forward(self, inp):
        return relu(self.bn(self.conv_transpose2d(inp)))
