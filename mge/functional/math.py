"""Reductions, orderings and linear algebra (``megengine.functional.math``).

Also home of ``cumsum`` (``megengine.functional.tensor`` in MegEngine) and ``logsumexp``
(``megengine.functional.nn`` in MegEngine); both are exported at ``F.`` top level as there.
"""
import math as _math

import numpy as np

from .._core.ops.elemwise import TypeCvt, elemwise_op
from .._core.ops.matmul import SVD, BatchedMatrixMul, Dot, MatInv, MatrixMul
from .._core.ops.reduce import Argmax, Argmin, Argsort, CumSum, Reduce, TopK
from ..tensor import Tensor
from .utils import _tensor_like
from ..core import apply

__all__ = [
    "argmax", "argmin", "argsort", "dot", "isinf", "isnan", "matinv", "matmul", "max", "mean",
    "min", "norm", "normalize", "prod", "sign", "sort", "std", "sum", "svd", "topk", "var",
    "logsumexp",
]  # (cumsum is defined here and exported by functional.tensor, where MegEngine has it)

def _axis_key(axis):
    # Lists and arrays are not hashable: as tuples they make a key for the op's shared instance.
    if isinstance(axis, np.ndarray):
        axis = axis.tolist()
    return tuple(axis) if isinstance(axis, list) else axis


def _e(mode, *args):
    return apply(elemwise_op(mode), *args)[0]


def _reduce(mode, inp, axis, keepdims):
    return apply(Reduce.get(mode, _axis_key(axis), bool(keepdims)), inp)[0]


def _tensor(x):
    return x if _tensor_like(x) else Tensor(x)


def _to_float(x):
    return x if x.dtype.kind == "f" else apply(TypeCvt.get(np.dtype("float32")), x)[0]


# -- reductions -----------------------------------------------------------------------------------

def sum(inp, axis=None, keepdims=False):
    """Sum of the elements over ``axis``.

    MegEngine signature: ``sum(inp, axis=None, keepdims=False)``.

    Args:
        inp: input tensor.
        axis: an int, a sequence of ints, or None (every axis).  Negative values count from the end.
        keepdims: keep the reduced axes as dimensions of size 1.

    Returns:
        a tensor of the input's dtype (bool inputs are counted in int32).

    Example::

        >>> F.sum(mge.tensor([[1, 2], [3, 4]]), axis=1).numpy()
        array([3, 7], dtype=int32)
    """
    return _reduce("sum", inp, axis, keepdims)


def prod(inp, axis=None, keepdims=False):
    """Product of the elements over ``axis``.

    MegEngine signature: ``prod(inp, axis=None, keepdims=False)``.  Arguments as in :func:`sum`.
    """
    return _reduce("prod", inp, axis, keepdims)


def min(inp, axis=None, keepdims=False):
    """Smallest element over ``axis``.

    MegEngine signature: ``min(inp, axis=None, keepdims=False)``.  Arguments as in :func:`sum`;
    a ``ValueError`` for an empty reduction.
    """
    return _reduce("min", inp, axis, keepdims)


def max(inp, axis=None, keepdims=False):
    """Largest element over ``axis``.

    MegEngine signature: ``max(inp, axis=None, keepdims=False)``.  Arguments as in :func:`sum`;
    a ``ValueError`` for an empty reduction.
    """
    return _reduce("max", inp, axis, keepdims)


def mean(inp, axis=None, keepdims=False):
    """Mean of the elements over ``axis``; float32 for integer, bool and float16 inputs.

    MegEngine signature: ``mean(inp, axis=None, keepdims=False)``.  Arguments as in :func:`sum`.
    The mean of no elements is NaN.
    """
    return _reduce("mean", inp, axis, keepdims)


def var(inp, axis=None, keepdims=False):
    """Population variance (``mean((inp - mean(inp)) ** 2)``) over ``axis``.

    MegEngine signature: ``var(inp, axis=None, keepdims=False)``.  Arguments as in :func:`sum`.
    """
    m = mean(inp, axis, keepdims=axis is not None)
    return mean(_e("square", _e("sub", inp, m)), axis, keepdims)


def std(inp, axis=None, keepdims=False):
    """Population standard deviation over ``axis`` (the square root of :func:`var`).

    MegEngine signature: ``std(inp, axis=None, keepdims=False)``.
    """
    return _e("sqrt", var(inp, axis, keepdims))


def norm(inp, ord=None, axis=None, keepdims=False):
    """Vector norm of order ``ord`` over ``axis``.

    MegEngine signature: ``norm(inp, ord=None, axis=None, keepdims=False)``.

    ``ord`` None means 2; ``0`` counts the non-zero elements; ``inf``/``-inf`` give the largest /
    smallest absolute value; any other ``p`` gives ``sum(abs(inp) ** p) ** (1 / p)``.

    Raises:
        TypeError: if ``axis`` is None and ``inp`` is not a vector (as MegEngine).
    """
    inp = _tensor(inp)
    if axis is None and inp.ndim != 1:
        raise TypeError(f"norm: axis is required unless input is a vector (got shape {inp.shape})")
    if ord is None:
        ord = 2
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise TypeError(f"norm: ord must be a number or None, got {ord!r}")
    if ord == 0:
        return sum(_e("neq", inp, 0), axis, keepdims)
    if ord == _math.inf:
        return max(_e("abs", inp), axis, keepdims)
    if ord == -_math.inf:
        return min(_e("abs", inp), axis, keepdims)
    x = _to_float(inp)
    if ord == 2:
        return _e("sqrt", sum(_e("square", x), axis, keepdims))
    if ord == 1:
        return sum(_e("abs", x), axis, keepdims)
    return _e("pow", sum(_e("pow", _e("abs", x), float(ord)), axis, keepdims), 1.0 / ord)


def normalize(inp, ord=None, axis=None, eps=1e-12):
    """``inp`` divided by its :func:`norm` over ``axis`` (at least ``eps``).

    MegEngine signature: ``normalize(inp, ord=None, axis=None, eps=1e-12)``.  With ``axis`` None
    the input must be a vector.
    """
    n = norm(inp, ord, axis, keepdims=axis is not None)
    return _e("true_div", inp, _e("max", n, eps))


def logsumexp(inp, axis, keepdims=False):
    """:math:`\\log \\sum \\exp(inp)` over ``axis``, computed stably (shifted by the maximum).

    MegEngine signature: ``logsumexp(inp, axis, keepdims=False)`` (in ``megengine.functional.nn``).
    """
    inp = _tensor(inp)
    base = inp.detach()
    shift = max(base, axis, keepdims=True)
    s = sum(_e("exp", _e("sub", inp, shift)), axis, keepdims)
    if not keepdims:
        shift = max(base, axis, keepdims=False)
    return _e("add", shift, _e("log", s))


def cumsum(inp, axis):
    """Cumulative sum along ``axis`` (bool inputs count in int32).

    MegEngine signature: ``cumsum(inp, axis)`` (in ``megengine.functional.tensor``).

    Example::

        >>> F.cumsum(mge.tensor([[1, 2, 3], [4, 5, 6]]), axis=1).numpy()
        array([[ 1,  3,  6],
               [ 4,  9, 15]], dtype=int32)
    """
    return apply(CumSum.get(axis, False, False), inp)[0]


# -- arg-extrema and sorting ----------------------------------------------------------------------

def argmax(inp, axis=None, keepdims=False):
    """Index (int32) of the largest element over ``axis``.

    MegEngine signature: ``argmax(inp, axis=None, keepdims=False)``.  With ``axis`` None the index
    is into the flattened input; several axes count as one flattened axis (C order).
    """
    return apply(Argmax.get(_axis_key(axis), bool(keepdims)), inp)[0]


def argmin(inp, axis=None, keepdims=False):
    """Index (int32) of the smallest element over ``axis``.

    MegEngine signature: ``argmin(inp, axis=None, keepdims=False)``.  See :func:`argmax`.
    """
    return apply(Argmin.get(_axis_key(axis), bool(keepdims)), inp)[0]


def sort(inp, descending=False):
    """Sort along the last axis; returns ``(sorted values, int32 indices)``.

    MegEngine signature: ``sort(inp, descending=False)``.  MegEngine takes 1-D or 2-D input; mge
    sorts any input of at least one dimension along its last axis.  Equal values keep their order
    when ascending; the descending order is the reverse of the ascending one.
    """
    return apply(Argsort.get(bool(descending)), inp)


def argsort(inp, descending=False):
    """Indices (int32) that sort ``inp`` along its last axis.

    MegEngine signature: ``argsort(inp, descending=False)``.  See :func:`sort`.
    """
    return apply(Argsort.get(bool(descending)), inp)[1]


def topk(inp, k, descending=True, kth_only=False, no_sort=False):
    """The ``k`` largest (``descending``) or smallest values along the last axis, with indices.

    MegEngine signature: ``topk(inp, k, descending=True, kth_only=False, no_sort=False)``.

    Args:
        inp: input tensor (at least 1-D).
        k: how many values (clipped to the length of the last axis).
        descending: take the largest values when True, the smallest when False.
        kth_only: return only the k-th value and the first index holding it (the last axis is
            removed).
        no_sort: the k values come in the order of their indices instead of sorted.

    Returns:
        ``(values, indices)``; indices are int32.
    """
    if isinstance(k, Tensor):
        k = int(k.item())
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"topk: k must be an int, got {k!r}")
    op = TopK.get(int(k), bool(descending), bool(kth_only), bool(no_sort))
    return apply(op, inp)


# -- elementwise predicates -----------------------------------------------------------------------

def sign(x):
    """Elementwise sign (-1, 0 or 1, in the input's dtype).  MegEngine signature: ``sign(x)``."""
    return _e("sign", x)


def isnan(inp):
    """Elementwise test for NaN (a bool tensor).  MegEngine signature: ``isnan(inp)``."""
    return _e("isnan", inp)


def isinf(inp):
    """Elementwise test for positive or negative infinity.  MegEngine signature: ``isinf(inp)``."""
    return _e("isinf", inp)


# -- linear algebra -------------------------------------------------------------------------------

def _ndim(x):
    return x.ndim if isinstance(x, Tensor) else np.ndim(x)


def matmul(inp1, inp2, transpose_a=False, transpose_b=False, compute_mode="default"):
    """Matrix product with numpy's ``matmul`` rules.

    MegEngine signature: ``matmul(inp1, inp2, transpose_a=False, transpose_b=False,
    compute_mode="default")``.

    Two vectors give their inner product; a 1-D first (second) operand is a row (column) vector
    whose added dimension is removed from the result; leading dimensions of operands with more than
    two dimensions broadcast.  ``transpose_a``/``transpose_b`` transpose the last two dimensions of an
    operand with at least two.  ``compute_mode="float32"`` accumulates float16 products in float32.

    Raises:
        ValueError: when the inner dimensions or the batch dimensions do not match (the message
            names the op and the shapes), or an operand is 0-d.
    """
    d1, d2 = _ndim(inp1), _ndim(inp2)
    if d1 == 0 or d2 == 0:
        raise ValueError(f"matmul: operands must have at least 1 dimension, got {d1}-d and {d2}-d")
    if d1 == 1 and d2 == 1:
        return apply(Dot.get(), inp1, inp2)[0]
    cls = MatrixMul if d1 == 2 and d2 == 2 else BatchedMatrixMul
    op = cls.get(bool(transpose_a), bool(transpose_b), compute_mode)
    return apply(op, inp1, inp2)[0]


def dot(inp1, inp2):
    """Inner product of two vectors (0-d result).

    MegEngine signature: ``dot(inp1, inp2)``.  Inputs must be 1-D (or 0-d) of equal length.
    """
    return apply(Dot.get(), inp1, inp2)[0]


def matinv(inp):
    """Inverse of a square matrix, or of each matrix of a batch ``(..., n, n)``.

    MegEngine signature: ``matinv(inp)``.  Integer inputs give float32.  A singular matrix is a
    ``ValueError`` from the kernel: raised by the call for tiny inputs or at ``async_level = 0``,
    otherwise reported at the next sync point as ``AsyncError`` with the ``ValueError`` as cause.
    """
    return apply(MatInv.get(), inp)[0]


def svd(inp, full_matrices=False, compute_uv=True):
    """Singular value decomposition ``inp = U @ diag(S) @ Vh`` of each matrix in the last two dims.

    MegEngine signature: ``svd(inp, full_matrices=False, compute_uv=True)``.

    Returns:
        ``(U, S, Vh)``; only ``S`` when ``compute_uv`` is False (MegEngine fails there).
    """
    out = apply(SVD.get(bool(full_matrices), bool(compute_uv)), inp)
    return out if compute_uv else out[0]



def _check_non_finite(inps, scale=1.0):
    """MegEngine's ``F.math._check_non_finite``: multiply each tensor of ``inps`` by ``scale`` in
    place and return an int32 0-d tensor, 1 when some tensor held a NaN or an infinity (the
    ``CheckNonFinite`` op of ``mge.amp``)."""
    from ..amp.check_non_finite import check_non_finite

    if isinstance(inps, Tensor):
        inps = [inps]
    return check_non_finite(inps, scale)
