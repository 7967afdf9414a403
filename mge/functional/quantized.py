"""Quantized ops (MegEngine 1.13's ``megengine.functional.quantized``), for inference.

MegEngine runs these with integer kernels.  mge's CPU device has no quantized kernels, so they
are simulated exactly: the integer values of the quantized inputs are multiplied and summed in
float64 (exact for int8 x int8 sums below 2**53, like MegEngine's int32 accumulator), the
qint32 bias is added, ``relu`` is applied in that int32 domain, and the sum is converted to the
output dtype by mge's ``astype`` (MegEngine's ``TypeCvt``: dequantize with the accumulator scale
``inp_scale * weight_scale`` in float32, divide by the output scale, round halves away from zero,
clip).  ``_elemwise_multi_type`` dequantizes, computes in float32 and requantizes, as
MegEngine's ``ElemwiseMultiType`` does for its ``q*`` modes.  No gradients (inference only).
"""
from typing import Tuple, Union

import numpy as np

from ..tensor import Tensor


class _LazyDtype:
    # mge.core.tensor.dtype imports ml_dtypes (slow): ``import mge`` loads this module, so the
    # dtype helpers are looked up on first use.
    def __getattr__(self, name):
        from ..core.tensor import dtype

        return getattr(dtype, name)


_dt = _LazyDtype()

__all__ = ["conv_bias_activation", "batch_conv_bias_activation", "conv_transpose2d"]


def _pair(v):
    if isinstance(v, (tuple, list)):
        return tuple(int(a) for a in v)
    return (int(v), int(v))


def _int_values(x, what):
    """The integer values (zero point removed) of a quantized tensor, in float64, and its
    scale."""
    if not isinstance(x, Tensor):
        x = Tensor(x)
    if not _dt.is_quantize(x.dtype):
        raise TypeError(f"{what} must have a quantized dtype (qint8(scale)...), got {x.dtype}")
    arr = x.numpy().astype(np.float64)
    zp = _dt.get_zero_point(x.dtype) if "zero_point" in x.dtype.metadata["mgb_dtype"] else 0
    return arr - (zp or 0), float(_dt.get_scale(x.dtype))


def _from_acc(acc, acc_scale, dtype, nonlinear_mode):
    """A qint32 tensor of the integer accumulator ``acc``, ``relu``-ed if asked, converted to
    ``dtype`` (when given)."""
    mode = str(nonlinear_mode).lower()
    if mode not in ("identity", "relu"):
        raise NotImplementedError(f"quantized nonlinear_mode {nonlinear_mode!r} is not "
                                  "supported by mge (identity, relu)")
    if mode == "relu":
        acc = np.maximum(acc, 0.0)
    qdt = _dt.qint32(np.float32(acc_scale))
    out = Tensor(np.clip(acc, -2 ** 31, 2 ** 31 - 1).astype(np.int32).astype(qdt), dtype=qdt)
    if dtype is not None:
        out = out.astype(dtype)
    return out


def _conv_int(x, w, stride, padding, dilation, groups, conv_mode):
    """Integer-valued 2D cross-correlation ``(N, C, H, W) x (OC, C/g, KH, KW)`` in float64."""
    if str(conv_mode).lower() == "convolution":
        w = w[..., ::-1, ::-1]
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if w.ndim == 5:
        w = w.reshape((-1,) + w.shape[2:])
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow), np.float64)
    ocg = oc // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * ocg:(g + 1) * ocg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", patch,
                                                           ws[:, :, i, j])
    return out


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
    del compute_mode
    x, s_in = _int_values(inp, "inp")
    w, s_w = _int_values(weight, "weight")
    if x.ndim != 4:
        raise NotImplementedError(f"mge's quantized conv_bias_activation takes NCHW inputs, got "
                                  f"shape {x.shape}")
    acc = _conv_int(x, w, _pair(stride), _pair(padding), _pair(dilation), int(groups),
                    conv_mode)
    acc_scale = np.float32(s_in) * np.float32(s_w)
    if bias is not None:
        b, s_b = _int_values(bias, "bias")
        if not np.isclose(s_b, acc_scale, rtol=1e-6):
            b = np.round(b * s_b / acc_scale)
        acc = acc + b.reshape(1, -1, 1, 1)
    return _from_acc(acc, acc_scale, dtype, nonlinear_mode)


def batch_conv_bias_activation(inp: Tensor, weight: Tensor, bias: Tensor, dtype=None,
                               stride: Union[int, Tuple[int, int]] = 1,
                               padding: Union[int, Tuple[int, int]] = 0,
                               dilation: Union[int, Tuple[int, int]] = 1, groups: int = 1,
                               nonlinear_mode="identity", conv_mode="cross_correlation",
                               compute_mode="default") -> Tensor:
    r"""Quantized convolution with one kernel per batch item (``weight`` is
    ``(N, OC, C, KH, KW)``), bias and activation, for inference; arguments as
    :func:`conv_bias_activation` (``groups`` must be 1)."""
    del compute_mode
    if groups != 1:
        raise NotImplementedError("batch_conv_bias_activation: groups must be 1")
    x, s_in = _int_values(inp, "inp")
    w, s_w = _int_values(weight, "weight")
    acc = np.concatenate([
        _conv_int(x[i:i + 1], w[i], _pair(stride), _pair(padding), _pair(dilation), 1,
                  conv_mode) for i in range(x.shape[0])])
    acc_scale = np.float32(s_in) * np.float32(s_w)
    if bias is not None:
        b, s_b = _int_values(bias, "bias")
        if not np.isclose(s_b, acc_scale, rtol=1e-6):
            b = np.round(b * s_b / acc_scale)
        acc = acc + b.reshape(1, -1, 1, 1)
    return _from_acc(acc, acc_scale, dtype, nonlinear_mode)


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
    x, s_in = _int_values(inp, "inp")
    w, s_w = _int_values(weight, "weight")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oph, opw = _pair(output_padding)
    n, ic, h, wd = x.shape
    _, oc, kh, kw = w.shape
    full_h = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, oc, full_h + ph, full_w + pw), np.float64)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("nchw,co->nohw", x, w[:, :, i, j])
            full[:, :, i * dh:i * dh + sh * (h - 1) + 1:sh,
                 j * dw:j * dw + sw * (wd - 1) + 1:sw] += contrib
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    acc = full[:, :, ph:ph + oh, pw:pw + ow]
    return _from_acc(acc, np.float32(s_in) * np.float32(s_w), dtype, "identity")


_UNARY = {"abs", "sin", "cos", "tan", "exp", "log", "relu", "sigmoid", "tanh", "neg", "negate",
          "floor", "ceil", "round", "h_swish", "hswish", "erf", "silu", "gelu", "sqrt",
          "square", "log1p", "expm1", "acos", "asin", "atan", "sinh", "cosh", "asinh",
          "acosh", "atanh", "relu6", "softplus", "logsigmoid", "sign"}


def _elemwise_multi_type(*args, mode, dtype=None):
    r"""MegEngine's ``ElemwiseMultiType`` for its quantized ``q*`` modes (``qadd``,
    ``qmul``, ``qfuse_add_relu``, ``qabs``...): dequantize the inputs, apply the float
    elementwise op ``mode[1:]``, quantize to ``dtype``."""
    from ..module.misc import Elemwise

    m = str(mode).lower()
    if not m.startswith("q"):
        raise NotImplementedError(f"_elemwise_multi_type: only the quantized modes (q*) are "
                                  f"provided by mge, got {mode!r}")
    floats = [a.astype("float32") if isinstance(a, Tensor) and _dt.is_quantize(a.dtype)
              else a for a in args]
    out = Elemwise(m[1:])(*floats)
    return out.astype(dtype) if dtype is not None else out


def _elwise(*args, mode):
    r"""The float elementwise op ``mode`` (MegEngine's private ``_elwise``)."""
    from ..module.misc import Elemwise

    return Elemwise(str(mode).lower())(*args)
