"""CPU kernels of the ops of ``mge/_core/ops/nn.py``: softmax family, one-hot indexing, dropout,
padding and their backward ops (convolution, pooling and normalisation are in ``conv.py``,
``pool.py`` and ``norm.py``).
"""
import numpy as np

from ....ops.nn import (
    Dropout, DropoutBackward, IndexingOneHot, IndexingSetOneHot, LogSoftmax, OneHot, Pad,
    PadBackward, Softmax, SoftmaxCrossEntropy, SoftmaxCrossEntropyBackward, softmax_axes,
)
from .... import _accel
from ..table import def_kernel

_LOOPS = _accel.load("mge._core.device.cpu.loops")  # C loops for the common (batch, classes) case
_add_reduce = np.add.reduce


def _shifted(op, x):
    axes = softmax_axes(op, x.ndim) if x.ndim else None
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xa = x.astype(acc, copy=False)
    if x.size == 0:
        return xa, axes
    return xa - xa.max(axis=axes, keepdims=True), axes


@def_kernel(Softmax)
def _cpu_softmax(op, x):
    z, axes = _shifted(op, x)
    e = np.exp(z)
    return ((e / e.sum(axis=axes, keepdims=True)).astype(x.dtype, copy=False),)


@def_kernel(LogSoftmax)
def _cpu_logsoftmax(op, x):
    z, axes = _shifted(op, x)
    return ((z - np.log(np.exp(z).sum(axis=axes, keepdims=True))).astype(x.dtype, copy=False),)


def _one_hot_index_axis(op, x, index, what="index", src="src"):
    """The axis the kernels of the one-hot ops index along, once ``index``'s values are in range
    (``what`` and ``src`` name the inputs in the message)."""
    axis = op.axis % x.ndim
    n = x.shape[axis]
    if index.size and (index.min() < 0 or index.max() >= n):  # no negative indices (MegEngine)
        raise IndexError(f"{op.name}: {what} out of range [0, {n}) along axis {axis} "
                         f"({src} shape {x.shape}, {what} range [{index.min()}, {index.max()}])")
    return axis


@def_kernel(IndexingOneHot)
def _cpu_indexing_one_hot(op, x, index):
    axis = _one_hot_index_axis(op, x, index)
    if x.ndim == 2 and axis == 1:  # (batch, classes), the loss's case: one fancy index
        y = x[np.arange(x.shape[0]), index]
        return (y[:, None] if op.keepdims else y,)
    y = np.take_along_axis(x, np.expand_dims(index.astype(np.intp), axis), axis)
    return (y if op.keepdims else np.squeeze(y, axis),)


@def_kernel(IndexingSetOneHot)
def _cpu_indexing_set_one_hot(op, x, index, value):
    axis = _one_hot_index_axis(op, x, index)
    out = x.copy()
    if x.ndim == 2 and axis == 1:
        out[np.arange(x.shape[0]), index] = value.reshape(index.shape)
        return (out,)
    idx = np.expand_dims(index.astype(np.intp), axis)
    np.put_along_axis(out, idx, value.reshape(idx.shape).astype(x.dtype, copy=False), axis)
    return (out,)


def _cross_entropy_parts(op, x, index):
    # (z, lse, axis, picked index): the max-shifted logits in the accumulation dtype, their
    # logsumexp (keepdims) and the index expanded along the class axis
    axis = _one_hot_index_axis(op, x, index, "label", "logits")
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xa = x.astype(acc, copy=False)
    z = xa - xa.max(axis=axis, keepdims=True) if x.size else xa
    lse = np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return z, lse, axis, np.expand_dims(index.astype(np.intp, copy=False), axis)


@def_kernel(SoftmaxCrossEntropy)
def _cpu_softmax_cross_entropy(op, x, index):
    if x.ndim == 2 and op.axis % 2 == 1:  # (batch, classes): one C pass, reduced there too
        loss = _LOOPS.cross_entropy(x, index, op.reduction)
        if loss is not None:
            return (loss,)
    nll = _per_sample_cross_entropy(op, x, index)
    if op.reduction == "none":
        return (nll,)
    total = _add_reduce(nll, axis=None, dtype=x.dtype)  # (pairwise, as Reduce's sum and mean)
    if op.reduction == "mean":
        total = total / x.dtype.type(nll.size) if nll.size else x.dtype.type(np.nan)
    return (np.asarray(total, dtype=x.dtype),)


def _per_sample_cross_entropy(op, x, index):
    z, lse, axis, idx = _cross_entropy_parts(op, x, index)
    if z.ndim == 2 and axis == 1:  # (batch, classes), the common case: one fancy index
        nll = lse[:, 0] - z[np.arange(z.shape[0]), index]
    else:
        nll = np.squeeze(lse - np.take_along_axis(z, idx, axis), axis)
    return nll.astype(x.dtype, copy=False)


def _per_sample_dy(op, dy, index):
    # a reduced loss's gradient, one value per sample: dy / count (mean) or dy (sum)
    if op.reduction == "none":
        return dy
    if op.reduction == "mean" and index.size:
        dy = dy / dy.dtype.type(index.size)
    return np.broadcast_to(dy, index.shape)


@def_kernel(SoftmaxCrossEntropyBackward)
def _cpu_softmax_cross_entropy_backward(op, x, index, dy):
    if x.ndim == 2 and op.axis % 2 == 1:
        dx = _LOOPS.cross_entropy_backward(x, index, dy, op.reduction)
        if dx is not None:
            return (dx,)
    dy = _per_sample_dy(op, dy, index)
    z, lse, axis, idx = _cross_entropy_parts(op, x, index)
    p = np.exp(z - lse)  # softmax, in the accumulation dtype
    if p.ndim == 2 and axis == 1:
        p[np.arange(p.shape[0]), index] -= 1
    else:
        np.put_along_axis(p, idx, np.take_along_axis(p, idx, axis) - 1, axis)
    p *= np.expand_dims(dy.astype(p.dtype, copy=False), axis)
    return (p.astype(x.dtype, copy=False),)


@def_kernel(OneHot)
def _cpu_one_hot(op, x):
    n = op.num_classes
    if x.size and (x.min() < 0 or x.max() >= n):
        raise IndexError(f"{op.name}: labels must be in [0, {n}), got range [{x.min()}, {x.max()}]")
    return ((x[..., None] == np.arange(n)).astype(np.int32),)


@def_kernel(Dropout)
def _cpu_dropout(op, x):
    mask = np.random.default_rng(op.seed).random(x.shape, dtype=np.float32) >= op.drop_prob
    scale = np.asarray(1 / (1 - op.drop_prob), x.dtype)
    return ((x * mask * scale).astype(x.dtype, copy=False), mask)


@def_kernel(DropoutBackward)
def _cpu_dropout_backward(op, dy, mask):
    scale = np.asarray(1 / (1 - op.drop_prob), dy.dtype)
    out = np.multiply(dy, mask, dtype=dy.dtype)
    out *= scale
    return (out,)


@def_kernel(Pad)
def _cpu_pad(op, x):
    width = tuple(op.pad_width) + ((0, 0),) * (x.ndim - len(op.pad_width))
    if op.mode == "constant":
        return (np.pad(x, width, constant_values=np.asarray(op.constant_value).astype(x.dtype)),)
    return (np.pad(x, width, mode="reflect" if op.mode == "reflect" else "edge"),)


@def_kernel(PadBackward)
def _cpu_pad_backward(op, g):
    if op.mode == "constant":
        return (g[tuple(slice(a, g.shape[i] - b) for i, (a, b) in enumerate(op.pad_width))],)
    # np.pad pads one axis after another, so the gradient folds one axis at a time.
    out = g
    for axis, (a, b) in enumerate(op.pad_width):
        if not (a or b):
            continue
        t = np.moveaxis(out, axis, 0)
        n = t.shape[0] - a - b
        core = t[a:a + n].copy()
        if op.mode == "replicate":      # the border repeats the edge element
            if a:
                core[0] += t[:a].sum(axis=0)
            if b:
                core[-1] += t[a + n:].sum(axis=0)
        else:                           # reflect: border j mirrors element a - j (n - 2 - j after)
            if a:
                core[1:a + 1] += t[:a][::-1]
            if b:
                core[n - 1 - b:n - 1] += t[a + n:][::-1]
        out = np.moveaxis(core, 0, axis)
    return (out,)
