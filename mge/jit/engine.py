"""The engine of compiled trace programs (compiled: it is the replay's per-op path).

``run_plan`` walks a ``TracedProgram``'s plan: each step reads its input slots, drops the slots
whose last reader it is (so the kernel door may write the output into a freed buffer), calls the
CPU device's kernel door and stores the outputs in their slots.  An error names the traced op.
"""
import time

import cython
import numpy as np

from .._core import _accel

_accel.guard(__name__)
if cython.compiled:
    from cython.cimports.libc.stdlib import free, malloc
    from cython.cimports.mge._core.device.cpu.device_c import CpuDevice
else:
    CpuDevice = _accel.load("mge._core.device.cpu.device").CpuDevice

_clock = time.perf_counter

__all__ = ["run_plan", "run_fused", "set_overlap", "ADD", "SUB", "MUL", "DIV", "NEG"]


def run_plan(cpu_, plan: list, n_slots: cython.Py_ssize_t, inputs, out_slots: tuple, name,
             profile=None):
    """Run ``plan`` (``[(op, input slots, output slots, descs, reuse, frees, ufunc, into)]``) on
    ``inputs`` through ``cpu_``'s kernel door (or ``ufunc(*args, out=args[into])`` where the
    plan says so); returns the values of ``out_slots``.  With a ``profile`` dict, each step's
    count and time are added to ``profile[op name]`` (``[calls, seconds]``).

    A step whose ``ufunc`` field is a list is a product *overlapped* with those steps: the
    product starts on the second GEMM thread (``set_overlap``'s ``start``), the listed steps
    run here meanwhile, then ``join`` waits for it (a product that cannot start runs after
    them, here)."""
    cpu: CpuDevice = cpu_
    env = [None] * n_slots
    k: cython.Py_ssize_t
    for k in range(len(inputs)):
        env[k] = inputs[k]
    inputs = None
    _run_steps(cpu, plan, env, name, profile)
    return tuple([env[s] for s in out_slots])


_start = None  # (op, args) -> the product's outputs, started, or None (set_overlap)
_join = None


def set_overlap(start, join):
    """The functions overlapped steps start and join their products with (``mge.jit.program``)."""
    global _start, _join
    _start, _join = start, join


@cython.cfunc
def _run_steps(cpu: CpuDevice, plan: list, env: list, name, profile):
    k: cython.Py_ssize_t
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
        t0: cython.double = _clock() if profile is not None else 0.0
        if type(ufunc) is list:  # a product overlapped with the steps listed
            res = _overlapped(cpu, step, args, ufunc, env, name, profile, t0)
            args = None
            outs_: tuple = step[2]
            for k in range(len(outs_)):
                env[cython.cast(cython.Py_ssize_t, outs_[k])] = res[k]
            continue
        try:
            if step[0] is None:  # a fused chain (program.py): step[6] holds its tables
                st = cython.cast(tuple, ufunc)
                nv: cython.Py_ssize_t = st[2]
                res = run_fused(st[0], st[1], args[:nv], st[3], args[nv:], st[4], st[5], st[6])
            elif ufunc is not None:  # into a freed buffer of the program's own (program.py)
                res = (ufunc(*args, out=args[cython.cast(cython.Py_ssize_t, step[7])]),)
            else:
                res = cpu.execute(step[0], args, step[3], step[4])
        except Exception as e:
            _name_the_op(e, step[0], name)
            raise
        args = None
        if profile is not None:
            _account(profile, step[0], _clock() - t0)
        outs: tuple = step[2]
        for k in range(len(outs)):
            env[cython.cast(cython.Py_ssize_t, outs[k])] = res[k]


@cython.cfunc
def _overlapped(cpu: CpuDevice, step: tuple, args: list, steps: list, env: list, name, profile,
                t0: cython.double):
    # the product of ``step`` on the second thread while ``steps`` run here; its outputs
    op = step[0]
    try:
        res = _start(op, args)
    except Exception as e:
        _name_the_op(e, op, name)
        raise
    spent: cython.double = _clock() - t0 if profile is not None else 0.0
    try:
        _run_steps(cpu, steps, env, name, profile)  # (each names its own errors)
    finally:
        t1: cython.double = _clock() if profile is not None else 0.0
        if res is not None:
            _join()
    try:
        if res is None:  # it could not start: it runs now, here
            res = cpu.execute(op, args, step[3], step[4])
    except Exception as e:
        _name_the_op(e, op, name)
        raise
    if profile is not None:  # the product's time: its start, the wait for it (or its run)
        _account(profile, op, spent + _clock() - t1)
    return res


def _account(profile, op, seconds):
    key = "fused elementwise chain" if op is None else op.name
    entry = profile.get(key)
    if entry is None:
        entry = profile[key] = [0, 0.0]
    entry[0] += 1
    entry[1] += seconds


def _name_the_op(e, op, name):
    what = "a fused elementwise chain" if op is None else op.name
    note = f"(in {name}, at the traced op {what})"
    if hasattr(e, "add_note"):
        e.add_note(note)
    elif e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]} {note}",) + e.args[1:]


# -- fused elementwise chains ----------------------------------------------------------------------
# Opcodes of a fused chain (program.py builds the code): each is (opcode, dst, a, b) over float32
# registers, one register per value of the chain.
ADD, SUB, MUL, DIV, NEG = 0, 1, 2, 3, 4


def run_fused(code, n_regs, vec_inputs, vec_regs, scalars, scalar_regs, out_regs, shape):
    """Run a fused chain of float32 elementwise ops element by element (one C loop, no
    temporaries); returns one new array of ``shape`` per output register.

    ``vec_inputs`` (arrays of ``shape``) load ``vec_regs`` at each element; ``scalars`` (0-d
    arrays) load ``scalar_regs`` once.  Each op rounds to float32, as numpy's loops do.
    """
    outs = [np.empty(shape, np.float32) for _ in out_regs]
    if not cython.compiled:
        return _run_fused_numpy(code, n_regs, vec_inputs, vec_regs, scalars, scalar_regs,
                                out_regs, outs)
    n: cython.Py_ssize_t = outs[0].size if outs else 0
    ins = [np.ascontiguousarray(a, np.float32).reshape(-1) for a in vec_inputs]
    n_code: cython.Py_ssize_t = len(code) // 4
    c_code: cython.p_int = cython.cast(cython.p_int, malloc(len(code) * cython.sizeof(cython.int)))
    regs: cython.p_float = cython.cast(cython.p_float, malloc((n_regs + 1) * cython.sizeof(cython.float)))
    n_in: cython.Py_ssize_t = len(ins)
    n_out: cython.Py_ssize_t = len(outs)
    in_ptr: cython.pp_float = cython.cast(cython.pp_float, malloc((n_in + 1) * cython.sizeof(cython.p_float)))
    out_ptr: cython.pp_float = cython.cast(cython.pp_float, malloc((n_out + 1) * cython.sizeof(cython.p_float)))
    in_reg: cython.p_int = cython.cast(cython.p_int, malloc((n_in + 1) * cython.sizeof(cython.int)))
    out_reg: cython.p_int = cython.cast(cython.p_int, malloc((n_out + 1) * cython.sizeof(cython.int)))
    try:
        if not (c_code and regs and in_ptr and out_ptr and in_reg and out_reg):
            raise MemoryError("run_fused: cannot allocate its tables")
        k: cython.Py_ssize_t
        for k in range(len(code)):
            c_code[k] = code[k]
        for k in range(len(scalars)):
            regs[cython.cast(cython.int, scalar_regs[k])] = float(scalars[k])
        view: cython.float[::1]
        for k in range(n_in):
            view = ins[k]
            in_ptr[k] = cython.address(view[0]) if view.shape[0] else cython.NULL
            in_reg[k] = vec_regs[k]
        for k in range(n_out):
            view = outs[k].reshape(-1)
            out_ptr[k] = cython.address(view[0]) if view.shape[0] else cython.NULL
            out_reg[k] = out_regs[k]
        with cython.nogil:
            _fused_loop(c_code, n_code, regs, in_ptr, in_reg, n_in, out_ptr, out_reg, n_out, n)
    finally:
        free(c_code)
        free(regs)
        free(in_ptr)
        free(out_ptr)
        free(in_reg)
        free(out_reg)
    return outs


@cython.cfunc
@cython.nogil
@cython.exceptval(check=False)
def _fused_loop(code: cython.p_int, n_code: cython.Py_ssize_t, regs: cython.p_float,
                in_ptr: cython.pp_float, in_reg: cython.p_int, n_in: cython.Py_ssize_t,
                out_ptr: cython.pp_float, out_reg: cython.p_int, n_out: cython.Py_ssize_t,
                n: cython.Py_ssize_t) -> cython.void:
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    c: cython.p_int
    for i in range(n):
        for j in range(n_in):
            regs[in_reg[j]] = in_ptr[j][i]
        for j in range(n_code):
            c = code + 4 * j
            if c[0] == 0:
                regs[c[1]] = regs[c[2]] + regs[c[3]]
            elif c[0] == 1:
                regs[c[1]] = regs[c[2]] - regs[c[3]]
            elif c[0] == 2:
                regs[c[1]] = regs[c[2]] * regs[c[3]]
            elif c[0] == 3:
                regs[c[1]] = regs[c[2]] / regs[c[3]]
            else:
                regs[c[1]] = -regs[c[2]]
        for j in range(n_out):
            out_ptr[j][i] = regs[out_reg[j]]


_NUMPY_OPS = {ADD: np.add, SUB: np.subtract, MUL: np.multiply, DIV: np.true_divide}


def _run_fused_numpy(code, n_regs, vec_inputs, vec_regs, scalars, scalar_regs, out_regs, outs):
    # the pure-Python twin: the same float32 ops, a numpy ufunc per op on whole arrays
    regs = [None] * n_regs
    for a, r in zip(vec_inputs, vec_regs):
        regs[r] = a
    for a, r in zip(scalars, scalar_regs):
        regs[r] = a
    for k in range(0, len(code), 4):
        op, dst, a, b = code[k], code[k + 1], code[k + 2], code[k + 3]
        regs[dst] = np.negative(regs[a]) if op == NEG else _NUMPY_OPS[op](regs[a], regs[b])
    for out, r in zip(outs, out_regs):
        out[...] = regs[r]
    return outs
