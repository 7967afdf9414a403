"""The CUDA device's launcher of programs (``ops/program.py``'s ``Program``: a ``jit.trace``
replay's ops as one op).

A program runs as one command of the channel: its steps go through ``CudaDevice.execute`` one
after another -- the same launchers, so the same kernels and the same bits as the ops run
eagerly -- without the channel's per-op work (commands, handles, shape rules, memory
bookkeeping of intermediates).  A step's ``frees`` drop the slots it reads last before it
runs, so the device may write its output over such an input (the door's ``reuse``) and an
intermediate's block goes back to the pool right after its last reader, as in eager runs.  The
program's own inputs belong to their tensors and are never freed by it.

A program compiled for this device has no CPU engine steps (fused chains, direct ufunc calls:
``mge.jit.program`` leaves them out for a device that is not the CPU); an error in a step names
the traced op.
"""
from ....ops.program import Program
from . import def_launcher

__all__ = ["launch_program"]


@def_launcher(Program, strided=True)
def launch_program(device, op, inputs, descs):
    """Run ``op``'s steps on ``device``; the buffers of its output slots."""
    env = [None] * op.n_slots
    n = len(inputs)
    env[:n] = inputs
    env[n:n + len(op.consts)] = op.consts  # (the folded constants follow the inputs)
    inputs = None
    for step in op.plan:
        step_op, ins, outs, out_descs, reuse, frees = step[:6]
        if step_op is None or step[6] is not None:
            raise RuntimeError(f"{op.name}: a CPU engine step in a program for {device.name} "
                               f"(the program was compiled for another device)")
        args = [env[s] for s in ins]
        for s in frees:
            env[s] = None
        try:
            res = device.execute(step_op, args, out_descs, reuse)
        except Exception as e:
            _name_the_op(e, step_op, op)
            raise
        args = None
        for k, s in enumerate(outs):
            env[s] = res[k]
        res = None  # (only the slots hold the outputs: a freed one may be donated next)
    return tuple(env[s] for s in op.out_slots)


def _name_the_op(e, step_op, op):
    note = f"(in {op.name}, at the traced op {step_op.name})"
    if hasattr(e, "add_note"):
        e.add_note(note)
    elif e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]} {note}",) + e.args[1:]
