"""Convolutions: ``Convolution``, ``ConvolutionBackwardData`` (transposed conv) and
``ConvolutionBackwardFilter`` (the weight gradient).

All three work on any number of spatial dims (1-D, 2-D, 3-D): the length of ``stride`` says how
many.  Layouts are MegEngine's: input ``(N, C, *spatial)``; a dense weight is ``(O, I, *kernel)``,
a grouped weight ``(G, O/G, I/G, *kernel)``.  ``ConvolutionBackwardData`` takes ``(weight, dy)``
(MegEngine's order) and gives the input-shaped result; its weight is read as the weight of the
forward convolution whose input gradient it computes, i.e. ``(I, O, *kernel)`` of the transposed conv.

The kernels are im2col: a strided window view of the padded input (no copy), reshaped into one
matrix per group and multiplied with BLAS, so nothing loops over output pixels.  The transposed conv
scatters one strided slice per kernel position (a loop of ``prod(kernel)`` steps).

Backward rules: the three ops are bilinear, and each one's gradients are the other two, so
convolutions are differentiable to any order.  With ``y = conv(x, w)``:
``dx = ConvolutionBackwardData(w, dy)`` (``output_padding`` restores the input size that the
floor in the output size lost) and ``dw = ConvolutionBackwardFilter(x, dy, w)``.
"""
import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .base import (OpDef, TensorDesc, def_backward, def_infer, def_kernel, def_on_worker,
                   op_error)
from .gradutil import cached_op, run

__all__ = ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardFilter", "conv_out_size"]


class Convolution(OpDef):
    """Cross-correlation of ``(x, weight)``; tuples ``stride``, ``padding``, ``dilation`` (one entry per
    spatial dim) and ``groups``."""

    _fields = ("stride", "padding", "dilation", "groups", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "compute_mode": "default"}


class ConvolutionBackwardData(OpDef):
    """Transposed convolution of ``(weight, dy)``: the gradient of ``Convolution`` w.r.t. its input.

    ``output_padding`` adds rows/columns at the end of each spatial dim (it picks the input size
    when several sizes give the same forward output size)."""

    _fields = ("stride", "padding", "dilation", "groups", "output_padding", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "output_padding": (0, 0), "compute_mode": "default"}


class ConvolutionBackwardFilter(OpDef):
    """The weight gradient of ``Convolution``: inputs ``(x, dy, weight)``; ``weight`` gives the shape."""

    _fields = ("stride", "padding", "dilation", "groups", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "compute_mode": "default"}


def conv_out_size(size, k, s, p, d):
    """Output length of a convolution along one dim (MegEngine: floor)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# -- shape rules ---------------------------------------------------------------------------------

def _check_params(op, descs):
    nd = len(op.stride)
    if not (len(op.padding) == len(op.dilation) == nd):
        raise op_error(ValueError, op, "stride, padding and dilation must have the same length", descs)
    if any(s < 1 for s in op.stride) or any(d < 1 for d in op.dilation):
        raise op_error(ValueError, op, f"stride {op.stride} and dilation {op.dilation} must be >= 1",
                       descs)
    if any(p < 0 for p in op.padding):
        raise op_error(ValueError, op, f"padding {op.padding} must be >= 0", descs)
    if op.groups < 1:
        raise op_error(ValueError, op, f"groups must be >= 1, got {op.groups}", descs)
    return nd


def _split_weight(op, descs, wshape, nd):
    """``(G, A, B, kernel)`` of a dense or grouped weight shape."""
    g = op.groups
    if g == 1 and len(wshape) == nd + 2:
        return 1, wshape[0], wshape[1], tuple(wshape[2:])
    if len(wshape) == nd + 3 and wshape[0] == g:
        return g, wshape[1], wshape[2], tuple(wshape[3:])
    want = f"{nd + 2}-D (O, I, *kernel)" if g == 1 else f"{nd + 3}-D (groups={g}, O/G, I/G, *kernel)"
    raise op_error(ValueError, op, f"weight must be {want}, got shape {wshape}", descs)


def _split_weight_for(op, descs, xs, ws, nd, channels_at):
    """``_split_weight`` of ``ws``, once the input of shape ``xs`` is checked to be
    (N, C, *spatial) with C the channels the weight expects: ``groups`` times the per-group size
    at position ``channels_at`` of ``(G, A, B, kernel)`` (B for a convolution, A for its
    transpose)."""
    if len(xs) != nd + 2:
        raise op_error(ValueError, op, f"input must be {nd + 2}-D (N, C, *spatial), got shape {xs}",
                       descs)
    parts = _split_weight(op, descs, ws, nd)
    g, per_group = parts[0], parts[channels_at]
    if per_group * g != xs[1]:
        raise op_error(ValueError, op, f"input has {xs[1]} channels but the weight expects "
                       f"{per_group * g} (groups={g}, {per_group} per group)", descs)
    return parts


def _check_float(op, descs):
    for d in descs:
        if d[1].kind != "f":
            raise op_error(TypeError, op, "inputs must be floating point", descs)
    if len({d[1] for d in descs}) > 1:
        raise op_error(TypeError, op, "inputs must have the same dtype", descs)


@def_infer(Convolution)
def _infer_conv(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (x, weight), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    _check_float(op, descs)
    (xs, dtype), (ws, _) = descs
    if xs is None or ws is None:
        return [TensorDesc(None, dtype)]
    g, og, _, k = _split_weight_for(op, descs, xs, ws, nd, channels_at=2)
    out = tuple(conv_out_size(xs[2 + i], k[i], op.stride[i], op.padding[i], op.dilation[i])
                for i in range(nd))
    if any(o <= 0 for o in out):
        raise op_error(ValueError, op, f"kernel {k} (dilation {op.dilation}) is larger than the padded "
                       f"input {xs[2:]} (padding {op.padding})", descs)
    return [TensorDesc((xs[0], g * og) + out, dtype)]


def _deconv_out(op, ishape, k):
    return tuple((ishape[i] - 1) * op.stride[i] - 2 * op.padding[i] + op.dilation[i] * (k[i] - 1)
                 + 1 + op.output_padding[i] for i in range(len(k)))


@def_infer(ConvolutionBackwardData)
def _infer_deconv(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (weight, dy), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    if len(op.output_padding) != nd:
        raise op_error(ValueError, op, "output_padding must have one entry per spatial dim", descs)
    _check_float(op, descs)
    (ws, dtype), (ys, _) = descs
    if ws is None or ys is None:
        return [TensorDesc(None, dtype)]
    g, _, b, k = _split_weight_for(op, descs, ys, ws, nd, channels_at=1)
    if any(not 0 <= op.output_padding[i] < max(op.stride[i], op.dilation[i]) for i in range(nd)):
        raise op_error(ValueError, op, f"output_padding {op.output_padding} must be smaller than "
                       f"stride {op.stride} or dilation {op.dilation}", descs)
    out = _deconv_out(op, ys[2:], k)
    if any(o <= 0 for o in out):
        raise op_error(ValueError, op, f"output size {out} is not positive", descs)
    return [TensorDesc((ys[0], g * b) + out, dtype)]


@def_infer(ConvolutionBackwardFilter)
def _infer_conv_filter(op, descs):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"expects 3 inputs (x, dy, weight), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    _check_float(op, descs[:2])
    (xs, dtype), (ys, _), (ws, wdt) = descs
    if xs is None or ys is None or ws is None:
        return [TensorDesc(ws, wdt)]
    if len(xs) != nd + 2 or len(ys) != nd + 2:
        raise op_error(ValueError, op, f"x and dy must be {nd + 2}-D (N, C, *spatial)", descs)
    g, og, ig, k = _split_weight(op, descs, ws, nd)
    full = tuple(conv_out_size(xs[2 + i], k[i], op.stride[i], op.padding[i], op.dilation[i])
                 for i in range(nd))
    # dy may be smaller than the convolution of x: the gradient of a transposed convolution whose
    # output_padding is at least the stride meets an x with rows no output position reaches.
    if (ys[0] != xs[0] or ig * g != xs[1] or og * g != ys[1]
            or any(not 0 < ys[2 + i] <= full[i] for i in range(nd))):
        raise op_error(ValueError, op, f"x {xs}, dy {ys} and weight {ws} do not belong to one "
                       f"convolution (its output would be {(xs[0], og * g) + full})", descs)
    return [TensorDesc(ws, wdt)]


# -- kernels -------------------------------------------------------------------------------------

def _compute_dtype(dtype):
    # numpy has no BLAS for float16: compute in float32 and round once at the end.
    return np.float32 if dtype == np.float16 else dtype


def _im2col(op, x, k, g, limit=None):
    """``(G, N*prod(out), prod(k)*C/G)`` patches of the padded input, and the output size
    (at most ``limit`` along each spatial dim when given).

    The input is moved to channels-last first, so the copy into the patch matrix moves runs of
    ``C/G`` contiguous values (much faster than NCHW patches, whose runs are kernel-width long).
    """
    nd = len(k)
    n, c = x.shape[:2]
    xl = np.moveaxis(x, 1, -1)                                     # (N, *sp, C)
    if any(op.padding):
        xl = np.pad(xl, ((0, 0),) + tuple((p, p) for p in op.padding) + ((0, 0),))
    span = tuple(op.dilation[i] * (k[i] - 1) + 1 for i in range(nd))
    v = sliding_window_view(xl, span, axis=tuple(range(1, 1 + nd)))  # (N, *out', C, *span)
    stop = (None,) * nd if limit is None else tuple((n - 1) * s + 1 for n, s in zip(limit, op.stride))
    v = v[(slice(None),) + tuple(slice(None, e, s) for e, s in zip(stop, op.stride)) + (slice(None),)
          + tuple(slice(None, None, d) for d in op.dilation)]
    out = v.shape[1:1 + nd]
    v = v.reshape((n,) + out + (g, c // g) + tuple(k))             # (N, *out, G, I/G, *k)
    perm = (1 + nd, 0) + tuple(range(1, 1 + nd)) + tuple(range(3 + nd, 3 + 2 * nd)) + (2 + nd,)
    cols = v.transpose(perm).reshape(g, n * int(np.prod(out)), int(np.prod(k)) * (c // g))
    return cols, out


def _weight_groups(op, w, nd):
    if w.ndim == nd + 2:
        return w[None]
    return w


@def_kernel(Convolution)
def _cpu_conv(op, x, w):
    nd = len(op.stride)
    dtype = x.dtype
    ct = _compute_dtype(dtype)
    w = _weight_groups(op, w, nd).astype(ct, copy=False)
    g, og, ig = w.shape[:3]
    k = w.shape[3:]
    cols, out = _im2col(op, x.astype(ct, copy=False), k, g)
    wk = np.moveaxis(w, 2, -1).reshape(g, og, -1).transpose(0, 2, 1)  # (G, *k * I/G, O/G)
    y = np.matmul(cols, wk).reshape((g, x.shape[0]) + out + (og,))
    y = y.transpose((1, 0, 2 + nd) + tuple(range(2, 2 + nd)))    # (N, G, O/G, *out)
    y = y.reshape((x.shape[0], g * og) + out)
    return (np.ascontiguousarray(y, dtype=dtype),)


@def_kernel(ConvolutionBackwardData)
def _cpu_deconv(op, w, dy):
    nd = len(op.stride)
    dtype = dy.dtype
    ct = _compute_dtype(dtype)
    w = _weight_groups(op, w, nd).astype(ct, copy=False)      # (G, A, B, *k): A = dy ch/G
    g, a, b = w.shape[:3]
    k = tuple(w.shape[3:])
    n, ins = dy.shape[0], tuple(dy.shape[2:])
    pix = int(np.prod(ins))
    # One GEMM per group, cols[g, b*k, n*pix] = w[g]^T @ dy[g].  (A stacked matmul that broadcasts
    # one operand over the batch misses BLAS in numpy and is ~20x slower.)
    d = dy.astype(ct, copy=False).reshape(n, g, a, pix).transpose(1, 2, 0, 3).reshape(g, a, n * pix)
    cols = np.matmul(w.reshape(g, a, -1).transpose(0, 2, 1), d)
    cols = cols.reshape((g, b) + k + (n,) + ins)
    out = _deconv_out(op, ins, k)
    full = tuple(max((ins[i] - 1) * op.stride[i] + op.dilation[i] * (k[i] - 1) + 1,
                     op.padding[i] + out[i]) for i in range(nd))
    buf = np.zeros((g, b, n) + full, ct)
    lead = (slice(None),) * 3
    for pos in itertools.product(*(range(kk) for kk in k)):
        sl = tuple(slice(pos[i] * op.dilation[i],
                         pos[i] * op.dilation[i] + (ins[i] - 1) * op.stride[i] + 1, op.stride[i])
                   for i in range(nd))
        buf[lead + sl] += cols[(slice(None), slice(None)) + pos]
    crop = tuple(slice(op.padding[i], op.padding[i] + out[i]) for i in range(nd))
    res = np.moveaxis(buf[lead + crop], 2, 0)                   # (N, G, B, *out)
    return (np.ascontiguousarray(res, dtype=dtype).reshape((n, g * b) + out),)


@def_kernel(ConvolutionBackwardFilter)
def _cpu_conv_filter(op, x, dy, w):
    nd = len(op.stride)
    dtype = w.dtype
    ct = _compute_dtype(dtype)
    grouped = w.ndim == nd + 3
    wg = w if grouped else w[None]
    g, og, ig = wg.shape[:3]
    k = wg.shape[3:]
    cols, out = _im2col(op, x.astype(ct, copy=False), k, g, dy.shape[2:])  # (G, M, *k * I/G)
    n = x.shape[0]
    m = int(np.prod(out))
    d = dy.astype(ct, copy=False).reshape((n, g, og, m))
    d = d.transpose(1, 2, 0, 3).reshape(g, og, n * m)              # (G, O/G, M)
    dw = np.matmul(d, cols).reshape((g, og) + tuple(k) + (ig,))
    dw = np.moveaxis(dw, -1, 2)
    if not grouped:
        dw = dw[0]
    return (np.ascontiguousarray(dw, dtype=dtype),)


# -- backward rules --------------------------------------------------------------------------------

def _params(op):
    return op.stride, op.padding, op.dilation, op.groups


def _input_grad(op, w, dy, in_spatial):
    """``ConvolutionBackwardData(w, dy)`` of the spatial size ``in_spatial``: ``output_padding``
    adds back the input rows that the floor in the convolution's output size dropped."""
    nd = len(op.stride)
    k = tuple(w.shape[-nd:])
    extra = tuple(int(in_spatial[i]) - ((dy.shape[2 + i] - 1) * op.stride[i] - 2 * op.padding[i]
                                        + op.dilation[i] * (k[i] - 1) + 1) for i in range(nd))
    bwd = cached_op(ConvolutionBackwardData, *_params(op), extra, op.compute_mode)
    return run(bwd, w, dy)


def _output_grad(op, x, w, out_spatial):
    """``Convolution(x, w)`` cropped to ``out_spatial`` (it is larger only after an
    ``output_padding`` of at least the stride)."""
    y = run(cached_op(Convolution, *_params(op), op.compute_mode), x, w)
    if tuple(y.shape[2:]) != tuple(out_spatial):
        y = y[(slice(None), slice(None)) + tuple(slice(0, n) for n in out_spatial)]
    return y


def _filter_grad(op, x, dy, w):
    bwd = cached_op(ConvolutionBackwardFilter, *_params(op), op.compute_mode)
    return run(bwd, x, dy, w)


@def_backward(Convolution)
def _conv_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None:
        return [None, None]
    x, w = inputs
    dx = _input_grad(op, w, g, x.shape[2:]) if needs[0] else None
    dw = _filter_grad(op, x, g, w) if needs[1] else None
    return [dx, dw]


@def_backward(ConvolutionBackwardData)
def _deconv_grad(op, inputs, outputs, grads, needs):
    # out = deconv(w, dy) is the transpose of x -> conv(x, w): <gg, deconv(w, dy)> = <conv(gg, w), dy>
    g = grads[0]
    if g is None:
        return [None, None]
    w, dy = inputs
    dw = _filter_grad(op, g, dy, w) if needs[0] else None
    ddy = _output_grad(op, g, w, dy.shape[2:]) if needs[1] else None
    return [dw, ddy]


@def_backward(ConvolutionBackwardFilter)
def _conv_filter_grad(op, inputs, outputs, grads, needs):
    # <gg, filter(x, dy)> = <conv(x, gg), dy>; the weight input only gives the shape.
    g = grads[0]
    if g is None:
        return [None, None, None]
    x, dy, _ = inputs
    dx = _input_grad(op, g, dy, x.shape[2:]) if needs[0] else None
    ddy = _output_grad(op, x, g, dy.shape[2:]) if needs[1] else None
    return [dx, ddy, None]


# Convolutions are matrix products (BLAS, without the GIL): the worker runs them.
for _cls in (Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter):
    def_on_worker(_cls)
