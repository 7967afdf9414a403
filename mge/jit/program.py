"""Compiled programs: a slice of a recording as one op that the channel runs like any other.

A ``TracedProgram`` is a flat list of kernel calls through the device's kernel door
(``Device.execute``), over numbered *slots* instead of tensors: no transformation stack, no
``Tensor`` objects, no shape rules at run time (the recording has every shape).  Compiling a slice
of a ``Recording`` (``compile_program``) does, in order:

* **dead-code elimination** -- only the ops that the requested outputs depend on are kept (a
  replay still checks every op the function issues; the program runs only those that matter);
* **common subexpressions** -- an op equal to an earlier one (same parameters) on the same
  inputs is not run again: its outputs are the earlier op's (not for ops that are never
  recomputed: random numbers, updates);
* **constant folding** -- an op whose inputs are all constants (creation ops such as ``Fill``,
  ``Linspace``, ``Eye``, and what is computed from them only) runs once, when the program is
  compiled; its small results (at most ``FOLD_MAX_SIZE`` elements) are kept, read-only, as
  constants of the program.  Captured tensors are not constants (they change between calls),
  nor are random numbers;
* **a buffer plan** -- each intermediate is dropped right after its last reader, and that reader
  is told it may write its output into the freed buffer (the door's in-place ``reuse``), so a
  chain of elementwise ops runs in one or two buffers;
* **direct ufunc calls** -- an elementwise op whose CPU kernel is a numpy ufunc, with inputs of
  its output's dtype and a freed buffer of the program's own (a fresh result of such an op, of
  the output's shape and dtype), is called as ``ufunc(*inputs, out=buffer)`` without the door:
  the same function on the same arrays (so the same bits), without the door's checks;
* **SGD steps folded into products** (``opt_level`` 2) -- a plain SGD step of a parameter the
  program receives, whose gradient is a large 2-D product nothing else reads, becomes one GEMM
  that adds ``-lr`` times the product to the parameter in place (``MatrixMulUpdate``,
  ``CpuKernels.gemm_update``: beta 1).  The program writes over the parameter's buffer when the
  door says nothing else sees it (``DONATING``), over a copy otherwise.  CBLAS rounds once per
  element where eager SGD rounds twice: within float32 rounding, not bit-identical;
* **bias and relu in one pass** (``opt_level`` 1) -- ``add(x, b)`` of a (rows, cols) ``x`` and
  a (cols,) ``b``, and the ``relu`` that alone reads the sum, become one ``BiasAct``: a C loop
  over ``x``'s buffer (``CpuLoops.bias_act``) with the same bits as numpy's two calls;
* **bias SGD steps folded into their gradients' sums** (``opt_level`` 1 and 2) -- a plain SGD
  step of a (cols,) parameter whose gradient is the column sums of a (rows, cols) gradient, read
  by nothing else, becomes one ``BiasSGDUpdate``: a C pass with eager's bits;
* **pairs of matrix products** -- two large independent products (a backward pass's input
  gradient and weight gradient, two folded updates) run at the same time, one on a second
  native thread (``MatrixMulPair``, ``CpuKernels.gemm2``), when the BLAS runs a product on one
  thread and the machine has another core: the same CBLAS calls, so the same bits.  The second
  may come up to ``PAIR_LOOKAHEAD`` steps later, when moving it up changes nothing it or the
  steps it jumps read;
* **products overlapped with small steps** -- a large single product starts on the second
  thread (``CpuKernels.gemm_start``) while the small steps around it that do not need it run,
  then the program waits for it (``_overlap_products``), where a hand-over to that thread is
  measured quick enough to pay (``overlaps_pay``);
* **updates of many parameters as one step** (a program for another device only) -- an
  optimizer's fused updates (``SGDUpdate``, ``AdamUpdate``...) of one op and one set of dtypes
  that run one after another, or that only other updates separate, become one ``MultiUpdate``
  step (``_group_updates``): the CUDA device runs it in one launch (or a few) instead of one a
  parameter, with the single updates' bits.  Only independent updates move next to each other,
  and nothing moves past an op that is not an update;
* **the thread** -- the program runs on the worker thread when one of its ops would
  (``long_running``: matrix products, convolutions), overlapping the caller's Python, and on the
  caller's thread otherwise.

``Programs`` caches compiled programs by ``(start, stop, outputs)``: a replay that asks for the
same outputs as the last one compiles nothing.  An error in a kernel names the recorded op.
"""
import os

import numpy as np

from .._core import _accel
from .._core import profiler as _profiler  # profiler: trace compile spans (issue 13)
from .._core.device import as_device
from .._core.device.cpu import blas as _blas
from .._core.device.cpu.table import KERNELS, def_donating, def_inplace, def_kernel
from .._core.device.cpu.kernels.elemwise import _IN_PLACE as _UFUNCS  # mode -> in-place ufunc
from .._core.ops.base import INFER, OpDef, TensorDesc, def_infer
from .._core.ops.elemwise import Elemwise
from .._core.ops.matmul import MatrixMul
from .._core.ops.optimizer import (
    AdadeltaUpdate, AdagradUpdate, AdamUpdate, RMSpropUpdate, SGDUpdate,
)
from .._core.ops.program import ElemwiseChain as _ElemwiseChain, MultiUpdate as _MultiUpdate
from .._core.ops.program import Program
from .._core.ops.reduce import Reduce
from .._core.ops.rng import reseeded as _reseeded
from . import arith as _arith

_run = _accel.load("mge.jit.engine")

__all__ = ["TracedProgram", "BiasAct", "BiasSGDUpdate", "MatrixMulPair", "MatrixMulUpdate", "Programs",
           "compile_program"]


class TracedProgram(Program):
    """Ops ``[start, stop)`` of a recording as one op (see the module docstring and
    ``mge._core.ops.program``, the contract a device runs it by)."""

    _fields = ()

    def __init__(self, plan, n_slots, in_vars, out_vars, out_slots, out_descs, long_running, label,
                 profile=None, device=None, consts=(), donors=()):
        d = self.__dict__
        d["consts"] = consts        # the folded constants' arrays (read-only), after the inputs
        d["donors"] = donors        # positions of the inputs that updates overwrite (see _donor)
        d["seeded_steps"] = {}      # recorded op index -> plan index, of random-number ops
        d["device"] = device        # where it runs when it has no inputs (random numbers only)
        d["profile"] = profile      # None, or {op name: [calls, seconds]} that runs add to
        d["plan"] = plan            # [(op, input slots, output slots, descs, reuse, frees)]
        d["n_slots"] = n_slots
        d["in_vars"] = in_vars      # the recording's vars the inputs hold, in order
        d["out_vars"] = out_vars
        d["out_slots"] = out_slots
        d["out_descs"] = out_descs
        d["long_running"] = long_running
        d["label"] = label
        d["_key"] = (id(self),)
        d["_types"] = ()
        d["_hash"] = id(self)

    def __eq__(self, other):
        return self is other

    def reseeded(self, ops):
        """This program with the random-number ops of ``ops`` (recorded op index -> the op, with
        its seed of this call) in place of the recorded ones: a new program object, so that a
        run already queued keeps its own seeds.  ``fresh_seeds()`` draws each one's next seed."""
        plan = None
        for k, op in ops.items():
            i = self.seeded_steps.get(k)
            if i is not None:
                if plan is None:
                    plan = list(self.plan)
                plan[i] = (op,) + plan[i][1:]
        if plan is None:
            return self
        new = object.__new__(TracedProgram)
        d = new.__dict__
        d.update(self.__dict__)
        d["plan"] = plan
        d["_key"] = (id(new),)
        d["_hash"] = id(new)
        return new

    def fresh_seeds(self):
        """This program with the next seed drawn for each of its random-number ops (a run
        without the function's Python: ``without_host``)."""
        if not self.seeded_steps:
            return self
        return self.reseeded({k: _reseeded(self.plan[i][0]) for k, i in self.seeded_steps.items()})

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        raise TypeError("a TracedProgram is not picklable; dump the trace instead")

    @property
    def name(self):
        return f"TracedProgram[{self.label}]"

    def __repr__(self):
        return f"<TracedProgram {self.label}: {len(self.plan)} kernel calls>"


@def_infer(TracedProgram)
def _infer_program(op, descs):
    return list(op.out_descs)


_cpu = None
_run_plan = _run.run_plan


@def_kernel(TracedProgram)
def _run_program(op, *inputs):
    return _run_donated(op, inputs, ())


@def_donating(TracedProgram)
def _run_donated(op, inputs, donated):
    # ``donated``: positions of inputs whose buffers nobody else sees (the door checked): the
    # program's updates (``MatrixMulUpdate``) write over those of its ``donors``, and over
    # copies of the others -- a parameter that someone still reads keeps its old value
    global _cpu
    if _cpu is None:
        _cpu = as_device("cpu0").impl
    if op.donors:
        inputs = list(inputs)
        for k in op.donors:
            if k not in donated:
                inputs[k] = inputs[k].copy()
        inputs = tuple(inputs)
    elif type(inputs) is not tuple:
        inputs = tuple(inputs)
    if op.consts:  # the folded constants take the slots after the inputs'
        inputs = inputs + op.consts
    return _run_plan(_cpu, op.plan, op.n_slots, inputs, op.out_slots, op.name, op.profile)


class MatrixMulUpdate(OpDef):
    """A program's SGD step folded into the product of its gradient: inputs ``(a, b, param)``,
    output ``param + alpha * product(a, b)`` (``product``: the ``MatrixMul``; ``alpha``: minus
    the learning rate), written over ``param``'s buffer -- CBLAS's GEMM with beta 1, so the
    gradient is never stored and the parameter is read and written once.  Only programs use it:
    their ``donors`` make the buffer theirs to write (``_run_donated``)."""

    _fields = ("product", "alpha")
    long_running = True


@def_infer(MatrixMulUpdate)
def _infer_update(op, descs):
    return [descs[2]]


@def_kernel(MatrixMulUpdate)
def _run_update(op, a, b, param):
    f = op.product
    if _CPU.gemm_update(a, b, f.transposeA, f.transposeB, param, op.alpha):
        return (param,)
    a, b = a.copy(), b.copy()  # (strides CBLAS does not take)
    if _CPU.gemm_update(a, b, f.transposeA, f.transposeB, param, op.alpha):
        return (param,)
    raise RuntimeError(f"{op.name}: CBLAS refused the update of a {param.shape} {param.dtype} "
                       f"parameter (the program was compiled for it)")


class BiasAct(OpDef):
    """A program's bias addition and, when ``relu``, the relu after it, as one pass: inputs
    ``(x, b)`` with ``x`` (rows, cols) and ``b`` (cols,), output ``relu(x + b)`` -- written over
    ``x``'s buffer when the program frees it.  ``CpuLoops.bias_act``: the same bits as numpy's
    ``add`` and ``maximum``, without their second pass and calls (about 40 us a layer of the MLP
    benchmark, after a matrix product has cooled the caches)."""

    _fields = ("relu",)
    long_running = False


@def_infer(BiasAct)
def _infer_bias_act(op, descs):
    return [descs[0]]


def _bias_act_into(op, x, b, out):
    if not _LOOPS.bias_act(out, x, b, op.relu):
        np.add(x, b, out=out)
        if op.relu:
            np.maximum(out, 0, out=out)
    return (out,)


@def_kernel(BiasAct)
def _run_bias_act(op, x, b):
    return _bias_act_into(op, x, b, np.empty_like(x))


@def_inplace(BiasAct)
def _run_bias_act_inplace(op, arrays, k):
    return _bias_act_into(op, arrays[0], arrays[1], arrays[0]) if k == 0 else None


class BiasSGDUpdate(OpDef):
    """A program's plain SGD step of a bias folded into the column sums of its gradient's rows:
    inputs ``(g, param)``, output ``param - lr * g.sum(axis=0)`` -- one C pass
    (``CpuLoops.colsum_sgd``) with the bits of eager's sum and update, where there were two kernel
    calls and a gradient in between."""

    _fields = ("lr",)
    long_running = False


@def_infer(BiasSGDUpdate)
def _infer_bias_sgd(op, descs):
    return [descs[1]]


@def_kernel(BiasSGDUpdate)
def _run_bias_sgd(op, g, param):
    out = np.empty_like(param)
    if not _LOOPS.colsum_sgd(out, param, g, -op.lr):
        _add_scaled(out, param, np.add.reduce(g, axis=0), -op.lr)  # eager's two kernels
    return (out,)


class MatrixMulPair(OpDef):
    """Two independent 2-D matrix products of a program, run at the same time: inputs
    ``(a1, b1, a2, b2)``, outputs ``(first(a1, b1), second(a2, b2))``; either may be a
    ``MatrixMulUpdate`` (then with its parameter after its operands)."""

    _fields = ("first", "second")
    long_running = True


def _arity(op):
    return 3 if type(op) is MatrixMulUpdate else 2


@def_infer(MatrixMulPair)
def _infer_pair(op, descs):
    f, g = op.first, op.second
    n = _arity(f)
    return list(INFER[type(f)](f, descs[:n])) + list(INFER[type(g)](g, descs[n:]))


_CPU = _accel.load("mge._core.device.cpu.handoff").CPU
_LOOPS = _accel.load("mge._core.device.cpu.loops")
_add_scaled = _accel.load("mge._core.device.cpu.handoff").add_scaled


def _gemm_args(op, arrays):
    # (a, b, transposeA, transposeB, c or None, alpha) of a program's product (paired or started)
    if type(op) is MatrixMulUpdate:
        p = op.product
        return arrays[0], arrays[1], p.transposeA, p.transposeB, arrays[2], op.alpha
    return arrays[0], arrays[1], op.transposeA, op.transposeB, None, 1.0


@def_kernel(MatrixMulPair)
def _run_pair(op, *arrays):
    f, g = op.first, op.second
    n = _arity(f)
    a1, b1, ta1, tb1, c1, alpha1 = _gemm_args(f, arrays[:n])
    a2, b2, ta2, tb2, c2, alpha2 = _gemm_args(g, arrays[n:])
    both = _CPU.gemm2(a1, b1, ta1, tb1, a2, b2, ta2, tb2, c1, alpha1, c2, alpha2)
    if both is not None:
        return both
    # (a product CBLAS does not take: one after the other)
    return tuple(KERNELS[type(f)](f, *arrays[:n])) + tuple(KERNELS[type(g)](g, *arrays[n:]))


PAIR_MIN_WORK = 1 << 22  # multiply-adds of each product: smaller ones are not worth a thread
#: Whether programs pair products: ``None`` decides by ``pairs_pay()``; True or False forces it
#: (for tests and measurements; programs compiled later follow it).
PAIR_PRODUCTS = None
_pairs_pay = None


def pairs_pay():
    """Whether two products at once pay here: the BLAS runs each on one thread, and the
    machine has another core (decided once), unless ``PAIR_PRODUCTS`` says otherwise."""
    global _pairs_pay
    if PAIR_PRODUCTS is not None:
        return bool(PAIR_PRODUCTS)
    if _pairs_pay is None:
        _pairs_pay = _blas.threads() == 1 and (os.cpu_count() or 1) >= 2
    return _pairs_pay


def _gemm_work(rec, op, ins, outs):
    # m*n*k of a 2-D float product that CBLAS takes (0: not one to pair)
    if type(op) is MatrixMulUpdate:
        op = op.product
    elif type(op) is not MatrixMul or op.compute_mode != "default" or len(outs) != 1:
        return 0
    descs = rec.descs
    (sa, da), (sb, db) = descs[ins[0]][:2], descs[ins[1]][:2]
    so, do = descs[outs[0]][:2]
    if (sa is None or sb is None or so is None or len(sa) != 2 or len(sb) != 2
            or da != db or da != do or da.kind != "f" or da.itemsize not in (4, 8)):
        return 0
    k = sa[0] if op.transposeA else sa[1]
    return so[0] * so[1] * k


PAIR_LOOKAHEAD = 8  # plan steps: how far ahead a product looks for its partner


def _written(step):
    # the slots a step writes over (an update's parameter, a pair's updates'), besides outputs
    op, ins = step[0], step[1]
    if type(op) is MatrixMulUpdate:
        return (ins[2],)
    if type(op) is MatrixMulPair:
        n = _arity(op.first)
        return ((ins[2],) if n == 3 else ()) + ((ins[n + 2],) if _arity(op.second) == 3 else ())
    return ()


def _partner(plan, works, i):
    # the index of a later large product that can run beside plan[i], moved up to it: it reads
    # nothing made at or after i, the steps it jumps do not read what it frees or overwrites,
    # and the two do not overwrite what the other reads (None: there is none)
    p = plan[i]
    made = set(p[2])
    between = set()  # slots the jumped steps read
    for j in range(i + 1, min(len(plan), i + 1 + PAIR_LOOKAHEAD)):
        q = plan[j]
        if works[j] >= PAIR_MIN_WORK:
            if (not made & set(q[1]) and not between & (set(q[5]) | set(_written(q)))
                    and not set(_written(q)) & set(p[1]) and not set(_written(p)) & set(q[1])):
                return j
            return None
        made.update(q[2])
        between.update(q[1])
    return None


def _pair_products(plan, works):
    # independent large products -> one MatrixMulPair step (at the first one's place); returns
    # the plan and its steps' works (a pair's: 0, it pairs no further)
    plan, works = list(plan), list(works)
    out, out_works, i = [], [], 0
    while i < len(plan):
        p = plan[i]
        j = _partner(plan, works, i) if works[i] >= PAIR_MIN_WORK else None
        if j is not None:
            q = plan.pop(j)
            works.pop(j)
            out.append((MatrixMulPair(p[0], q[0]), p[1] + q[1], p[2] + q[2], p[3] + q[3], None,
                        p[5] + q[5], None, -1))
            out_works.append(0)
        else:
            out.append(p)
            out_works.append(works[i])
        i += 1
    return out, out_works


# -- products overlapped with the small steps around them ------------------------------------------
OVERLAP_MIN_WORK = 1 << 22  # multiply-adds of a product worth starting on the second thread
OVERLAP_WINDOW = 16         # plan steps: how far before and after a product its company comes from
#: The longest hand-over to the second thread (start and join, beyond running the product
#: here) at which overlapping pays: the small steps beside a product save tens of microseconds.
OVERLAP_MAX_HANDOVER_US = 30.0
#: Whether programs overlap products with small steps: ``None`` decides by measuring the
#: hand-over once (``overlaps_pay()``); True or False forces it (tests, measurements).
OVERLAP_PRODUCTS = None
_handover_us = None


def handover_us():
    """The measured cost of handing a product to the second thread and waiting for it, beyond
    running it here (microseconds, the median of 15 tries on a small product; measured once)."""
    global _handover_us
    if _handover_us is None:
        import time

        import numpy as np
        a = np.ones((64, 64), np.float32)
        extra = []
        for _ in range(15):
            t0 = time.perf_counter()
            started = _CPU.gemm_start(a, a, False, False) is not None
            _CPU.gemm_join()
            t1 = time.perf_counter()
            _CPU.gemm(a, a, False, False)
            t2 = time.perf_counter()
            if not started:
                extra = [float("inf")]
                break
            extra.append((t1 - t0) - (t2 - t1))
        extra.sort()
        _handover_us = extra[len(extra) // 2] * 1e6
    return _handover_us


def overlaps_pay():
    """Whether programs overlap large products with small steps here: pairs pay (one BLAS
    thread, a second core), and a hand-over to the second thread costs at most
    ``OVERLAP_MAX_HANDOVER_US`` (measured: about 100 us on the 2-core virtual machine this was
    built on, where overlapping made a traced MLP step 15% slower; a few microseconds on bare
    metal), unless ``OVERLAP_PRODUCTS`` says otherwise."""
    if OVERLAP_PRODUCTS is not None:
        return bool(OVERLAP_PRODUCTS) and _CPU.has_blas
    return pairs_pay() and _CPU.has_blas and handover_us() <= OVERLAP_MAX_HANDOVER_US


def _overlap_start(op, args):
    # starts a plan's product on the second GEMM thread: its outputs (ready after the join)
    c = _CPU.gemm_start(*_gemm_args(op, args))
    return None if c is None else (c,)


_run.set_overlap(_overlap_start, _CPU.gemm_join)


def _reads(step):
    return set(step[1])


def _may_join(step, works_j):
    # a step that may run beside a started product: a small kernel, not a product to pair, not
    # a pair or group (they use the second thread), not a random-number op (seeds are per step)
    op = step[0]
    if works_j >= PAIR_MIN_WORK or type(step[6]) is list:
        return False
    return op is None or (type(op) is not MatrixMulPair and not op.seeded)


def _overlap_products(plan, works):
    """Each large single product (not a pair) starts on the second thread, and small steps that
    do not need it run beside it: steps after it that read none of its results (nor of the
    steps they would jump), and steps before it whose results only later steps read.  Neither
    may free, overwrite or write into what the product reads, nor read what it overwrites; a
    moved step frees nothing that a step it jumps still reads.  The same kernels on the same
    values: the same bits."""
    plan, works = list(plan), list(works)
    i = 0
    while i < len(plan):
        p = plan[i]
        if (works[i] < OVERLAP_MIN_WORK or type(p[0]) not in (MatrixMul, MatrixMulUpdate)
                or type(p[6]) is list):
            i += 1
            continue
        p_reads, p_made, p_written = set(p[1]), set(p[2]), set(_written(p))
        untouchable = p_reads | p_written  # what company must not free or write into

        def fits(q):
            return (not set(q[1]) & (p_made | p_written)
                    and not (set(q[5]) | set(_written(q))) & untouchable)

        # company from before: steps whose results only steps after the product read
        before, chosen = [], set()
        for k in range(i - 1, max(-1, i - 1 - OVERLAP_WINDOW), -1):
            q = plan[k]
            if not _may_join(q, works[k]) or not fits(q):
                continue
            made = set(q[2])
            jumped = [plan[m] for m in range(k + 1, i + 1) if m not in chosen]
            if any(made & _reads(r) for r in jumped):
                continue  # a jumped step (or the product) needs it
            if any((set(r[5]) | set(_written(r))) & _reads(q) for r in jumped):
                continue  # a jumped step frees or overwrites what it reads
            if any(set(q[5]) & _reads(r) for r in jumped):
                continue
            chosen.add(k)
            before.append(k)
        before.reverse()
        # company from after: steps reading nothing made by the product or by steps staying
        after, stay_made, stay_reads = [], set(p_made), set()
        for j in range(i + 1, min(len(plan), i + 1 + OVERLAP_WINDOW)):
            q = plan[j]
            if (_may_join(q, works[j]) and fits(q) and not set(q[1]) & stay_made
                    and not set(q[5]) & stay_reads and not set(_written(q)) & stay_reads):
                after.append(j)
                continue
            stay_made.update(q[2])
            stay_reads.update(q[1])
            stay_made.update(_written(q))
        company = before + after
        if not company:
            i += 1
            continue
        group = (p[0], p[1], p[2], p[3], p[4], p[5], [plan[k] for k in company], -1)
        drop = set(company)
        new_plan, new_works = [], []
        for k, (q, w) in enumerate(zip(plan, works)):
            if k == i:
                new_plan.append(group)
                new_works.append(w)
            elif k not in drop:
                new_plan.append(q)
                new_works.append(w)
        i = i - len(before) + 1  # (the group took the product's place, the company's left)
        plan, works = new_plan, new_works
    return plan


UPDATE_MIN_SIZE = 1 << 15  # elements of a parameter: smaller updates stay SGDUpdate steps
#: Whether programs fold SGD steps into their gradients' products (``MatrixMulUpdate``):
#: ``None`` decides by the BLAS (CBLAS present); True or False forces it (tests, measurements).
FOLD_UPDATES = None


def _updates_fold():
    if FOLD_UPDATES is not None:
        return bool(FOLD_UPDATES) and _CPU.has_blas
    return _CPU.has_blas


def _dataflow(ops, keep):
    """``(producer, last_read, reads)`` of the kept ops: per var, the op that makes it, the last
    op that reads it, and how many reads it has."""
    producer, last_read, reads = {}, {}, {}
    for k in keep:
        op, ins, outs = ops[k]
        for v in outs:
            producer[v] = k
        for v in ins:
            last_read[v] = k
            reads[v] = reads.get(v, 0) + 1
    return producer, last_read, reads


def _plain_sgd(op, ins, outs):
    # an SGD step with neither momentum nor weight decay: param - lr * grad, the foldable kind
    return (type(op) is SGDUpdate and op.momentum == 0.0 and op.weight_decay == 0.0
            and len(ins) == 2 and len(outs) == 1)


def _fold_updates(ops, keep, descs, wanted, opt_level):
    """Plain SGD steps (``SGDUpdate`` without momentum or weight decay) of a parameter the
    program receives, whose gradient is a large 2-D product that nothing else reads: the two
    become one ``MatrixMulUpdate`` at the step's place, and the product is dropped.  Returns
    ``keep`` without the products (``ops`` is rewritten in place)."""
    if opt_level < 2 or not _updates_fold():
        return keep
    producer, last_read, reads = _dataflow(ops, keep)
    wanted = set(wanted)
    dropped = set()
    for k in keep:
        op, ins, outs = ops[k]
        if not _plain_sgd(op, ins, outs):
            continue
        p, g = ins
        kg = producer.get(g)
        if kg is None or p in producer or p == g or p in wanted or g in wanted:
            continue
        mm, m_ins, m_outs = ops[kg]
        if (type(mm) is not MatrixMul or mm.compute_mode != "default" or len(m_outs) != 1
                or p in m_ins or reads.get(g) != 1 or last_read.get(p) != k):
            continue
        (sp, dp, devp), (sg, dg, _) = descs[p][:3], descs[g][:3]
        if (sp is None or sp != sg or dp != dg or len(sp) != 2 or dp.kind != "f"
                or dp.itemsize not in (4, 8) or _size(sp) < UPDATE_MIN_SIZE
                or not _on_cpu(devp) or _gemm_work(RecordingView(descs, ops), mm, m_ins, m_outs) == 0):
            continue
        ops[k] = (MatrixMulUpdate(mm, -float(op.lr)), tuple(m_ins) + (p,), outs)
        dropped.add(kg)
    return [k for k in keep if k not in dropped]


def _fold_bias_updates(ops, keep, descs, wanted, opt_level):
    """A plain SGD step of a 1-D parameter whose gradient is the column sums of a (rows, cols)
    float gradient -- a bias of a layer -- that nothing else reads becomes one ``BiasSGDUpdate``
    at the sum's place (the step's when something in between reads the parameter): the same
    bits, ``opt_level`` 1 and 2.  Returns ``keep`` without the dropped ops (``ops`` is
    rewritten in place)."""
    if opt_level < 1:
        return keep
    producer, _, reads = _dataflow(ops, keep)
    wanted = set(wanted)
    dropped = set()
    for k in keep:
        op, ins, outs = ops[k]
        if not _plain_sgd(op, ins, outs):
            continue
        p, gb = ins
        kr = producer.get(gb)
        if kr is None or p in producer or p == gb or gb in wanted or reads.get(gb) != 1:
            continue
        red, r_ins, _ = ops[kr]
        if type(red) is not Reduce or red.mode != "sum" or red.keepdims or len(r_ins) != 1 \
                or tuple(red.axis if isinstance(red.axis, tuple) else (red.axis,)) != (0,):
            continue
        (sg, dg, devg), (sp, dp, _) = descs[r_ins[0]][:3], descs[p][:3]
        if (sg is None or sp is None or len(sg) != 2 or sg[0] < 1 or sg[1] < 2
                or tuple(sp) != (sg[1],) or dg != dp or dg.kind != "f" or dg.itemsize not in (4, 8)
                or not _on_cpu(devg)):
            continue
        fused = (BiasSGDUpdate.get(float(op.lr)), (r_ins[0], p), outs)
        pos = {kk: i for i, kk in enumerate(keep)}
        between = keep[pos[kr] + 1:pos[k]]
        if any(p in ops[kk][1] for kk in between):
            ops[k] = fused  # (the parameter is read in between: the step stays where it was)
            dropped.add(kr)
        else:
            # at the sum's place: the gradient's rows are read there, not kept for the step (and
            # the weights' updates after it stay next to each other, for a pair)
            ops[kr] = fused
            dropped.add(k)
    return [k for k in keep if k not in dropped]


def _fuse_bias_act(ops, keep, descs, wanted, opt_level):
    """``add(x, b)`` of a (rows, cols) float ``x`` and a (cols,) ``b`` of its dtype -- a layer's
    bias -- becomes a ``BiasAct``, and a ``relu`` that is the sole reader of the sum joins it.
    Returns ``keep`` without the relus (``ops`` is rewritten in place)."""
    if opt_level < 1:
        return keep
    reads = {}
    for k in keep:
        for v in ops[k][1]:
            reads.setdefault(v, []).append(k)
    wanted = set(wanted)
    dropped = set()
    for k in keep:
        op, ins, outs = ops[k]
        if type(op) is not Elemwise or op.mode != "add" or len(ins) != 2 or len(outs) != 1:
            continue
        (sx, dx, devx), (sb, db, _) = descs[ins[0]][:3], descs[ins[1]][:3]
        if (sx is None or sb is None or len(sx) != 2 or tuple(sb) != (sx[1],) or dx != db
                or dx.kind != "f" or dx.itemsize not in (4, 8) or ins[0] == ins[1]
                or not _on_cpu(devx)):
            continue
        relu = False
        users = reads.get(outs[0], ())
        user = ops[users[0]][0] if len(users) == 1 else None
        if (outs[0] not in wanted and type(user) is Elemwise and user.mode == "relu"
                and len(ops[users[0]][1]) == 1):
            relu = True
            outs = ops[users[0]][2]
            dropped.add(users[0])
        ops[k] = (BiasAct.get(relu), ins, outs)
    return [k for k in keep if k not in dropped]


_TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo


def _desc(d):
    # The door reads ``.shape``/``.dtype`` of its descs: a handle's are C fields (a
    # TensorDesc's are Python properties), and this is read once per kernel call.
    return _TensorInfo(d[0], d[1], d[2])


def _op_runs_long(op, descs_in, descs_out):
    rule = op.long_running
    if rule is True or rule is False:
        return rule
    try:
        return bool(rule(op, descs_in, descs_out))
    except Exception:
        return True


class RecordingView:
    """Ops and descs as ``compile_program`` reads a recording (a rewritten or partial one)."""

    def __init__(self, descs, ops):
        self.descs = descs
        self.ops = ops


FOLD_MAX_SIZE = 1 << 16  # elements: larger constants are computed by each run, not kept


def _merge_common(ops, keep):
    # common subexpressions: (op, inputs) seen before -> the earlier outputs.  Returns the ops
    # with inputs renamed, the ops kept, and the renaming of the dropped ops' outputs.
    ops = list(ops)
    alias = {}
    seen = {}
    kept = []
    for k in keep:
        op, ins, outs = _arith.renamed(ops, k, alias)
        if not op.never_recompute:
            key = (op, ins)
            try:
                first = seen.get(key)
            except TypeError:  # an op whose parameters do not hash: not merged
                first = key = None
            if first is not None and len(first) == len(outs):
                for v, w in zip(outs, first):
                    alias[v] = w
                continue
            if key is not None:
                seen[key] = outs
        kept.append(k)
    return ops, kept, alias


def _fold_constants(rec, keep, out_vars):
    # ops whose inputs are all constants run now; returns the ops left and {var: array}
    global _cpu
    if _cpu is None:
        _cpu = as_device("cpu0").impl
    ops, descs = rec.ops, rec.descs
    wanted = set(out_vars)
    consts, left = {}, []
    for k in keep:
        op, ins, outs = ops[k]
        # (an op taking new parameters in a replay, such as Fill's value, recompiles: folding it
        # is safe)
        if (op.never_recompute or not outs or wanted.intersection(outs)
                or any(v not in consts for v in ins)
                or any(descs[v][0] is None or _size(descs[v][0]) > FOLD_MAX_SIZE for v in outs)
                or any(not _on_cpu(descs[v][2]) for v in outs)):
            left.append(k)
            continue
        try:
            values = _cpu.execute(op, [consts[v] for v in ins], [_desc(descs[v]) for v in outs],
                                  None)
        except Exception:  # it fails when it runs, as it would have without folding
            left.append(k)
            continue
        for v, value in zip(outs, values):
            value.flags.writeable = False  # shared by every run: nothing may write into it
            consts[v] = value
    return left, consts


def _resolve(alias, v):
    # the value var v is, after merged and simplified ops handed theirs on
    while v in alias:
        v = alias[v]
    return v


class _Known:
    """The values known when a program is compiled, for ``arith.simplify``: folded constants,
    and tensors captured with ``capture_as_const`` (one element only: read as numbers)."""

    def __init__(self, consts, snapshots, descs):
        self.consts = consts
        self.snapshots = snapshots or {}
        self.descs = descs

    def get(self, v):
        x = self.consts.get(v)
        if x is not None:
            return x
        t = self.snapshots.get(v)
        shape = self.descs[v][0]
        if t is None or shape is None or _size(shape) != 1:
            return None
        return t.numpy()


def _on_cpu(device):
    global _cpu
    if _cpu is None:
        _cpu = as_device("cpu0").impl
    try:
        return as_device(device).impl is _cpu
    except Exception:
        return False


def compile_program(rec, start, stop, out_vars, profile=None, opt_level=2):
    """Ops ``[start, stop)`` of ``rec`` as a ``TracedProgram`` giving ``out_vars``; with a
    ``profile`` dict, each run adds its kernel calls' counts and times to it, by op name.
    ``opt_level`` (``trace``'s): at 1 and above, arithmetic is simplified as MegBrain's graphs
    do (``mge.jit.arith``); at 0 the program computes each op as recorded."""
    ops = rec.ops
    descs = rec.descs
    # dead-code elimination, backwards from the outputs
    needed = set(out_vars)
    keep = []
    for k in range(stop - 1, start - 1, -1):
        op, ins, outs = ops[k]
        if not outs or not needed.intersection(outs):
            continue
        keep.append(k)
        needed.update(ins)
    keep.reverse()
    snapshots = getattr(rec, "snapshots", None)  # (capture_as_const's values)
    # a program for another device (the CUDA device) runs its steps through that device's door
    # (ops/program.py): the CPU's rewrites -- constants folded by CPU kernels, the arithmetic
    # simplifier, the fused and folded CPU ops, direct ufunc calls, product pairs -- are left out,
    # so its steps are the recorded ops (less dead code and common subexpressions), with eager's
    # kernels and bits
    on_cpu = all(_on_cpu(d) for d in {descs[v][2] for k in keep for v in ops[k][1] + ops[k][2]})
    ops, keep, alias = _merge_common(ops, keep)
    rec = RecordingView(descs, ops)
    wanted = tuple([alias.get(v, v) for v in out_vars])  # the outputs, as the kept ops name them
    consts = {}
    if on_cpu:
        keep, consts = _fold_constants(rec, keep, wanted)
        if opt_level >= 1:
            keep = _arith.simplify(ops, keep, descs, _Known(consts, snapshots, descs), alias)
            wanted = tuple([_resolve(alias, v) for v in out_vars])
        keep = _fold_updates(ops, keep, descs, wanted, opt_level)
        keep = _fuse_bias_act(ops, keep, descs, wanted, opt_level)
        keep = _fold_bias_updates(ops, keep, descs, wanted, opt_level)
    groups = ()
    if not on_cpu:  # (a device that updates many parameters in one launch: MultiUpdate)
        keep, groups = _group_updates(rec, keep)
    produced = set()
    for k in keep:
        produced.update(ops[k][2])
    in_vars = []
    seen = set(consts)
    for k in keep:
        for v in ops[k][1]:
            if v not in produced and v not in seen:
                seen.add(v)
                in_vars.append(v)
    for v in wanted:  # an output the slice does not compute: an input passed through
        if v not in produced and v not in seen:
            seen.add(v)
            in_vars.append(v)
    slot = {v: i for i, v in enumerate(in_vars)}
    const_vars = [v for v in consts if any(v in ops[k][1] for k in keep)]
    for v in const_vars:  # (their arrays follow the inputs: _run_program)
        slot[v] = len(slot)
    n_slots = len(slot)
    last = {}
    for k in keep:
        for v in ops[k][1]:
            last[v] = k
    # inputs belong to their tensors, constants to the program
    keep_alive = set(wanted) | set(in_vars) | set(const_vars)
    plan = []
    works = []     # per plan step: the multiply-adds of a product that may pair, else 0
    long_running = False
    fresh = set()  # vars whose buffer the program made and nobody else sees
    units = _fusion_units(rec, keep) if on_cpu else _with_groups(_chain_units(rec, keep), groups)
    for unit in units:
        if type(unit) is _UpdateGroup:  # optimizer updates of many parameters: one step
            n_slots = _plan_group(rec, unit, slot, n_slots, last, keep_alive, plan)
            works.append(0)
            continue
        if type(unit) is list:  # a fused elementwise chain
            before = len(plan)
            fuse = _plan_fused if on_cpu else _plan_chain
            n_slots = fuse(rec, unit, slot, n_slots, last, keep_alive, wanted, plan)
            works.extend([0] * (len(plan) - before))
            fresh.update(v for k in unit for v in ops[k][2])
            continue
        k = unit
        op, ins, outs = ops[k]
        in_slots = tuple(slot[v] for v in ins)
        frees = []
        for v in set(ins):
            if last[v] == k and v not in keep_alive:
                frees.append(slot[v])
        reuse = [j for j, v in enumerate(ins) if slot[v] in frees] or None
        ufunc, into = None, -1
        if on_cpu and type(op) is Elemwise and len(outs) == 1:
            fn = _UFUNCS.get(op.mode)
            shape, dtype = descs[outs[0]][0], descs[outs[0]][1]
            if fn is not None and shape is not None and all(descs[v][1] == dtype for v in ins):
                for j, v in enumerate(ins):
                    if v in fresh and slot[v] in frees and descs[v][0] == shape:
                        ufunc, into = fn, j
                        break
                fresh.add(outs[0])  # a ufunc's result, by the door or into a fresh buffer
        out_slots = []
        for v in outs:
            slot[v] = n_slots
            out_slots.append(n_slots)
            n_slots += 1
        out_descs = [_desc(descs[v]) for v in outs]
        in_descs = [TensorDesc(descs[v][0], descs[v][1]) for v in ins]
        if not long_running and _op_runs_long(op, in_descs, out_descs):
            long_running = True
        plan.append((op, in_slots, tuple(out_slots), out_descs, reuse, tuple(frees), ufunc, into))
        works.append(_gemm_work(rec, op, ins, outs))
    if on_cpu and pairs_pay():
        plan, works = _pair_products(plan, works)
    if on_cpu and overlaps_pay():
        plan = _overlap_products(plan, works)
    # the input slots updates write over (a pair's too): the program's to write (_run_donated)
    donors = sorted({s for step in plan for s in _written(step)})
    seeded = {ops[k][0]: k for k in keep if ops[k][0].seeded}  # (seeds make them unique)
    # (descs and reuse are lists: the kernel door takes lists)
    label = f"ops {start}..{stop - 1}"
    program = TracedProgram(plan, n_slots, in_vars, tuple(out_vars),
                         tuple(slot[v] for v in wanted),
                         tuple(TensorDesc(descs[v][0], descs[v][1]) for v in out_vars),
                         long_running, label, profile,
                         descs[out_vars[0]][2] if out_vars else None,
                         tuple(consts[v] for v in const_vars), tuple(donors))
    if seeded:
        program.seeded_steps.update({seeded[step[0]]: i for i, step in enumerate(plan)
                                     if step[0] in seeded})
    return program


# -- fusion of elementwise chains --------------------------------------------------------------------
_FUSED_MODES = {"add": _run.ADD, "sub": _run.SUB, "mul": _run.MUL, "true_div": _run.DIV,
                "neg": _run.NEG}
FUSE_MIN_OPS = 3      # shorter chains are not worth a fused step
FUSE_MAX_SIZE = 512   # elements: above this numpy's vector loops beat one op at a time per element
_f32 = None


def _fusable_shape(rec, k):
    # the output shape of op k if it can join a fused chain, else None
    global _f32
    if _f32 is None:
        import numpy as np
        _f32 = np.dtype("float32")
    op, ins, outs = rec.ops[k]
    if type(op) is not Elemwise or op.mode not in _FUSED_MODES or len(outs) != 1:
        return None
    shape, dtype = rec.descs[outs[0]][0], rec.descs[outs[0]][1]
    if dtype != _f32 or shape is None or _size(shape) > FUSE_MAX_SIZE:
        return None
    for v in ins:
        s, d = rec.descs[v][0], rec.descs[v][1]
        if d != _f32 or (s != shape and s != ()):
            return None
    return shape


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _fusion_units(rec, keep):
    # keep's ops in order, runs of at least FUSE_MIN_OPS fusable ops of one shape as lists
    units = []
    run, run_shape = [], None
    for k in keep + [None]:
        shape = None if k is None else _fusable_shape(rec, k)
        if shape is not None and (not run or shape == run_shape):
            run.append(k)
            run_shape = shape
            continue
        if len(run) >= FUSE_MIN_OPS:
            units.append(run)
        else:
            units.extend(run)
        run, run_shape = ([k], shape) if shape is not None else ([], None)
        if k is not None and shape is None:
            units.append(k)
    return units


def _plan_fused(rec, run, slot, n_slots, last, keep_alive, out_vars, plan):
    ops, descs = rec.ops, rec.descs
    shape = descs[ops[run[0]][2][0]][0]
    produced = {ops[k][2][0] for k in run}
    reg = {}
    vec, scal = [], []
    for k in run:
        for v in ops[k][1]:
            if v not in produced and v not in reg:
                reg[v] = len(reg)
                (vec if descs[v][0] == shape else scal).append(v)
    code = []
    for k in run:
        op, ins, outs = ops[k]
        reg[outs[0]] = len(reg)
        b = reg[ins[1]] if len(ins) > 1 else 0
        code += [_FUSED_MODES[op.mode], reg[outs[0]], reg[ins[0]], b]
    wanted = set(out_vars)
    outs = [v for v in sorted(produced) if v in wanted or last.get(v, -1) > run[-1]]
    if not outs:
        return n_slots
    frees = tuple(slot[v] for v in vec + scal if last[v] <= run[-1] and v not in keep_alive)
    out_slots = []
    for v in outs:
        slot[v] = n_slots
        out_slots.append(n_slots)
        n_slots += 1
    static = (code, len(reg), len(vec), [reg[v] for v in vec], [reg[v] for v in scal],
              [reg[v] for v in outs], shape)
    plan.append((None, tuple(slot[v] for v in vec + scal), tuple(out_slots), None, None, frees,
                 static, -1))
    return n_slots


# -- elementwise chains for another device (ElemwiseChain: one kernel on the CUDA device) --------
CHAIN_MIN_OPS = 2  # a chain of two already saves a launch and a round trip through memory


def _chain_shape(rec, k):
    # the output shape of op k if it can be a step of an ElemwiseChain, else None
    op, ins, outs = rec.ops[k]
    if type(op) is not Elemwise or len(outs) != 1:
        return None
    shape, dtype = rec.descs[outs[0]][0], rec.descs[outs[0]][1]
    if shape is None or any(rec.descs[v][0] is None for v in ins):
        return None
    if not _chain_supports(op.mode, [rec.descs[v][1] for v in ins]):
        return None
    if np.dtype(dtype).kind == "c":
        return None
    return tuple(shape)


def _chain_units(rec, keep):
    # keep's ops in order, runs of at least CHAIN_MIN_OPS chainable ops of one output shape --
    # each input made inside the run or broadcast to that shape -- as lists
    units = []
    run, run_shape, made = [], None, set()

    def close():
        if len(run) >= CHAIN_MIN_OPS:
            units.append(list(run))
        else:
            units.extend(run)

    for k in keep:
        shape = _chain_shape(rec, k)
        op, ins, outs = rec.ops[k]
        fits = shape is not None and all(
            v in made or _broadcasts_to(tuple(rec.descs[v][0]), shape) for v in ins)
        if fits and run and shape == run_shape:
            run.append(k)
            made.add(outs[0])
            continue
        close()
        if fits:
            run, run_shape, made = [k], shape, {outs[0]}
        else:
            run, run_shape, made = [], None, set()
            units.append(k)
    close()
    return units


def _broadcasts_to(shape, target):
    # whether numpy broadcasting takes ``shape`` to ``target`` without changing ``target``
    if len(shape) > len(target):
        return False
    return all(a == b or a == 1 for a, b in zip(shape[::-1], target[::-1]))


def _plan_chain(rec, run, slot, n_slots, last, keep_alive, out_vars, plan):
    # the run as one ElemwiseChain step: registers are its outside inputs, then each op's output
    ops, descs = rec.ops, rec.descs
    shape = tuple(descs[ops[run[0]][2][0]][0])
    produced = [ops[k][2][0] for k in run]
    reg, inputs = {}, []
    for k in run:
        for v in ops[k][1]:
            if v not in reg and v not in produced:
                reg[v] = len(reg)
                inputs.append(v)
    steps = []
    for k in run:
        op, ins, outs = ops[k]
        steps.append((op.mode, tuple(reg[v] for v in ins)))
        reg[outs[0]] = len(reg)
    wanted = set(out_vars)
    outs = [v for v in produced if v in wanted or last.get(v, -1) > run[-1]]
    if not outs:
        return n_slots
    dtypes = tuple(np.dtype(descs[v][1]) for v in inputs + produced)
    chain = _ElemwiseChain(tuple(steps), dtypes, len(inputs), tuple(reg[v] for v in outs), shape)
    frees = tuple(slot[v] for v in inputs if last[v] <= run[-1] and v not in keep_alive)
    reuse = [j for j, v in enumerate(inputs) if slot[v] in frees] or None
    out_slots = []
    for v in outs:
        slot[v] = n_slots
        out_slots.append(n_slots)
        n_slots += 1
    plan.append((chain, tuple(slot[v] for v in inputs), tuple(out_slots),
                 [_desc(descs[v]) for v in outs], reuse, frees, None, -1))
    return n_slots


def _chain_supports(mode, dtypes):
    from .._core.device.cuda.kernels.elemwise_chain import chain_supports  # (on first use)
    return chain_supports(mode, dtypes)


# -- optimizer updates of many parameters for another device (MultiUpdate: a few launches) ------
#: The update ops that group (each has a multi-tensor kernel on the CUDA device).
GROUPED_UPDATES = (SGDUpdate, AdamUpdate, AdagradUpdate, AdadeltaUpdate, RMSpropUpdate)
GROUP_MIN_UPDATES = 2  # two updates in one step already save a launch


class _UpdateGroup(tuple):
    """A unit of the plan: the op indices of updates that run as one ``MultiUpdate`` step."""


def _update_key(rec, k):
    # what updates must share to be one group -- the op (hyperparameters included) and every
    # input's dtype -- or None for an op that does not group (not an update; a shape unknown)
    op, ins, outs = rec.ops[k]
    if type(op) not in GROUPED_UPDATES:
        return None
    if any(rec.descs[v][0] is None for v in ins + outs):
        return None
    return (type(op), op, tuple(np.dtype(rec.descs[v][1]) for v in ins))


def _group_updates(rec, keep):
    """``keep`` with the updates of each window reordered so that those of one key (one op, one
    set of dtypes) lie next to each other, and those groups (tuples of op indices, at least
    ``GROUP_MIN_UPDATES`` each).

    A window is a run of updates consecutive in ``keep`` none of which reads what another of the
    run writes (a parameter updated twice in one call starts a new window): its updates are then
    independent, and running them in any order reads and writes what running them in the
    recorded order does.  Any other op ends the window, so nothing moves past an op that is not
    an update.  (The buffer plan is made after this, on the new order: each intermediate is
    still freed by its last reader.)"""
    order, groups = [], []
    window, written = [], set()

    def close():
        by_key = {}
        for k in window:
            by_key.setdefault(_update_key(rec, k), []).append(k)
        for members in by_key.values():  # (dicts keep the first member's order)
            order.extend(members)
            if len(members) >= GROUP_MIN_UPDATES:
                groups.append(_UpdateGroup(members))
        window.clear()
        written.clear()

    for k in keep:
        op, ins, outs = rec.ops[k]
        if _update_key(rec, k) is None:
            close()
            order.append(k)
            continue
        if written.intersection(ins):
            close()
        window.append(k)
        written.update(outs)
    close()
    return order, groups


def _with_groups(units, groups):
    # ``units`` (op indices and chains) with each group's updates -- consecutive op indices
    # there, updates never being chained -- as the group, at its first member's place
    if not groups:
        return units
    first = {g[0]: g for g in groups}
    rest = {k for g in groups for k in g[1:]}
    out = []
    for u in units:
        if type(u) is int:
            if u in rest:
                continue
            u = first.get(u, u)
        out.append(u)
    return out


def _plan_group(rec, group, slot, n_slots, last, keep_alive, plan):
    # the group as one MultiUpdate step: inputs and outputs the members' one after another; an
    # intermediate whose last reader is a member (a gradient) is freed by the step, so the
    # launcher may write an output over it (the single updates' reuse, for the whole group)
    ops, descs = rec.ops, rec.descs
    members = set(group)
    ins, outs = [], []
    for k in group:
        ins.extend(ops[k][1])
        outs.extend(ops[k][2])
    frees = []
    for v in dict.fromkeys(ins):
        if last[v] in members and v not in keep_alive:
            frees.append(slot[v])
    reuse = [j for j, v in enumerate(ins) if slot[v] in frees] or None
    out_slots = []
    for v in outs:
        slot[v] = n_slots
        out_slots.append(n_slots)
        n_slots += 1
    step = _MultiUpdate(ops[group[0]][0], len(group))
    plan.append((step, tuple(slot[v] for v in ins), tuple(out_slots),
                 [_desc(descs[v]) for v in outs], reuse, tuple(frees), None, -1))
    return n_slots


class Programs:
    """A trace's compiled programs, by the slice of the recording and the outputs asked for."""

    def __init__(self, profile=None, opt_level=2):
        self._cache = {}
        self._later = {}
        self.compiled = 0
        self.profile = profile  # None, or the dict the programs' runs fill (trace(profiling=True))
        self.opt_level = opt_level  # trace's: what compile_program may rewrite

    def clear(self):
        """Forget every program (the recording changed)."""
        self._cache.clear()
        self._later.clear()

    def later(self, rec, start, stop):
        """The vars ops ``[start, stop)`` produce that ops after ``stop`` read (cached)."""
        key = (start, stop)
        out = self._later.get(key)
        if out is None:
            produced = set()
            for _, _, outs in rec.ops[start:stop]:
                produced.update(outs)
            last = rec.last_use
            out = self._later[key] = sorted(v for v in produced if last[v] >= stop)
        return out

    def get(self, rec, start, stop, out_vars):
        key = (start, stop, out_vars)
        p = self._cache.get(key)
        if p is None:
            if len(self._cache) > 64:
                self._cache.clear()
            _pspan = _profiler.span("trace", "trace compile", {"ops": stop - start})  # profiler
            try:  # profiler (issue 13): the span ends even if compiling fails
                p = self._cache[key] = compile_program(rec, start, stop, out_vars, self.profile,
                                                              self.opt_level)
            finally:
                _profiler.end(_pspan)  # profiler (issue 13)
            self.compiled += 1
        return p
