"""Backward rules of ``Identity``, ``Detach``, ``Copy`` and ``AssertEqual``."""
from ...ops.misc import AssertEqual, Copy, Detach, Identity
from ..gradutil import run
from ..registry import def_backward


@def_backward(Identity)
def _identity_backward(op, inputs, outputs, grads, needs):
    return [grads[0] if needs[0] else None]


@def_backward(Detach)
def _detach_backward(op, inputs, outputs, grads, needs):
    return [None]  # the point of Detach: nothing flows back through it


@def_backward(Copy)
def _copy_backward(op, inputs, outputs, grads, needs):
    # The gradient goes back to the device the value came from.
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    device = inputs[0].device
    if g.device == device:
        return [g]
    return [run(Copy.get(device), g)]


@def_backward(AssertEqual)
def _assert_equal_backward(op, inputs, outputs, grads, needs):
    # the output is ``expect``: its gradient is the output's; the check passes nothing back
    return [grads[0] if needs[0] else None, None, None]
