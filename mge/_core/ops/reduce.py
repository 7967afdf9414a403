"""Reductions and orderings: ``Reduce``, ``Argmax``/``Argmin``, ``Argsort``, ``TopK``, ``CumSum``,
and their shape/dtype rules.

Axes are kept in the op as the user gave them (an int, a tuple of ints, or ``None`` for all axes;
negative values count from the end) and normalised against the input's rank by the shape rule and
the kernel (``normalize_axes``), so one op instance serves inputs of any rank.  A 0-d input
behaves like shape ``(1,)`` for axis checks (``axis=0`` and ``axis=-1`` are accepted) and reduces
to a 0-d result.

Output dtypes follow MegEngine (``reduce_dtype``): ``sum``/``prod``/``sum_sqr`` keep the input
dtype (small integer types wrap around, as in MegEngine; float16 accumulates in float32) except
that bool counts in int32; ``min``/``max`` keep the dtype; ``mean`` gives float32 (float64 for
float64 input); indices are int32.

Kernels: ``device/cpu/kernels/reduce.py``; backward rules: ``autodiff/rules/reduce.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Reduce", "Argmax", "Argmin", "Argsort", "TopK", "CumSum", "REDUCE_MODES", "normalize_axes"]

REDUCE_MODES = frozenset(["sum", "prod", "min", "max", "mean", "sum_sqr"])
_int32 = np.dtype("int32")
_float32 = np.dtype("float32")
_float64 = np.dtype("float64")


class Reduce(OpDef):
    """Reduce over ``axis`` (``None``: all axes) with ``mode`` in ``REDUCE_MODES``."""

    _fields = ("mode", "axis", "keepdims")
    _defaults = {"axis": None, "keepdims": False}
    long_running = False

    def __init__(self, mode, axis=None, keepdims=False):
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in REDUCE_MODES:
            raise ValueError(f"Reduce: unknown mode {mode!r}; expected one of {sorted(REDUCE_MODES)}")
        super().__init__(mode, _check_axis_arg("Reduce", axis), bool(keepdims))


class Argmax(OpDef):
    """Index (int32) of the largest value over ``axis``; several axes count as one flattened axis."""

    _fields = ("axis", "keepdims")
    _defaults = {"axis": None, "keepdims": False}
    long_running = False

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
    long_running = False


class TopK(OpDef):
    """The ``k`` smallest (or largest when ``descending``) values along the last axis.

    Outputs ``(values, indices)``.  ``kth_only``: only the k-th value (the last axis is removed) and
    the first index holding it.  ``no_sort``: the k values in the order of their indices.  ``k``
    larger than the axis is clipped to its length, as MegEngine does.
    """

    _fields = ("k", "descending", "kth_only", "no_sort")
    _defaults = {"descending": False, "kth_only": False, "no_sort": False}
    long_running = False


class CumSum(OpDef):
    """Cumulative sum along ``axis``; ``exclusive`` starts from 0, ``reverse`` sums from the end."""

    _fields = ("axis", "exclusive", "reverse")
    _defaults = {"exclusive": False, "reverse": False}
    long_running = False


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


class ReduceAxisError(ValueError, AssertionError):
    """An axis out of range or repeated: a ``ValueError``, and an ``AssertionError`` as MegEngine
    raises (its axis normalization asserts)."""


def _axes_or_raise(op, desc, axis):
    axes = normalize_axes(axis, len(desc[0]))
    if axes is None:
        raise op_error(ReduceAxisError, op, f"axis {axis!r} is out of range or repeated for a "
                       f"{len(desc[0])}-d input", [desc])
    return axes


def reduced_shape(shape, axes, keepdims):
    """``shape`` reduced over the (normalised) ``axes``: dropped, or kept as size 1."""
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _one_input(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    return descs[0]


# -- Reduce --------------------------------------------------------------------------------------

def reduce_dtype(mode, dtype):
    """The output dtype of ``Reduce(mode)`` of a ``dtype`` input (see the module docstring)."""
    if mode == "mean":
        return _float64 if dtype == _float64 else _float32
    if mode in ("sum", "prod", "sum_sqr") and dtype.kind == "b":
        return _int32
    return dtype


@def_infer(Reduce)
def _infer_reduce(op, descs):
    d = _one_input(op, descs)
    dtype = reduce_dtype(op.mode, d[1])
    if d[0] is None:
        return [TensorDesc(None, dtype)]
    axes = _axes_or_raise(op, d, op.axis)
    if op.mode in ("min", "max") and any(d[0][a] == 0 for a in axes):
        raise op_error(ValueError, op, "cannot take the min/max over an empty axis", descs)
    return [TensorDesc(reduced_shape(d[0], axes, op.keepdims), dtype)]


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
    return [TensorDesc(reduced_shape(d[0], axes, op.keepdims), _int32)]


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


# -- CumSum --------------------------------------------------------------------------------------

def cumsum_dtype(dtype):
    """The output dtype of ``CumSum`` of a ``dtype`` input (bool counts in int32)."""
    return _int32 if dtype.kind == "b" else dtype


@def_infer(CumSum)
def _infer_cumsum(op, descs):
    d = _one_input(op, descs)
    if not isinstance(op.axis, int) or isinstance(op.axis, bool):
        raise op_error(TypeError, op, f"axis must be an int, got {op.axis!r}", descs)
    if d[0] is not None:
        _axes_or_raise(op, d, op.axis)
    return [TensorDesc(d[0], cumsum_dtype(d[1]))]
