"""``Program``: several ops as one op -- the contract between ``jit.trace``'s compiler
(``mge/jit/program.py``, whose ``TracedProgram`` is one) and the devices that run programs.

A program is a flat list of *steps* over numbered *slots* (values of the device), with no
tensors, no transformations and no shape rules at run time:

* ``plan``: the steps, each a tuple ``(op, input slots, output slots, output descs, reuse,
  frees, ufunc, into)``: run ``op`` through the device's kernel door on the values of the input
  slots, after setting the slots listed in ``frees`` to nothing (their last reader is this step,
  so the door may write an output over a freed input: ``reuse`` lists those input positions),
  and store its outputs in the output slots.  ``ufunc``/``into`` and a step whose ``op`` is
  ``None`` (a fused chain) are the CPU engine's own steps; a program compiled for another
  device has neither.
* ``n_slots``: the number of slots; the program's inputs fill slots ``0 ..``, its folded
  constants (``consts``, values of the device) the next ones.
* ``out_slots``: the slots whose values are the program's outputs, ``out_descs`` their shapes
  and dtypes.

A device runs a program as one op: the CPU device with its compiled engine (``mge.jit.engine``),
the CUDA device step by step through its own ``execute`` (``cuda/launch/program.py``).
A program for another device may hold two kinds of steps that stand for several ops: an
``ElemwiseChain`` (a run of elementwise ops over one shape) and a ``MultiUpdate`` (one
optimizer's updates of many parameters).  A device
that runs programs says so with ``Device.runs_programs``.
"""
from .base import INFER, OpDef, def_infer, op_error

__all__ = ["Program", "ElemwiseChain", "MultiUpdate"]


class Program(OpDef):
    """Base class of the ops that are programs of steps (see the module docstring); a subclass
    sets ``plan``, ``n_slots``, ``out_slots``, ``out_descs``, ``consts`` and ``label``."""

    never_recompute = True  # DTR cannot recompute a program's outputs piecemeal
    complex_ok = True  # it passes values to its steps, each checked when it was recorded


class ElemwiseChain(OpDef):
    """A chain of ``Elemwise`` ops over values of one shape as one op -- a program's step for a
    device that fuses such chains into one kernel (the CUDA device), with the bits of the ops
    run one by one: each step's result is rounded to its dtype before the next reads it.

    Values are numbered registers: the op's inputs are registers ``0 .. len(in_dtypes) - 1``
    (an input of one element is read as a scalar, broadcast), then each step ``(mode, inputs)``
    of ``steps`` writes the next register, of dtype ``dtypes[register]``.  ``outs`` lists the
    registers that are the op's outputs; ``shape`` is the shape of every output.
    """

    _fields = ("steps", "dtypes", "n_in", "outs", "shape")
    long_running = False
    never_recompute = True  # (only in programs, which DTR does not recompute piecemeal)



class MultiUpdate(OpDef):
    """The fused optimizer update ``update`` (an ``SGDUpdate``, ``AdamUpdate``...) of ``count``
    parameters as one op -- a program's step for a device that updates many tensors in one
    launch (the CUDA device), with the bits of the updates run one by one.

    Every member has the same op (the same hyperparameters) and the same input dtypes; the
    inputs are the concatenation of the members' inputs (``(param, grad, *states)`` each, all of
    one length), the outputs the concatenation of their outputs.  Members are independent: none
    reads what another writes.
    """

    _fields = ("update", "count")
    long_running = False
    never_recompute = True  # (only in programs, which DTR does not recompute piecemeal)

    def members(self, values):
        """``values`` (the op's inputs) cut into its members' inputs."""
        n = len(values)
        if self.count < 1 or n % self.count:
            raise op_error(TypeError, self, f"{n} inputs do not split into {self.count} updates "
                                            f"of equal arity")
        k = n // self.count
        return [values[m * k:(m + 1) * k] for m in range(self.count)]


@def_infer(MultiUpdate)
def _infer_multi_update(op, descs):
    rule = INFER[type(op.update)]
    out = []
    for member in op.members(list(descs)):
        out.extend(rule(op.update, member))
    return out
