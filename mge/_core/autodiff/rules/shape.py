"""Backward rules of the shape ops (``mge/_core/ops/shape.py``), and the helpers that the
indexing rules (``indexing.py`` here) share with them.

Shapes come from the forward tensors, which know them.
"""
import numpy as np

from ...ops.creation import Fill
from ...ops.indexing import IndexingSetMultiAxisVec, SetSubtensor, Subtensor
from ...ops.reduce import Reduce
from ...ops.shape import (
    AddAxis, Broadcast, BroadcastTo, Concat, CondTake, Diag, Dimshuffle, Gather, RemoveAxis, Repeat, Reshape,
    Roll, Scatter, ScatterAdd, Split, Stack, Tile, Where,
)
from .. import gradutil as gu
from ..registry import READS_INPUTS, def_backward


def grad_rule(cls):
    """``def_backward`` for rules that may assume some input gradient is wanted and some output
    gradient is not zero: the wrapper answers all-``None`` otherwise."""
    def deco(fn):
        def rule(op, inputs, outputs, grads, needs):
            if not any(needs) or all(g is None for g in grads):
                return [None] * len(inputs)
            return fn(op, inputs, outputs, grads, needs)
        rule.__name__ = rule.__qualname__ = fn.__name__
        rule.__doc__ = fn.__doc__
        return def_backward(cls)(rule)
    return deco


def grad_like(g, x):
    """``g`` as the gradient of ``x`` in ``x``'s dtype: ``None`` for a bool (mask) or complex
    input.  An integer data input gets an integer gradient (asked for only when an integer
    tensor is attached); index inputs get ``None`` from their rules."""
    if x.dtype.kind not in "fiu":
        return None
    return gu.cast(g, x.dtype)


def zeros(shape, like):
    """A zero tensor of ``shape`` with ``like``'s dtype and device."""
    return gu.run(Fill.get(tuple(shape), 0, like.dtype, like.device))


def sum_to_value(g, shape):
    """``g`` (a gradient of an indexed region) summed to the ``shape`` of the value assigned there.

    Like ``gu.sum_to``, and the value may also have extra leading size-1 axes, which numpy drops
    when it assigns.
    """
    shape = tuple(shape)
    core = shape
    while len(core) > g.ndim and core[0] == 1:
        core = core[1:]
    return gu.reshape(gu.sum_to(g, core), shape)


def _reduce_sum(g, axes, keepdims):
    return gu.run(Reduce.get("sum", axes, keepdims), g)


@grad_rule(Reshape)
def _grad_reshape(op, inputs, outputs, grads, needs):
    return [grad_like(gu.reshape(grads[0], inputs[0].shape), inputs[0])]


@grad_rule(Broadcast)
def _grad_broadcast(op, inputs, outputs, grads, needs):
    return [grad_like(gu.sum_to(grads[0], inputs[0].shape), inputs[0])]


@grad_rule(BroadcastTo)
def _grad_broadcast_to(op, inputs, outputs, grads, needs):
    return [grad_like(gu.sum_to(grads[0], inputs[0].shape), inputs[0]), None]


@grad_rule(Dimshuffle)
def _grad_dimshuffle(op, inputs, outputs, grads, needs):
    g = grads[0]
    axes = [p for p in op.pattern if p != "x"]
    if len(axes) != len(op.pattern):  # drop the new axes first
        g = gu.reshape(g, tuple(s for s, p in zip(g.shape, op.pattern) if p != "x"))
    inverse = tuple(int(a) for a in np.argsort(axes))
    if inverse != tuple(range(len(axes))):
        g = gu.run(Dimshuffle.get(inverse), g)
    return [grad_like(g, inputs[0])]


def _grad_as_reshape(op, inputs, outputs, grads, needs):
    return [grad_like(gu.reshape(grads[0], inputs[0].shape), inputs[0])]


grad_rule(AddAxis)(_grad_as_reshape)
grad_rule(RemoveAxis)(_grad_as_reshape)


def _no_values(op):
    return ()


# these rules read only their input's shape and dtype
for _cls in (Reshape, Broadcast, BroadcastTo, AddAxis, RemoveAxis):
    READS_INPUTS[_cls] = _no_values
del _cls


@grad_rule(Concat)
def _grad_concat(op, inputs, outputs, grads, needs):
    g = grads[0]
    if len(inputs) == 1:
        parts = [g]
    else:
        # 0-d inputs are concatenated as one-element vectors (the scalar plugin sits below grad).
        sections = tuple(x.shape[op.axis] if x.ndim else 1 for x in inputs)
        parts = gu.runs(Split.get(op.axis, sections), g)
    return [grad_like(gu.reshape(p, x.shape), x) if need else None
            for p, x, need in zip(parts, inputs, needs)]


@grad_rule(Stack)
def _grad_stack(op, inputs, outputs, grads, needs):
    g = grads[0]
    axis = op.axis % (inputs[0].ndim + 1)
    lead = (("slice", None, None, None),) * axis
    return [grad_like(gu.run(Subtensor.get(lead + (("int", i),)), g), x) if need else None
            for i, (x, need) in enumerate(zip(inputs, needs))]


@grad_rule(Split)
def _grad_split(op, inputs, outputs, grads, needs):
    # Outputs without a gradient contribute zeros.
    like = next(g for g in grads if g is not None)
    parts = [zeros(y.shape, like) if g is None else g for g, y in zip(grads, outputs)]
    g = parts[0] if len(parts) == 1 else gu.run(Concat.get(op.axis), *parts)
    return [grad_like(g, inputs[0])]


@grad_rule(Tile)
def _grad_tile(op, inputs, outputs, grads, needs):
    # Output axis d holds reps[d] copies of input axis d, copy-major: view it as (reps, size)
    # pairs and sum over the copies.
    g, x = grads[0], inputs[0]
    n = max(x.ndim, len(op.reps))
    shape = (1,) * (n - x.ndim) + tuple(x.shape)
    reps = (1,) * (n - len(op.reps)) + tuple(op.reps)
    axes = tuple(2 * d for d in range(n) if reps[d] != 1)
    if axes:
        pairs = tuple(v for r, s in zip(reps, shape) for v in (r, s))
        g = _reduce_sum(gu.reshape(g, pairs), axes, True)
    return [grad_like(gu.reshape(g, x.shape), x)]


@grad_rule(Repeat)
def _grad_repeat(op, inputs, outputs, grads, needs):
    # Each input element became ``repeats`` neighbours along the axis: sum them.
    g, x = grads[0], inputs[0]
    if op.repeats != 1:
        axis = op.axis % x.ndim
        shape = tuple(x.shape)
        g = gu.reshape(g, shape[:axis + 1] + (op.repeats,) + shape[axis + 1:])
        g = _reduce_sum(g, axis + 1, False)
    return [grad_like(g, x)]


@grad_rule(Roll)
def _grad_roll(op, inputs, outputs, grads, needs):
    back = Roll.get(tuple(-s for s in op.shift), op.axis)
    return [grad_like(gu.run(back, grads[0]), inputs[0])]


@grad_rule(Where)
def _grad_where(op, inputs, outputs, grads, needs):
    mask, x, y = inputs
    g = grads[0]
    zero = zeros((), g)
    gx = gy = None
    if needs[1]:
        gx = grad_like(gu.sum_to(gu.run(op, mask, g, zero), x.shape), x)
    if needs[2]:
        gy = grad_like(gu.sum_to(gu.run(op, mask, zero, g), y.shape), y)
    return [None, gx, gy]


@grad_rule(CondTake)
def _grad_condtake(op, inputs, outputs, grads, needs):
    # The values came from distinct positions: write their gradient back under the mask.
    mask, x = inputs
    g = grads[0]
    if g is None or not needs[1]:
        return [None, None]
    put = IndexingSetMultiAxisVec.get((("mask",),))
    return [None, grad_like(gu.run(put, zeros(x.shape, g), g, mask), x)]


@grad_rule(Gather)
def _grad_gather(op, inputs, outputs, grads, needs):
    # An element gathered several times collects every copy's gradient.
    x, index = inputs
    g = grads[0]
    gx = gu.run(ScatterAdd.get(op.axis), zeros(x.shape, g), index, g)
    return [grad_like(gx, x), None]


@grad_rule(Scatter)
def _grad_scatter(op, inputs, outputs, grads, needs):
    # As in MegEngine (and torch's scatter): with repeated indices every source element that aims
    # at a position gets its gradient, though only one of them was written.
    x, index, source = inputs
    g = grads[0]
    gx = gs = None
    if needs[0]:
        gx = grad_like(gu.run(op, g, index, zeros(index.shape, g)), x)
    if needs[2]:
        gs = grad_like(gu.run(Gather.get(op.axis), g, index), source)
    return [gx, None, gs]


@grad_rule(ScatterAdd)
def _grad_scatter_add(op, inputs, outputs, grads, needs):
    x, index, source = inputs
    g = grads[0]
    gs = grad_like(gu.run(Gather.get(op.axis), g, index), source) if needs[2] else None
    return [grad_like(g, x) if needs[0] else None, None, gs]


@grad_rule(Diag)
def _grad_diag(op, inputs, outputs, grads, needs):
    g, x = grads[0], inputs[0]
    if x.ndim == 1:  # the vector went onto diagonal k: read it back
        return [grad_like(gu.run(op, g), x)]
    # The diagonal of an (r, c) matrix is a strided slice of its flat form: write g there.
    r, c = x.shape
    n = g.shape[0]  # the output's length (a single output may reach the rule as None)
    start = op.k if op.k >= 0 else -op.k * c
    stop = start + (n - 1) * (c + 1) + 1 if n else start
    put = SetSubtensor.get((("slice", start, stop, c + 1),))
    return [grad_like(gu.reshape(gu.run(put, zeros((r * c,), g), g), (r, c)), x)]
