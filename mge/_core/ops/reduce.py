"""Reductions and orderings: ``Reduce``, ``Argmax``/``Argmin``, ``Argsort``, ``TopK``, ``CumSum``.

Axes are kept in the op as the user gave them (an int, a tuple of ints, or ``None`` for all axes;
negative values count from the end) and normalised against the input's rank by the shape rule and
the kernel, so one op instance serves inputs of any rank.  A 0-d input behaves like shape ``(1,)``
for axis checks (``axis=0`` and ``axis=-1`` are accepted) and reduces to a 0-d result.

Output dtypes follow MegEngine: ``sum``/``prod``/``sum_sqr`` keep the input dtype (small integer
types wrap around, as in MegEngine; float16 accumulates in float32) except that bool counts in int32; ``min``/``max`` keep the
dtype; ``mean`` gives float32 (float64 for float64 input); indices are int32.

Backward rules are at the end: one function per ``Reduce`` mode in ``_REDUCE_GRADS``, and the
rules of ``CumSum``, ``TopK`` and ``Argsort`` (whose values are differentiable; indices and
``Argmax``/``Argmin`` are not).
"""
import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error

__all__ = ["Reduce", "Argmax", "Argmin", "Argsort", "TopK", "CumSum", "REDUCE_MODES", "normalize_axes"]

REDUCE_MODES = frozenset(["sum", "prod", "min", "max", "mean", "sum_sqr"])
_int32 = np.dtype("int32")
_float32 = np.dtype("float32")
_float64 = np.dtype("float64")
_float16 = np.dtype("float16")


class Reduce(OpDef):
    """Reduce over ``axis`` (``None``: all axes) with ``mode`` in ``REDUCE_MODES``."""

    _fields = ("mode", "axis", "keepdims")
    _defaults = {"axis": None, "keepdims": False}

    def __init__(self, mode, axis=None, keepdims=False):
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in REDUCE_MODES:
            raise ValueError(f"Reduce: unknown mode {mode!r}; expected one of {sorted(REDUCE_MODES)}")
        super().__init__(mode, _check_axis_arg("Reduce", axis), bool(keepdims))


class Argmax(OpDef):
    """Index (int32) of the largest value over ``axis``; several axes count as one flattened axis."""

    _fields = ("axis", "keepdims")
    _defaults = {"axis": None, "keepdims": False}

    def __init__(self, axis=None, keepdims=False):
        super().__init__(_check_axis_arg(type(self).__name__, axis), bool(keepdims))


class Argmin(Argmax):
    """Index (int32) of the smallest value over ``axis``."""


class Argsort(OpDef):
    """Sort along the last axis; outputs ``(values, indices)`` (indices int32).

    Ascending order is stable; descending order is the reverse of the stable ascending order (equal
    values come last-index first), as MegEngine's ``Argsort``.
    """

    _fields = ("descending",)
    _defaults = {"descending": False}


class TopK(OpDef):
    """The ``k`` smallest (or largest when ``descending``) values along the last axis.

    Outputs ``(values, indices)``.  ``kth_only``: only the k-th value (the last axis is removed) and
    the first index holding it.  ``no_sort``: the k values in the order of their indices.  ``k``
    larger than the axis is clipped to its length, as MegEngine does.
    """

    _fields = ("k", "descending", "kth_only", "no_sort")
    _defaults = {"descending": False, "kth_only": False, "no_sort": False}


class CumSum(OpDef):
    """Cumulative sum along ``axis``; ``exclusive`` starts from 0, ``reverse`` sums from the end."""

    _fields = ("axis", "exclusive", "reverse")
    _defaults = {"exclusive": False, "reverse": False}


# -- axes ----------------------------------------------------------------------------------------

def _check_axis_arg(name, axis):
    if axis is None:
        return None
    if isinstance(axis, np.ndarray):
        axis = axis.tolist()
    if isinstance(axis, (list, tuple)):
        if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axis):
            raise TypeError(f"{name}: axis must be an int, a sequence of ints or None, got {axis!r}")
        return tuple(int(a) for a in axis)
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        return int(axis)
    raise TypeError(f"{name}: axis must be an int, a sequence of ints or None, got {axis!r}")


_axes_cache = {}


def normalize_axes(axis, ndim):
    """Sorted tuple of non-negative axes for rank ``ndim``; ``None`` when an axis is invalid.

    A 0-d input counts as rank 1 for the check.  ``axis=None`` means every axis.
    """
    key = (axis, ndim)
    try:
        return _axes_cache[key]
    except KeyError:
        pass
    rank = max(ndim, 1)
    if axis is None:
        axes = tuple(range(ndim))
    else:
        items = axis if isinstance(axis, tuple) else (axis,)
        out = []
        for a in items:
            if not -rank <= a < rank:
                return None
            out.append(a % rank)
        if len(set(out)) != len(out):
            return None
        axes = tuple(sorted(out)) if ndim else ()
    _axes_cache[key] = axes
    return axes


def _axes_or_raise(op, desc, axis):
    axes = normalize_axes(axis, len(desc[0]))
    if axes is None:
        raise op_error(ValueError, op, f"axis {axis!r} is out of range or repeated for a "
                       f"{len(desc[0])}-d input", [desc])
    return axes


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _one_input(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    return descs[0]


# -- Reduce --------------------------------------------------------------------------------------

def _reduce_dtype(mode, dtype):
    if mode == "mean":
        return _float64 if dtype == _float64 else _float32
    if mode in ("sum", "prod", "sum_sqr") and dtype.kind == "b":
        return _int32
    return dtype


@def_infer(Reduce)
def _infer_reduce(op, descs):
    d = _one_input(op, descs)
    dtype = _reduce_dtype(op.mode, d[1])
    if d[0] is None:
        return [TensorDesc(None, dtype)]
    axes = _axes_or_raise(op, d, op.axis)
    if op.mode in ("min", "max") and any(d[0][a] == 0 for a in axes):
        raise op_error(ValueError, op, "cannot take the min/max over an empty axis", descs)
    return [TensorDesc(_reduced_shape(d[0], axes, op.keepdims), dtype)]


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
    out_dtype = _reduce_dtype(mode, x.dtype)
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
            shape = _reduced_shape(x.shape, axes, keepdims)
            return (np.full(shape, np.nan, dtype=out_dtype),)
        r = _add_reduce(x, axis=axes, keepdims=keepdims, dtype=out_dtype) / out_dtype.type(count)
    return (np.asarray(r, dtype=out_dtype),)


# -- Argmax / Argmin -----------------------------------------------------------------------------

@def_infer(Argmax)
@def_infer(Argmin)
def _infer_arg(op, descs):
    d = _one_input(op, descs)
    if d[0] is None:
        return [TensorDesc(None, _int32)]
    axes = _axes_or_raise(op, d, op.axis)
    if any(d[0][a] == 0 for a in axes):
        raise op_error(ValueError, op, "cannot take the arg-extremum over an empty axis", descs)
    return [TensorDesc(_reduced_shape(d[0], axes, op.keepdims), _int32)]


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
                r = r.reshape(_reduced_shape(x.shape, axes, True))
        return (np.asarray(r, dtype=_int32),)
    return kernel


def_kernel(Argmax)(_cpu_arg(np.argmax))
def_kernel(Argmin)(_cpu_arg(np.argmin))


# -- Argsort / TopK ------------------------------------------------------------------------------

def _needs_axis(op, descs):
    d = _one_input(op, descs)
    if d[0] is not None and len(d[0]) == 0:
        raise op_error(ValueError, op, "needs an input with at least 1 dimension, got a 0-d one", descs)
    return d


@def_infer(Argsort)
def _infer_argsort(op, descs):
    d = _needs_axis(op, descs)
    return [TensorDesc(d[0], d[1]), TensorDesc(d[0], _int32)]


def _argsort(x, descending):
    idx = np.argsort(x, axis=-1, kind="stable")
    if descending:
        idx = idx[..., ::-1]
    return idx


@def_kernel(Argsort)
def _cpu_argsort(op, x):
    idx = _argsort(x, op.descending)
    return (np.take_along_axis(x, idx, axis=-1), idx.astype(_int32))


@def_infer(TopK)
def _infer_topk(op, descs):
    d = _needs_axis(op, descs)
    k = op.k
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise op_error(ValueError, op, f"k must be a positive int, got {k!r}", descs)
    if d[0] is None:
        return [TensorDesc(None, d[1]), TensorDesc(None, _int32)]
    n = d[0][-1]
    if op.kth_only:
        if n == 0:
            raise op_error(ValueError, op, "kth_only needs a non-empty last axis", descs)
        shape = d[0][:-1]
    else:
        shape = d[0][:-1] + (min(k, n),)
    return [TensorDesc(shape, d[1]), TensorDesc(shape, _int32)]


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

def _cumsum_dtype(dtype):
    return _int32 if dtype.kind == "b" else dtype


@def_infer(CumSum)
def _infer_cumsum(op, descs):
    d = _one_input(op, descs)
    if not isinstance(op.axis, int) or isinstance(op.axis, bool):
        raise op_error(TypeError, op, f"axis must be an int, got {op.axis!r}", descs)
    if d[0] is not None:
        _axes_or_raise(op, d, op.axis)
    return [TensorDesc(d[0], _cumsum_dtype(d[1]))]


@def_kernel(CumSum)
def _cpu_cumsum(op, x):
    dtype = _cumsum_dtype(x.dtype)
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


# -- backward rules ------------------------------------------------------------------------------
from .creation import Fill  # noqa: E402
from .gradutil import (  # noqa: E402
    broadcast, cached_op, cast, ew, fit, output, reshape, run, unreduce,
)


def _count(shape, axes):
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _sum_grad(x, y, g, axes, keepdims):
    return broadcast(unreduce(g, x.shape, axes, keepdims), x.shape)


def _mean_grad(x, y, g, axes, keepdims):
    # Scale the small gradient, then broadcast it (an empty group has an empty gradient).
    g = ew("mul", g, 1.0 / max(_count(x.shape, axes), 1))
    return broadcast(unreduce(g, x.shape, axes, keepdims), x.shape)


def _sum_sqr_grad(x, y, g, axes, keepdims):
    return ew("mul", x, unreduce(ew("add", g, g), x.shape, axes, keepdims))  # 2 x g, broadcast


def _max_grad(x, y, g, axes, keepdims):
    # Every element equal to the maximum gets the whole gradient (MegEngine's rule for ties).
    # y >= x everywhere, so "y <= x" means "x is a maximum": one op.
    shape = x.shape
    return ew("cond_leq_mov", unreduce(y, shape, axes, keepdims), x,
              unreduce(g, shape, axes, keepdims))


def _min_grad(x, y, g, axes, keepdims):
    shape = x.shape
    return ew("cond_leq_mov", x, unreduce(y, shape, axes, keepdims),
              unreduce(g, shape, axes, keepdims))


def _prod_grad(x, y, g, axes, keepdims):
    # d prod / d x_i is the product of the other elements.  y / x_i is that only when x_i != 0
    # (MegEngine answers nan at zeros), so divide the product of the non-zero elements instead,
    # and give 0 where another element of the group is 0.
    zero = cast(ew("eq", x, 0.0), x.dtype)        # 1 where x is 0
    safe = ew("add", x, zero)                      # x with its zeros made ones
    p = run(cached_op(Reduce, "prod", axes, True), safe)
    other_zeros = ew("sub", run(cached_op(Reduce, "sum", axes, True), zero), zero)
    grad = ew("cond_leq_mov", other_zeros, 0.0, ew("true_div", p, safe))
    return ew("mul", grad, unreduce(g, x.shape, axes, keepdims))


_REDUCE_GRADS = {
    "sum": _sum_grad, "mean": _mean_grad, "sum_sqr": _sum_sqr_grad, "max": _max_grad,
    "min": _min_grad, "prod": _prod_grad,
}


@def_backward(Reduce, keeps_outputs=lambda op: op.mode in ("max", "min"))
def _reduce_backward(op, inputs, outputs, grads, needs):
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f":
        return [None]
    g = cast(g, x.dtype)  # the mean of float16 is float32: back to float16 before broadcasting
    axes = normalize_axes(op.axis, len(x.shape))
    if not axes:  # nothing reduced (a 0-d input): the output is the input, or its square
        return [ew("mul", x, ew("add", g, g)) if op.mode == "sum_sqr" else fit(g, x)]
    y = output(op, inputs, outputs) if op.mode in ("max", "min") else None
    return [_REDUCE_GRADS[op.mode](x, y, g, axes, op.keepdims)]


@def_backward(CumSum)
def _cumsum_backward(op, inputs, outputs, grads, needs):
    # Each input element adds to the outputs after it (before it when reversed): the gradient is
    # the cumulative sum of the output gradient the other way round, with the same exclusivity.
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f":
        return [None]
    r = run(cached_op(CumSum, op.axis, op.exclusive, not op.reverse), g)
    return [fit(r, x)]  # a 0-d input gave a (1,) output: fit reshapes back


def _scatter_last(x, index, g):
    # Zeros of x's shape with g written at ``index`` along the last axis (indices are distinct).
    from .shape import Scatter  # shape.py imports this module
    zeros = run(cached_op(Fill, tuple(x.shape), 0, x.dtype, x.device))
    return run(cached_op(Scatter, -1), zeros, index, cast(g, x.dtype))


@def_backward(TopK)
def _topk_backward(op, inputs, outputs, grads, needs):
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f":
        return [None]
    index = output(op, inputs, outputs, 1)
    if op.kth_only:  # one value per row: give it its last axis back
        shape = tuple(g.shape) + (1,)
        g, index = reshape(g, shape), reshape(index, shape)
    return [_scatter_last(x, index, g)]


@def_backward(Argsort)
def _argsort_backward(op, inputs, outputs, grads, needs):
    # The sorted values are a permutation of the input (MegEngine differentiates F.sort too).
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f":
        return [None]
    return [_scatter_last(x, output(op, inputs, outputs, 1), g)]


@def_backward(Argmax)
@def_backward(Argmin)
def _arg_backward(op, inputs, outputs, grads, needs):
    return [None]  # indices are not differentiable
