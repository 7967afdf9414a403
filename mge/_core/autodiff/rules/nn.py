"""Backward rules of the ops of ``mge/_core/ops/nn.py``: softmax family, one-hot indexing,
dropout, padding and their backward ops (convolution, pooling and normalisation are in
``conv.py``, ``pool.py`` and ``norm.py``).

Each backward op is the transpose of a linear map, so its own rule is the forward map again: every
rule here is twice differentiable.
"""
from ...ops.creation import Fill
from ...ops.nn import (
    Dropout, DropoutBackward, IndexingOneHot, IndexingSetOneHot, LogSoftmax, Pad, PadBackward,
    Softmax,
)
from ...ops.reduce import Reduce
from ..gradutil import ew, output, run
from ..registry import def_backward


def _zeros_like(t):
    return run(Fill.get(tuple(t.shape), 0, t.dtype, t.device))


def _sum_keepdims(t, axis):
    return run(Reduce.get("sum", axis, True), t)


@def_backward(Softmax, keeps_outputs=True)
def _softmax_grad(op, inputs, outputs, grads, needs):
    # dx = y * (dy - sum(dy * y)) along the softmax axes
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    y = output(op, inputs, outputs)
    gy = ew("mul", g, y)
    return [ew("sub", gy, ew("mul", y, _sum_keepdims(gy, op.axis)))]


@def_backward(LogSoftmax, keeps_outputs=True)
def _logsoftmax_grad(op, inputs, outputs, grads, needs):
    # dx = dy - softmax(x) * sum(dy), with softmax(x) = exp(y)
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    y = output(op, inputs, outputs)
    return [ew("sub", g, ew("mul", ew("exp", y), _sum_keepdims(g, op.axis)))]


@def_backward(IndexingOneHot)
def _indexing_one_hot_grad(op, inputs, outputs, grads, needs):
    # The picked elements get the gradient, every other element of src none; index gets none.
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None]
    src, index = inputs
    return [run(IndexingSetOneHot.get(op.axis), _zeros_like(src), index, g), None]


@def_backward(IndexingSetOneHot)
def _indexing_set_one_hot_grad(op, inputs, outputs, grads, needs):
    # Overwritten elements of src get no gradient; value gets the gradient at the written places.
    g = grads[0]
    src, index, value = inputs
    if g is None:
        return [None, None, None]
    dsrc = dvalue = None
    if needs[0]:
        dsrc = run(op, g, index, _zeros_like(value))
    if needs[2]:
        dvalue = run(IndexingOneHot.get(op.axis, value.ndim == src.ndim), g, index)
    return [dsrc, None, dvalue]


@def_backward(Dropout)
def _dropout_grad(op, inputs, outputs, grads, needs):
    # The forward op's mask output, not a second draw: the same elements are dropped.
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(DropoutBackward.get(op.drop_prob), g, outputs[1])]


@def_backward(DropoutBackward)
def _dropout_backward_grad(op, inputs, outputs, grads, needs):
    # Linear in dy and symmetric: its transpose is itself.
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None]
    return [run(op, g, inputs[1]), None]


@def_backward(Pad)
def _pad_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(PadBackward.get(op.pad_width, op.mode), g)]


@def_backward(PadBackward)
def _pad_backward_grad(op, inputs, outputs, grads, needs):
    # PadBackward is the transpose of padding with zeros, so its transpose is that padding.
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(Pad.get(op.pad_width, op.mode, 0.0), g)]
