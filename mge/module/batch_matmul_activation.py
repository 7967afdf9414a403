"""``BatchMatMulActivation`` (MegEngine 1.13's ``megengine.module.batch_matmul_activation``)."""
import numpy as np

from ..functional import matmul, relu
from ..tensor import Parameter
from . import init
from .module import Module

__all__ = ["BatchMatMulActivation"]

_MODES = ("identity", "relu")


class BatchMatMulActivation(Module):
    r"""A batched :func:`~mge.functional.matmul` with an activation: ``weight @ x (+ bias)``,
    then ``relu`` with ``nonlinear_mode="relu"``; nothing is transposed.

    Args:
        batch: the batch size (``weight`` is ``(batch, out_features, in_features)``).
        in_features, out_features: the sizes of the product.
        bias: whether to add a learnt ``(out_features,)`` bias.  As in MegEngine it is added to
            the ``(batch, out_features, N)`` product with numpy broadcasting, i.e. along the last
            axis (so it needs ``N == out_features`` or ``N == 1``).  Default: ``True``
        nonlinear_mode: ``"identity"`` or ``"relu"``. Default: ``"identity"``

    ``weight`` starts as :math:`\mathcal{N}(0, 1/\text{in_features})` and ``bias`` at zero.
    """

    def __init__(self, batch, in_features, out_features, bias=True, nonlinear_mode="identity",
                 **kwargs):
        super().__init__(**kwargs)
        mode = str(nonlinear_mode).lower()
        if mode not in _MODES:
            raise ValueError(f"BatchMatMulActivation: nonlinear_mode must be one of {_MODES}, "
                             f"got {nonlinear_mode!r}")
        self.batch = batch
        self.out_features = out_features
        self.in_features = in_features
        self.weight = Parameter(np.zeros((batch, out_features, in_features), dtype=np.float32))
        self.bias = None
        if bias:
            self.bias = Parameter(np.zeros((out_features,), dtype=np.float32))
        self.nonlinear_mode = mode
        self.reset_parameters()

    def _get_fanin(self):
        return self.in_features

    def reset_parameters(self):
        """Draw ``weight`` from :math:`\\mathcal{N}(0, 1/\\text{in_features})`; zero ``bias``."""
        init.normal_(self.weight, 0.0, np.sqrt(1 / self._get_fanin()))
        if self.bias is not None:
            init.zeros_(self.bias)

    def _calc_linear(self, x, weight, bias):
        res = matmul(weight, x)
        if bias is not None:
            res = res + bias
        if self.nonlinear_mode == "relu":
            res = relu(res)
        return res

    def forward(self, x):
        return self._calc_linear(x, self.weight, self.bias)

    def _module_info_string(self):
        return (f"batch={self.batch}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
