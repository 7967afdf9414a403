"""QAT ``ConvTransposeBn2d`` and ``ConvTransposeBnRelu2d`` (batch norm folded into the
transposed convolution)."""
from ... import functional as F
from .. import conv_transpose_bn as Float
from . import _fold
from .module import QATModule

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d"]


class _ConvTransposeBnActivation2d(Float._ConvTransposeBnActivation2d, QATModule):
    def get_batch_mean_var(self, inp):
        r"""Per-channel mean and (biased) variance of ``inp``, shaped ``(1, C, 1, 1)``."""
        return _fold.batch_mean_var(inp)

    def _fold_weight(self, factor):
        ct = self.conv_transpose2d
        if ct.groups == 1:
            return ct.weight * factor.reshape(1, -1, 1, 1)
        return ct.weight * factor.reshape(ct.groups, 1, -1, 1, 1)

    def fold_weight_bias(self, bn_mean, bn_var):
        r"""The folded weight (fake-quantized) and bias."""
        n = self.bn.num_features
        if bn_mean is None:
            bn_mean = F.zeros((n,), dtype="float32")
        if bn_var is None:
            bn_var = F.ones((n,), dtype="float32")
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self.apply_quant_weight(self._fold_weight(factor))
        b_fold = _fold.folded_bias(self.bn, self.conv_transpose2d.bias, bn_mean,
                                   bn_var).reshape(1, -1, 1, 1)
        return w_fold, b_fold

    def update_running_mean_and_running_var(self, bn_mean, bn_var, num_elements_per_channel):
        r"""Update the batch norm's running statistics (unbiased variance, no gradient)."""
        _fold.update_running(self.bn, bn_mean, bn_var, num_elements_per_channel)

    def calc_conv_transpose2d_bn_qat(self, inp, approx=True):
        r"""The transposed convolution with the folded, fake-quantized weight (see
        :meth:`~mge.module.qat.ConvBn2d.calc_conv_bn_qat`)."""
        ct = self.conv_transpose2d
        if self.training and not approx:
            out = ct(inp)
            bn_mean, bn_var = self.get_batch_mean_var(out)
            self.update_running_mean_and_running_var(bn_mean, bn_var, out.size / out.shape[1])
        else:
            bn_mean, bn_var = self.bn.running_mean, self.bn.running_var
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self._fold_weight(factor)
        b_fold = None
        if not (self.training and approx):
            b_fold = _fold.folded_bias(self.bn, ct.bias, bn_mean, bn_var).reshape(1, -1, 1, 1)
        w_qat = self.apply_quant_weight(w_fold)
        b_qat = self.apply_quant_bias(b_fold, inp, w_qat)
        out = ct.calc_conv_transpose2d(inp, w_qat, b_qat)
        if not (self.training and approx):
            return out
        orig = out / factor.reshape(1, -1, 1, 1)
        if ct.bias is not None:
            orig = orig + ct.bias
        return self.bn(orig)

    @classmethod
    def from_float_module(cls, float_module: Float._ConvTransposeBnActivation2d):
        r"""A QAT module sharing the parameters and batch norm of ``float_module``."""
        c = float_module.conv_transpose2d
        qat_module = cls(c.in_channels, c.out_channels, c.kernel_size, c.stride, c.padding,
                         c.output_padding, c.dilation, c.groups, c.bias is not None,
                         c.conv_mode, c.compute_mode, name=float_module.name)
        qat_module.conv_transpose2d.weight = c.weight
        qat_module.conv_transpose2d.bias = c.bias
        qat_module.bn = float_module.bn
        return qat_module


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    r"""QAT :class:`~mge.module.ConvTransposeBn2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_conv_transpose2d_bn_qat(inp))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    r"""QAT :class:`~mge.module.ConvTransposeBnRelu2d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_conv_transpose2d_bn_qat(inp)))
