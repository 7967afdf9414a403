"""QAT ``ConvBn2d`` and ``ConvBnRelu2d``: the batch norm folded into the convolution's weight
and bias, the folded weight fake-quantized (MegEngine 1.13's scheme)."""
from ... import functional as F
from .. import conv_bn as Float
from . import _fold
from .module import QATModule

__all__ = ["ConvBn2d", "ConvBnRelu2d"]


class _ConvBnActivation2d(Float._ConvBnActivation2d, QATModule):
    def get_batch_mean_var(self, inp):
        r"""Per-channel mean and (biased) variance of ``inp``, shaped ``(1, C, 1, 1)``."""
        return _fold.batch_mean_var(inp)

    def _fold_weight(self, factor):
        conv = self.conv
        if conv.groups == 1:
            return conv.weight * factor.reshape(-1, 1, 1, 1)
        return conv.weight * factor.reshape(conv.groups, -1, 1, 1, 1)

    def fold_weight_bias(self, bn_mean, bn_var):
        r"""The folded weight (fake-quantized) and bias for the statistics given (None:
        mean 0, variance 1)."""
        n = self.bn.num_features
        if bn_mean is None:
            bn_mean = F.zeros((n,), dtype="float32")
        if bn_var is None:
            bn_var = F.ones((n,), dtype="float32")
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self.apply_quant_weight(self._fold_weight(factor))
        b_fold = _fold.folded_bias(self.bn, self.conv.bias, bn_mean, bn_var).reshape(1, -1, 1, 1)
        return w_fold, b_fold

    def update_running_mean_and_running_var(self, bn_mean, bn_var, num_elements_per_channel):
        r"""Update the batch norm's running statistics (unbiased variance, no gradient)."""
        _fold.update_running(self.bn, bn_mean, bn_var, num_elements_per_channel)

    def calc_conv_bn_qat(self, inp, approx=True):
        r"""Convolution with the folded, fake-quantized weight.  In training (``approx``) the
        output is rescaled back and goes through the batch norm (which uses and updates the
        batch statistics); in evaluation the folded bias is used with the running
        statistics."""
        if self.training and not approx:
            conv = self.conv(inp)
            bn_mean, bn_var = self.get_batch_mean_var(conv)
            self.update_running_mean_and_running_var(bn_mean, bn_var,
                                                     conv.size / conv.shape[1])
        else:
            bn_mean, bn_var = self.bn.running_mean, self.bn.running_var
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self._fold_weight(factor)
        b_fold = None
        if not (self.training and approx):
            b_fold = _fold.folded_bias(self.bn, self.conv.bias, bn_mean,
                                       bn_var).reshape(1, -1, 1, 1)
        w_qat = self.apply_quant_weight(w_fold)
        b_qat = self.apply_quant_bias(b_fold, inp, w_qat)
        conv = self.conv.calc_conv(inp, w_qat, b_qat)
        if not (self.training and approx):
            return conv
        orig_conv = conv / factor.reshape(1, -1, 1, 1)
        if self.conv.bias is not None:
            orig_conv = orig_conv + self.conv.bias
        return self.bn(orig_conv)

    @classmethod
    def from_float_module(cls, float_module: Float._ConvBnActivation2d):
        r"""A QAT module sharing the convolution's parameters and the batch norm of
        ``float_module``."""
        c = float_module.conv
        qat_module = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                         c.dilation, c.groups, c.bias is not None, c.conv_mode, c.compute_mode,
                         padding_mode=c.padding_mode, name=float_module.name)
        qat_module.conv.weight = c.weight
        qat_module.conv.bias = c.bias
        qat_module.bn = float_module.bn
        return qat_module


class ConvBn2d(_ConvBnActivation2d):
    r"""QAT :class:`~mge.module.ConvBn2d` (batch norm folded into the convolution)."""

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_bn_qat(inp))


class ConvBnRelu2d(_ConvBnActivation2d):
    r"""QAT :class:`~mge.module.ConvBnRelu2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_bn_qat(inp)))
