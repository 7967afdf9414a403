"""Quantized ``ConvBn2d`` and ``ConvBnRelu2d``: the folded convolution."""
from ...tensor import Parameter
from ..qat import conv_bn as QAT
from .conv import Conv2d

__all__ = ["ConvBn2d", "ConvBnRelu2d"]


class _ConvBnActivation2d(Conv2d):
    r"""A quantized convolution with the batch norm folded in, for inference."""

    @classmethod
    def from_qat_module(cls, qat_module: QAT._ConvBnActivation2d):
        r"""The folded quantized convolution of a QAT conv-bn module (running statistics)."""
        c = qat_module.conv
        qconv = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                    c.dilation, c.groups, dtype=qat_module.get_activation_dtype(),
                    name=qat_module.name, padding_mode=c.padding_mode)
        w_fold, b_fold = qat_module.fold_weight_bias(qat_module.bn.running_mean,
                                                     qat_module.bn.running_var)
        weight = w_fold.astype(qat_module.get_weight_dtype())
        qconv.weight = Parameter(weight.numpy(), name=c.weight.name)
        qconv.bias = Parameter(b_fold.numpy())
        if c.bias is not None:
            qconv.bias.name = c.bias.name
        return qconv


class ConvBn2d(_ConvBnActivation2d):
    r"""Quantized :class:`~mge.module.qat.ConvBn2d`."""

    def forward(self, inp):
        return self.calc_conv_quantized(inp, nonlinear_mode="identity")


class ConvBnRelu2d(_ConvBnActivation2d):
    r"""Quantized :class:`~mge.module.qat.ConvBnRelu2d`."""

    def forward(self, inp):
        return self.calc_conv_quantized(inp, nonlinear_mode="relu")
