"""Backward rules of the indexing ops (``mge/_core/ops/indexing.py``).

As in MegEngine (and torch's ``index_put``), the value of a setter with repeated indices gets the
gradient of its position once per repeat, although only one write survived.  ``zeros``,
``grad_like``, ``sum_to_value`` and ``grad_rule`` are ``shape.py``'s; a 0-d zero written into a
region clears it (the value broadcasts).
"""
from ...ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor,
    Subtensor,
)
from .. import gradutil as gu
from ..registry import READS_INPUTS
from .shape import grad_like, grad_rule, sum_to_value, zeros


@grad_rule(Subtensor)
def _grad_subtensor(op, inputs, outputs, grads, needs):
    x = inputs[0]
    g = grads[0]
    return [grad_like(gu.run(SetSubtensor.get(op.items), zeros(x.shape, g), g), x)]


@grad_rule(SetSubtensor)
def _grad_setsubtensor(op, inputs, outputs, grads, needs):
    # x keeps the gradient outside the region it lost; the value gets the region's gradient.
    x, value = inputs
    g = grads[0]
    gx = gv = None
    if needs[0]:
        gx = grad_like(gu.run(op, g, zeros((), g)), x)
    if needs[1]:
        region = gu.run(Subtensor.get(op.items), g)
        gv = grad_like(sum_to_value(region, value.shape), value)
    return [gx, gv]


@grad_rule(IndexingMultiAxisVec)
def _grad_multi(op, inputs, outputs, grads, needs):
    # Repeated indices picked one element several times: its gradient is the sum (np.add.at).
    x, arrays = inputs[0], inputs[1:]
    g = grads[0]
    gx = gu.run(IndexingIncrMultiAxisVec.get(op.items), zeros(x.shape, g), g, *arrays)
    return [grad_like(gx, x)] + [None] * len(arrays)


# Of x these rules read its shape and dtype; the index arrays of IndexingMultiAxisVec (the
# inputs after x, at most one per axis) are read as values.
_INDEX_INPUTS = tuple(range(1, 16))
READS_INPUTS[Subtensor] = lambda op: ()
READS_INPUTS[IndexingMultiAxisVec] = lambda op: _INDEX_INPUTS


def _grad_value(op, g, value, arrays):
    region = gu.run(IndexingMultiAxisVec.get(op.items), g, *arrays)
    return grad_like(sum_to_value(region, value.shape), value)


@grad_rule(IndexingSetMultiAxisVec)
def _grad_setmulti(op, inputs, outputs, grads, needs):
    x, value, arrays = inputs[0], inputs[1], inputs[2:]
    g = grads[0]
    gx = gv = None
    if needs[0]:
        gx = grad_like(gu.run(op, g, zeros((), g), *arrays), x)
    if needs[1]:
        gv = _grad_value(op, g, value, arrays)
    return [gx, gv] + [None] * len(arrays)


@grad_rule(IndexingIncrMultiAxisVec)
def _grad_incrmulti(op, inputs, outputs, grads, needs):
    x, value, arrays = inputs[0], inputs[1], inputs[2:]
    g = grads[0]
    gx = grad_like(g, x) if needs[0] else None
    gv = _grad_value(op, g, value, arrays) if needs[1] else None
    return [gx, gv] + [None] * len(arrays)
