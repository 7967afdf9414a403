"""``Linear`` and the fused ``LinearRelu``."""
import numpy as np

from ..functional.nn import linear, relu
from ..tensor import Parameter
from . import init
from .module import Module

__all__ = ["Linear", "LinearRelu"]


class Linear(Module):
    r"""Applies a linear transformation :math:`y = xW^T + b`.

    Args:
        in_features: size of each input sample (the last axis).
        out_features: size of each output sample.
        bias: whether to learn an additive bias. Default: ``True``
        compute_mode: ``"default"``, or ``"float32"`` to accumulate float16 in float32.

    ``weight`` has shape ``(out_features, in_features)`` and starts as
    :math:`\mathcal{N}(0, 1/\text{in_features})`; ``bias`` ``(out_features,)`` starts at zero.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.Linear(in_features=3, out_features=1)
        >>> m(mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))).shape
        (2, 1)
    """

    def __init__(self, in_features, out_features, bias=True, compute_mode="default", **kwargs):
        super().__init__(**kwargs)
        self.out_features = out_features
        self.in_features = in_features
        self.weight = Parameter(np.zeros((out_features, in_features), dtype=np.float32))
        self.bias = Parameter(np.zeros((out_features,), dtype=np.float32)) if bias else None
        self.compute_mode = compute_mode
        self.reset_parameters()

    def _get_fanin(self):
        return self.in_features

    def reset_parameters(self):
        """Draw ``weight`` from :math:`\\mathcal{N}(0, 1/\\text{fan_in})`; zero ``bias``."""
        init.normal_(self.weight, 0.0, np.sqrt(1 / self._get_fanin()))
        if self.bias is not None:
            init.zeros_(self.bias)

    def calc_linear(self, x, weight, bias):
        return linear(x, weight, bias, compute_mode=self.compute_mode)

    def forward(self, x):
        return self.calc_linear(x, self.weight, self.bias)

    def _module_info_string(self):
        return "in_features={}, out_features={}, bias={}".format(
            self.in_features, self.out_features, self.bias is not None)


class LinearRelu(Linear):
    """:class:`Linear` followed by :func:`~mge.functional.relu` (MegEngine's fused module)."""

    def forward(self, inp):
        return relu(self.calc_linear(inp, self.weight, self.bias))
