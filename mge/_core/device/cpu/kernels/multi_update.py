"""CPU kernel of ``MultiUpdate`` (``ops/program.py``): a program's group of optimizer updates.

A ``jit.trace`` program for a device that is not the CPU groups its optimizer updates into
``MultiUpdate`` steps (``mge/jit/program.py``); a device without multi-tensor kernels of its own
-- one that runs the CPU's kernels, as the tests' opaque device -- computes such a step here,
member by member with the single update's own CPU kernel, so with its bits.
"""
from ....ops.program import MultiUpdate
from ..table import KERNELS, def_kernel


@def_kernel(MultiUpdate)
def _cpu_multi_update(op, *arrays):
    kernel = KERNELS[type(op.update)]
    outs = []
    for member in op.members(arrays):
        outs.extend(kernel(op.update, *member))
    return tuple(outs)
