"""CUDA C for ``MultiUpdate`` (``ops/program.py``): one optimizer's updates of many parameters in
one launch, as PyTorch's multi-tensor apply does.

A ``jit.trace`` program for the CUDA device groups the updates of a training step -- one
``SGDUpdate`` (``AdamUpdate``...) per parameter, all with the same hyperparameters and dtypes --
into ``MultiUpdate`` steps (``mge/jit/program.py``); the launcher (``cuda/launch/multi_update.py``)
runs one of these kernels per chunk of members, where the updates one by one took a launch each.

**The flattened space.**  The members' elements are numbered one after another: member ``j``
holds elements ``[end[j - 1], end[j])`` (``end[-1] = 0``).  Each thread runs a grid-stride loop
over that space; when its element leaves the member it was in, it finds the next one (a binary
search over ``end``: empty members are skipped, and an element only grows along a thread's
loop) and loads that member's pointers (and, for the optimizers with a step counter, computes
its ``t`` once).  Then, for element ``i`` of the member, it runs *the single update's own
statements* (``optimizer.update_text``: the same expression builder, so the same operations,
roundings and bits as ``optimizer.py``'s kernel and the CPU kernel).

**The table.**  The members' ends and array addresses are one struct passed by value,
``mge_tensor_table<T, W>`` (``T`` members of ``W`` pointers: ``columns`` names them), sized so
that every kernel parameter together fits CUDA's 4 KB of kernel parameters
(``PARAM_BYTES``): nothing is copied to the device first, and a group of more than ``T``
members is launched in chunks of ``T`` (``capacity``).  Kernel parameters are read-only and
read through the constant cache, as PyTorch's tensor lists are.

**Step counters.**  The optimizers with a step counter (Adam, Adagrad, Adadelta, RMSprop) read
each member's counter in the update kernel; a second kernel, after it in stream order, writes
every member's ``step + 1`` (one thread a member), so the counter written over in place is read
by every thread first -- as ``optimizer.py``'s two launches do for one parameter.

``DIFFERENCES`` are the single updates' own (``optimizer.DIFFERENCES``).
"""
import functools

import numpy as np

from .elemwise import KernelSource
from .optimizer import (
    _CODE, _PARTS, _STORAGE, DIFFERENCES, NTHREADS, NVRTC_OPTIONS, step_increment, update_text,
)

__all__ = ["MultiUpdateKernels", "multi_update_kernels", "pack_table", "PARAM_BYTES",
           "NVRTC_OPTIONS", "NTHREADS", "DIFFERENCES"]

#: The bytes of kernel parameters CUDA takes (every architecture, every CUDA version).
PARAM_BYTES = 4096

_TABLE = r"""#ifndef MGE_TENSOR_TABLE
#define MGE_TENSOR_TABLE
/* the table is read where the launch put it (never copied per thread, whatever the
   optimisation level): a __grid_constant__ parameter, from Volta and CUDA 11.7 on */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700 && \
    (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))
#define MGE_GRID_CONSTANT __grid_constant__
#else
#define MGE_GRID_CONSTANT
#endif
/* a multi-tensor kernel's members, by value: member j holds elements [end[j - 1], end[j]) of
   the flattened space (end[-1] = 0); ptr[j] are its arrays' addresses */
template <int T, int W> struct mge_tensor_table {
    long long end[T];
    unsigned long long ptr[T][W];
};
/* the member holding element g: the first from lo whose end lies past g (g < end[count - 1]),
   by bisection -- an empty member's end is its predecessor's, so it is skipped */
template <int T, int W>
MGE_FN int mge_member_of(const mge_tensor_table<T, W>& tab, int lo, int count, long long g) {
    int hi = count - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (tab.end[mid] > g) hi = mid; else lo = mid + 1;
    }
    return lo;
}
#endif
"""


class MultiUpdateKernels:
    """The kernels of one ``MultiUpdate`` signature: ``update`` (the grid-stride kernel over the
    members' elements), ``step`` (the counters' kernel, or None), ``capacity`` (members a launch
    takes), ``columns`` (each pointer column of the table: ``("out", j)`` for the member's output
    ``j``, ``("in", k)`` for its input ``k``), ``table`` (the table's numpy struct dtype),
    ``scalars`` (the op's ``double`` parameters after ``count`` and ``n``), ``arrays`` (the
    input positions read per element: parameter, gradient, array states) and ``step_input``
    (the step counter's input position, or None)."""

    __slots__ = ("update", "step", "capacity", "columns", "table", "scalars", "arrays",
                 "step_input")

    def __init__(self, update, step, capacity, columns, table, scalars, arrays, step_input):
        self.update, self.step, self.capacity = update, step, capacity
        self.columns, self.table, self.scalars = columns, table, scalars
        self.arrays, self.step_input = arrays, step_input

    @property
    def kernels(self):
        """The kernels the launches use, in order."""
        return (self.update,) if self.step is None else (self.update, self.step)


def table_dtype(capacity, width):
    """The numpy struct with the bytes of ``mge_tensor_table<capacity, width>``."""
    return np.dtype([("end", np.int64, (capacity,)), ("ptr", np.uint64, (capacity, width))],
                    align=True)


def capacity_for(width, nscalars):
    """The most members a table of ``width`` pointers each holds with the update kernel's other
    parameters (``int count``, ``long long n``, ``nscalars`` doubles) in ``PARAM_BYTES``."""
    return (PARAM_BYTES - 16 - 8 * nscalars) // (8 * (1 + width))


def multi_update_kernels(op, dtypes):
    """The ``MultiUpdateKernels`` of a group of update op ``op`` (an ``SGDUpdate``,
    ``AdamUpdate``...) on members with inputs of ``dtypes`` (one member's, in the op's order).
    A ``TypeError`` names the op and dtypes the single update's kernels refuse."""
    text = update_text(op, dtypes)  # (checks the op, the dtypes and their count)
    return _multi_update_kernels(text)


@functools.lru_cache(maxsize=None)
def _multi_update_kernels(u):
    # output j of the kernel's statements is the member's output: 0 the parameter, the state of
    # input k its output k - 1 (an update's outputs are its inputs without the gradient)
    columns = [("out", 0)] + [("out", k - 1) for k in u.states] + [("in", k) for k in u.arrays]
    if u.step is not None:
        columns += [("in", u.step), ("out", u.step - 1)]
    width = len(columns)
    cap = capacity_for(width, len(u.scalars))
    table = f"mge_tensor_table<{cap}, {width}>"
    st = u.storage
    decls, loads = [], []
    names = [f"out{j}" for j in range(len(u.out_dtypes))] + [f"in{k}" for k in u.arrays]
    types = [f"{st[d]}*" for d in u.out_dtypes] + [f"const {st[u.in_dtypes[k]]}*" for k in u.arrays]
    if u.step is not None:
        names.append("step")
        types.append(f"const {st[u.in_dtypes[u.step]]}*")
    for c, (name, ctype) in enumerate(zip(names, types)):
        decls.append(f"{ctype} {name} = 0;")
        loads.append(f"{name} = ({ctype})tab.ptr[j][{c}];")
    if u.step is not None:  # t from the member's counter, once per member a thread meets
        decls.append("double t = 0.0;")
        loads.append(f"t = {u.t_expr};")
    kname = f"mge_multi_opt_{u.tag}_t{cap}"
    params = (f"const MGE_GRID_CONSTANT {table} tab", "int count", "long long n") + tuple(
        f"double {s}" for s in u.scalars)
    unused = "".join(f"    (void){s};\n" for s in u.scalars)  # not every variant uses each
    body = "\n        ".join(u.lines)
    text = (f"MGE_KERNEL {kname}({', '.join(params)})\n{{\n{unused}"
            f"    int j = -1;\n    long long start = 0, end = 0;\n"
            + "".join(f"    {d}\n" for d in decls) +
            f"    MGE_LOOP(unsigned long long, g, n) {{\n"
            f"        if ((long long)g >= end) {{  /* g left member j: find its own */\n"
            f"            j = mge_member_of(tab, j + 1, count, (long long)g);\n"
            f"            start = j ? tab.end[j - 1] : 0;\n"
            f"            end = tab.end[j];\n"
            + "".join(f"            {line}\n" for line in loads) +
            f"        }}\n"
            f"        const unsigned long long i = g - (unsigned long long)start;\n"
            f"        {body}\n    }}\n}}\n")
    parts = _PARTS + (("MGE_TENSOR_TABLE", _TABLE), (kname, text))
    update = KernelSource(kname, parts, params, True, 64, len(u.arrays) + int(u.step is not None))
    step = None
    if u.step is not None:
        z = u.in_dtypes[u.step]
        c = _STORAGE[z]
        sname = f"mge_multi_opt_step_{_CODE[z]}_t{cap}w{width}"
        stext = (f"MGE_KERNEL {sname}(const MGE_GRID_CONSTANT {table} tab, int count)\n{{\n"
                 f"    MGE_LOOP(unsigned long long, j, count) {{\n"
                 f"        const {c}* step = (const {c}*)tab.ptr[j][{width - 2}];\n"
                 f"        {c}* step_out = ({c}*)tab.ptr[j][{width - 1}];\n"
                 f"        mge_stf(step_out, 0, {step_increment(z, 'step')});\n    }}\n}}\n")
        step = KernelSource(sname, _PARTS + (("MGE_TENSOR_TABLE", _TABLE), (sname, stext)),
                            (f"const MGE_GRID_CONSTANT {table} tab", "int count"), True, 64, 1)
    return MultiUpdateKernels(update, step, cap, tuple(columns), table_dtype(cap, width),
                              u.scalars, u.arrays, u.step)


def pack_table(kernels, ends, rows):
    """The ``tab`` argument (a ``numpy.void``) of ``kernels`` for members with ``ends`` (the
    flattened space's cumulative sizes) and ``rows`` (per member, one address per column of
    ``kernels.columns``); at most ``kernels.capacity`` members."""
    if len(ends) > kernels.capacity or len(rows) != len(ends):
        raise ValueError(f"CUDA MultiUpdate table: {len(ends)} ends and {len(rows)} rows for a "
                         f"table of {kernels.capacity} members")
    packed = np.zeros((), kernels.table)
    if ends:
        packed["end"][:len(ends)] = ends
        packed["ptr"][:len(rows)] = rows
    return packed[()]
