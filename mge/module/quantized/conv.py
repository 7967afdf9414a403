"""Quantized ``Conv2d``, ``ConvRelu2d``, ``ConvTranspose2d``, ``ConvTransposeRelu2d``."""
from typing import Tuple, Union

import numpy as np

from ... import functional as F
from ...core.tensor import dtype
from ...functional.quantized import conv_bias_activation, conv_transpose2d
from ...tensor import Parameter
from .. import conv as Float
from ..qat import conv as QAT
from .module import QuantizedModule

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d"]


class Conv2d(Float.Conv2d, QuantizedModule):
    r"""Quantized :class:`~mge.module.qat.Conv2d`: a convolution of a quantized input with the
    quantized weight and the qint32 bias, output in ``dtype``; for inference.  Arguments as
    :class:`~mge.module.Conv2d`, plus ``dtype`` (the output dtype)."""

    def __init__(self, in_channels: int, out_channels: int,
                 kernel_size: Union[int, Tuple[int, int]],
                 stride: Union[int, Tuple[int, int]] = 1,
                 padding: Union[int, Tuple[int, int]] = 0,
                 dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 dtype=None, padding_mode: str = "zeros", **kwargs):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, True, conv_mode, compute_mode, padding_mode, **kwargs)
        self.output_dtype = dtype

    def calc_conv_quantized(self, inp, nonlinear_mode="identity"):
        r"""The quantized convolution (``nonlinear_mode`` ``"identity"`` or ``"relu"``)."""
        assert self.padding_mode in ["zeros", "reflect", "replicate"]
        bias_scale = dtype.get_scale(inp.dtype) * dtype.get_scale(self.weight.dtype)
        bias = self.bias.astype(dtype.qint32(bias_scale))
        padding = self.padding
        if self.padding_mode != "zeros":
            inp = F.pad(inp, self.get_pad_witdth(), self.padding_mode)
            padding = 0
        return conv_bias_activation(inp, self.weight, bias, self.output_dtype, self.stride,
                                    padding, self.dilation, self.groups,
                                    conv_mode=self.conv_mode, compute_mode=self.compute_mode,
                                    nonlinear_mode=nonlinear_mode)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Conv2d):
        r"""A quantized ``Conv2d`` from a QAT one."""
        qconv = cls(qat_module.in_channels, qat_module.out_channels, qat_module.kernel_size,
                    qat_module.stride, qat_module.padding, qat_module.dilation,
                    qat_module.groups, dtype=qat_module.get_activation_dtype(),
                    padding_mode=qat_module.padding_mode, name=qat_module.name)
        weight = qat_module.weight.astype(qat_module.get_weight_dtype())
        qconv.weight = Parameter(weight.numpy(), name=qat_module.weight.name)
        if qat_module.bias is not None:
            qconv.bias = Parameter(qat_module.bias.numpy(), name=qat_module.bias.name)
        else:
            qconv.bias = Parameter(np.zeros(qat_module._infer_bias_shape(), dtype=np.float32))
        return qconv

    def forward(self, inp):
        return self.calc_conv_quantized(inp, nonlinear_mode="identity")


class ConvRelu2d(Conv2d):
    r"""Quantized :class:`~mge.module.qat.ConvRelu2d`."""

    def forward(self, inp):
        return self.calc_conv_quantized(inp, nonlinear_mode="relu")


class ConvTranspose2d(Float.ConvTranspose2d, QuantizedModule):
    r"""Quantized :class:`~mge.module.qat.ConvTranspose2d`, for inference.  Arguments as
    :class:`~mge.module.ConvTranspose2d`, plus ``dtype`` (the output dtype, qint8).  As in
    MegEngine 1.13, a bias or groups raise ``NotImplementedError`` when called."""

    output_padding = 0

    def __init__(self, in_channels: int, out_channels: int,
                 kernel_size: Union[int, Tuple[int, int]],
                 stride: Union[int, Tuple[int, int]] = 1,
                 padding: Union[int, Tuple[int, int]] = 0,
                 output_padding: Union[int, Tuple[int, int]] = 0,
                 dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 dtype=None, **kwargs):
        super().__init__(in_channels=in_channels, out_channels=out_channels,
                         kernel_size=kernel_size, stride=stride, padding=padding,
                         output_padding=output_padding, dilation=dilation, groups=groups,
                         bias=bias, conv_mode=conv_mode, compute_mode=compute_mode, **kwargs)
        self.output_dtype = dtype

    @classmethod
    def from_qat_module(cls, qat_module: QAT.ConvTranspose2d):
        r"""A quantized ``ConvTranspose2d`` from a QAT one."""
        q = cls(qat_module.in_channels, qat_module.out_channels, qat_module.kernel_size,
                qat_module.stride, qat_module.padding, qat_module.output_padding,
                qat_module.dilation, qat_module.groups, qat_module.bias is not None,
                qat_module.conv_mode, qat_module.compute_mode,
                dtype=qat_module.get_activation_dtype(), name=qat_module.name)
        weight = qat_module.weight.astype(qat_module.get_weight_dtype())
        q.weight = Parameter(weight.numpy(), name=qat_module.weight.name)
        q.bias = (Parameter(qat_module.bias.numpy(), name=qat_module.bias.name)
                  if qat_module.bias is not None else None)
        return q

    def calc_conv_transpose2d_quantized(self, inp, nonlinear_mode):
        r"""The quantized transposed convolution (``nonlinear_mode`` must be identity)."""
        assert nonlinear_mode == "identity", "nonlinear_mode shoule be 'identity'"
        bias = None
        if self.bias is not None:
            bias_scale = dtype.get_scale(inp.dtype) * dtype.get_scale(self.weight.dtype)
            bias = self.bias.astype(dtype.qint32(bias_scale))
        return conv_transpose2d(inp=inp, weight=self.weight, bias=bias,
                                dtype=self.output_dtype, stride=self.stride,
                                padding=self.padding, output_padding=self.output_padding,
                                dilation=self.dilation, groups=self.groups,
                                conv_mode=self.conv_mode, compute_mode=self.compute_mode)

    def forward(self, inp):
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="identity")


class ConvTransposeRelu2d(ConvTranspose2d):
    r"""Quantized :class:`~mge.module.qat.ConvTransposeRelu2d` (as in MegEngine 1.13 it asserts:
    the quantized transposed convolution has no relu)."""

    def forward(self, inp):
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="relu")
