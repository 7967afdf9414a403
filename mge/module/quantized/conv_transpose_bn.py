"""Quantized ``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d``."""
from ...tensor import Parameter
from ..qat import conv_transpose_bn as QAT
from .conv import ConvTranspose2d

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]


class _ConvTransposeBnActivation2d(ConvTranspose2d):
    r"""A quantized transposed convolution with the batch norm folded in, for inference (its
    folded bias makes it raise ``NotImplementedError`` when called, as in MegEngine 1.13)."""

    @classmethod
    def from_qat_module(cls, qat_module: QAT._ConvTransposeBnActivation2d):
        r"""The folded quantized transposed convolution of a QAT module."""
        c = qat_module.conv_transpose2d
        q = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                c.output_padding, c.dilation, c.groups,
                dtype=qat_module.get_activation_dtype(), name=qat_module.name)
        w_fold, b_fold = qat_module.fold_weight_bias(qat_module.bn.running_mean,
                                                     qat_module.bn.running_var)
        weight = w_fold.astype(qat_module.get_weight_dtype())
        q.weight = Parameter(weight.numpy(), name=c.weight.name)
        q.bias = Parameter(b_fold.numpy())
        if c.bias is not None:
            q.bias.name = c.bias.name
        return q


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    r"""Quantized :class:`~mge.module.qat.ConvTransposeBn2d`."""

    def forward(self, inp):
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="identity")


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    r"""Quantized :class:`~mge.module.qat.ConvTransposeBnRelu2d`."""

    def forward(self, inp):
        return self.calc_conv_transpose2d_quantized(inp, nonlinear_mode="relu")
