"""CPU kernels of the quantized ops (``mge/_core/ops/quantized.py``).

mge's CPU device has no integer convolution kernels, so the quantized ops are simulated exactly:
the integer values of the quantized inputs (the zero point removed) are multiplied and summed in
float64 -- exact while the sums stay below 2**53, as MegEngine's int32 accumulator is exact -- the
qint32 bias is added, ``relu`` is taken in that int32 domain, the sum is saturated to int32, and
MegEngine's ``TypeCvt`` converts the qint32 accumulator to the output dtype (:func:`typecvt`:
dequantize in float32 with the accumulator scale, divide by the output scale, round halves away
from zero, clip, store).  The float steps are the CPU kernels of the ``Elemwise`` modes they
name (``mul``, ``true_div``, ``round``, ``clip``), so the results are bit-identical to the same
conversion written with ``Elemwise`` ops.

Every kernel returns its output already of the quantized dtype its rule declares: numpy compares
dtypes without their metadata, so the device would not convert a plain ``int8`` array to
``qint8(scale)``.
"""
import numpy as np

from ....ops.base import INFER
from ....ops.elemwise import Elemwise, elemwise_op
from ....ops.quantized import (BatchConvBias, ConvBias, ElemwiseMultiType,
                               QuantizedConvolutionBackwardData, QuantizedElemwise,
                               QuantizedMatrixMul, QuantizedTypeCvt, float_mode, qdtype,
                               qspec_range, qspec_storage)
from ..table import KERNELS, def_kernel

_f32 = np.dtype(np.float32)


def _ew(mode, *arrays):
    """The CPU kernel of ``Elemwise(mode)`` on ``arrays`` (output 0), of the dtype the mode's
    rule declares (as the device makes it)."""
    op = elemwise_op(mode)
    out = np.asarray(KERNELS[Elemwise](op, *arrays)[0])
    dtype = INFER[Elemwise](op, [(a.shape, a.dtype) for a in arrays])[0][1]
    return out if out.dtype == dtype else out.astype(dtype)


def _like(x, value):
    # a Python number next to a tensor of x's dtype (dispatch's scalar_dtype: a float tensor
    # keeps its dtype), as a 0-d array
    return np.asarray(value, dtype=x.dtype)


def dequantize(x, spec):
    """``float32(q) - zero_point``, times ``scale``: the float32 value of storage values ``x`` of
    the quantization ``spec``."""
    v = x.astype(_f32)
    if spec[2] is not None:
        v = _ew("sub", v, _like(v, float(spec[2])))
    return _ew("mul", v, _like(v, float(spec[1])))


def quantize(v, spec):
    """``clip(round(v / scale) + zero_point, qmin, qmax)`` in ``v``'s float dtype (float32 for
    others), stored in the dtype of ``spec``."""
    if v.dtype.kind != "f":
        v = v.astype(_f32)
    q = _ew("round", _ew("true_div", v, _like(v, float(spec[1]))))
    if spec[2] is not None:
        q = _ew("add", q, _like(q, float(spec[2])))
    qmin, qmax = qspec_range(spec)
    q = _ew("clip", q, _like(q, qmin), _like(q, qmax))
    return q.astype(qdtype(spec))


def typecvt(x, src, dst):
    """MegEngine's ``TypeCvt`` of storage values ``x`` (quantization ``src``, a qspec or None) to
    ``dst`` (a qspec or a numpy dtype): dequantize, then quantize."""
    v = x if src is None else dequantize(x, src)
    if isinstance(dst, tuple):
        return quantize(v, dst)
    dst = np.dtype(dst)
    return v if v.dtype == dst and not v.dtype.metadata else v.astype(dst)


def _int_values(x, spec):
    """The integer values of storage values ``x`` (zero point removed), in float64."""
    v = x.astype(np.float64)
    return v - spec[2] if spec[2] is not None else v


def _from_acc(acc, acc_spec, out_spec, relu):
    """The float64 integer accumulator ``acc`` ``relu``-ed (if asked), saturated to int32 and
    converted from qint32 (``acc_spec``) to ``out_spec``."""
    if relu:
        acc = np.maximum(acc, 0.0)
    q = np.clip(acc, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    if out_spec == acc_spec:
        return q.view(qdtype(acc_spec))
    return typecvt(q, acc_spec, out_spec)


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


def _add_bias(op, acc, bias):
    acc_spec = op.acc_spec
    b = _int_values(bias, op.bias_q)
    s_b = float(op.bias_q[1])
    acc_scale = np.float32(acc_spec[1])
    if not np.isclose(s_b, acc_scale, rtol=1e-6):  # a bias of another scale is rescaled
        b = np.round(b * s_b / acc_scale)
    return acc + b.reshape(1, -1, 1, 1)


@def_kernel(ConvBias)
def _cpu_conv_bias(op, x, w, bias=None):
    acc = _conv_int(_int_values(x, op.inp_q), _int_values(w, op.weight_q), op.stride,
                    op.padding, op.dilation, op.groups, op.conv_mode)
    if bias is not None:
        acc = _add_bias(op, acc, bias)
    return (_from_acc(acc, op.acc_spec, op.out_spec,
                      str(op.nonlinear_mode).lower() == "relu"),)


@def_kernel(BatchConvBias)
def _cpu_batch_conv_bias(op, x, w, bias=None):
    xi, wi = _int_values(x, op.inp_q), _int_values(w, op.weight_q)
    acc = np.concatenate([
        _conv_int(xi[i:i + 1], wi[i], op.stride, op.padding, op.dilation, 1, op.conv_mode)
        for i in range(xi.shape[0])])
    if bias is not None:
        acc = _add_bias(op, acc, bias)
    return (_from_acc(acc, op.acc_spec, op.out_spec,
                      str(op.nonlinear_mode).lower() == "relu"),)


@def_kernel(QuantizedConvolutionBackwardData)
def _cpu_qdeconv(op, w, x):
    x, w = _int_values(x, op.inp_q), _int_values(w, op.weight_q)
    (sh, sw), (ph, pw), (dh, dw) = op.stride, op.padding, op.dilation
    oph, opw = op.output_padding
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
    return (_from_acc(acc, op.acc_spec, op.out_spec, False),)


@def_kernel(QuantizedMatrixMul)
def _cpu_qmatmul(op, a, b):
    a, b = _int_values(a, op.a_q), _int_values(b, op.b_q)
    if op.transposeA:
        a = a.T
    if op.transposeB:
        b = b.T
    acc = a @ b
    return (np.clip(acc, -2 ** 31, 2 ** 31 - 1).astype(np.int32).view(qdtype(op.acc_spec)),)


@def_kernel(QuantizedElemwise)
def _cpu_qelemwise(op, *xs):
    vals = []
    for k, x in enumerate(xs):
        spec = op.input_spec(k)
        if spec != op.dtype:  # another quantization, or a float input: TypeCvt to dtype first
            x = typecvt(x, spec if isinstance(spec, tuple) else None, op.dtype)
        vals.append(x.astype(np.int64))
    out = vals[0] + vals[1] if op.mode == "add" else np.maximum(vals[0], 0)
    lo, hi = qspec_range(op.dtype)
    return (np.clip(out, lo, hi).astype(qspec_storage(op.dtype)).view(qdtype(op.dtype)),)


@def_kernel(QuantizedTypeCvt)
def _cpu_qtypecvt(op, x):
    out = typecvt(x, op.src, op.dtype)
    want = qdtype(op.dtype)
    if out.dtype.metadata != want.metadata or out.dtype != want:
        out = out.astype(want)
    return (out,)


# MegEngine's float modes mge composes of its own (see ops.quantized.QUANTIZED_FLOAT_MODES);
# Python numbers in them take the float dtype of the tensor they meet
_COMPOSED = {
    "fuse_mul_add3": lambda a, b, c: _ew("add", _ew("mul", a, b), c),
    "fuse_mul_add4": lambda a, b, c, d: _ew("add", _ew("mul", a, b), _ew("mul", c, d)),
    "fuse_add_sigmoid": lambda a, b: _ew("sigmoid", _ew("add", a, b)),
    "fuse_add_tanh": lambda a, b: _ew("tanh", _ew("add", a, b)),
    "fuse_add_h_swish": lambda a, b: _ew("hswish", _ew("add", a, b)),
    "erfc": lambda a: _ew("sub", _like(a, 1), _ew("erf", a)),
    "prelu": lambda x, w: _ew("add", _ew("max", x, _like(x, 0)),
                              _ew("mul", w, _ew("min", x, _like(x, 0)))),
    "fast_tanh_grad": lambda x, dy: _ew("tanh_grad", _ew("tanh", x), dy),
}


@def_kernel(ElemwiseMultiType)
def _cpu_elemwise_multi_type(op, *xs):
    mode, _ = float_mode(op.mode)
    floats = [x if q is None else dequantize(x, q) for x, q in zip(xs, op.in_q)]
    fn = _COMPOSED.get(mode)
    v = fn(*floats) if fn is not None else _ew(mode, *floats)
    if op.dtype is None:
        return (v,)
    out = typecvt(v, None, op.dtype)
    want = qdtype(op.dtype)
    if out.dtype.metadata != want.metadata:
        out = out.astype(want)
    return (out,)
