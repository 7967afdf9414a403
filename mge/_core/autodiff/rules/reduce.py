"""Backward rules of the reductions and orderings.

One function per ``Reduce`` mode in ``_REDUCE_GRADS``, and the rules of ``CumSum``, ``TopK`` and
``Argsort`` (whose values are differentiable; indices and ``Argmax``/``Argmin`` are not).
"""
from ...ops.creation import Fill
from ...ops.reduce import Argmax, Argmin, Argsort, CumSum, Reduce, TopK, normalize_axes
from ...ops.shape import Scatter
from ..gradutil import broadcast, cast, ew, fit, output, reshape, run, unreduce
from ..registry import def_backward


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
    p = run(Reduce.get("prod", axes, True), safe)
    other_zeros = ew("sub", run(Reduce.get("sum", axes, True), zero), zero)
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
    r = run(CumSum.get(op.axis, op.exclusive, not op.reverse), g)
    return [fit(r, x)]  # a 0-d input gave a (1,) output: fit reshapes back


def _scatter_last(x, index, g):
    # Zeros of x's shape with g written at ``index`` along the last axis (indices are distinct).
    zeros = run(Fill.get(tuple(x.shape), 0, x.dtype, x.device))
    return run(Scatter.get(-1), zeros, index, cast(g, x.dtype))


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
