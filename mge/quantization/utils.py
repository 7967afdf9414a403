"""Quantization helpers (MegEngine 1.13's ``megengine.quantization.utils``).

* :class:`QuantMode`, :class:`QParams` (shared with ``Tensor.qparams``: the same classes as
  :mod:`mge.core.tensor.qparams`), :class:`LSQParams` and :func:`create_qparams`;
* :func:`fake_quant_tensor` / :func:`fake_quant_bias`: quantize and dequantize in float, with the
  straight-through gradient of MegEngine's ``FakeQuant`` kernel;
* :func:`tqt_forward` / :func:`lsq_forward`: the fake quantization of TQT (a learned log2
  threshold) and LSQ (a learned step size), with the gradients of MegEngine's ``TQT`` and ``LSQ``
  kernels with respect to the input and to the scale.

The three quantizers are :class:`mge.autodiff.Function` s: their forward is made of mge ops and
their backward is MegEngine's formula, so they work under :class:`~mge.autodiff.GradManager` and
the ``core.autodiff.grad.Grad`` of MegEngine's tests alike.
"""
import abc
import math
from functools import partial, update_wrapper, wraps
from typing import Union

import numpy as np

from .. import functional as F
from ..autodiff import Function
from ..core.tensor.dtype import QuantDtypeMeta, _builtin_quant_dtypes, create_quantized_dtype
from ..core.tensor.qparams import QParams, QuantMode
from ..tensor import Tensor

__all__ = [
    "QuantMode", "QParams", "LSQParams", "QParamsModuleMixin", "create_qparams",
    "fake_quant_tensor", "fake_quant_bias", "tqt_forward", "lsq_forward", "Round",
    "register_method_to_class",
]

_LN2 = math.log(2.0)


def _as_tensor(value):
    if isinstance(value, Tensor):
        return value
    return Tensor(np.asarray(value, dtype=np.float32))


def _sum_to(grad, shape):
    """``grad`` summed over the axes that broadcasting added to reach ``shape``."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    if len(shape) == 0:
        return grad.sum()
    lead = grad.ndim - len(shape)
    if lead:
        grad = grad.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


def _clamp(x, qmin, qmax):
    # MegEngine's kernels: ``x <= qmin ? qmin : x; x >= qmax ? qmax : x`` (NaN passes through).
    x = F.where(x <= qmin, F.full_like(x, qmin), x)
    return F.where(x >= qmax, F.full_like(x, qmax), x)


class Round(Function):
    r"""Rounding (halves away from zero) with a straight-through gradient: the gradient of the
    output passes to the input unchanged (``F.round`` itself has a zero gradient)."""

    def forward(self, x):
        return F.round(x)

    def backward(self, output_grads):
        return output_grads


class _Reversed(Function):
    """A ``Function`` called with its inputs in reverse order (``_forward``/``_backward`` see
    them in the natural order): mge's grad calls the callbacks of the inputs of one node last
    input first, and this gives MegEngine's order (first input first) for these quantizers."""

    def forward(self, *args):
        return self._forward(*reversed(args))

    def backward(self, dy):
        return tuple(reversed(self._backward(dy)))

    def __call__(self, *args):
        return super().__call__(*reversed(args))


class _FakeQuant(_Reversed):
    """``(clamp(round(x / s) + zp, qmin, qmax) - zp) * s``; gradient ``dy`` where
    ``qmin <= round(x / s) + zp <= qmax`` and 0 elsewhere (MegEngine's ``FakeQuant``); none for
    the scale and the zero point."""

    def __init__(self, qmin, qmax):
        self.qmin, self.qmax = float(qmin), float(qmax)

    def _forward(self, inp, scale, zero_point):
        q = F.round(inp / scale) + zero_point
        self.mask = (q >= self.qmin) & (q <= self.qmax)
        return (_clamp(q, self.qmin, self.qmax) - zero_point) * scale

    def _backward(self, dy):
        return F.where(self.mask, dy, F.zeros_like(dy)), None, None


class _TQT(_Reversed):
    """TQT's fake quantization with the threshold ``t = 2 ** scale``:
    ``clamp(round(x / t), qmin, qmax) * t``.  Gradients (MegEngine's ``TQTBackward``):
    ``dx = dy`` unless ``x / t`` is more than half a step outside ``[qmin, qmax]``;
    ``ds = sum(dy * (rounded - x / t) inside, dy * rounded outside) * t * ln 2``."""

    def __init__(self, qmin, qmax):
        self.qmin, self.qmax = float(qmin), float(qmax)

    def _forward(self, inp, scale):
        t = F.pow(2.0, scale)
        scaled = inp / t
        rounded = _clamp(F.round(scaled), self.qmin, self.qmax)
        self.saved = (scaled, rounded, t, scale.shape)
        return rounded * t

    def _backward(self, dy):
        scaled, rounded, t, s_shape = self.saved
        clip = (scaled < self.qmin - 0.5) | (scaled > self.qmax + 0.5)
        zero = F.zeros_like(dy)
        dx = F.where(clip, zero, dy)
        ds = F.where(clip, dy * rounded, dy * (rounded - scaled)) * t * _LN2
        return dx, _sum_to(ds, s_shape)


class _LSQ(_Reversed):
    """LSQ's fake quantization: ``(round(clamp(x / s + zp, qmin, qmax)) - zp) * s``.
    Gradients (MegEngine's ``LSQBackward``), with ``v = x / s + zp``: ``dx = dy`` inside
    ``[qmin, qmax]``, 0 outside; ``ds = sum(dy * grad_scale * (qmin below, qmax above,
    round(v) - v inside))``."""

    def __init__(self, qmin, qmax):
        self.qmin, self.qmax = float(qmin), float(qmax)

    def _forward(self, inp, scale, zero_point, grad_scale):
        v = inp / scale + zero_point
        out = (F.round(_clamp(v, self.qmin, self.qmax)) - zero_point) * scale
        self.saved = (v, grad_scale, scale.shape)
        return out

    def _backward(self, dy):
        v, grad_scale, s_shape = self.saved
        small, big = v < self.qmin, v > self.qmax
        inside = F.round(v) - v
        gs = F.where(small, F.full_like(v, self.qmin),
                     F.where(big, F.full_like(v, self.qmax), inside))
        ds = gs * grad_scale * dy
        dx = F.where(small | big, F.zeros_like(dy), dy)
        return dx, _sum_to(ds, s_shape), None, None


def tqt_forward(qmin, qmax, inp, scale):
    r"""TQT fake quantization of ``inp`` with the learned log2 threshold ``scale``
    (``inp`` rounded on the grid of step ``2 ** scale``, clamped to ``[qmin, qmax]`` steps)."""
    return _TQT(qmin, qmax)(inp, _as_tensor(scale))


def lsq_forward(qmin, qmax, inp, step_size, zero_point=None, scale_grad=None):
    r"""LSQ fake quantization of ``inp`` with the learned ``step_size``; ``zero_point``
    (default 0) and ``scale_grad`` (the factor of the step size's gradient, default 1)."""
    if zero_point is None:
        zero_point = Tensor([0.0], dtype=np.float32)
    if scale_grad is None:
        scale_grad = Tensor([1.0], dtype=np.float32)
    return _LSQ(qmin, qmax)(inp, _as_tensor(step_size), _as_tensor(zero_point),
                            _as_tensor(scale_grad))


def register_method_to_class(cls):
    r"""Decorator: add the decorated function to ``cls`` as a method of the same name."""
    def decorator(func):
        @wraps(func)
        def wrapper(self, *args, **kwargs):
            return func(self, *args, **kwargs)

        if isinstance(func, partial):
            update_wrapper(func, func.func)
        setattr(cls, func.__name__, wrapper)
        return func

    return decorator


class LSQParams(QParams):
    r"""The :class:`QParams` of :class:`~.LSQ`, with the extra ``grad_scale`` slot."""

    __slots__ = "mode", "dtype_meta", "scale", "zero_point", "grad_scale"

    def __init__(self, mode, dtype_meta, scale, zero_point, grad_scale):
        super().__init__(mode, dtype_meta, scale, zero_point)
        self.grad_scale = grad_scale


class QParamsModuleMixin(abc.ABC):
    r"""Mixin of the modules that answer :meth:`get_qparams` (observers, TQT, LSQ): adds
    :meth:`get_quantized_dtype`."""

    def get_quantized_dtype(self):
        r"""The quantized dtype (``qint8(scale)``...) of this module's current qparams."""
        qparams = self.get_qparams()
        scale = float(np.asarray(_value(qparams.scale)).reshape(-1)[0]) \
            if qparams.scale is not None else None
        zero_point = int(np.asarray(_value(qparams.zero_point)).reshape(-1)[0]) \
            if qparams.zero_point is not None else None
        return create_quantized_dtype(qparams.dtype_meta, scale, zero_point)

    @abc.abstractmethod
    def get_qparams(self) -> QParams:
        r"""The current quantization parameters."""


def _value(x):
    return x.numpy() if isinstance(x, Tensor) else x


def create_qparams(mode: QuantMode = QuantMode.SYMMERTIC,
                   dtype_meta: Union[str, QuantDtypeMeta] = None, scale: Tensor = None,
                   zero_point: Tensor = None):
    r"""A :class:`QParams`.

    Args:
        mode: a :class:`QuantMode` (or None).
        dtype_meta: a :class:`~mge.core.tensor.dtype.QuantDtypeMeta` or the name of a builtin
            one (``"qint8"``, ``"qint8_narrow"``, ``"quint8"``, ``"qint4"``, ``"qint32"``...).
        scale: the scale (a tensor or a number).
        zero_point: the zero point (asymmetric modes).
    """
    if isinstance(dtype_meta, str):
        dtype_meta = _builtin_quant_dtypes[dtype_meta]
    if mode is not None and not isinstance(mode, QuantMode):
        raise AssertionError(f"mode must be a QuantMode, got {mode!r}")
    return QParams(mode, dtype_meta, scale, zero_point)


def fake_quant_tensor(inp: Tensor, qparams: QParams) -> Tensor:
    r"""Quantize ``inp`` with ``qparams`` and dequantize it again (a float tensor on the grid).

    ``(clip(round(inp / scale) + zero_point, qmin, qmax) - zero_point) * scale``, rounding
    halves away from zero; symmetric modes use zero point 0.  The gradient is straight-through
    inside ``[qmin, qmax]`` and 0 where the value was clipped (MegEngine's ``FakeQuant``).

    Args:
        inp: the tensor to fake-quantize.
        qparams: gives the mode, ``qmin``/``qmax`` (of its ``dtype_meta``), scale and zero point.
    """
    scale = _as_tensor(qparams.scale)
    if qparams.mode == QuantMode.ASYMMERTIC:
        zero_point = _as_tensor(qparams.zero_point)
    else:
        zero_point = Tensor([0.0], dtype=np.float32)
    meta = qparams.dtype_meta
    return _FakeQuant(meta.qmin, meta.qmax)(inp, scale, zero_point)


def fake_quant_bias(bias: Tensor, inp: Tensor, w_qat: Tensor) -> Tensor:
    r"""Fake-quantize ``bias`` to ``qint32`` with scale ``inp_scale * weight_scale``, read from
    the ``qparams`` of ``inp`` and ``w_qat``.

    Only for symmetric int8 input and weight of the same mode (otherwise ``bias`` is returned
    as it is), as in MegEngine.
    """
    b_qat = bias
    if (getattr(inp, "qparams", None) is None or getattr(w_qat, "qparams", None) is None
            or bias is None):
        return b_qat
    inp_params, w_params = inp.qparams, w_qat.qparams
    if inp_params.scale is None or w_params.scale is None:
        return b_qat
    if inp_params.mode != QuantMode.SYMMERTIC or inp_params.mode != w_params.mode:
        return b_qat
    if inp_params.dtype_meta is None or w_params.dtype_meta is None:
        return b_qat
    if inp_params.dtype_meta.np_dtype_str != "int8" or w_params.dtype_meta.np_dtype_str != "int8":
        return b_qat
    b_param = create_qparams(w_params.mode, _builtin_quant_dtypes["qint32"],
                             scale=_as_tensor(inp_params.scale) * _as_tensor(w_params.scale))
    b_qat = fake_quant_tensor(bias, b_param)
    b_qat.qparams.update(b_param)
    return b_qat
