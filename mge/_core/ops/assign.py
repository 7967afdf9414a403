"""``Assign``: an in-place update as an op.

``Tensor._reset(value)`` -- what ``x += y``, ``x[i] = v``, the optimizers' updates and the
initialisers do -- is ``apply(Assign(), x, value)``, so every transformation sees it (grad moves
its slot with the value, a trace records it).  Its meaning, carried out by the bottom of the stack
(``dispatch.py``): afterwards the tensor object ``x`` holds ``value``'s value (it shares the
storage, as ``Identity`` does), and the one output holds ``x``'s *old* value, for whoever wants to
keep it (grad does, for the ops recorded on it); dropping it frees the old value.  The kernel is
``Identity``'s on ``value`` alone, so the old value's last reader is still the op that computed
the new one, which may then write over it in place.
"""
from .base import OpDef, TensorDesc, def_infer

__all__ = ["Assign"]


class Assign(OpDef):
    """``(target, value)`` -> the target's old value; the target takes ``value``'s value."""

    long_running = False
    complex_ok = True


@def_infer(Assign)
def _infer_assign(op, descs):
    # the output holds the target's old value
    return [TensorDesc(descs[0][0], descs[0][1])]
