"""Quantized ``BatchMatMulActivation``."""
import numpy as np

from ...core.tensor import dtype
from ...functional import expand_dims, squeeze
from ...functional.quantized import batch_conv_bias_activation
from ...tensor import Parameter
from .. import batch_matmul_activation as Float
from ..qat import batch_matmul_activation as QAT
from .module import QuantizedModule

__all__ = ["BatchMatMulActivation"]


class BatchMatMulActivation(Float.BatchMatMulActivation, QuantizedModule):
    r"""Quantized :class:`~mge.module.qat.BatchMatMulActivation`: ``weight @ inp + bias`` per
    batch item (a batched 1x1 convolution, the bias per output feature), then the activation;
    output in ``dtype``; for inference."""

    def __init__(self, batch: int, in_features: int, out_features: int, bias: bool = True,
                 nonlinear_mode="identity", dtype=None, **kwargs):
        super().__init__(batch, in_features, out_features, bias, nonlinear_mode, **kwargs)
        self.output_dtype = dtype

    def calc_bmm_quantized(self, inp):
        r"""The quantized batched product."""
        bias_scale = dtype.get_scale(inp.dtype) * dtype.get_scale(self.weight.dtype)
        inp = expand_dims(inp, [-1])
        res = batch_conv_bias_activation(inp, self.weight,
                                         self.bias.astype(dtype.qint32(bias_scale)),
                                         dtype=self.output_dtype, stride=1, padding=0,
                                         dilation=1, groups=1,
                                         nonlinear_mode=self.nonlinear_mode)
        return squeeze(res, -1)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.BatchMatMulActivation):
        r"""A quantized ``BatchMatMulActivation`` from a QAT one."""
        qbmm = cls(qat_module.batch, qat_module.in_features, qat_module.out_features,
                   qat_module.bias is not None, qat_module.nonlinear_mode,
                   dtype=qat_module.get_activation_dtype(), name=qat_module.name)
        weight = qat_module.weight.astype(qat_module.get_weight_dtype())
        weight = expand_dims(weight, [-1, -2])
        qbmm.weight = Parameter(weight.numpy(), name=qat_module.weight.name)
        if qat_module.bias is not None:
            bias = qat_module.bias.reshape((1, qbmm.out_features, 1, 1))
            qbmm.bias = Parameter(bias.numpy(), name=qat_module.bias.name)
        else:
            qbmm.bias = Parameter(np.zeros((1, qbmm.out_features, 1, 1), dtype=np.float32))
        return qbmm

    def forward(self, inp):
        return self.calc_bmm_quantized(inp)
