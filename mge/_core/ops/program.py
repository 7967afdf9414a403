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
the CUDA device step by step through its own ``execute`` (``cuda/launch/program.py``).  A device
that runs programs says so with ``Device.runs_programs``.
"""
from .base import OpDef

__all__ = ["Program", "ElemwiseChain"]


class Program(OpDef):
    """Base class of the ops that are programs of steps (see the module docstring); a subclass
    sets ``plan``, ``n_slots``, ``out_slots``, ``out_descs``, ``consts`` and ``label``."""

    never_recompute = True  # DTR cannot recompute a program's outputs piecemeal


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
