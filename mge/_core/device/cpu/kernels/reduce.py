"""CPU kernels of the reductions and orderings (``Reduce``, ``Argmax``/``Argmin``, ``Argsort``,
``TopK``, ``CumSum``).

The output dtypes are the ops' (``ops/reduce.py``); float16 sums and products accumulate in
float32, means of float16 and integers in float32.
"""
import numpy as np

from ....ops.reduce import (
    Argmax, Argmin, Argsort, CumSum, Reduce, TopK, cumsum_dtype, normalize_axes, reduce_dtype,
    reduced_shape,
)
from ..table import def_kernel

_int32 = np.dtype("int32")
_float32 = np.dtype("float32")
_float16 = np.dtype("float16")


def _np_axes(x, axis):
    axes = normalize_axes(axis, x.ndim)
    if axes is None:
        raise ValueError(f"Reduce: axis {axis!r} is out of range for shape {x.shape}")
    return axes


_add_reduce = np.add.reduce


@def_kernel(Reduce)
def _cpu_reduce(op, x):
    mode, keepdims = op.mode, op.keepdims
    axes = _np_axes(x, op.axis)
    out_dtype = reduce_dtype(mode, x.dtype)
    if x.ndim == 0:
        x = x.astype(out_dtype) if mode != "sum_sqr" else (x * x).astype(out_dtype)
        return (np.array(x, dtype=out_dtype),)
    acc = _float32 if out_dtype == _float16 else out_dtype  # float16 accumulates in float32
    if mode == "sum":  # (np.add.reduce: np.sum without its Python wrapper)
        r = _add_reduce(x, axis=axes, keepdims=keepdims, dtype=acc)
    elif mode == "sum_sqr":
        x = x.astype(acc, copy=False)
        r = np.sum(x * x, axis=axes, keepdims=keepdims, dtype=acc)
    elif mode == "prod":
        r = np.prod(x, axis=axes, keepdims=keepdims, dtype=acc)
    elif mode == "max":
        r = np.max(x, axis=axes, keepdims=keepdims)
    elif mode == "min":
        r = np.min(x, axis=axes, keepdims=keepdims)
    else:  # mean: float16 and integers accumulate in float32 (float64 for float64)
        count = 1
        for a in axes:
            count *= x.shape[a]
        if count == 0:
            shape = reduced_shape(x.shape, axes, keepdims)
            return (np.full(shape, np.nan, dtype=out_dtype),)
        r = _add_reduce(x, axis=axes, keepdims=keepdims, dtype=out_dtype) / out_dtype.type(count)
    return (np.asarray(r, dtype=out_dtype),)


# -- Argmax / Argmin -----------------------------------------------------------------------------

def _cpu_arg(fn):
    def kernel(op, x):
        axes = _np_axes(x, op.axis)
        if x.ndim == 0:
            return (np.zeros((), _int32),)
        if len(axes) == 1:
            r = fn(x, axis=axes[0], keepdims=op.keepdims)
        else:
            # Several axes act as one: move them to the end, flatten them, index the flat order.
            rest = [i for i in range(x.ndim) if i not in axes]
            moved = np.transpose(x, rest + list(axes))
            flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
            r = fn(flat, axis=-1)
            if op.keepdims:
                r = r.reshape(reduced_shape(x.shape, axes, True))
        return (np.asarray(r, dtype=_int32),)
    return kernel


def_kernel(Argmax)(_cpu_arg(np.argmax))
def_kernel(Argmin)(_cpu_arg(np.argmin))


# -- Argsort / TopK ------------------------------------------------------------------------------

def _argsort(x, descending):
    idx = np.argsort(x, axis=-1, kind="stable")
    if descending:
        idx = idx[..., ::-1]
    return idx


@def_kernel(Argsort)
def _cpu_argsort(op, x):
    idx = _argsort(x, op.descending)
    return (np.take_along_axis(x, idx, axis=-1), idx.astype(_int32))


@def_kernel(TopK)
def _cpu_topk(op, x):
    n = x.shape[-1]
    k = min(op.k, n)
    if op.kth_only:
        if k < n:
            kth = n - k if op.descending else k - 1
            val = np.partition(x, kth, axis=-1)[..., kth]
        else:
            val = (np.min if op.descending else np.max)(x, axis=-1)
        # The first index holding the k-th value (MegEngine: argmax of equality).
        idx = np.argmax(x == val[..., None], axis=-1)
        return (np.asarray(val, dtype=x.dtype), np.asarray(idx, dtype=_int32))
    if op.no_sort:
        if k < n:
            kth = n - k if op.descending else k - 1
            part = np.argpartition(x, kth, axis=-1)
            idx = part[..., n - k:] if op.descending else part[..., :k]
            idx = np.sort(idx, axis=-1)
        else:
            idx = np.broadcast_to(np.arange(n), x.shape)
    else:
        idx = _argsort(x, op.descending)[..., :k]
    return (np.take_along_axis(x, idx, axis=-1), np.ascontiguousarray(idx, dtype=_int32))


# -- CumSum --------------------------------------------------------------------------------------

@def_kernel(CumSum)
def _cpu_cumsum(op, x):
    dtype = cumsum_dtype(x.dtype)
    if x.ndim == 0:
        return (np.zeros((), dtype) if op.exclusive else x.astype(dtype),)
    axis = op.axis % x.ndim
    if op.reverse:
        x = np.flip(x, axis)
    r = np.cumsum(x, axis=axis, dtype=dtype)
    if op.exclusive:  # shift by one along the axis, starting from 0 (exact, unlike r - x)
        shifted = np.zeros_like(r)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        src[axis], dst[axis] = slice(None, -1), slice(1, None)
        shifted[tuple(dst)] = r[tuple(src)]
        r = shifted
    if op.reverse:
        r = np.flip(r, axis)
    return (np.ascontiguousarray(r),)
