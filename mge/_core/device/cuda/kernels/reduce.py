"""CUDA C for ``Reduce`` (every mode), ``Argmax``/``Argmin``, ``CumSum``, ``Argsort`` and ``TopK``,
generated per mode and dtype signature, with the launch plans the CUDA device follows to run them.

Like ``elemwise.py`` this makes text only: nothing here needs a GPU or NVRTC.

**The view.**  Every kernel works on a C-contiguous input seen as ``(outer, n, inner)`` with the
reduced (or scanned) axis in the middle (``reduce_view``: adjacent axes merge into one; axes that
are not adjacent once size-1 dims are dropped must be made so by the caller, with a transposing
copy).  There are ``m = outer * inner`` outputs (output columns, for a scan); output ``q`` reads
``in[o*n*inner + j*inner + i]`` for ``j < n``, with ``q = o*inner + i``.

**The decomposition: a tile kernel.**  A block is ``(TX, TY)`` threads (``TX * TY = 256``, both
powers of two): ``tx`` picks one of ``TX`` consecutive outputs, ``ty`` strides over ``n``.
Consecutive threads of a warp read consecutive addresses in both limits:

* long rows (``inner == 1``, large ``n``): ``TX = 1, TY = 256``, a block per output row, the 256
  threads reading the row side by side;
* short rows with a large ``inner``: ``TX >= 32``, ``TY = min(n rounded up to a power of 2,
  256 / TX)``: a thread (or a few) per output, a warp reading 32 consecutive ``inner`` positions;
* in between, ``TX = 256 / TY`` with ``TY`` the row length rounded up, so that no thread idles on
  short rows of ``inner == 1`` either (several rows per block).

Each thread folds its strided share of the row into an accumulator, then the block combines the
``TY`` accumulators of each ``tx``: in shared memory while the partner ``ty + s`` is in another
warp (``s * TX >= 32``), then by warp shuffles (``__shfl_down_sync`` with offset ``s * TX``) for the
last stages (``mge_block_tree``).  Blocks loop over tiles (a grid-stride loop), so any grid covers
any ``m``.  When there are few outputs and long rows (too few tiles to fill a GPU), the plan
splits each row into ``gridDim.y`` chunks: a *partial* kernel writes each chunk's accumulator to a
workspace and a *final* kernel combines them (the workspace seen as ``(1, splits, m)``): two
launches, deterministic (no atomics), the same partition for any grid.

``CumSum`` uses the same tiles: each block walks its columns' rows ``TY`` elements at a time, an
inclusive Hillis-Steele scan along ``ty`` in shared memory (two buffers, ``log2 TY`` stages), plus
a running carry per column.  Long scans over few columns are split in three launches: the chunk
sums (the partial ``Reduce(sum)`` kernel), an exclusive scan of those (the *raw* scan kernel of the
accumulator type) and the chunks' scans starting from it (``carry``).

``Argsort``/``TopK`` sort each row (the last axis, at most ``MAX_SORT`` = 1024 elements; longer
rows raise ``NotImplementedError``) in shared memory by a bitonic network of (value, index) pairs:
one compare-and-swap per thread and stage, ``log2(seg) * (log2(seg) + 1) / 2`` stages for rows
padded to ``seg``, a power of two, several short rows a block (512 elements, 256 threads).  The
index breaks ties, so the order is numpy's stable one (NaN last); ``no_sort`` sorts the chosen
``k`` once more by index, ``kth_only`` finds the first index holding the k-th value from the run
of equal values in the sorted row.

**The host build.**  The sources compile as host C++ too (``hostbuild.py``), so the tests run
them on numpy arrays.  Kernel bodies are phases between barriers written with ``block.py``'s
macros (the one prelude of every family): ``MGE_FOR_BLOCKS { ... }`` (host: a loop over the
grid), ``MGE_THREADS { MGE_THREAD_IDS ... }`` one phase of every thread (host: a loop over the
block's threads, ``tx`` fastest), ``MGE_SYNC`` a barrier, ``MGE_SHARED_ARRAY`` the dynamic shared
memory.  Warp shuffles become, on the host, the same pairings through shared memory, so a
result's bits are the GPU's.  The launch geometry comes from block.py's ``mge_host_launch(gx, gy,
gz, bx, by, bz, shared_bytes)`` before a call; on the host a kernel that would use more dynamic
shared memory than the plan gave sets ``mge_host_error`` and does nothing, and shared memory
starts as 0xff bytes (a read of an element never written shows).

**Plans** (``launch.py``'s format, the one of every family).  ``PLANS`` maps ``Reduce``,
``Argmax``, ``Argmin``, ``CumSum``, ``Argsort`` and ``TopK`` to ``plan(op, ins, outs) ->
launch.Plan``; the lower-level ``reduce_launch``/``cumsum_launch``/``argsort_launch``/
``topk_launch`` (buffers ``"in0"``, ``"out0"``/``"out1"`` by default) build them.  A plan is one
tile launch, or for split rows the partial and final launches (``Reduce``; an accumulator array
of ``splits * m`` in the workspace ``"ws"``) or three launches (``CumSum``: the chunk sums and
their scanned carries, two arrays in the workspace).  ``STRIDED`` is empty: every kernel
addresses a dense ``(outer, n, inner)`` view, so the device makes strided inputs dense first (one
relayout copy; reading strides in the tile loops would cost an index division per element and
break the coalesced rows).  These kernels find no bad data, so their plans have no ``Check``;
what the plan sees from shapes, dtypes and the op's parameters it raises itself, naming the op,
shapes and dtypes: a ``TypeError`` for a dtype, a ``ValueError`` for an axis out of range, a
min/max or arg-extremum over an empty axis, a bad ``k``; a ``NotImplementedError`` for what the
kernels do not do (axes that are not adjacent -- no transposing copy step yet -- and rows of
more than ``MAX_SORT`` to sort).

Accumulators: float for float16 and float32, double for float64; integer sums, products and
squares wrap as numpy's (and the CPU kernel's) do, computed in an unsigned type of 32 or 64 bits
and truncated to the output (the same bits modulo ``2**bits``); the mean of integers is an exact
64-bit integer sum (double for int64) divided once.  Where the results may differ from the CPU
device's is written in ``DIFFERENCES``.
"""
import functools
import math

import numpy as np

from ....ops.reduce import (
    REDUCE_MODES, Argmax, Argmin, Argsort, CumSum, Reduce, TopK, cumsum_dtype, normalize_axes,
    reduce_dtype,
)
from ..backend import parse_param
from .block import BLOCK_PARTS
from .launch import Buf, Launch, Plan, Workspace
from .elemwise import (
    _PRELUDE, _TYPES, SUPPORTED_DTYPES, KernelSource, _code, _load, _storage, program,
)

__all__ = ["PLANS", "STRIDED", "reduce_kernel", "total_kernel", "cumsum_kernel", "reduce_launch",
           "cumsum_launch", "reduce_view", "block_shape", "launch_args", "check_layouts",
           "topk_kernel", "topk_launch", "argsort_launch", "REDUCE_KERNEL_MODES", "STAGES",
           "THREADS", "MAX_SORT", "DIFFERENCES", "NVRTC_OPTIONS", "program"]

#: NVRTC flags (as elemwise's: no contraction, so float arithmetic rounds as written).
NVRTC_OPTIONS = ("--fmad=false",)

#: The threads of a block.
THREADS = 256

#: The modes ``reduce_kernel`` takes: the op's, and the arg-extrema.
REDUCE_KERNEL_MODES = tuple(sorted(REDUCE_MODES)) + ("argmax", "argmin")

#: Kernel stages: the whole reduction; a chunk's accumulator into a workspace; the workspace's
#: accumulators combined into the output.
STAGES = ("full", "partial", "final")

# A plan splits rows while fewer tiles than this would run (about two blocks per SM of a large
# GPU), and gives each thread of a split at least this many elements.
_TARGET_BLOCKS = 512
_MIN_PER_THREAD = 16
_MAX_GRID_X = 2 ** 31 - 1
_MAX_GRID_Y = 65535

#: Where a CUDA kernel's results may differ from the CPU device's (the tests check the rest).
DIFFERENCES = """\
* Float sums, means, products and sums of squares combine in another order (each thread's
  strided share, then a tree; numpy sums pairwise): results differ in the last bits, by at most
  a few ulp times log2(n) plus n / 256 for the per-thread runs.  float16 accumulates in float and
  rounds once, as the CPU kernel does.
* The mean of integers is their exact integer sum (double for int64) divided once, where the CPU
  kernel sums them in float32: it is closer to the true mean.
* CumSum of floats is a parallel scan (another order than numpy's running sum), float16 in float
  rounded once per element where numpy rounds every running sum to float16.
* max/min of +0.0 and -0.0 may give either zero (numpy: as its SIMD loop meets them); a NaN gives
  NaN as numpy does, though not necessarily the same NaN's bits.
* Integer results (sum, prod, sum_sqr, cumsum wrap modulo 2**bits as numpy), max/min, argmax and
  argmin (the first index of the extreme, a NaN counting as the extreme), Argsort and TopK are
  exact.
* TopK(no_sort) with ties at the k-th value keeps the first ones in stable order; numpy's
  argpartition (the CPU kernel) may keep others.
"""

# -- dtypes ---------------------------------------------------------------------------------------

_B, _F16, _F32, _F64 = (np.dtype(d) for d in ("bool", "float16", "float32", "float64"))
_I32, _I64 = np.dtype("int32"), np.dtype("int64")

# accumulator C type -> (code in names, numpy dtype of its bytes in a workspace)
_ACC = {"unsigned int": ("u32", np.dtype("uint32")),
        "unsigned long long": ("u64", np.dtype("uint64")),
        "long long": ("s64", np.dtype("int64")),
        "float": ("f32", _F32), "double": ("f64", _F64)}


def _compute_ctype(d):
    return _TYPES[d][2]


def _sum_acc(d):
    """The accumulator of a sum (product, square, scan) of ``d``: wraps as ``d``'s output."""
    if d.kind == "f":
        return "double" if d == _F64 else "float"
    return "unsigned long long" if d.itemsize == 8 else "unsigned int"


def _acc(mode, d):
    if mode in ("sum", "prod", "sum_sqr"):
        return _sum_acc(d)
    if mode == "mean":
        if d.kind == "f":
            return "double" if d == _F64 else "float"
        return "double" if d == _I64 else "long long"  # exact, then divided once
    if mode in ("max", "min"):
        return _compute_ctype(d)
    return f"mge_argpair<{_compute_ctype(d)}>"


_CSIZE = {"bool": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2,
          "int": 4, "unsigned int": 4, "float": 4, "long long": 8, "unsigned long long": 8,
          "double": 8}


def _acc_itemsize(ctype):
    """The bytes of an accumulator of C type ``ctype`` (in shared memory and workspaces)."""
    if ctype.startswith("mge_argpair"):
        size = _CSIZE[ctype[len("mge_argpair<"):-1]]
        return 8 if size <= 4 else 16  # {V v; int i;} at V's alignment (4 at least)
    return _CSIZE[ctype]


def _out_dtype(mode, d):
    return _I32 if mode in ("argmax", "argmin") else reduce_dtype(mode, d)


# -- the block prelude ----------------------------------------------------------------------------

# Reduce's block pieces (kernels/block.py holds the phase macros): the arg-extremum pair, the
# block tree and the tile reduction and scan, shared with softmax.py.
_REDUCE_BLOCK = r"""#ifndef MGE_REDUCE_BLOCK
#define MGE_REDUCE_BLOCK
/* an arg-extremum's accumulator: the value and its index along the axis */
template <class V> struct mge_argpair { V v; int i; };
#if defined(__CUDACC__)
template <class V> MGE_FN mge_argpair<V> mge_shfl_down(mge_argpair<V> p, unsigned off) {
    p.v = mge_shfl_down(p.v, off);
    p.i = mge_shfl_down(p.i, off);
    return p;
}
#endif
template <class V> MGE_FN bool mge_isnan(V v) { return v != v; }

/* Combine sh[ty * TX + tx] over ty for each tx (C::comb), the result in sh[tx]; every thread of
   the block calls it.  Shared-memory stages while the partner ty + s is in another warp, then
   warp shuffles of offset s * TX (on the host the same pairs, through shared memory). */
template <class C, class A> MGE_BLOCK_FN void mge_block_tree(A* sh) {
    const unsigned TX = blockDim.x, TY = blockDim.y;
    unsigned s = TY / 2;
    for (; s > 0 && s * TX >= 32; s >>= 1) {
        MGE_THREADS { MGE_THREAD_IDS
        if (ty < s) sh[tid] = C::comb(sh[tid], sh[tid + s * TX]);
        }
        MGE_SYNC
    }
#if defined(__CUDACC__)
    if (s > 0) {  /* what is left lies in sh[0, 2 s TX) with 2 s TX <= 32: the first warp's */
        const unsigned tid = threadIdx.y * TX + threadIdx.x;
        if (tid < 32) {
            A v = sh[tid];
            for (; s > 0; s >>= 1) v = C::comb(v, mge_shfl_down(v, s * TX));
            if (tid < TX) sh[tid] = v;
        }
        __syncthreads();
    }
#else
    for (; s > 0; s >>= 1) {
        MGE_THREADS { MGE_THREAD_IDS
        if (ty < s) sh[tid] = C::comb(sh[tid], sh[tid + s * TX]);
        }
    }
#endif
}

/* The tile reduction: output q of m = outer * inner folds in[o, j, i] for j in this split's
   chunk [blockIdx.y * chunk, +chunk) (Op::load, Op::comb), then Op::store(acc, count) goes to
   out[blockIdx.y * m + q] (a workspace row per split, or the output when gridDim.y is 1). */
template <class Op> MGE_BLOCK_FN void mge_reduce_tile(
        typename Op::out_t* out, const typename Op::in_t* in, long long outer, long long n,
        long long inner, long long chunk, long long count) {
    typedef typename Op::acc_t A;
    const unsigned TX = blockDim.x, TY = blockDim.y;
    MGE_SHARED_ARRAY(A, sh, TX * TY)
    const long long m = outer * inner, tiles = (m + TX - 1) / TX;
    MGE_FOR_BLOCKS {
    const long long j0 = (long long)blockIdx.y * chunk;
    const long long j1 = j0 + chunk < n ? j0 + chunk : n;
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        A acc = Op::id();
        if (q < m) {
            const long long o = q / inner, i = q - o * inner;
            const typename Op::in_t* p = in + o * n * inner + i;
            for (long long j = j0 + ty; j < j1; j += TY)
                acc = Op::comb(acc, Op::load(p[j * inner], j));
        }
        sh[tid] = acc;
        }
        MGE_SYNC
        mge_block_tree<Op>(sh);
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        if (ty == 0 && q < m) out[(long long)blockIdx.y * m + q] = Op::store(sh[tx], count);
        }
        MGE_SYNC  /* the next tile writes sh again */
    }
    }
}

/* The tile scan: column q of m runs through its chunk [blockIdx.y * chunk, +chunk) of n (from
   the chunk's end when reverse), TY elements at a time: an inclusive Hillis-Steele scan over ty
   in two shared buffers, plus the column's carry (carry_in[blockIdx.y * m + q], or zero). */
template <class Op> MGE_BLOCK_FN void mge_scan_tile(
        typename Op::out_t* out, const typename Op::in_t* in, long long outer, long long n,
        long long inner, long long chunk, const typename Op::acc_t* carry_in, int exclusive,
        int reverse) {
    typedef typename Op::acc_t A;
    const unsigned TX = blockDim.x, TY = blockDim.y;
    MGE_SHARED_ARRAY(A, sh, 2 * TX * TY + TX)
    A* const buf0 = sh;
    A* const buf1 = sh + TX * TY;
    A* const carry = sh + 2 * TX * TY;
    const long long m = outer * inner, tiles = (m + TX - 1) / TX;
    MGE_FOR_BLOCKS {
    const long long j0 = (long long)blockIdx.y * chunk;
    const long long len = (j0 + chunk < n ? j0 + chunk : n) - j0;
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        if (ty == 0) carry[tx] = (carry_in && q < m) ? carry_in[(long long)blockIdx.y * m + q] : (A)0;
        }
        MGE_SYNC
        for (long long c = 0; c < len; c += TY) {
            MGE_THREADS { MGE_THREAD_IDS
            const long long q = tile * TX + tx, t = c + ty;
            A v = (A)0;
            if (q < m && t < len) {
                const long long o = q / inner, i = q - o * inner;
                const long long j = reverse ? j0 + len - 1 - t : j0 + t;
                v = Op::load(in[o * n * inner + j * inner + i]);
            }
            buf0[tid] = v;
            }
            MGE_SYNC
            unsigned flip = 0;
            for (unsigned off = 1; off < TY; off <<= 1) {
                MGE_THREADS { MGE_THREAD_IDS
                const A* src = flip ? buf1 : buf0;
                A* dst = flip ? buf0 : buf1;
                dst[tid] = ty >= off ? (A)(src[tid - off * TX] + src[tid]) : src[tid];
                }
                MGE_SYNC
                flip ^= 1u;
            }
            const A* scan = flip ? buf1 : buf0;
            MGE_THREADS { MGE_THREAD_IDS
            const long long q = tile * TX + tx, t = c + ty;
            if (q < m && t < len) {
                const long long o = q / inner, i = q - o * inner;
                const long long j = reverse ? j0 + len - 1 - t : j0 + t;
                const A before = ty ? scan[tid - TX] : (A)0;
                out[o * n * inner + j * inner + i] =
                    Op::store((A)(carry[tx] + (exclusive ? before : scan[tid])));
            }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
            if (ty == 0) carry[tx] = (A)(carry[tx] + scan[(TY - 1) * TX + tx]);
            }
            MGE_SYNC
        }
    }
    }
}
#endif /* MGE_REDUCE_BLOCK */
"""

#: The parts every kernel of this module (and softmax.py) starts with.
_BLOCK_PARTS = BLOCK_PARTS + (("MGE_REDUCE_BLOCK", _REDUCE_BLOCK),)


# -- the per-kernel operation structs --------------------------------------------------------------

def _int_limits(d):
    """C literals of ``d``'s (min, max) in its compute type."""
    if d == _B:
        return "false", "true"
    info = np.iinfo(d)
    lo = "(-9223372036854775807LL - 1)" if d == _I64 else str(int(info.min))
    hi = f"{int(info.max)}LL" if d == _I64 else str(int(info.max))
    c = _compute_ctype(d)
    return f"({c}){lo}", f"({c}){hi}"


def _extremes(d):
    """(lowest, highest) values of ``d``'s compute type, as C: the max's and min's identities."""
    if d.kind == "f":
        inf = "MGE_INF_D" if d == _F64 else "MGE_INF_F"
        return f"-{inf}", inf
    return _int_limits(d)


def _to_acc(expr, src, acc):
    """C for the element ``expr`` stored as ``src`` in the accumulator type ``acc``."""
    value = _load(expr, src, src)
    return value if acc == _compute_ctype(src) else f"({acc})({value})"


def _store_expr(expr, expr_ctype, out):
    """C for the value ``expr`` (of C type ``expr_ctype``) in ``out``'s storage."""
    if out == _F16:
        return f"mge_d2h({expr})" if expr_ctype == "double" else f"mge_f2h((float)({expr}))"
    return f"({_storage(out)})({expr})"


def _op_struct(name, mode, in_dtype, stage, out):
    """(C type stored in, C type stored out, guarded text of the struct ``name``)."""
    acc = _acc(mode, in_dtype)
    raw_in = stage == "final"
    in_t = acc if raw_in else _storage(in_dtype)
    out_t = acc if stage == "partial" else _storage(out)
    v = _compute_ctype(in_dtype)
    lo, hi = _extremes(in_dtype)
    if mode in ("argmax", "argmin"):
        better = ">" if mode == "argmax" else "<"
        ident = lo if mode == "argmax" else hi
        body = (f"    MGE_MEMBER acc_t id() {{ acc_t a; a.v = {ident}; a.i = 2147483647; "
                f"return a; }}\n"
                f"    /* b wins: a NaN over any number, a larger (smaller) value, the first index "
                f"among equals */\n"
                f"    MGE_MEMBER acc_t comb(acc_t a, acc_t b) {{\n"
                f"        bool an = mge_isnan(a.v), bn = mge_isnan(b.v);\n"
                f"        bool win = bn ? (!an || b.i < a.i) : (!an && (b.v {better} a.v || "
                f"(b.v == a.v && b.i < a.i)));\n"
                f"        return win ? b : a;\n    }}\n")
        load = (f"in_t x, long long j) {{ return x; }}" if raw_in else
                f"in_t x, long long j) {{ acc_t a; a.v = {_load('x', in_dtype, in_dtype)}; "
                f"a.i = (int)j; return a; }}")
        store = "a" if stage == "partial" else "(int)a.i"
    else:
        if mode in ("max", "min"):
            ident = lo if mode == "max" else hi
            cmp = ">" if mode == "max" else "<"
            comb = (f"mge_isnan(a) ? a : (mge_isnan(b) ? b : (b {cmp} a ? b : a))"
                    if in_dtype.kind == "f" else f"b {cmp} a ? b : a")
        elif mode == "prod":
            ident, comb = "(acc_t)1", "(acc_t)(a * b)"
        else:
            ident, comb = "(acc_t)0", "(acc_t)(a + b)"
        body = (f"    MGE_MEMBER acc_t id() {{ return {ident}; }}\n"
                f"    MGE_MEMBER acc_t comb(acc_t a, acc_t b) {{ return {comb}; }}\n")
        value = "x" if raw_in else _to_acc("x", in_dtype, acc)
        if mode == "sum_sqr" and not raw_in:
            load = f"in_t x, long long j) {{ acc_t v = {value}; return (acc_t)(v * v); }}"
        else:
            load = f"in_t x, long long j) {{ return {value}; }}"
        if stage == "partial":
            store = "a"
        elif mode == "mean":
            r = "double" if out == _F64 else "float"
            if acc == "long long":  # the exact integer sum, divided once
                store = _store_expr("(double)a / (double)count", "double", out)
            else:
                store = _store_expr(f"a / ({r})count", r, out)
        else:
            store = _store_expr("a", acc, out)
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"struct {name} {{\n"
            f"    typedef {in_t} in_t; typedef {acc} acc_t; typedef {out_t} out_t;\n"
            f"{body}"
            f"    MGE_MEMBER acc_t load({load}\n"
            f"    MGE_MEMBER out_t store(acc_t a, long long count) {{ (void)count; "
            f"return {store}; }}\n}};\n#endif\n")
    return in_t, out_t, text


# -- kernels --------------------------------------------------------------------------------------

def _error(exc, what, message, dtypes=()):
    names = ", ".join(str(d) for d in dtypes)
    return exc(f"CUDA {what}: {message}" + (f" (dtypes: {names})" if names else ""))


def _dtype(what, d):
    try:
        d = np.dtype(d)
    except TypeError as e:
        raise _error(TypeError, what, f"not a dtype ({e})", [d]) from None
    if d not in _TYPES:
        raise _error(TypeError, what, f"unsupported dtype {d} (the CUDA kernels take "
                     f"{', '.join(str(t) for t in SUPPORTED_DTYPES)})", [d])
    return d


def _reduce_mode(mode, what="Reduce kernel"):
    name = mode.lower() if isinstance(mode, str) else mode
    if name not in REDUCE_KERNEL_MODES:
        raise ValueError(f"CUDA {what}: unknown mode {mode!r}; expected one of "
                         f"{list(REDUCE_KERNEL_MODES)}")
    return name


def _op_name(mode):
    return {"argmax": "Argmax", "argmin": "Argmin"}.get(mode, f"Reduce({mode!r})")


def reduce_kernel(mode, in_dtype, out_dtype=None, stage="full"):
    """The CUDA tile kernel of ``Reduce(mode)`` (or ``Argmax``/``Argmin`` for ``mode`` "argmax"/
    "argmin") of an ``in_dtype`` input.

    ``out_dtype`` defaults to (and must be) the op's output dtype.  ``stage``: "full" reduces
    into the output; "partial" writes each split's accumulator to a workspace; "final" combines a
    workspace's accumulators into the output (``STAGES``).  Parameters (``KernelSource.params``):
    ``out, in, long long outer, long long n, long long inner, long long chunk, long long count``
    (``count``: a mean's divisor); launch it as ``reduce_launch`` says.  A ``ValueError`` for an
    unknown mode or stage, a ``TypeError`` for an unsupported dtype or a wrong ``out_dtype``; both
    name the op and the dtypes."""
    mode = _reduce_mode(mode)
    what = f"{_op_name(mode)} kernel"
    d = _dtype(what, in_dtype)
    out = _out_dtype(mode, d)
    if out_dtype is not None and _dtype(what, out_dtype) != out:
        raise _error(TypeError, what, f"gives {out}, not {np.dtype(out_dtype)}", [d])
    if stage not in STAGES:
        raise ValueError(f"CUDA {what}: unknown stage {stage!r}; expected one of {list(STAGES)}")
    return _reduce_kernel(mode, d, stage)


def total_kernel(mode, dtype):
    """A "final" ``Reduce`` kernel of the sum or mean of accumulators of ``dtype`` values (float,
    double for float64) into ``dtype`` itself (the op's mean of float16 gives float32; a loss's
    mean keeps its dtype): the total of per-sample values a kernel left in a workspace."""
    if mode not in ("sum", "mean"):
        raise ValueError(f"CUDA total kernel: mode must be 'sum' or 'mean', got {mode!r}")
    d = _dtype(f"Reduce({mode!r}) kernel", dtype)
    if d.kind != "f":
        raise _error(TypeError, f"Reduce({mode!r}) total kernel", "takes float dtypes", [d])
    return _reduce_kernel(mode, d, "final", d)


@functools.lru_cache(maxsize=None)  # the device asks at every launch; the text is made once
def _reduce_kernel(mode, d, stage, out=None):
    out = _out_dtype(mode, d) if out is None else out
    tag = "" if stage == "full" else f"_{stage}"
    base = f"{mode}_{_code(d)}" if mode in ("argmax", "argmin") else \
        f"reduce_{mode}_{_code(d)}_to_{_code(out)}"
    op = f"mge_rop_{base}{tag}"
    in_t, out_t, op_text = _op_struct(op, mode, d, stage, out)
    name = f"mge_{base}{tag}"
    params = (f"{out_t}* out", f"const {in_t}* in", "long long outer", "long long n",
              "long long inner", "long long chunk", "long long count")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n"
            f"{{\n    mge_reduce_tile<{op}>(out, in, outer, n, inner, chunk, count);\n}}\n")
    parts = _BLOCK_PARTS + (
             (op, op_text), (name, text))
    return KernelSource(name, parts, params, True, 64, 1)


def cumsum_kernel(in_dtype, out_dtype=None):
    """The CUDA tile-scan kernel of ``CumSum`` of an ``in_dtype`` input (bool counts in int32;
    the output dtype is the op's).  Parameters: ``out, in, long long outer, long long n, long long
    inner, long long chunk, const A* carry, int exclusive, int reverse`` (``A`` the accumulator;
    ``carry`` may be NULL); launch it as ``cumsum_launch`` says."""
    d = _dtype("CumSum kernel", in_dtype)
    out = cumsum_dtype(d)
    if out_dtype is not None and _dtype("CumSum kernel", out_dtype) != out:
        raise _error(TypeError, "CumSum kernel", f"gives {out}, not {np.dtype(out_dtype)}", [d])
    return _scan_kernel(d, False)


def _raw_scan_kernel(d):
    """The scan of the accumulators of ``d``'s cumsum (a long scan's chunk totals)."""
    return _scan_kernel(d, True)


@functools.lru_cache(maxsize=None)
def _scan_kernel(d, raw):
    acc = _sum_acc(d)
    if raw:
        code = _ACC[acc][0]
        name, op = f"mge_scan_raw_{code}", f"mge_sop_raw_{code}"
        in_t = out_t = acc
        load, store = "x", "a"
    else:
        out = cumsum_dtype(d)
        name = f"mge_cumsum_{_code(d)}_to_{_code(out)}"
        op = f"mge_sop_cumsum_{_code(d)}_to_{_code(out)}"
        in_t, out_t = _storage(d), _storage(out)
        load, store = _to_acc("x", d, acc), _store_expr("a", acc, out)
    op_text = (f"#ifndef MGE_DEF_{op}\n#define MGE_DEF_{op}\n"
               f"struct {op} {{\n"
               f"    typedef {in_t} in_t; typedef {acc} acc_t; typedef {out_t} out_t;\n"
               f"    MGE_MEMBER acc_t load(in_t x) {{ return {load}; }}\n"
               f"    MGE_MEMBER out_t store(acc_t a) {{ return {store}; }}\n}};\n#endif\n")
    params = (f"{out_t}* out", f"const {in_t}* in", "long long outer", "long long n",
              "long long inner", "long long chunk", f"const {acc}* carry", "int exclusive",
              "int reverse")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n"
            f"{{\n    mge_scan_tile<{op}>(out, in, outer, n, inner, chunk, carry, exclusive, "
            f"reverse);\n}}\n")
    parts = _BLOCK_PARTS + (
             (op, op_text), (name, text))
    return KernelSource(name, parts, params, True, 64, 1)


# -- launch plans ---------------------------------------------------------------------------------

def _pow2_at_least(v):
    return 1 << max(0, int(v) - 1).bit_length()


def block_shape(n, inner, threads=THREADS):
    """``(TX, TY)`` of a tile kernel over rows of ``n`` and an ``inner`` stride (see the module):
    ``TX * TY == threads``; ``TX`` at least 32 (or ``inner`` rounded up) so that a warp reads
    consecutive addresses, ``TY`` no longer than the row rounded up to a power of two."""
    tx_min = min(32, _pow2_at_least(inner))
    ty = max(1, min(_pow2_at_least(max(n, 1)), threads // tx_min))
    return threads // ty, ty


def reduce_view(shape, axis, what="Reduce"):
    """``(outer, n, inner)`` of a C-contiguous array of ``shape`` reduced over ``axis`` (an int,
    a tuple, or None for all): the reduced axes must be adjacent once size-1 dims are dropped
    (else a ``NotImplementedError`` naming the op, the shape and the axes: a limitation of the
    kernels, not bad input); an axis out of range or repeated is a ``ValueError``."""
    shape = tuple(int(s) for s in shape)
    axes = normalize_axes(axis if not isinstance(axis, list) else tuple(axis), len(shape))
    if axes is None:
        raise ValueError(f"CUDA {what}: axis {axis!r} is out of range or repeated for shape "
                         f"{shape}")
    big = [a for a in axes if shape[a] != 1]
    if big and big[-1] - big[0] + 1 != len(big):
        between = [a for a in range(big[0], big[-1]) if a not in axes and shape[a] != 1]
        if between:
            raise NotImplementedError(
                f"CUDA {what}: axes {axes} of shape {shape} are not adjacent (the kernels "
                f"reduce one run of axes; transpose them together first)")
    if not big:
        outer = math.prod(shape)
        return outer, 1, 1
    first, last = big[0], big[-1]
    outer = math.prod(shape[:first])
    n = math.prod(shape[first:last + 1])
    inner = math.prod(shape[last + 1:])
    return outer, n, inner


def _splits(m, n, tx, ty):
    """How many chunks each row is cut into: 1 unless the tiles are too few for the GPU and the
    rows long enough to share."""
    tiles = -(-m // tx)
    if tiles >= _TARGET_BLOCKS or n < 2 * ty * _MIN_PER_THREAD:
        return 1
    return int(min(-(-_TARGET_BLOCKS // tiles), n // (ty * _MIN_PER_THREAD), _MAX_GRID_Y))


def launch_args(kernel, args):
    """``args`` as ``launch.Launch`` takes them for ``kernel``'s parameters: a pointer a ``Buf``
    or ``None`` (NULL), a scalar an int converted to the parameter's numpy type."""
    params = [parse_param(p) for p in kernel.params]
    if len(params) != len(args):
        raise TypeError(f"CUDA {kernel.name}: {len(args)} arguments for {len(params)} "
                        f"parameters")
    out = []
    for p, a in zip(params, args):
        if p.kind == "pointer":
            if a is not None and not isinstance(a, Buf):
                raise TypeError(f"CUDA {kernel.name}: parameter {p.decl!r} takes a Buf, got {a!r}")
            out.append(a)
        else:
            out.append(p.dtype.type(a))
    return tuple(out)


def _tile_launch(kernel, m, n, inner, splits, args, shared_per_thread, extra_per_tx=0):
    # a tile kernel over m outputs of rows of n: shared memory per thread and per column (tx)
    tx, ty = block_shape(n, inner)
    tiles = -(-m // tx)
    grid = (int(min(tiles, _MAX_GRID_X)), int(splits), 1)
    shared = shared_per_thread * tx * ty + extra_per_tx * tx
    return Launch(kernel, grid, (tx, ty, 1), launch_args(kernel, args), shared)


def _view_note(view):
    return f"(outer, n, inner) = {tuple(int(v) for v in view)}"


def reduce_launch(mode, in_dtype, shape, axis=None, src=Buf("in0"), dst=Buf("out0")):
    """The ``launch.Plan`` of ``Reduce(mode)`` (or "argmax"/"argmin") of a C-contiguous
    ``in_dtype`` array of ``shape`` at ``src`` over ``axis`` into ``dst``: a "full" kernel, or for
    few outputs of long rows a "partial" kernel over ``gridDim.y`` chunks into the workspace and a
    "final" one over it.  Axes that are not adjacent raise ``NotImplementedError`` (see
    ``reduce_view``)."""
    mode = _reduce_mode(mode)
    d = _dtype(f"{_op_name(mode)} kernel", in_dtype)
    outer, n, inner = view = reduce_view(shape, axis, _op_name(mode))
    m = outer * inner
    if mode in ("argmax", "argmin") and n >= 2 ** 31:
        raise ValueError(f"CUDA {_op_name(mode)}: an axis of {n} elements (shape "
                         f"{tuple(shape)}) has indices beyond int32")
    if m == 0:
        return Plan((), notes=(_view_note(view), "no outputs"))
    size = _acc_itemsize(_acc(mode, d))
    tx, ty = block_shape(n, inner)
    splits = _splits(m, n, tx, ty)
    if splits == 1:
        launch = _tile_launch(reduce_kernel(mode, d), m, n, inner, 1,
                              (dst, src, outer, n, inner, n, n), size)
        return Plan((launch,), notes=(_view_note(view),))
    chunk = -(-n // splits)
    splits = -(-n // chunk)
    ws = Workspace()
    partial = ws.add(splits * m * size)  # the accumulators, seen as (1, splits, m)
    first = _tile_launch(reduce_kernel(mode, d, stage="partial"), m, n, inner, splits,
                         (partial, src, outer, n, inner, chunk, n), size)
    second = _tile_launch(reduce_kernel(mode, d, stage="final"), m, splits, m, 1,
                          (dst, partial, 1, splits, m, splits, n), size)
    return Plan((first, second), ws.size,
                notes=(_view_note(view), f"rows split in {splits} chunks of {chunk}"))


def cumsum_launch(in_dtype, shape, axis, exclusive=False, reverse=False, src=Buf("in0"),
                  dst=Buf("out0")):
    """The ``launch.Plan`` of ``CumSum(axis, exclusive, reverse)`` of a C-contiguous ``in_dtype``
    array of ``shape`` at ``src`` into ``dst``: one scan kernel, or for few long columns three
    launches (the chunk sums into the workspace, their exclusive scan, the chunks' scans from
    it)."""
    d = _dtype("CumSum kernel", in_dtype)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"CUDA CumSum: axis must be an int, got {axis!r} (shape "
                        f"{tuple(shape)}, dtype {d})")
    outer, n, inner = view = reduce_view(shape, int(axis), "CumSum")
    m = outer * inner
    if m == 0 or n == 0:
        return Plan((), notes=(_view_note(view), "no outputs"))
    size = _acc_itemsize(_sum_acc(d))
    flags = (int(bool(exclusive)), int(bool(reverse)))
    scan = cumsum_kernel(d)
    tx, ty = block_shape(n, inner)
    splits = _splits(m, n, tx, ty)
    if splits == 1:
        launch = _tile_launch(scan, m, n, inner, 1,
                              (dst, src, outer, n, inner, n, None, *flags), 2 * size, size)
        return Plan((launch,), notes=(_view_note(view),))
    chunk = -(-n // splits)
    splits = -(-n // chunk)
    ws = Workspace()
    sums, carries = ws.add(splits * m * size), ws.add(splits * m * size)
    # (Reduce's sum accumulates as CumSum does: bool and integers in 32 or 64 unsigned bits)
    totals = _tile_launch(reduce_kernel("sum", d, stage="partial"), m, n, inner, splits,
                          (sums, src, outer, n, inner, chunk, n), size)
    scanned = _tile_launch(_raw_scan_kernel(d), m, splits, m, 1,
                           (carries, sums, 1, splits, m, splits, None, 1, flags[1]), 2 * size,
                           size)
    chunks = _tile_launch(scan, m, n, inner, splits,
                          (dst, src, outer, n, inner, chunk, carries, *flags), 2 * size, size)
    return Plan((totals, scanned, chunks), ws.size,
                notes=(_view_note(view), f"columns split in {splits} chunks of {chunk}"))


# -- Argsort and TopK: a bitonic sort within a block ----------------------------------------------

#: The longest row ``Argsort``/``TopK`` kernels sort (one block's shared memory).
MAX_SORT = 1024

# TopK's variants (the kernel's ``mode``)
_SORTED, _KTH_ONLY, _NO_SORT = 0, 1, 2

_SORT_PRELUDE = r"""#ifndef MGE_SORT_PRELUDE
#define MGE_SORT_PRELUDE
/* numpy's stable ascending order of (value, index) pairs, a NaN after every number, padding
   (an index >= n) after everything: a total order, so a bitonic network sorts stably */
template <class V> MGE_FN bool mge_sort_less(const mge_argpair<V>& a, const mge_argpair<V>& b,
                                             int n) {
    if (a.i >= n || b.i >= n) return b.i >= n && (a.i < n || a.i < b.i);
    const bool an = mge_isnan(a.v), bn = mge_isnan(b.v);
    if (an || bn) return bn && (!an || a.i < b.i);
    return a.v < b.v || (a.v == b.v && a.i < b.i);
}

/* Bitonic sort of every segment of seg (a power of two) pairs of s[0, 2 * blockDim.x), ascending
   (by_index: by the index alone).  A thread compares and swaps one pair per stage. */
template <class V> MGE_BLOCK_FN void mge_bitonic(mge_argpair<V>* s, unsigned seg, int n,
                                                 bool by_index) {
    for (unsigned k = 2; k <= seg; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            MGE_THREADS { MGE_THREAD_IDS
            const unsigned a = 2 * tid - (tid & (j - 1)), b = a + j;
            /* runs of k alternate in direction to make the bitonic runs of 2k; each segment's
               last merge (k == seg) is ascending */
            const bool up = k == seg || (a & k) == 0;
            const bool lt = by_index ? s[b].i < s[a].i : mge_sort_less(s[b], s[a], n);
            if (lt == up) {
                const mge_argpair<V> t = s[a];
                s[a] = s[b];
                s[b] = t;
            }
            }
            MGE_SYNC
        }
    }
}

/* Rows of n <= seg elements, 2 * blockDim.x / seg rows a block: the values and int32 indices of
   the sorted row (mode 0: the first k, descending as the reverse of the stable ascending order),
   of the k-th only (mode 1: the first index holding it), or of the k chosen in index order
   (mode 2). */
template <class Op> MGE_BLOCK_FN void mge_topk_tile(
        typename Op::out_t* values, int* indices, const typename Op::in_t* in, long long rows,
        int n, int k, int seg, int descending, int mode) {
    typedef mge_argpair<typename Op::acc_t> P;
    const unsigned T = blockDim.x, E = 2 * blockDim.x, R = E / (unsigned)seg;
    MGE_SHARED_ARRAY(P, s, E)
    const long long groups = (rows + R - 1) / R;
    MGE_FOR_BLOCKS {
    (void)blockIdx.y;
    for (long long g = blockIdx.x; g < groups; g += gridDim.x) {
        MGE_THREADS { MGE_THREAD_IDS
        for (unsigned e = tid; e < E; e += T) {
            const long long r = g * R + e / seg;
            const int j = (int)(e % seg);
            P p;
            p.v = (typename Op::acc_t)0;
            p.i = n + j;  /* padding */
            if (r < rows && j < n) {
                p.v = Op::load(in[r * n + j]);
                p.i = j;
            }
            s[e] = p;
        }
        }
        MGE_SYNC
        mge_bitonic(s, (unsigned)seg, n, false);
        if (mode == 2 && k < n) {  /* the chosen k, then sorted by their indices */
            MGE_THREADS { MGE_THREAD_IDS
            for (unsigned e = tid; e < E; e += T) {
                const int j = (int)(e % seg);
                const bool chosen = descending ? (j >= n - k && j < n) : j < k;
                if (!chosen && s[e].i < n) s[e].i += 2 * seg;  /* after the padding */
            }
            }
            MGE_SYNC
            mge_bitonic(s, (unsigned)seg, n, true);
        }
        MGE_THREADS { MGE_THREAD_IDS
        for (unsigned e = tid; e < E; e += T) {
            const long long r = g * R + e / seg;
            const int t = (int)(e % seg);
            const unsigned base = e - (unsigned)t;
            if (r >= rows) continue;
            if (mode == 1) {
                /* np.partition's k-th; for k == n numpy's max or min (a NaN if there is one) */
                const int kth = k < n ? (descending ? n - k : k - 1) : (descending ? 0 : n - 1);
                typename Op::acc_t v = s[base + kth].v;
                if (k >= n && descending && mge_isnan(s[base + n - 1].v)) v = s[base + n - 1].v;
                /* the first index holding it: equal values are adjacent and in index order */
                if (t == 0) {
                    values[r] = Op::store(v);
                    if (mge_isnan(v)) indices[r] = 0;  /* x == NaN holds nowhere: argmax is 0 */
                }
                if (t < n && !mge_isnan(v) && s[e].v == v && (t == 0 || !(s[e - 1].v == v)))
                    indices[r] = s[e].i;
            } else if (mode == 2 && k >= n) {
                if (t < n) {
                    values[r * n + t] = in[r * n + t];
                    indices[r * n + t] = t;
                }
            } else if (t < k) {
                const P p = s[base + ((mode == 0 && descending) ? n - 1 - t : t)];
                values[r * k + t] = Op::store(p.v);
                indices[r * k + t] = p.i;
            }
        }
        }
        MGE_SYNC
    }
    }
}
#endif /* MGE_SORT_PRELUDE */
"""


def topk_kernel(in_dtype):
    """The CUDA kernel of ``TopK`` and ``Argsort`` of an ``in_dtype`` input: a bitonic sort of
    rows of at most ``MAX_SORT`` elements in shared memory.  Parameters: ``values, int* indices,
    in, long long rows, int n, int k, int seg, int descending, int mode``; launch it as
    ``topk_launch``/``argsort_launch`` say.  A ``TypeError`` names an unsupported dtype."""
    return _topk_kernel(_dtype("TopK kernel", in_dtype))


@functools.lru_cache(maxsize=None)
def _topk_kernel(d):
    name, op = f"mge_topk_{_code(d)}", f"mge_kop_{_code(d)}"
    v = _compute_ctype(d)
    op_text = (f"#ifndef MGE_DEF_{op}\n#define MGE_DEF_{op}\n"
               f"struct {op} {{\n"
               f"    typedef {_storage(d)} in_t; typedef {v} acc_t; typedef {_storage(d)} out_t;\n"
               f"    MGE_MEMBER acc_t load(in_t x) {{ return {_load('x', d, d)}; }}\n"
               f"    MGE_MEMBER out_t store(acc_t a) {{ return {_store_expr('a', v, d)}; }}\n"
               f"}};\n#endif\n")
    params = (f"{_storage(d)}* values", "int* indices", f"const {_storage(d)}* in",
              "long long rows", "int n", "int k", "int seg", "int descending", "int mode")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n"
            f"{{\n    mge_topk_tile<{op}>(values, indices, in, rows, n, k, seg, descending, "
            f"mode);\n}}\n")
    parts = _BLOCK_PARTS + (
             ("MGE_SORT_PRELUDE", _SORT_PRELUDE), (op, op_text), (name, text))
    return KernelSource(name, parts, params, True, 64, 1)


def _sort_plan(what, d, shape, k, descending, mode, src, values, indices):
    kernel = _topk_kernel(_dtype(f"{what} kernel", d))
    shape = tuple(int(s) for s in shape)
    if not shape:
        raise ValueError(f"CUDA {what}: needs an input with at least 1 dimension, got a 0-d one")
    n = shape[-1]
    rows = math.prod(shape[:-1])
    if n > MAX_SORT:
        raise NotImplementedError(f"CUDA {what}: the kernels sort rows of at most {MAX_SORT} "
                                  f"elements in one block; the last axis of shape {shape} has "
                                  f"{n}")
    if rows == 0 or n == 0:
        return Plan((), notes=(f"{rows} rows of {n}: no outputs",))
    seg = max(2, _pow2_at_least(n))
    elements = max(seg, 512)  # several short rows a block: 256 threads, or 512 for 1024
    threads = elements // 2
    groups = -(-rows // (elements // seg))
    args = launch_args(kernel, (values, indices, src, rows, n, k, seg, int(bool(descending)),
                                mode))
    launch = Launch(kernel, (int(min(groups, _MAX_GRID_X)), 1, 1), (threads, 1, 1), args,
                    elements * _acc_itemsize(f"mge_argpair<{_compute_ctype(np.dtype(d))}>"))
    return Plan((launch,), notes=(f"{rows} rows of {n} padded to {seg}, "
                                  f"{elements // seg} a block",))


def argsort_launch(in_dtype, shape, descending=False, src=Buf("in0"), values=Buf("out0"),
                   indices=Buf("out1")):
    """The ``launch.Plan`` of ``Argsort(descending)`` of a C-contiguous array of ``shape`` at
    ``src`` (sorted along its last axis, of at most ``MAX_SORT`` elements: beyond, a
    ``NotImplementedError``): one launch writing ``values`` and ``indices`` (int32)."""
    n = int(shape[-1]) if len(shape) else 0
    return _sort_plan("Argsort", in_dtype, shape, n, descending, _SORTED, src, values, indices)


def topk_launch(in_dtype, shape, k, descending=False, kth_only=False, no_sort=False,
                src=Buf("in0"), values=Buf("out0"), indices=Buf("out1")):
    """The ``launch.Plan`` of ``TopK(k, descending, kth_only, no_sort)`` of a C-contiguous array
    of ``shape`` at ``src`` (along its last axis, of at most ``MAX_SORT`` elements): one launch
    writing ``values`` and ``indices`` (int32) of the op's output shape (``k`` clipped to the
    axis)."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"CUDA TopK: k must be a positive int, got {k!r} (shape "
                         f"{tuple(shape)})")
    n = int(shape[-1]) if len(shape) else 0
    if kth_only and n == 0:
        raise ValueError(f"CUDA TopK: kth_only needs a non-empty last axis (shape "
                         f"{tuple(shape)})")
    mode = _KTH_ONLY if kth_only else _NO_SORT if no_sort else _SORTED
    return _sort_plan("TopK", in_dtype, shape, min(int(k), n), descending, mode, src, values,
                      indices)


# -- PLANS: op -> plan ----------------------------------------------------------------------------

def _describe(layouts):
    return (f"input shapes: {', '.join(str(x.shape) for x in layouts)}; dtypes: "
            f"{', '.join(str(x.dtype) for x in layouts)}")


def check_layouts(op, ins, outs, nin, nout):
    """``ins``/``outs`` of a plan function checked against the op's ``nin`` inputs and ``nout``
    outputs (a ``TypeError`` naming the op, shapes and dtypes)."""
    if len(ins) != nin or len(outs) != nout:
        raise TypeError(f"CUDA {op.name}: expects {nin} input(s) and {nout} output(s), got "
                        f"{len(ins)} and {len(outs)} ({_describe(ins)})")


def _check_outs(op, ins, outs, want):
    # the outputs the op's rule gives (sizes and dtypes: the plan writes them dense)
    for k, (o, (size, dtype)) in enumerate(zip(outs, want)):
        if o.size != size or o.dtype != dtype:
            raise ValueError(f"CUDA {op.name}: output {k} is {o.shape} {o.dtype}, the op gives "
                             f"{size} elements of {dtype} ({_describe(ins)})")


def _reduced(op, x, axis, what):
    outer, n, inner = reduce_view(x.shape, axis, op.name)
    if n == 0 and x.size == 0 and what:
        raise ValueError(f"CUDA {op.name}: cannot take the {what} over an empty axis "
                         f"({_describe([x])})")
    return outer * inner


def _plan_reduce(op, ins, outs):
    check_layouts(op, ins, outs, 1, 1)
    (x,) = ins
    m = _reduced(op, x, op.axis, "min/max" if op.mode in ("max", "min") else None)
    _check_outs(op, ins, outs, [(m, _out_dtype(op.mode, _dtype(op.name, x.dtype)))])
    return reduce_launch(op.mode, x.dtype, x.shape, op.axis)


def _plan_arg(mode):
    def plan(op, ins, outs):
        check_layouts(op, ins, outs, 1, 1)
        (x,) = ins
        m = _reduced(op, x, op.axis, "arg-extremum")
        _check_outs(op, ins, outs, [(m, _I32)])
        return reduce_launch(mode, x.dtype, x.shape, op.axis)
    plan.__doc__ = f"The plan of ``{mode.capitalize()}`` (``PLANS``)."
    return plan


def _plan_cumsum(op, ins, outs):
    check_layouts(op, ins, outs, 1, 1)
    (x,) = ins
    _check_outs(op, ins, outs, [(x.size, cumsum_dtype(_dtype(op.name, x.dtype)))])
    return cumsum_launch(x.dtype, x.shape, op.axis, op.exclusive, op.reverse)


def _plan_argsort(op, ins, outs):
    check_layouts(op, ins, outs, 1, 2)
    (x,) = ins
    _check_outs(op, ins, outs, [(x.size, x.dtype), (x.size, _I32)])
    return argsort_launch(x.dtype, x.shape, op.descending)


def _plan_topk(op, ins, outs):
    check_layouts(op, ins, outs, 1, 2)
    (x,) = ins
    plan = topk_launch(x.dtype, x.shape, op.k, op.descending, op.kth_only, op.no_sort)
    size = math.prod(x.shape[:-1]) * (1 if op.kth_only else min(int(op.k), x.shape[-1]))
    _check_outs(op, ins, outs, [(size, x.dtype), (size, _I32)])
    return plan


#: ``op class -> plan(op, ins, outs)`` (``launch.Layout`` lists) -> ``launch.Plan``.
PLANS = {Reduce: _plan_reduce, Argmax: _plan_arg("argmax"), Argmin: _plan_arg("argmin"),
         CumSum: _plan_cumsum, Argsort: _plan_argsort, TopK: _plan_topk}

#: The op classes whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()
