"""Fake quantization modules (MegEngine 1.13's ``megengine.quantization.fake_quant``):
:class:`FakeQuantize` (scale from an observer), :class:`TQT` (learned log2 threshold) and
:class:`LSQ` (learned step size)."""
import math
from typing import Union

import numpy as np

from .. import functional as F
from ..core.tensor.dtype import QuantDtypeMeta, _builtin_quant_dtypes
from ..logger import get_logger
from ..module import Module
from ..tensor import Parameter, Tensor
from .utils import (
    LSQParams, QParams, QParamsModuleMixin, QuantMode, create_qparams, fake_quant_tensor,
    lsq_forward, tqt_forward,
)

__all__ = ["FakeQuantize", "TQT", "LSQ"]

logger = get_logger(__name__)


def _dtype_meta(dtype):
    if isinstance(dtype, str):
        if dtype not in _builtin_quant_dtypes:
            raise ValueError("unknown dtype: {}, only support {}".format(
                dtype, _builtin_quant_dtypes.keys()))
        dtype = _builtin_quant_dtypes[dtype]
    return dtype


def _drop_narrow_range(kwargs):
    if "narrow_range" in kwargs:
        del kwargs["narrow_range"]
        logger.warning("FakeQuantize currently has no narrow_range param so it is ignored here",
                       exc_info=DeprecationWarning)


class _FakeQuantize(Module):
    r"""Base of the fake quantizers: ``dtype`` (a name or a
    :class:`~mge.core.tensor.dtype.QuantDtypeMeta`) and ``enable``; ``forward`` fake-quantizes
    while enabled and returns the input unchanged otherwise."""

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, **kwargs):
        super().__init__()
        _drop_narrow_range(kwargs)
        dtype = _dtype_meta(dtype)
        self.dtype = dtype
        self.qmin = dtype.qmin
        self.qmax = dtype.qmax
        self.enabled = enable

    def enable(self):
        r"""Fake-quantize in ``forward``."""
        self.enabled = True

    def disable(self):
        r"""Return the input unchanged in ``forward``."""
        self.enabled = False

    def fake_quant_forward(self, inp, qparams: QParams = None):
        r"""The fake-quantized ``inp`` (subclasses define it)."""
        raise NotImplementedError

    def normal_forward(self, inp, qparams: QParams = None):
        r"""``inp`` unchanged."""
        return inp

    def forward(self, inp, qparams: QParams = None):
        if self.enabled:
            return self.fake_quant_forward(inp, qparams=qparams)
        return self.normal_forward(inp, qparams=qparams)


class TQT(_FakeQuantize, QParamsModuleMixin):
    r"""TQT (https://arxiv.org/abs/1903.08066, Trained Quantization Thresholds): fake
    quantization on a grid of step ``2 ** scale``, ``scale`` a learned :class:`~mge.Parameter`
    (its gradient is MegEngine's TQT formula, see :func:`~.utils.tqt_forward`).

    Args:
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`, the target dtype.
        enable: whether ``forward`` fake-quantizes.
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, **kwargs):
        super().__init__(dtype, enable, **kwargs)
        self.scale = Parameter(0.0, dtype="float32")

    def fake_quant_forward(self, inp, qparams: QParams = None):
        return tqt_forward(self.qmin, self.qmax, inp, self.scale)

    def set_qparams(self, qparams: QParams):
        r"""Start from ``qparams``' scale: ``self.scale = log2(qparams.scale)`` (symmetric only)."""
        assert qparams.mode == QuantMode.SYMMERTIC, \
            "only symmetric quantization is supported by TQT"
        if qparams.scale is None:
            raise AssertionError("Can not get an initialized scale")
        scale = qparams.scale if isinstance(qparams.scale, Tensor) else Tensor(qparams.scale)
        self.scale[...] = F.log(scale) / math.log(2)

    def get_qparams(self):
        r"""Symmetric qparams with scale ``2 ** self.scale``."""
        return create_qparams(QuantMode.SYMMERTIC, self.dtype, scale=2 ** self.scale)


class FakeQuantize(_FakeQuantize):
    r"""Quantize and dequantize with the scale and zero point an observer gives
    (:func:`~.utils.fake_quant_tensor`; straight-through gradient inside the range).

    Args:
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`, the target dtype.
        enable: whether ``forward`` fake-quantizes.
    """

    def fake_quant_forward(self, inp, qparams: QParams = None):
        assert qparams.dtype_meta is self.dtype, (
            "input qparams' dtype is not equal to self.dtype.\nqparams.dtype_meta={}\n"
            "self.dtype={}".format(qparams.dtype_meta, self.dtype))
        return fake_quant_tensor(inp, qparams)


class LSQ(_FakeQuantize, QParamsModuleMixin):
    r"""LSQ (https://arxiv.org/abs/1902.08153, Learned Step Size Quantization): fake
    quantization with the learned step ``|step_size| + eps`` (its gradient is MegEngine's LSQ
    formula, see :func:`~.utils.lsq_forward`).

    Args:
        dtype: a string or :class:`~mge.core.tensor.dtype.QuantDtypeMeta`, the target dtype.
        enable: whether ``forward`` fake-quantizes.
        eps: keeps the step away from zero. Default: 1e-5
    """

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True,
                 eps: float = 1e-5, **kwargs):
        super().__init__(dtype=dtype, enable=enable, **kwargs)
        self.eps = Tensor(eps, dtype="float32")
        self.step_size = Parameter(1.0, dtype="float32")
        self.mode = None
        self.zero_point = Tensor(0.0, dtype="float32")
        self.grad_scale = Tensor(1.0, dtype="float32")

    def set_qparams(self, qparams: QParams):
        r"""Start from ``qparams``: step ``scale - eps`` (0 below ``eps``), its zero point in
        asymmetric mode and, for :class:`~.utils.LSQParams`, its ``grad_scale``."""
        self.mode = qparams.mode
        if qparams.mode == QuantMode.ASYMMERTIC:
            self.zero_point = qparams.zero_point
        else:
            self.zero_point = Tensor(0.0, dtype="float32")
        if qparams.scale is None:
            raise AssertionError("Can not get an initialized scale")
        init = float(np.asarray(qparams.scale.numpy() if isinstance(qparams.scale, Tensor)
                                else qparams.scale).reshape(-1)[0])
        eps = float(self.eps.numpy())
        init = 0.0 if init < eps else np.float32(init) - np.float32(eps)
        self.step_size = Parameter(float(init), dtype="float32")
        if isinstance(qparams, LSQParams):
            self.grad_scale = qparams.grad_scale

    def fake_quant_forward(self, inp, qparams: LSQParams = None):
        step_size = F.abs(self.step_size) + self.eps
        return lsq_forward(self.qmin, self.qmax, inp, step_size, self.zero_point,
                           self.grad_scale)

    def get_qparams(self):
        r"""The :class:`~.utils.LSQParams` of the current step."""
        return LSQParams(mode=self.mode, dtype_meta=self.dtype,
                         scale=F.abs(self.step_size.detach()) + self.eps,
                         zero_point=self.zero_point, grad_scale=self.grad_scale)
