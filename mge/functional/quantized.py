"""Quantized ops (MegEngine 1.13's ``megengine.functional.quantized``), for inference.

Each function applies one op of ``mge._core.ops.quantized`` (MegEngine's ``ConvBias``,
``BatchConvBias``, ``ConvolutionBackwardData``, ``ElemwiseMultiType``), so the ops run on the
channel like any other, and ``jit.trace`` records them (and ``trace.dump`` writes them).  mge's
CPU device has no integer kernels: the ops simulate MegEngine's exactly -- the integer values of
the quantized inputs multiplied and summed in float64 (exact for int8 x int8 sums below 2**53,
like MegEngine's int32 accumulator), the qint32 bias added, ``relu`` applied in that int32
domain, and the sum converted to the output dtype by MegEngine's ``TypeCvt`` (dequantize with the
accumulator scale ``float32(inp_scale) * float32(weight_scale)`` in float32, divide by the
output scale, round halves away from zero, clip).  ``_elemwise_multi_type`` dequantizes,
computes in float32 and requantizes, as MegEngine's ``ElemwiseMultiType`` does for its ``q*``
modes.  No gradients (inference only).
"""
from typing import Tuple, Union

import numpy as np

from .._core.ops.quantized import (BatchConvBias, ConvBias, ElemwiseMultiType,
                                   QuantizedConvolutionBackwardData, qspec)
from ..core import apply
from ..tensor import Tensor

__all__ = ["conv_bias_activation", "batch_conv_bias_activation", "conv_transpose2d"]


def _pair(v):
    if isinstance(v, (tuple, list)):
        return tuple(int(a) for a in v)
    return (int(v), int(v))


def _spec(x, what, fn):
    """The quantization (qspec) of the tensor ``x``; a ``TypeError`` naming ``fn`` unless it has
    a quantized dtype."""
    q = qspec(getattr(x, "dtype", None))
    if q is None:
        raise TypeError(f"{fn}: {what} must have a quantized dtype (qint8(scale)...), got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    return q


def _out_param(dtype):
    # an output dtype as an op parameter: its qspec, a plain numpy dtype, or None (qint32)
    if dtype is None:
        return None
    q = qspec(dtype)
    return q if q is not None else np.dtype(dtype)


def _conv_op(cls, fn, inp, weight, bias, dtype, stride, padding, dilation, groups,
             nonlinear_mode, conv_mode, compute_mode):
    if not isinstance(inp, Tensor):
        inp = Tensor(inp)
    op = cls(_pair(stride), _pair(padding), _pair(dilation), int(groups),
             str(nonlinear_mode).lower(), str(conv_mode).lower(), str(compute_mode).lower(),
             _out_param(dtype), _spec(inp, "inp", fn), _spec(weight, "weight", fn),
             None if bias is None else _spec(bias, "bias", fn))
    args = (inp, weight) if bias is None else (inp, weight, bias)
    return apply(op, *args)[0]


def conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor, dtype=None,
                         stride: Union[int, Tuple[int, int]] = 1,
                         padding: Union[int, Tuple[int, int]] = 0,
                         dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                         nonlinear_mode="identity", conv_mode="cross_correlation",
                         compute_mode="default") -> Tensor:
    r"""Quantized convolution, bias and activation, for inference (NCHW).

    Args:
        inp: quantized input ``(N, C, H, W)`` (qint8 / quint8...).
        weight: quantized kernel ``(OC, C, KH, KW)``, or ``(groups, OC/g, C/g, KH, KW)``.
        bias: qint32 bias ``(1, OC, 1, 1)`` with scale ``inp_scale * weight_scale``.
        dtype: the output dtype (``qint8(scale)``...); None keeps the qint32 accumulator.
        stride, padding, dilation: pairs or ints.
        groups: number of groups.
        nonlinear_mode: ``"identity"`` or ``"relu"``.
        conv_mode: ``"cross_correlation"`` or ``"convolution"``.
        compute_mode: accepted for MegEngine's signature (integer sums are exact).
    """
    return _conv_op(ConvBias, "conv_bias_activation", inp, weight, bias, dtype, stride, padding,
                    dilation, groups, nonlinear_mode, conv_mode, compute_mode)


def batch_conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor, dtype=None,
                               stride: Union[int, Tuple[int, int]] = 1,
                               padding: Union[int, Tuple[int, int]] = 0,
                               dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                               nonlinear_mode="identity", conv_mode="cross_correlation",
                               compute_mode="default") -> Tensor:
    r"""Quantized convolution with one kernel per batch item (``weight`` is
    ``(N, OC, C, KH, KW)``), bias and activation, for inference; arguments as
    :func:`conv_bias_activation` (``groups`` must be 1)."""
    if groups != 1:
        raise NotImplementedError("batch_conv_bias_activation: groups must be 1")
    return _conv_op(BatchConvBias, "batch_conv_bias_activation", inp, weight, bias, dtype,
                    stride, padding, dilation, groups, nonlinear_mode, conv_mode, compute_mode)


def conv_transpose2d(inp: Tensor, weight: Tensor, bias: Tensor = None, dtype=None,
                     stride: Union[int, Tuple[int, int]] = 1,
                     padding: Union[int, Tuple[int, int]] = 0,
                     output_padding: Union[int, Tuple[int, int]] = 0,
                     dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                     conv_mode="cross_correlation", compute_mode="default") -> Tensor:
    r"""Quantized 2D transposed convolution, for inference: ``inp`` ``(N, IC, H, W)`` and
    ``weight`` ``(IC, OC, KH, KW)`` quantized, the output converted to ``dtype``.  As in
    MegEngine 1.13, groups and bias are not supported (``NotImplementedError``)."""
    if str(conv_mode).lower() != "cross_correlation":
        raise AssertionError("quantized conv_transpose2d: conv_mode must be cross_correlation")
    if str(compute_mode).lower() != "default":
        raise AssertionError("quantized conv_transpose2d: compute_mode must be default")
    if groups != 1:
        raise NotImplementedError("group quantized transposed conv2d is not supported yet.")
    if bias is not None:
        raise NotImplementedError("bias of quantized transposed conv2d is not supported yet.")
    fn = "conv_transpose2d"
    op = QuantizedConvolutionBackwardData(
        _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation), 1,
        "cross_correlation", "default", _out_param(dtype), _spec(inp, "inp", fn),
        _spec(weight, "weight", fn))
    return apply(op, weight, inp)[0]


def _elemwise_multi_type(*args, mode, dtype=None):
    r"""MegEngine's ``ElemwiseMultiType`` for its quantized ``q*`` modes (``qadd``,
    ``qmul``, ``qfuse_add_relu``, ``qabs``...): dequantize the inputs, apply the float
    elementwise op ``mode[1:]``, quantize to ``dtype`` (None: the float result).  Numbers and
    arrays among the inputs become float32 tensors."""
    m = str(mode).lower()
    if not m.startswith("q"):
        raise NotImplementedError(f"_elemwise_multi_type: only the quantized modes (q*) are "
                                  f"provided by mge, got {mode!r}")
    ins = tuple(Tensor(np.asarray(a, dtype=np.float32))
                if isinstance(a, (int, float, list, tuple, np.ndarray, np.generic)) else a
                for a in args)
    op = ElemwiseMultiType(m, _out_param(dtype), tuple(qspec(a.dtype) for a in ins))
    return apply(op, *ins)[0]


def _elwise(*args, mode):
    r"""The float elementwise op ``mode`` (MegEngine's private ``_elwise``)."""
    from ..module.misc import Elemwise

    return Elemwise(str(mode).lower())(*args)
