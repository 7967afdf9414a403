"""Backward rules of the pooling ops (``mge/_core/ops/nn_pool.py``).

``PoolingBackward`` is linear in ``dy``, and its transpose is ``MaxPoolingGather`` (max) or the
average ``Pooling`` itself, whose own rules lead back to it: pooling is differentiable to any order.
"""
from ...ops.nn_pool import AdaptivePooling, MaxPoolingGather, Pooling, PoolingBackward
from ..gradutil import output, run
from ..registry import def_backward


def _pool_output(op, inputs, outputs, g):
    # Only max pooling reads y; the average modes take any tensor of y's shape in its place: g,
    # always (whether the grad transformation still holds y must not change the ops issued, or a
    # traced step would issue different ops from call to call).
    if op.mode != "max":
        return g
    return output(op, inputs, outputs)


@def_backward(Pooling, keeps_outputs=lambda op: op.mode == "max")
def _pooling_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    bwd = PoolingBackward.get(op.mode, op.kernel, op.stride, op.padding)
    return [run(bwd, inputs[0], _pool_output(op, inputs, outputs, g), g)]


@def_backward(AdaptivePooling, keeps_outputs=lambda op: op.mode == "max")
def _adaptive_pooling_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    p = op.as_pooling(inputs[0].shape)
    bwd = PoolingBackward.get(p.mode, p.kernel, p.stride, p.padding)
    return [run(bwd, inputs[0], _pool_output(op, inputs, outputs, g), g)]


@def_backward(PoolingBackward)
def _pooling_backward_grad(op, inputs, outputs, grads, needs):
    # Linear in dy; x and y only choose the arg-max (piecewise constant), so they get none.
    g = grads[0]
    if g is None or not needs[2]:
        return [None, None, None]
    x, y = inputs[:2]
    if op.mode == "max":
        dg = run(MaxPoolingGather.get(op.kernel, op.stride, op.padding), x, y, g)
    else:
        dg = run(Pooling.get(op.mode, op.kernel, op.stride, op.padding), g)
    return [None, None, dg]


@def_backward(MaxPoolingGather)
def _max_gather_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[2]:
        return [None, None, None]
    x, y = inputs[:2]
    bwd = PoolingBackward.get("max", op.kernel, op.stride, op.padding)
    return [None, None, run(bwd, x, y, g)]
