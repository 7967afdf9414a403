"""Ops that move or relabel values: ``Detach`` (cut from autodiff), ``Copy`` (to a device)."""
from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel
from .gradutil import cached_op, run

__all__ = ["Detach", "Copy", "Identity"]


class Identity(OpDef):
    """Returns its input unchanged (the storage is shared; storage is never written in place)."""


class Detach(OpDef):
    """Like ``Identity``, but autodiff does not look through it."""


class Copy(OpDef):
    """Copy to ``device`` (a ``CompNode``)."""

    _fields = ("device",)
    sets_device = True


def _same(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])]


for _cls in (Identity, Detach, Copy):
    def_infer(_cls)(_same)


@def_kernel(Identity)
@def_kernel(Detach)
def _cpu_identity(op, x):
    return (x,)


@def_kernel(Copy)
def _cpu_copy(op, x):
    # The channel of the target device takes a host array; between CPU devices that is x itself.
    return (x,)


# -- backward rules ------------------------------------------------------------------------------

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
    return [run(cached_op(Copy, device), g)]
