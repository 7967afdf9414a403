"""Quantized ``Linear`` and ``LinearRelu``."""
import numpy as np

from ..._core.ops.quantized import QuantizedElemwise, QuantizedMatrixMul, qspec
from ...core import apply
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
        inp_q, w_q = qspec(inp.dtype), qspec(self.weight.dtype)
        if inp_q is None or w_q is None:
            raise TypeError(f"quantized Linear: the input and the weight must have quantized "
                            f"dtypes, got {inp.dtype} and {self.weight.dtype}")
        # MegEngine's graph: MatrixMul (qint32), ADD of the bias as qint32 of the accumulator's
        # scale (the ADD converts it, as MegBrain folds the TypeCvt of the constant bias into a
        # constant), then TypeCvt; relu is taken in the int32 domain, before the conversion
        mm = QuantizedMatrixMul(False, True, "default", inp_q, w_q)
        ret = apply(mm, inp, self.weight)[0]
        acc = mm.acc_spec
        if self.bias is not None:
            bias = self.bias
            b_q = qspec(bias.dtype)
            if b_q is not None and b_q[0] != "QuantizedS32":
                raise TypeError(f"quantized Linear: the bias must be float or qint32, got "
                                f"{bias.dtype}")
            add = QuantizedElemwise("add", acc, (acc, b_q if b_q is not None else bias.dtype))
            ret = apply(add, ret, bias)[0]
        if nonlinear_mode == "relu":
            ret = apply(QuantizedElemwise("relu", acc), ret)[0]
        return ret if self.output_dtype is None else ret.astype(self.output_dtype)

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
