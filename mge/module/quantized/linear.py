"""Quantized ``Linear`` and ``LinearRelu``."""
import numpy as np

from ...core.tensor import dtype
from ...functional.quantized import _from_acc, _int_values
from ...tensor import Parameter
from ..qat import linear as QAT
from .module import QuantizedModule

__all__ = ["Linear", "LinearRelu"]


class Linear(QuantizedModule):
    r"""Quantized :class:`~mge.module.qat.Linear`: ``inp @ weight.T + bias`` on quantized
    tensors (qint32 accumulator, bias as qint32 with scale ``inp_scale * weight_scale``), output
    converted to ``dtype``; for inference."""

    def __init__(self, dtype: np.dtype = None, **kwargs):
        super().__init__(**kwargs)
        self.weight = None
        self.bias = None
        self.output_dtype = dtype

    def calc_linear_quantized(self, inp, nonlinear_mode="identity"):
        r"""The quantized linear map (``nonlinear_mode`` ``"identity"`` or ``"relu"``)."""
        if self.training:
            raise ValueError("quantized module only support inference.")
        assert nonlinear_mode in ["identity", "relu"]
        x, s_in = _int_values(inp, "inp")
        w, s_w = _int_values(self.weight, "weight")
        acc_scale = np.float32(s_in) * np.float32(s_w)
        acc = x @ w.T
        if self.bias is not None:
            b, _ = _int_values(self.bias.astype(dtype.qint32(acc_scale)), "bias")
            acc = acc + b
        return _from_acc(acc, acc_scale, self.output_dtype, nonlinear_mode)

    def forward(self, inp):
        return self.calc_linear_quantized(inp)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Linear):
        r"""A quantized ``Linear`` from a QAT one."""
        qmod = cls(dtype=qat_module.get_activation_dtype(), name=qat_module.name)
        weight = qat_module.weight.astype(qat_module.get_weight_dtype())
        qmod.weight = Parameter(weight.numpy(), name=qat_module.weight.name)
        if qat_module.bias is not None:
            qmod.bias = Parameter(qat_module.bias.numpy(), name=qat_module.bias.name)
        return qmod


class LinearRelu(Linear):
    r"""Quantized :class:`~mge.module.qat.LinearRelu`."""

    def forward(self, inp):
        return self.calc_linear_quantized(inp, nonlinear_mode="relu")
