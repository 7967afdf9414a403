"""Backward rules of the ops of ``mge/_core/ops/nn.py``: softmax family, one-hot indexing,
dropout, padding and their backward ops (convolution, pooling and normalisation are in
``conv.py``, ``pool.py`` and ``norm.py``).

Each backward op is the transpose of a linear map, so its own rule is the forward map again: every
rule here is twice differentiable.
"""
from ...ops.creation import Fill
from ...ops.nn import (
    Dropout, DropoutBackward, IndexingOneHot, IndexingSetOneHot, LogSoftmax, Pad, PadBackward,
    Softmax, SoftmaxCrossEntropy, SoftmaxCrossEntropyBackward,
)
from ...ops.reduce import Reduce
from ...ops.shape import Reshape
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


@def_backward(SoftmaxCrossEntropy)
def _softmax_cross_entropy_grad(op, inputs, outputs, grads, needs):
    # dlogits = (softmax(logits) - onehot(label)) * dy, in one op; the label gets none
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None]
    logits, label = inputs
    return [run(SoftmaxCrossEntropyBackward.get(op.axis, op.reduction), logits, label, g), None]


@def_backward(SoftmaxCrossEntropyBackward)
def _softmax_cross_entropy_backward_grad(op, inputs, outputs, grads, needs):
    # out = (p - onehot) * s with p = softmax(logits) and s each sample's share of dy
    # (dy itself, dy / count for a mean, dy for a sum; broadcast along the axis):
    #   d dy     = sum(gg * (p - onehot)) along the axis (over everything, / count, when reduced)
    #   d logits = s * p * (gg - sum(gg * p))                (softmax's Jacobian, times s)
    gg = grads[0]
    logits, label, dy = inputs
    if gg is None:
        return [None, None, None]
    axis = op.axis % len(logits.shape)
    count = 1
    for n in label.shape:
        count *= n
    d_logits = d_dy = None
    if needs[2]:
        per_class = SoftmaxCrossEntropyBackward.get(op.axis, "none")
        ones = run(Fill.get(tuple(label.shape), 1, logits.dtype, logits.device))
        prod = ew("mul", gg, run(per_class, logits, label, ones))
        if op.reduction == "none":
            d_dy = run(Reduce.get("sum", axis, False), prod)
        else:
            d_dy = run(Reduce.get("sum", None, False), prod)
            if op.reduction == "mean" and count:
                d_dy = ew("true_div", d_dy, float(count))
    if needs[0]:
        p = run(Softmax.get(axis), logits)
        inner = ew("sub", gg, _sum_keepdims(ew("mul", gg, p), axis))
        if op.reduction == "none":
            share = _expand(dy, axis)
        else:
            share = ew("true_div", dy, float(count)) if op.reduction == "mean" and count else dy
        d_logits = ew("mul", ew("mul", p, inner), share)
    return [d_logits, None, d_dy]


def _expand(t, axis):
    # ``t`` with a size-1 ``axis`` (the loss's shape -> the logits' rank), for broadcasting
    shape = list(t.shape)
    shape.insert(axis, 1)
    return run(Reshape.get(tuple(shape)), t)


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
