"""Backward rules of the creation ops: none of them has a tensor input, so none has a gradient."""
from ...ops.creation import Arange, Eye, Fill, Linspace
from ..registry import def_backward


def _no_gradients(op, inputs, outputs, grads, needs):
    # No tensor inputs, so no gradients: the list has one entry per input, i.e. none.
    return [None] * len(inputs)


for _cls in (Fill, Arange, Linspace, Eye):
    def_backward(_cls)(_no_gradients)
del _cls
