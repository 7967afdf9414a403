"""QAT ``Linear`` and ``LinearRelu``."""
from ... import functional as F
from .. import linear as Float
from .module import QATModule

__all__ = ["Linear", "LinearRelu"]


class Linear(Float.Linear, QATModule):
    r"""A :class:`~mge.module.Linear` whose weight, bias and output are fake-quantized.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: whether to learn an additive bias. Default: True
    """

    def calc_linear_qat(self, inp):
        r"""The linear map with the fake-quantized weight and bias."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_linear(inp, w_qat, b_qat)

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_linear_qat(inp))

    @classmethod
    def from_float_module(cls, float_module: Float.Linear):
        r"""A QAT ``Linear`` sharing the parameters of ``float_module``."""
        qmod = cls(float_module.in_features, float_module.out_features,
                   name=float_module.name)
        qmod.weight = float_module.weight
        qmod.bias = float_module.bias
        return qmod


class LinearRelu(Linear):
    r"""QAT :class:`~mge.module.LinearRelu`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_linear_qat(inp)))
