"""QAT convolutions: ``Conv2d``, ``ConvRelu2d``, ``ConvTranspose2d``, ``ConvTransposeRelu2d``."""
from ... import functional as F
from .. import conv as Float
from .module import QATModule

__all__ = ["Conv2d", "ConvRelu2d", "ConvTranspose2d", "ConvTransposeRelu2d"]


class Conv2d(Float.Conv2d, QATModule):
    r"""A :class:`~mge.module.Conv2d` whose weight, bias and output are fake-quantized
    (:class:`~.QATModule`)."""

    def calc_conv_qat(self, inp):
        r"""The convolution with the fake-quantized weight and bias."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv(inp, w_qat, b_qat)

    @classmethod
    def from_float_module(cls, float_module: Float.Conv2d):
        r"""A QAT ``Conv2d`` sharing the parameters of ``float_module``."""
        qat_module = cls(
            float_module.in_channels, float_module.out_channels, float_module.kernel_size,
            float_module.stride, float_module.padding, float_module.dilation,
            float_module.groups, float_module.bias is not None, float_module.conv_mode,
            float_module.compute_mode, float_module.padding_mode, name=float_module.name)
        qat_module.weight = float_module.weight
        qat_module.bias = float_module.bias
        return qat_module

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_qat(inp))


class ConvRelu2d(Conv2d):
    r"""QAT :class:`~mge.module.ConvRelu2d`: ``relu`` of the convolution, then fake-quantized."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_qat(inp)))


class ConvTranspose2d(Float.ConvTranspose2d, QATModule):
    r"""A :class:`~mge.module.ConvTranspose2d` whose weight, bias and output are
    fake-quantized."""

    def calc_conv_transpose2d_qat(self, inp):
        r"""The transposed convolution with the fake-quantized weight and bias."""
        w_qat = self.apply_quant_weight(self.weight)
        b_qat = self.apply_quant_bias(self.bias, inp, w_qat)
        return self.calc_conv_transpose2d(inp, w_qat, b_qat)

    @classmethod
    def from_float_module(cls, float_module: Float.ConvTranspose2d):
        r"""A QAT ``ConvTranspose2d`` sharing the parameters of ``float_module``."""
        qat_module = cls(
            float_module.in_channels, float_module.out_channels, float_module.kernel_size,
            float_module.stride, float_module.padding, float_module.output_padding,
            float_module.dilation, float_module.groups, float_module.bias is not None,
            float_module.conv_mode, float_module.compute_mode, name=float_module.name)
        qat_module.weight = float_module.weight
        qat_module.bias = float_module.bias
        return qat_module

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_transpose2d_qat(inp))


class ConvTransposeRelu2d(ConvTranspose2d):
    r"""QAT :class:`~mge.module.ConvTransposeRelu2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_qat(inp)))
