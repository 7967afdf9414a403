"""Observers (MegEngine 1.13's ``megengine.quantization.observer``): modules that watch the
tensors passing through them and answer the quantization parameters (:meth:`get_qparams`) that
would represent them."""
from abc import abstractmethod
from copy import deepcopy
from typing import Union

import numpy as np

from .. import functional as F
from ..core.tensor.dtype import QuantDtypeMeta, _builtin_quant_dtypes
from ..distributed import WORLD, is_distributed
from ..distributed.functional import all_reduce_max, all_reduce_min
from ..logger import get_logger
from ..module import Module
from ..tensor import Tensor
from .utils import QParams, QParamsModuleMixin, QuantMode, create_qparams

__all__ = [
    "Observer", "MinMaxObserver", "SyncMinMaxObserver", "ExponentialMovingAverageObserver",
    "SyncExponentialMovingAverageObserver", "HistogramObserver", "PassiveObserver",
]

logger = get_logger(__name__)


class Observer(Module, QParamsModuleMixin):
    r"""Base class of the observers: modules that record statistics of their input for
    quantization.  Abstract (``forward`` and ``get_qparams``).

    Args:
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`: which dtype to
            collect scale and zero point for.
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], **kwargs):
        super().__init__()
        if isinstance(dtype, str):
            if dtype not in _builtin_quant_dtypes:
                raise ValueError("unknown dtype: {}, only support {}".format(
                    dtype, _builtin_quant_dtypes.keys()))
            dtype = _builtin_quant_dtypes[dtype]
        if "narrow_range" in kwargs:
            del kwargs["narrow_range"]
            logger.warning("FakeQuantize currently has no narrow_range param so it is ignored "
                           "here", exc_info=DeprecationWarning)
        self.dtype = dtype
        self.qmin = dtype.qmin
        self.qmax = dtype.qmax
        self.enabled = True

    def enable(self):
        r"""Record statistics in ``forward``."""
        self.enabled = True

    def disable(self):
        r"""Stop recording statistics."""
        self.enabled = False

    def train(self, mode: bool = True, recursive: bool = True) -> None:
        r"""Training mode also enables the observer, evaluation mode disables it."""
        super().train(mode, recursive)
        if mode:
            self.enable()
        else:
            self.disable()

    @abstractmethod
    def forward(self, x):
        pass


class MinMaxObserver(Observer):
    r"""Records the running minimum and maximum of its input; the scale covers
    ``[min(0, min), max(0, max)]``.

    Args:
        mode: the :class:`~.utils.QuantMode`.
        eps: the smallest scale (avoids division by zero).
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`.
    """

    def __init__(self, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(dtype, **kwargs)
        self.mode = mode
        self.min_val = Tensor(np.finfo(np.float32).max, dtype=np.float32)
        self.max_val = Tensor(np.finfo(np.float32).min, dtype=np.float32)
        self.scale_limit = eps

    def _calculate_qparams(self, inp_min_val, inp_max_val):
        min_val = F.minimum(0.0, inp_min_val)
        max_val = F.maximum(0.0, inp_max_val)
        if self.mode == QuantMode.SYMMERTIC:
            symmetric_max_vals = F.maximum(-min_val, max_val)
            scale = F.maximum(symmetric_max_vals / ((self.qmax - self.qmin) / 2),
                              self.scale_limit)
            zero_point = None
        else:
            scale = F.maximum((max_val - min_val) / (self.qmax - self.qmin), self.scale_limit)
            zero_point = self.qmin - F.round(min_val / scale)
        return create_qparams(self.mode, self.dtype, scale=scale, zero_point=zero_point)

    def get_qparams(self):
        r"""The qparams of the recorded range."""
        return self._calculate_qparams(self.min_val, self.max_val)

    def forward(self, x_orig):
        if self.enabled:
            x = x_orig.detach()
            self.min_val[...] = F.minimum(self.min_val, x.min())
            self.max_val[...] = F.maximum(self.max_val, x.max())
        return x_orig


def _global_min_max(x):
    if is_distributed():
        return all_reduce_min(x.min(), WORLD), all_reduce_max(x.max(), WORLD)
    return x.min(), x.max()


class SyncMinMaxObserver(MinMaxObserver):
    r"""The distributed :class:`MinMaxObserver`: the minimum and maximum over every process of
    the group (the local ones when not distributed)."""

    def forward(self, x_orig):
        if self.enabled:
            min_x, max_x = _global_min_max(x_orig.detach())
            self.min_val[...] = F.minimum(self.min_val, min_x)
            self.max_val[...] = F.maximum(self.max_val, max_x)
        return x_orig


class ExponentialMovingAverageObserver(MinMaxObserver):
    r"""A :class:`MinMaxObserver` whose minimum and maximum are exponential moving averages
    (the first input sets them).

    Args:
        momentum: weight of the old value in each update.
        mode: the :class:`~.utils.QuantMode`.
        eps: the smallest scale.
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`.
    """

    def __init__(self, momentum: float = 0.9, mode: QuantMode = QuantMode.SYMMERTIC,
                 eps: float = 0.00001, dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.momentum = Tensor(momentum, dtype="float32")
        # 0 on the first forward (no branch there, so that a trace records one program).
        self.runtime_momentum = Tensor(0.0)

    def set_momentum(self, momentum):
        r"""Set the momentum."""
        self.momentum = Tensor(momentum, dtype="float32")

    def _update(self, min_x, max_x):
        m = self.runtime_momentum
        self.min_val[...] = self.min_val * m + (1 - m) * min_x
        self.max_val[...] = self.max_val * m + (1 - m) * max_x
        self.runtime_momentum[...] = self.momentum

    def forward(self, x_orig):
        if self.enabled:
            x = x_orig.detach()
            self._update(x.min(), x.max())
        return x_orig


class SyncExponentialMovingAverageObserver(ExponentialMovingAverageObserver):
    r"""The distributed :class:`ExponentialMovingAverageObserver` (group-wide minimum and
    maximum of each input)."""

    def forward(self, x_orig):
        if self.enabled:
            self._update(*_global_min_max(x_orig.detach()))
        return x_orig


class HistogramObserver(MinMaxObserver):
    r"""A :class:`MinMaxObserver` that keeps a running histogram of its input and chooses the
    range minimising the L2 quantization error (outliers cut off).  For calibration.

    Args:
        bins: number of histogram bins.
        upsample_rate: resolution factor used to merge histograms of different ranges.
        mode: the :class:`~.utils.QuantMode`.
        eps: the smallest scale.
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`.
    """

    def __init__(self, bins: int = 2048, upsample_rate: int = 128,
                 mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype: Union[str, QuantDtypeMeta] = "qint8", **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.bins = bins
        self.upsample_rate = upsample_rate
        self.dst_nbins = self.dtype.qmax - self.dtype.qmin + 1
        self.histogram = Tensor([-1] + [0.0] * (bins - 1), dtype="float32")

    def _quantization_error(self, hist, bin_width, start_bin, end_bin):
        # L2 error of quantizing the (piecewise uniform) histogram with the range of bins
        # [start_bin, end_bin]: per source bin, the integral of (x - centre)^2 over the parts
        # of it falling in each destination bin.
        dst_w = bin_width * (end_bin - start_bin + 1) / self.dst_nbins
        if dst_w == 0.0:
            return 0.0
        src = np.arange(self.bins, dtype=np.float64)
        begin = (src - start_bin) * bin_width
        end = begin + bin_width
        last = self.dst_nbins - 1
        d_begin = np.minimum(last, np.maximum(0.0, np.floor(begin / dst_w)))
        d_end = np.minimum(last, np.maximum(0.0, np.floor(end / dst_w)))
        c_begin = d_begin * dst_w + dst_w / 2
        c_end = d_end * dst_w + dst_w / 2
        density = hist / bin_width
        half = dst_w / 2

        def cube_int(a, b):
            return (b * b * b - a * a * a) / 3

        same = density * cube_int(begin - c_begin, end - c_begin)
        split = (density * cube_int(begin - c_begin, half)
                 + (d_end - d_begin - 1) * density * cube_int(-half, half)
                 + density * cube_int(-half, end - c_end))
        return float(np.sum(np.where(d_begin == d_end, same, split)))

    def _non_linear_param_search(self):
        r"""The new (min, max): an approximate L2-error minimisation that moves the ends of
        the range inwards while the error decreases."""
        np_min_val = self.min_val.numpy()
        np_max_val = self.max_val.numpy()
        hist = self.histogram.numpy().astype(np.float64)
        assert len(hist) == self.bins, "bins mistmatch"
        bin_width = float((np_max_val - np_min_val) / self.bins)
        total = hist.sum()
        csum = np.cumsum(hist)
        stepsize = 1e-5
        alpha, beta = 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha, next_beta = alpha + stepsize, beta - stepsize
            left, right = start_bin, end_bin
            while left < end_bin and csum[left] < next_alpha * total:
                left += 1
            while right > start_bin and csum[right] > next_beta * total:
                right -= 1
            next_start, next_end = start_bin, end_bin
            if (left - start_bin) > (end_bin - right):
                next_start = left
                alpha = next_alpha
            else:
                next_end = right
                beta = next_beta
            if next_start == start_bin and next_end == end_bin:
                continue
            norm = self._quantization_error(hist, bin_width, next_start, next_end)
            if norm > norm_min:
                break
            norm_min = norm
            start_bin, end_bin = next_start, next_end
        new_min = self.min_val + Tensor(bin_width * start_bin, dtype=np.float32)
        new_max = self.min_val + Tensor(bin_width * (end_bin + 1), dtype=np.float32)
        return new_min, new_max

    def get_qparams(self):
        r"""The qparams of the range the histogram search chooses."""
        new_min, new_max = self._non_linear_param_search()
        return self._calculate_qparams(new_min, new_max)

    def _combine_histograms(self, orig_hist, new_hist, upsample_rate, downsample_rate,
                            start_idx, nbins):
        upsampled = new_hist.repeat(upsample_rate)
        wide = np.zeros((nbins * downsample_rate))
        wide[start_idx:nbins * upsample_rate + start_idx] = upsampled
        integral = np.cumsum(wide, 0)[downsample_rate - 1::downsample_rate]
        shifted = np.zeros((nbins))
        shifted[1:nbins] = integral[0:-1]
        return orig_hist + (integral - shifted) / upsample_rate

    def _adjust_min_max(self, combined_min, combined_max, upsample_rate):
        np_min_val = self.min_val.numpy()
        np_max_val = self.max_val.numpy()
        hist_bin_width = (np_max_val - np_min_val) / (self.bins * upsample_rate)
        downsample_rate = int(np.ceil((combined_max - combined_min)
                                      / (self.bins * hist_bin_width)))
        e = downsample_rate * (self.bins * hist_bin_width) - (combined_max - combined_min)
        combined_max = combined_max + e / 2
        combined_min = combined_min - e / 2
        start_idx = int(np.round((np_min_val - combined_min) / hist_bin_width))
        return combined_min, combined_max, downsample_rate, start_idx

    def sideeffect_forward(self, x_orig):
        r"""Merge the histogram of ``x_orig`` into the running one (on the host)."""
        x = x_orig.numpy()
        min_val = self.min_val.numpy()
        max_val = self.max_val.numpy()
        histogram = self.histogram.numpy()
        new_min, new_max = x.min(), x.max()
        if histogram[0] == -1:
            new_histogram, _ = np.histogram(x, self.bins, (new_min, new_max))
        else:
            new_min = min(new_min, min_val)
            new_max = max(new_max, max_val)
            new_min, new_max, downsample_rate, start_idx = self._adjust_min_max(
                new_min, new_max, self.upsample_rate)
            new_histogram, _ = np.histogram(x, self.bins, (new_min, new_max))
            new_histogram = new_histogram.astype(np.float64)
            if new_min == min_val and new_max == max_val:
                new_histogram += histogram
            else:
                new_histogram = self._combine_histograms(
                    new_histogram, histogram, self.upsample_rate, downsample_rate, start_idx,
                    self.bins)
        self.histogram = Tensor(new_histogram, dtype="float32")
        self.min_val = Tensor(new_min, dtype="float32")
        self.max_val = Tensor(new_max, dtype="float32")

    def forward(self, x_orig):
        self.sideeffect_forward(x_orig)
        return x_orig


class PassiveObserver(Observer):
    r"""An observer whose qparams are set from outside (:meth:`set_qparams`, the ``scale``
    property); used by :func:`~.quantize.apply_easy_quant`."""

    def __init__(self, dtype: Union[str, QuantDtypeMeta], **kwargs):
        super().__init__(dtype, **kwargs)
        self.qparams = None
        self.orig_scale = None

    @property
    def scale(self):
        r"""The scale of the qparams (settable; must be positive)."""
        return self.qparams.scale

    @scale.setter
    def scale(self, value: np.ndarray):
        assert np.all(value > 0)
        self.qparams.scale[...] = Tensor(value)

    def get_qparams(self):
        r"""The qparams set last."""
        return self.qparams

    def set_qparams(self, qparams: QParams):
        r"""Set (a copy of) ``qparams``; ``orig_scale`` keeps its scale as numpy."""
        self.qparams = deepcopy(qparams)
        if qparams.scale is None:
            raise AssertionError("Can not get an initialized scale")
        if qparams.dtype_meta is None:
            qparams.dtype_meta = self.dtype
        else:
            assert qparams.dtype_meta is self.dtype, (
                "input qparams' dtype is not equal to self.dtype.\nqparams.dtype_meta={}\n"
                "self.dtype={}".format(qparams.dtype_meta, self.dtype))
        self.orig_scale = qparams.scale.numpy()

    def forward(self, x):
        r"""Returns ``x`` (the qparams are set by :func:`~.quantize.apply_easy_quant`)."""
        return x
