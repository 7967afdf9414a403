"""QAT ``LinearBn1d`` and ``LinearBnRelu1d`` (batch norm folded into the linear layer)."""
from ... import functional as F
from .. import linear_bn as Float
from . import _fold
from .module import QATModule

__all__ = ["LinearBn1d", "LinearBnRelu1d"]


class _LinearBnActivation1d(Float._LinearBnActivation1d, QATModule):
    def get_batch_mean_var(self, inp):
        r"""Per-feature mean and (biased) variance of ``inp``."""
        return _fold.batch_mean_var(inp)

    def fold_weight_bias(self, bn_mean, bn_var):
        r"""The folded weight (fake-quantized) and bias."""
        n = self.bn.num_features
        if bn_mean is None:
            bn_mean = F.zeros((n,), dtype="float32")
        if bn_var is None:
            bn_var = F.ones((n,), dtype="float32")
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self.apply_quant_weight(self.linear.weight * factor.reshape(-1, 1))
        b_fold = _fold.folded_bias(self.bn, self.linear.bias, bn_mean, bn_var)
        return w_fold, b_fold

    def update_running_mean_and_running_var(self, bn_mean, bn_var, num_elements_per_channel):
        r"""Update the batch norm's running statistics (unbiased variance, no gradient)."""
        _fold.update_running(self.bn, bn_mean, bn_var, num_elements_per_channel)

    def calc_linear_bn_qat(self, inp, approx=True):
        r"""The linear map with the folded, fake-quantized weight; in training (``approx``)
        rescaled back and batch-normalised, in evaluation with the folded bias (MegEngine
        folds with the running statistics in both cases)."""
        if self.training and not approx:
            out = self.linear(inp)
            bn_mean, bn_var = self.get_batch_mean_var(out)
            self.update_running_mean_and_running_var(bn_mean, bn_var, out.size / out.shape[1])
        bn_mean = self.bn.running_mean.reshape(-1)
        bn_var = self.bn.running_var.reshape(-1)
        factor, _ = _fold.scale_factor(self.bn, bn_var)
        w_fold = self.linear.weight * factor.reshape(-1, 1)
        b_fold = None
        if not (self.training and approx):
            b_fold = _fold.folded_bias(self.bn, self.linear.bias, bn_mean, bn_var)
        w_qat = self.apply_quant_weight(w_fold)
        b_qat = self.apply_quant_bias(b_fold, inp, w_qat)
        out = self.linear.calc_linear(inp, w_qat, b_qat)
        if not (self.training and approx):
            return out
        shape = [1] * out.ndim
        shape[1] = -1
        orig = out / factor.reshape(shape)
        if self.linear.bias is not None:
            orig = orig + self.linear.bias.reshape(shape)
        return self.bn(orig)

    @classmethod
    def from_float_module(cls, float_module: Float._LinearBnActivation1d):
        r"""A QAT module sharing the parameters and batch norm of ``float_module``."""
        lin, bn = float_module.linear, float_module.bn
        qat_module = cls(lin.in_features, lin.out_features, lin.bias is not None,
                         lin.compute_mode, bn.eps, bn.momentum, bn.affine,
                         bn.track_running_stats, name=float_module.name)
        qat_module.linear.weight = lin.weight
        qat_module.linear.bias = lin.bias
        qat_module.bn = bn
        return qat_module


class LinearBn1d(_LinearBnActivation1d):
    r"""QAT :class:`~mge.module.LinearBn1d`."""

    def forward(self, inp):
        return self.apply_quant_activation(self.calc_linear_bn_qat(inp))


class LinearBnRelu1d(_LinearBnActivation1d):
    r"""QAT :class:`~mge.module.LinearBnRelu1d`."""

    def forward(self, inp):
        return self.apply_quant_activation(F.relu(self.calc_linear_bn_qat(inp)))
