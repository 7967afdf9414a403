"""The launcher of ``MultiUpdate`` (``ops/program.py``): a ``jit.trace`` program's optimizer
updates of many parameters in one launch per chunk (``kernels/multi_update.py``).

The inputs arrive dense (the device makes views dense first).  Each member's outputs are its
donated inputs' buffers where the single update's ``INPLACE`` pairs allow it (the new parameter
over the old one, a new state over the old state: ``plans.inplace_aliases``, as the single
update's plan launcher binds them), new dense buffers otherwise.  Then, per chunk of at most
``capacity`` members, one launch of the update kernel over the chunk's elements (none when they
are all empty) and, for the optimizers with a step counter, one launch that writes every
member's ``step + 1`` after it.
"""
import numpy as np

from ....ops.program import MultiUpdate
from ..kernels.launch import grid_for
from ..kernels.multi_update import NTHREADS, multi_update_kernels, pack_table
from ..kernels.optimizer import INPLACE
from . import def_launcher
from .plans import inplace_aliases

__all__ = ["launch_multi_update"]


@def_launcher(MultiUpdate, reuse=True)
def launch_multi_update(device, op, inputs, descs, donated):
    """Run the group ``op`` on ``inputs`` (its members' inputs one after another); its members'
    outputs, some written over donated inputs (``reuse``)."""
    update = op.update
    members = op.members(inputs)
    n_out = len(descs) // op.count
    if n_out * op.count != len(descs):
        raise TypeError(f"{op.name}: {len(descs)} outputs do not split into {op.count} updates")
    dtypes = tuple(b.dtype for b in members[0])
    ks = multi_update_kernels(update, dtypes)
    pairs = INPLACE[type(update)]
    outs, sizes = [], []
    for m, ins in enumerate(members):
        base = m * len(ins)
        mine = descs[m * n_out:(m + 1) * n_out]
        sizes.append(_checked_size(op, m, ins, mine, dtypes, ks))
        given = {k - base for k in donated if base <= k < base + len(ins)}
        aliases = inplace_aliases(ins, mine, given, pairs)
        device.inplace += len(aliases)
        for o, d in enumerate(mine):
            b = aliases.get(o)
            outs.append(b if b is not None else
                        device.empty(d.shape, d.dtype, f"an output of {op.name} ({d.dtype})"))
    device.load_kernels(ks.kernels)  # (both kernels in one build)
    scalars = [np.float64(getattr(update, s)) for s in ks.scalars]
    for first in range(0, op.count, ks.capacity):
        chunk = range(first, min(first + ks.capacity, op.count))
        table, n = _table(ks, members, outs, n_out, sizes, chunk)
        count = np.int32(len(chunk))
        if n:
            device.launch(ks.update, grid_for(n, NTHREADS), (NTHREADS, 1, 1),
                          [table, count, np.int64(n)] + scalars)
        if ks.step is not None:  # (after the update in stream order: it has read the counters)
            device.launch(ks.step, grid_for(len(chunk), NTHREADS), (NTHREADS, 1, 1),
                          [table, count])
    return tuple(outs)


def _checked_size(op, m, ins, descs, dtypes, ks):
    # member m's elements: every array the kernel reads per element has the parameter's shape,
    # the step counter one element, each output the shape of the input it replaces (the kernel
    # indexes them all alike: a wrong size would read or write past a buffer)
    got = tuple(b.dtype for b in ins)
    if got != dtypes:
        raise TypeError(f"{op.name}: member {m} has inputs of {', '.join(map(str, got))}, the "
                        f"group's first {', '.join(map(str, dtypes))}")
    shape = ins[0].shape
    for k in ks.arrays:
        if ins[k].shape != shape:
            raise ValueError(f"{op.name}: member {m}'s input {k} has shape {ins[k].shape}, its "
                             f"parameter {shape}")
    if ks.step_input is not None and ins[ks.step_input].size != 1:
        raise ValueError(f"{op.name}: member {m}'s step counter has shape "
                         f"{ins[ks.step_input].shape}, one element expected")
    if len(descs) != len(ins) - 1:
        raise TypeError(f"{op.name}: {len(descs)} outputs for an update of {len(ins)} inputs")
    for o, d in enumerate(descs):
        if d.shape is not None and tuple(d.shape) != ins[_replaced(o)].shape:
            raise ValueError(f"{op.name}: member {m}'s output {o} has shape {tuple(d.shape)}, "
                             f"its input {_replaced(o)} {ins[_replaced(o)].shape}")
    return ins[0].size


def _replaced(out_index):
    # the input an update's output replaces: the parameter's, else the next input's (no gradient)
    return 0 if out_index == 0 else out_index + 1


def _table(ks, members, outs, n_out, sizes, chunk):
    # the chunk's table (one row of addresses per member) and its elements
    ends, rows, n = [], [], 0
    for m in chunk:
        n += sizes[m]
        ends.append(n)
        ins, mine = members[m], outs[m * n_out:(m + 1) * n_out]
        rows.append([(ins[k] if kind == "in" else mine[k]).address for kind, k in ks.columns])
    return pack_table(ks, ends, rows), n
