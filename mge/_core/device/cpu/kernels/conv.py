"""CPU kernels of the convolutions (``mge/_core/ops/nn_conv.py``).

The kernels are im2col: a strided window view of the padded input (no copy), reshaped into one
matrix per group and multiplied with BLAS, so nothing loops over output pixels.  The transposed conv
scatters one strided slice per kernel position (a loop of ``prod(kernel)`` steps).
"""
import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ....ops.nn_conv import (
    Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter, deconv_out_size,
)
from ..table import def_kernel


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
    out = deconv_out_size(op, ins, k)
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
