"""CPU kernels of the normalisation ops (``mge/_core/ops/nn_norm.py``).

float16 inputs are computed in float32 and rounded once at the end.
"""
import numpy as np

from ....ops.nn_norm import (
    BatchNorm, BatchNormBackward, LayerNorm, LayerNormBackward, bn_axes, bn_stat_shape,
    layer_norm_range,
)
from ..table import def_kernel


def _acc(dtype):
    return np.float32 if dtype == np.float16 else dtype


@def_kernel(BatchNorm)
def _cpu_bn(op, x, w, b, *stats):
    acc = _acc(x.dtype)
    xa = x.astype(acc, copy=False)
    shape = bn_stat_shape(x.shape)
    w = w.reshape(shape).astype(acc, copy=False)
    b = b.reshape(shape).astype(acc, copy=False)
    if op.fwd_mode == "training":
        axes = bn_axes(x.ndim)
        mean = xa.mean(axis=axes, keepdims=True)
        var = np.square(xa - mean).mean(axis=axes, keepdims=True)
    else:
        mean = stats[0].reshape(shape).astype(acc, copy=False)
        var = stats[1].reshape(shape).astype(acc, copy=False)
    scale = w / np.sqrt(var + op.epsilon)
    y = ((xa - mean) * scale + b).astype(x.dtype, copy=False)
    if op.fwd_mode == "inference":
        return (y,)
    return (y, mean.astype(x.dtype, copy=False), var.astype(x.dtype, copy=False))


@def_kernel(LayerNorm)
def _cpu_ln(op, x, *wb):
    acc = _acc(x.dtype)
    xa = x.astype(acc, copy=False)
    start, end = layer_norm_range(op, x.ndim)
    axes = tuple(range(start, end))
    mean = xa.mean(axis=axes, keepdims=True)
    xc = xa - mean
    rstd = 1 / np.sqrt(np.square(xc).mean(axis=axes, keepdims=True) + op.eps)
    y = xc * rstd
    if op.affine:
        shape = x.shape[start:end] + (1,) * (x.ndim - end)
        y = y * wb[0].reshape(shape).astype(acc, copy=False) + wb[1].reshape(shape).astype(acc,
                                                                                           copy=False)
    dt = x.dtype
    return (y.astype(dt, copy=False), mean.astype(dt, copy=False), rstd.astype(dt, copy=False))


@def_kernel(BatchNormBackward)
def _cpu_bn_backward(op, x, dy, mean, var, w):
    # dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), the means over all axes but 1
    acc = _acc(x.dtype)
    shape = bn_stat_shape(x.shape)
    axes = bn_axes(x.ndim)
    m = x.size // max(x.shape[1], 1)
    rstd = 1 / np.sqrt(var.reshape(shape).astype(acc) + op.epsilon)
    xhat = x.astype(acc) - mean.reshape(shape).astype(acc)
    xhat *= rstd
    g = dy.astype(acc, copy=False)
    db = g.sum(axis=axes, keepdims=True)
    dw = np.multiply(g, xhat).sum(axis=axes, keepdims=True)
    xhat *= dw / m
    dx = np.subtract(g, xhat, out=xhat)
    dx -= db / m
    dx *= w.reshape(shape).astype(acc) * rstd
    wdt = w.dtype
    return (dx.astype(x.dtype, copy=False), dw.astype(wdt, copy=False), db.astype(wdt, copy=False))


@def_kernel(LayerNormBackward)
def _cpu_ln_backward(op, x, dy, mean, rstd, *w):
    # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) with gw = dy * weight, the means over
    # the normalised axes; dweight and dbias sum over the other axes.
    acc = _acc(x.dtype)
    start, end = layer_norm_range(op, x.ndim)
    axes = tuple(range(start, end))
    rstd = rstd.astype(acc, copy=False)
    xhat = x.astype(acc) - mean.astype(acc, copy=False)
    xhat *= rstd
    g = dy.astype(acc, copy=False)
    grads = ()
    gw = g
    if op.affine:
        w = w[0]
        outer = tuple(range(start)) + tuple(range(end, x.ndim))
        dw = np.multiply(g, xhat).sum(axis=outer).reshape(w.shape).astype(w.dtype, copy=False)
        db = g.sum(axis=outer).reshape(w.shape).astype(w.dtype, copy=False)
        grads = (dw, db)
        gw = g * w.reshape(x.shape[start:end] + (1,) * (x.ndim - end)).astype(acc, copy=False)
    c1 = gw.mean(axis=axes, keepdims=True)
    c2 = np.multiply(gw, xhat).mean(axis=axes, keepdims=True)
    xhat *= c2
    dx = np.subtract(gw, xhat, out=xhat)
    dx -= c1
    dx *= rstd
    return (dx.astype(x.dtype, copy=False),) + grads
