"""CPU kernels of the pooling ops (``mge/_core/ops/nn_pool.py``).

The kernels take one strided slice of the padded input per kernel position (a loop of
``prod(kernel)`` steps), never a loop over output pixels.
"""
import itertools

import numpy as np

from ....ops.nn_pool import AdaptivePooling, MaxPoolingGather, Pooling, PoolingBackward
from ..table import def_kernel


def _slices(op, out):
    for pos in itertools.product(*(range(k) for k in op.kernel)):
        yield (slice(None), slice(None)) + tuple(
            slice(p, p + (o - 1) * s + 1, s) for p, o, s in zip(pos, out, op.stride))


def _pool_forward(op, x):
    """The CPU computation of ``Pooling`` (also used by ``AdaptivePooling``)."""
    nd = len(op.kernel)
    out = tuple((x.shape[2 + i] + 2 * op.padding[i] - op.kernel[i]) // op.stride[i] + 1
                for i in range(nd))
    pad = ((0, 0), (0, 0)) + tuple((p, p) for p in op.padding)
    if op.mode == "max":
        if x.dtype.kind == "f":
            low = -np.inf
        elif x.dtype.kind == "b":
            low = False
        else:
            low = np.iinfo(x.dtype).min
        xp = np.pad(x, pad, constant_values=low) if any(op.padding) else x
        y = None
        for sl in _slices(op, out):
            y = xp[sl].copy() if y is None else np.maximum(y, xp[sl], out=y)
        return y
    acc_t = np.float32 if x.dtype == np.float16 else x.dtype
    xp = np.pad(x, pad) if any(op.padding) else x
    y = np.zeros(x.shape[:2] + out, acc_t)
    for sl in _slices(op, out):
        y += xp[sl]
    if op.mode == "average" or not any(op.padding):
        y /= np.prod(op.kernel)
    else:
        ones = np.pad(np.ones((1, 1) + x.shape[2:], np.int32), pad)
        cnt = np.zeros((1, 1) + out, np.int32)
        for sl in _slices(op, out):
            cnt += ones[sl]
        y /= cnt
    return y.astype(x.dtype, copy=False)


@def_kernel(Pooling)
def _cpu_pooling(op, x):
    return (_pool_forward(op, x),)


@def_kernel(AdaptivePooling)
def _cpu_adaptive(op, x):
    return (_pool_forward(op.as_pooling(x.shape), x),)


def _geometry(op, x):
    nd = len(op.kernel)
    out = tuple((x.shape[2 + i] + 2 * op.padding[i] - op.kernel[i]) // op.stride[i] + 1
                for i in range(nd))
    pad = ((0, 0), (0, 0)) + tuple((p, p) for p in op.padding)
    return out, pad


def _argmax_masks(op, x, y):
    """``(slice, mask)`` per kernel position: ``mask`` marks the windows whose first maximum is at
    that position of the window (so each window is marked exactly once).  The mask is one buffer,
    rewritten at each step: use it before taking the next."""
    out, pad = _geometry(op, x)
    # NaN padding equals nothing, so padding never takes a window's gradient (every window holds
    # a real element, since padding < kernel), even when the maximum is -inf.
    xp = np.pad(x, pad, constant_values=np.nan) if any(op.padding) else x
    taken = np.zeros(y.shape, bool)
    hit = np.empty(y.shape, bool)
    free = np.empty(y.shape, bool)
    for sl in _slices(op, out):
        np.equal(xp[sl], y, out=hit)
        hit &= np.logical_not(taken, out=free)
        taken |= hit
        yield sl, hit


def _crop(op, xp):
    if not any(op.padding):
        return xp
    return xp[(slice(None), slice(None)) + tuple(slice(p, xp.shape[2 + i] - p)
                                                 for i, p in enumerate(op.padding))]


@def_kernel(PoolingBackward)
def _cpu_pooling_backward(op, x, y, dy):
    out, pad = _geometry(op, x)
    acc = np.float32 if dy.dtype == np.float16 else dy.dtype
    padded = tuple(s + a + b for s, (a, b) in zip(x.shape, pad))
    dxp = np.zeros(padded, acc)
    if op.mode == "max":
        # A multiply by the mask, not a masked add: masked ufunc loops branch on every element.
        part = np.empty(y.shape, acc)
        for sl, hit in _argmax_masks(op, x, y):
            dxp[sl] += np.multiply(dy, hit, out=part)
    else:
        if op.mode == "average" or not any(op.padding):
            share = dy.astype(acc) / np.prod(op.kernel)
        else:
            ones = np.pad(np.ones((1, 1) + x.shape[2:], np.int32), pad)
            cnt = np.zeros((1, 1) + out, np.int32)
            for sl in _slices(op, out):
                cnt += ones[sl]
            share = dy.astype(acc) / cnt
        for sl in _slices(op, out):
            dxp[sl] += share
    return (np.ascontiguousarray(_crop(op, dxp), dtype=dy.dtype),)


@def_kernel(MaxPoolingGather)
def _cpu_max_gather(op, x, y, z):
    _, pad = _geometry(op, x)
    zp = np.pad(z, pad) if any(op.padding) else z
    acc = np.float32 if z.dtype == np.float16 else z.dtype
    res = np.zeros(y.shape, acc)
    part = np.empty(y.shape, acc)
    for sl, hit in _argmax_masks(op, x, y):
        res += np.multiply(zp[sl], hit, out=part)
    return (res.astype(z.dtype, copy=False),)
