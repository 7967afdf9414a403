"""``LinearBn1d`` and ``LinearBnRelu1d``: MegEngine 1.13's fused float modules (``linear`` then
``bn``)."""
import numpy as np

from ..functional import relu
from ..tensor import Parameter
from .batchnorm import BatchNorm1d
from .linear import Linear
from .module import Module

__all__ = ["LinearBn1d", "LinearBnRelu1d"]


class _LinearBnActivation1d(Module):
    # MegEngine's structure: ``linear`` (Linear) and ``bn`` (BatchNorm1d).  MegEngine also gives
    # the fused module a ``bias`` parameter of its own (zeros, ``(out_features,)``) that forward
    # never reads; it is kept so that MegEngine's state-dict keys (``bias``) load.
    def __init__(self, in_features, out_features, bias=True, compute_mode="default", eps=1e-5,
                 momentum=0.9, affine=True, track_running_stats=True, **kwargs):
        super().__init__(**kwargs)
        self.out_features = out_features
        self.in_features = in_features
        self.bias = None
        if bias:
            self.bias = Parameter(np.zeros((out_features,), dtype=np.float32))
        self.linear = Linear(in_features, out_features, bias, compute_mode, **kwargs)
        self.bn = BatchNorm1d(out_features, eps, momentum, affine, track_running_stats)


class LinearBn1d(_LinearBnActivation1d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.Linear` then
    :class:`~mge.module.BatchNorm1d` (``bn(linear(x))``).

    Takes :class:`~mge.module.Linear`'s arguments, then ``eps``, ``momentum``, ``affine`` and
    ``track_running_stats`` of :class:`~mge.module.BatchNorm1d`.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.LinearBn1d(5, 3)
        >>> m(mge.tensor(np.random.rand(4, 5).astype("float32"))).shape
        (4, 3)
    """

    def forward(self, inp):
        return self.bn(self.linear(inp))


class LinearBnRelu1d(_LinearBnActivation1d):
    r"""A fused :class:`~.Module`: :class:`~mge.module.Linear`,
    :class:`~mge.module.BatchNorm1d` and :func:`~mge.functional.relu`; the arguments of
    :class:`LinearBn1d`."""

    def forward(self, inp):
        return relu(self.bn(self.linear(inp)))
