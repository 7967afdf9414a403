"""The loop that runs a compiled trace program (compiled: it is the replay's per-op path).

``run_plan`` walks a ``TracedProgram``'s plan: each step reads its input slots, drops the slots
whose last reader it is (so the kernel door may write the output into a freed buffer), calls the
CPU device's kernel door and stores the outputs in their slots.  An error names the traced op.
"""
import cython

from .._core import _accel

_accel.guard(__name__)
if cython.compiled:
    from cython.cimports.mge._core.device.cpu.device_c import CpuDevice
else:
    CpuDevice = _accel.load("mge._core.device.cpu.device").CpuDevice

__all__ = ["run_plan"]


def run_plan(cpu_, plan: list, n_slots: cython.Py_ssize_t, inputs, out_slots: tuple, name):
    """Run ``plan`` (``[(op, input slots, output slots, descs, reuse, frees, ufunc, into)]``) on
    ``inputs`` through ``cpu_``'s kernel door (or ``ufunc(*args, out=args[into])`` where the
    plan says so); returns the values of ``out_slots``."""
    cpu: CpuDevice = cpu_
    env = [None] * n_slots
    k: cython.Py_ssize_t
    for k in range(len(inputs)):
        env[k] = inputs[k]
    inputs = None
    step: tuple
    for step in plan:
        ins: tuple = step[1]
        args = []
        for k in range(len(ins)):
            args.append(env[cython.cast(cython.Py_ssize_t, ins[k])])
        frees: tuple = step[5]
        for k in range(len(frees)):
            env[cython.cast(cython.Py_ssize_t, frees[k])] = None
        ufunc = step[6]
        try:
            if ufunc is not None:  # into a freed buffer of the program's own (program.py)
                res = (ufunc(*args, out=args[cython.cast(cython.Py_ssize_t, step[7])]),)
            else:
                res = cpu.execute(step[0], args, step[3], step[4])
        except Exception as e:
            _name_the_op(e, step[0], name)
            raise
        args = None
        outs: tuple = step[2]
        for k in range(len(outs)):
            env[cython.cast(cython.Py_ssize_t, outs[k])] = res[k]
    return tuple([env[s] for s in out_slots])


def _name_the_op(e, op, name):
    note = f"(in {name}, at the traced op {op.name})"
    if hasattr(e, "add_note"):
        e.add_note(note)
    elif e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]} {note}",) + e.args[1:]
