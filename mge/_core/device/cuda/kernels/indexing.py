"""CUDA C for the indexing ops and their launch plans (``PLANS``), index errors as ``Check``s.

**One kernel for every index op.**  ``IndexingMultiAxisVec`` (get), ``IndexingSetMultiAxisVec``
(set), ``IndexingIncrMultiAxisVec`` (incr), ``Gather``, ``Scatter``, ``ScatterAdd``,
``IndexingOneHot`` and ``IndexingSetOneHot`` are all the kernel ``mge_index_<mode>_...``: a
grid-stride loop (``launch.grid_for``, 256 threads a block) over an *iteration space* (the indexed
region's shape), with up to ``MAX_INDEX`` index arrays.  Per element it finds, through one
``mge_layout<2 + M, I>`` (the general kernels' layout of elemwise.py), the offset of the *x side*
(the indexed array: base plus the strides of the sliced dims), of the *other side* (the dense
result of a get, the broadcast value or source of a set) and of each index array (broadcast:
stride 0 along the dims it does not have).  Index ``k`` then adds ``wrap(v) * stride`` along the x
axis it indexes (a mask's flat index instead unravels over the axes the mask covers).  Get:
``other = x[...]``; set: ``x[...] = other``; incr: an atomic add.  The plans turn each op into
that form in Python: ``multi_axis_plan`` follows numpy's rules (ints and slices fold into the base
and the strides, the broadcast index dims go in place when the advanced indices are adjacent and
first otherwise); the along-axis ops index one axis with an index array of the iteration's own
shape.  Set and incr first copy x into ``out0`` (``relayout.copy_launch``) and write there.  Gets
and sets move bits, so they are generated per element size; incr per dtype.  Index arrays of any
integer dtype are read through a switch on a per-array dtype code (uniform over the launch: no
divergence), so one kernel serves every index dtype.

**Plans.**  ``PLANS`` maps each op class to ``plan(op, ins, outs) -> launch.Plan``; the buffers
are the op's inputs in its order (``in0`` x, then the value/source and the index arrays).  Every
op here reads ``ins[k].strides`` (``STRIDED`` holds them all): x, the index arrays, the values and
masks are read where they lie.  The value of a set/incr (and a scatter's source) must have x's
dtype, and ``Where``'s x and y the output's: the device converts first (a set moves bits).

**Checks.**  A kernel cannot raise: an out-of-range index sets, in the plan's workspace (one
int64 word per index array, zeroed by the device), ``LLONG_MAX - i`` by ``atomicMax`` for the
iteration index ``i`` it was met at -- so the word keeps the *first* bad element in row-major
order, which is the element numpy names -- and the element is not written.  The plan lists a
``launch.Check`` per word whose ``error`` builds the CPU device's ``IndexError`` with its exact
message: ``Gather``/``Scatter``/``ScatterAdd`` -- ``"<op>: index out of range for axis A of size
N (input shape S)"``; the one-hot ops -- ``"<op>: index out of range [0, N) along axis A (src
shape S, index range [lo, hi])"``, reading the whole index back (``error(value, read)``, on that
rare path only); the multi-axis ops -- ``"<op>: index V is out of bounds for axis A with size N
(indexed shape S)"``, reading the bad element back.  Errors the shapes show (a bad axis, an index
dtype, a value that does not fit) are raised by the plan functions, naming the op, shapes and
dtypes.

**Where** is an elementwise select by element size (contiguous, or general with broadcasting);
the mask of any dtype is true where nonzero (float16 by its bits, so -0 is false and NaN true).

**CondTake** has a data-dependent size: pass one, ``mge_condtake_count`` -- a block of 256
threads per tile of 1024 elements, each thread counting 4 consecutive flags, a shared-memory tree
sum giving the tile's count -- then ``mge_condtake_scan``, one block scanning the tiles' counts (an
exclusive scan in chunks of 256, Hillis-Steele in double-buffered shared memory, a running carry)
into offsets and the total.  The total is the plan's ``Readback`` (8 bytes): its ``outs`` give the
outputs' layouts (``total`` elements of x's dtype and int32), which the device allocates then, and
its ``then`` the second plan.  A plan's workspace lasts one plan only, so pass two counts and
scans again (one more read of the mask) before ``mge_condtake_write``: each block scans its
threads' counts again and each thread writes its elements in order at the tile's offset plus its
prefix -- the values and their int32 flat indices, in the order of ``np.flatnonzero``.  An empty
result launches nothing in pass two.  A **mask index** (``x[mask]``) takes the same route: a plan
counts each mask and reads its count back; the last plan writes each mask's flat indices (the
write kernel with NULL values) into its workspace and indexes with them (a flat index unravels
over the mask's axes; a get's output is sized by ``Readback.outs``).

**Host build.**  Kernels with blocks and barriers (the CondTake passes) use block.py's
``BLOCK_PRELUDE``: phases between barriers, each run for every emulated thread of the block before
the next (the plan's grid and block set by ``mge_host_launch``); the rest run serially through
``MGE_LOOP``, and the atomics are plain read-modify-writes there.
"""
import functools
import math
from dataclasses import dataclass

import numpy as np

from ....ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, numpy_index,
    shape_probe,
)
from ....ops.nn import IndexingOneHot, IndexingSetOneHot
from ....ops.shape import CondTake, Gather, Scatter, ScatterAdd, Where
from .elemwise import (
    _PRELUDE, MAX_NDIM, _F16, _dtypes, _code, _storage, KernelSource, index_bits_for,
    pack_layout, simplify_layout,
)
from .block import BLOCK_PARTS
from .launch import (
    THREADS, Buf, Check, Launch, Layout, Memset, Plan, Readback, Workspace, dense_strides,
    grid_for,
)
from .relayout import _UINT, _bits, _idx, _size, copy_launch

__all__ = ["MAX_INDEX", "INDEX_DTYPES", "MODES", "DIFFERENCES", "NVRTC_OPTIONS", "LLONG_MAX",
           "PLANS", "STRIDED", "index_kernel", "where_kernel", "condtake_count_kernel",
           "condtake_scan_kernel", "condtake_write_kernel", "multi_axis_plan", "gather_plan",
           "scatter_plan", "one_hot_plan", "set_one_hot_plan", "where_plan", "condtake_plan",
           "first_bad", "CONDTAKE_TILE"]

#: NVRTC flags (elemwise.py's).
NVRTC_OPTIONS = ("--fmad=false",)
#: The most index arrays one launch takes.
MAX_INDEX = MAX_NDIM
#: The kernel modes: ``get`` reads x, ``set`` writes it, ``incr`` adds to it.
MODES = ("get", "set", "incr")
#: Index dtypes, in the order of the kernels' dtype codes.
INDEX_DTYPES = tuple(np.dtype(d) for d in ("int8", "uint8", "int16", "uint16", "int32", "int64"))
LLONG_MAX = 2 ** 63 - 1
#: Elements a CondTake block handles (256 threads, 4 each).
CONDTAKE_TILE = 1024
_ITEMS = CONDTAKE_TILE // THREADS

#: Where these kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* Set with repeated indices (IndexingSetMultiAxisVec, Scatter, IndexingSetOneHot): numpy keeps the
  last write; on a GPU the threads race, so which of the repeated values lands is unspecified.
* Incr with repeated indices (IndexingIncrMultiAxisVec, ScatterAdd): floats add through atomicAdd
  in an unspecified order, so float sums may differ from np.add.at's in the last bits (and from run
  to run); integers and bool (a logical or) are exact.  float16 adds as numpy's half arithmetic
  does (in float, rounded once per add), through a compare-and-swap on its 32-bit word, as do the
  8- and 16-bit integers.
* An out-of-range index: the error names the first bad element in row-major order of the
  iteration; with negative-stride index arrays numpy may name another one.  Elements with good
  indices are still written (the output is discarded when the error is raised).  Of several bad
  index arrays the first (in the op's order) is named, as numpy does.
"""

_INDEX_CODE = {d: k for k, d in enumerate(INDEX_DTYPES)}
_C64 = np.dtype("complex64")

_INDEX_PRELUDE = r"""#ifndef MGE_INDEX_PRELUDE
#define MGE_INDEX_PRELUDE
/* the value of index element off of an array of dtype code (int8 uint8 int16 uint16 int32
   int64): the code is the same for the whole launch, so the switch does not diverge */
MGE_FN long long mge_load_index(const void* p, long long off, int code) {
    switch (code) {
    case 0: return ((const signed char*)p)[off];
    case 1: return ((const unsigned char*)p)[off];
    case 2: return ((const short*)p)[off];
    case 3: return ((const unsigned short*)p)[off];
    case 4: return ((const int*)p)[off];
    default: return ((const long long*)p)[off];
    }
}
/* record the first bad iteration index i: the largest LLONG_MAX - i wins */
MGE_FN void mge_flag(long long* word, long long i) {
#if defined(__CUDACC__)
    atomicMax(word, 9223372036854775807LL - i);
#else
    if (*word < 9223372036854775807LL - i) *word = 9223372036854775807LL - i;
#endif
}
/* the x side of an index array: the x axes it spans (1, or a mask's axes for a flat index) */
template <int M> struct mge_index {
    long long size[M][MGE_MAX_NDIM];
    long long stride[M][MGE_MAX_NDIM];
    int span[M];
    int code[M];
    int negative[M];  /* whether -n <= v < 0 counts from the end */
};
#endif /* MGE_INDEX_PRELUDE */
"""

# dtype -> the expression of x + v for the incr kernels (a, b: the stored values)
_ATOMIC_PRELUDE = r"""#ifndef MGE_ATOMIC_PRELUDE
#define MGE_ATOMIC_PRELUDE
/* 8- and 16-bit values (and float16's bits) have no atomic add: a compare-and-swap loop on the
   32-bit word holding them (inside the allocation: pool blocks are 512-byte aligned and sized) */
/* a + b in T: numpy's wrapping integer add, or (H) float16's (in float, rounded once) */
template <class T, bool H> MGE_FN T mge_small_sum(T a, T b) {
    return H ? (T)mge_f2h(mge_h2f((unsigned short)a) + mge_h2f((unsigned short)b))
             : mge_add<T>(a, b);
}
template <class T, bool H> MGE_FN void mge_atomic_small(T* p, T v) {
#if defined(__CUDACC__)
    unsigned int* w = (unsigned int*)((unsigned long long)p & ~3ULL);
    unsigned int shift = (unsigned int)((unsigned long long)p & 3ULL) * 8u;
    unsigned int mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
    unsigned int old = *w, assumed;
    do {
        assumed = old;
        T cur = (T)((assumed & mask) >> shift);
        unsigned int bits = ((unsigned int)mge_small_sum<T, H>(cur, v) << shift) & mask;
        old = atomicCAS(w, assumed, (assumed & ~mask) | bits);
    } while (assumed != old);
#else
    *p = mge_small_sum<T, H>(*p, v);
#endif
}
#if defined(__CUDACC__)
MGE_FN void mge_atomic_add(float* p, float v) { atomicAdd(p, v); }
MGE_FN void mge_atomic_add(double* p, double v) { atomicAdd(p, v); }
MGE_FN void mge_atomic_add(int* p, int v) { atomicAdd(p, v); }
MGE_FN void mge_atomic_add(long long* p, long long v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);  /* two's complement: wraps */
}
#else
template <class T> MGE_FN void mge_atomic_add(T* p, T v) { *p = mge_add<T>(*p, v); }
#endif
MGE_FN void mge_atomic_add(bool* p, bool v) { if (v) *p = true; }  /* np.add of bools: or */
MGE_FN void mge_atomic_add(signed char* p, signed char v) {
    mge_atomic_small<signed char, false>(p, v);
}
MGE_FN void mge_atomic_add(unsigned char* p, unsigned char v) {
    mge_atomic_small<unsigned char, false>(p, v);
}
MGE_FN void mge_atomic_add(short* p, short v) { mge_atomic_small<short, false>(p, v); }
MGE_FN void mge_atomic_add(unsigned short* p, unsigned short v) {
    mge_atomic_small<unsigned short, false>(p, v);
}
MGE_FN void mge_atomic_add_f16(unsigned short* p, unsigned short v) {
    mge_atomic_small<unsigned short, true>(p, v);
}
#endif /* MGE_ATOMIC_PRELUDE */
"""


def _parts(name, text, block=False, atomic=False):
    parts = [("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_INDEX_PRELUDE", _INDEX_PRELUDE)]
    if block:
        parts.append(BLOCK_PARTS[1])
    if atomic:
        parts.append(("MGE_ATOMIC_PRELUDE", _ATOMIC_PRELUDE))
    parts.append((name, text))
    return tuple(parts)


# -- the index kernel -----------------------------------------------------------------------------

def index_kernel(mode, narrays, itemsize=None, dtype=None, index_bits=64):
    """The index kernel of ``mode`` (``MODES``) with ``narrays`` index arrays: by ``itemsize``
    for get and set, by ``dtype`` for incr.  Parameters: ``(T* xs, T* os, const void* idx0...,
    I n, mge_layout<2 + narrays, I> layout, mge_index<narrays> index, long long* err)``."""
    if mode not in MODES:
        raise ValueError(f"CUDA index kernel: unknown mode {mode!r} (one of {', '.join(MODES)})")
    if not (isinstance(narrays, int) and 1 <= narrays <= MAX_INDEX):
        raise ValueError(f"CUDA index kernel: {narrays!r} index arrays, 1 to {MAX_INDEX}")
    _bits("index kernel", index_bits)
    if mode == "incr":
        if dtype is None:
            raise TypeError("CUDA index kernel: incr needs the dtype it adds in")
        (dtype,) = _dtypes("IndexingIncrMultiAxisVec/ScatterAdd kernel", [dtype])
        return _index_kernel(mode, narrays, dtype.itemsize, dtype, index_bits)
    if itemsize is None:
        if dtype is None:
            raise TypeError(f"CUDA index kernel: {mode} needs an element size or a dtype")
        (dtype,) = _dtypes(f"index kernel ({mode})", [dtype])
        itemsize = dtype.itemsize
    return _index_kernel(mode, narrays, _size("index kernel", itemsize), None, index_bits)


@functools.lru_cache(maxsize=None)
def _index_kernel(mode, m, itemsize, dtype, bits):
    idx = _idx(bits)
    t = _storage(dtype) if dtype is not None else _UINT[itemsize]
    tag = _code(dtype) if dtype is not None else str(itemsize)
    name = f"mge_index_{mode}_{tag}_m{m}_s{bits}"
    k = 2 + m
    params = ((f"const {t}* xs" if mode == "get" else f"{t}* xs"),
              (f"{t}* os" if mode == "get" else f"const {t}* os"),
              *(f"const void* idx{j}" for j in range(m)),
              f"{idx} n", f"mge_layout<{k}, {idx}> layout", f"mge_index<{m}> index",
              "long long* err")
    if mode == "get":
        act = "os[off[1]] = xs[xo];"
    elif mode == "set":
        act = "xs[xo] = os[off[1]];"
    elif dtype == _F16:
        act = "mge_atomic_add_f16(xs + xo, os[off[1]]);"
    else:
        act = "mge_atomic_add(xs + xo, os[off[1]]);"
    ptrs = ", ".join(f"idx{j}" for j in range(m))
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    const void* ptr[{m}] = {{{ptrs}}};
    MGE_LOOP(unsigned {idx}, i, n) {{
        {idx} off[{k}];
        mge_offsets<{k}, {idx}>(layout, ({idx})i, off);
        long long xo = off[0];
        bool bad = false;
        MGE_UNROLL
        for (int a = 0; a < {m}; ++a) {{
            long long v = mge_load_index(ptr[a], off[2 + a], index.code[a]);
            if (index.span[a] == 1) {{
                long long size = index.size[a][0];
                if (v < 0 && index.negative[a]) v += size;
                if (v < 0 || v >= size) {{
                    mge_flag(err + a, (long long)i);
                    bad = true;
                }} else {{
                    xo += v * index.stride[a][0];
                }}
            }} else {{  /* a mask's flat index (always in range): unravel, the last axis fastest */
                for (int d = MGE_MAX_NDIM - 1; d >= 0; --d) {{
                    if (d < index.span[a]) {{
                        long long q = v / index.size[a][d];
                        xo += (v - q * index.size[a][d]) * index.stride[a][d];
                        v = q;
                    }}
                }}
            }}
        }}
        if (!bad) {act}
    }}
}}
"""
    return KernelSource(name, _parts(name, text, atomic=mode == "incr"), params, False, bits, m)


def _index_dtype(m):
    return np.dtype([("size", np.int64, (m, MAX_NDIM)), ("stride", np.int64, (m, MAX_NDIM)),
                     ("span", np.int32, (m,)), ("code", np.int32, (m,)),
                     ("negative", np.int32, (m,))], align=True)


# -- plan helpers ---------------------------------------------------------------------------------

def first_bad(word):
    """The iteration index an error word records (``None``: no error)."""
    word = int(word)
    return None if word == 0 else LLONG_MAX - word


@dataclass(frozen=True)
class _Entry:
    """One index array: ``buf``, ``dtype``, its strides over the iteration space and the x axes
    it indexes (sizes, strides; one axis, or a mask's axes for a flat index)."""

    buf: Buf
    dtype: np.dtype
    strides: tuple
    sizes: tuple
    xstrides: tuple
    negative: bool
    axis: int = 0  # the (first) x axis it indexes, for messages


def _describe_ins(ins):
    return ", ".join(f"{x.dtype} {x.shape}" for x in ins) or "none"


def _fail(exc, op, message, ins=()):
    return exc(f"CUDA {op.name}: {message} (inputs: {_describe_ins(ins)})")


def _inputs(op, ins, n):
    if n is not None and len(ins) != n:
        raise _fail(TypeError, op, f"{len(ins)} input(s), the plan takes {n}", ins)
    return ins


def _same_dtype(op, ins, what, layout, dtype):
    if layout.dtype != dtype:
        raise _fail(TypeError, op, f"{what} dtype {layout.dtype} is not {dtype} (convert it "
                    f"first)", ins)


def _index_launch(mode, itemsize, dtype, shape, xs_strides, os_strides, entries, xs, os, err):
    """The index kernel's launch over ``shape`` (``err``: the ``Buf`` of one int64 word per
    entry); ``None`` when it is empty."""
    n = math.prod(shape)
    if n == 0:
        return None
    m = len(entries)
    if not 1 <= m <= MAX_INDEX:
        raise ValueError(f"CUDA index: {m} index arrays, 1 to {MAX_INDEX}")
    strides = [xs_strides, os_strides] + [e.strides for e in entries]
    shape, strides = simplify_layout(shape, strides)
    if len(shape) > MAX_NDIM:
        raise ValueError(f"CUDA index: {len(shape)} dims after merging, at most {MAX_NDIM}")
    bits = index_bits_for(shape, strides)
    if bits == 32 and sum(max(0, s - 1) * abs(st) for e in entries
                          for s, st in zip(e.sizes, e.xstrides)) + 1 > 2 ** 31 - 1:
        bits = 64
    kernel = index_kernel(mode, m, itemsize, dtype, bits)
    packed = np.zeros((), _index_dtype(m))
    for a, e in enumerate(entries):
        packed["size"][a, :len(e.sizes)] = e.sizes
        packed["stride"][a, :len(e.xstrides)] = e.xstrides
        packed["span"][a] = len(e.sizes)
        packed["code"][a] = _INDEX_CODE[e.dtype]
        packed["negative"][a] = int(e.negative)
    index = np.int32 if bits == 32 else np.int64
    return Launch(kernel, grid_for(n), (THREADS, 1, 1),
                  (xs, os, *(e.buf for e in entries), index(n), pack_layout(shape, strides, bits),
                   packed[()], err))


def _check_index_dtype(what, dtype):
    d = np.dtype(dtype)
    if d not in _INDEX_CODE:
        raise TypeError(f"CUDA {what}: index dtype {d} (the kernels read "
                        f"{', '.join(str(x) for x in INDEX_DTYPES)})")
    return d


def _value_dtype(what, mode, dtype):
    """(the incr kernel's dtype or ``None``, the element size) of x's ``dtype``."""
    if mode == "incr":
        (dtype,) = _dtypes(f"{what} kernel", [dtype])
        return dtype, dtype.itemsize
    if np.dtype(dtype) == _C64:  # get and set move its 8 bytes (no arithmetic)
        return None, _C64.itemsize
    return None, _size(f"{what} kernel", _dtypes(f"{what} kernel", [dtype])[0].itemsize)


def _copy_x(x, itemsize):
    """set/incr start from a copy of x: ``in0`` (any strides) into the dense ``out0``."""
    launch = copy_launch(x.shape, x.element_strides, dense_strides(x.shape), itemsize)
    return [] if launch is None else [launch]


def _axis(op, axis, ndim, ins):
    if not -ndim <= axis < ndim:
        raise _fail(ValueError, op, f"axis {axis} is out of range for {ndim}-d input", ins)
    return axis % ndim


def _read_layout(read, buf, layout):
    """The elements of ``layout`` at ``buf`` (any strides) read back through a check's ``read``,
    as a numpy array."""
    d, st = layout.dtype, layout.element_strides
    if layout.size == 0:
        return np.zeros(layout.shape, d)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(layout.shape, st))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(layout.shape, st))
    flat = read(buf + lo * d.itemsize, d, hi - lo + 1)
    return np.lib.stride_tricks.as_strided(flat[-lo:], layout.shape,
                                           tuple(s * d.itemsize for s in st)).copy()


def _along_axis(op, mode, ins, index, other, other_strides, negative, keep, ws=None):
    """The launches, axis, workspace (``ws``, or a new one) and check word of an along-axis op:
    iteration over ``index``'s shape (x's shape, with ``axis`` indexed; the one-hot ops,
    ``keep``: x's shape without ``axis``)."""
    x = ins[0]
    ndim = len(x.shape)
    axis = _axis(op, op.axis, ndim, ins)
    idt = _check_index_dtype(op.name, index.dtype)
    dtype, itemsize = _value_dtype(op.name, mode, x.dtype)
    if len(index.shape) != (ndim - 1 if keep else ndim):
        raise _fail(ValueError, op, f"an index of {len(index.shape)} dims for a {ndim}-d input",
                    ins)
    ws = Workspace() if ws is None else ws
    err = ws.add(8)
    launches = []
    if mode == "get":
        xst, xs, os = x.element_strides, Buf("in0"), Buf("out0")
    else:
        xst = dense_strides(x.shape)
        launches += _copy_x(x, itemsize)
        xs, os = Buf("out0"), other
    if keep:  # one-hot: the index is x's shape without axis
        it_xst = tuple(s for d, s in enumerate(xst) if d != axis)
    else:  # Gather / Scatter: the index has x's rank
        it_xst = tuple(0 if d == axis else s for d, s in enumerate(xst))
    ost = dense_strides(index.shape) if mode == "get" else tuple(other_strides)
    entry = _Entry(Buf("in1"), idt, index.element_strides, (x.shape[axis],), (xst[axis],),
                   negative, axis)
    launch = _index_launch(mode, itemsize, dtype, index.shape, it_xst, ost, [entry], xs, os, err)
    launches += [launch] if launch is not None else []
    return launches, axis, ws, err


def _range_error(op, axis, x):
    n = x.shape[axis]
    return lambda value: IndexError(f"{op.name}: index out of range for axis {axis} of size {n} "
                                    f"(input shape {x.shape})")


# -- the along-axis ops ---------------------------------------------------------------------------

def gather_plan(op, ins, outs):
    """``Gather(axis)``: ``in0`` (x) picked at ``in1`` (index, x's rank) along ``axis`` into
    ``out0`` (index's shape); a ``Check`` for an index out of range."""
    x, index = _inputs(op, ins, 2)
    launches, axis, ws, err = _along_axis(op, "get", ins, index, None, None, True, False)
    return Plan(tuple(launches), ws.size, (Check(err, _range_error(op, axis, x), np.int64),))


def scatter_plan(op, ins, outs):
    """``Scatter(axis)`` (set) or ``ScatterAdd(axis)`` (incr): a copy of ``in0`` (x) into
    ``out0``, then ``in2`` (source: x's dtype, index's shape) written or added at ``in1`` (index)
    along ``axis``; a ``Check`` for an index out of range."""
    x, index, source = _inputs(op, ins, 3)
    _same_dtype(op, ins, "source", source, x.dtype)
    if source.shape != index.shape:
        raise _fail(ValueError, op, "index and source must have the same shape", ins)
    mode = "incr" if isinstance(op, ScatterAdd) else "set"
    launches, axis, ws, err = _along_axis(op, mode, ins, index, Buf("in2"),
                                          source.element_strides, True, False)
    return Plan(tuple(launches), ws.size, (Check(err, _range_error(op, axis, x), np.int64),))


def _one_hot_error(op, axis, x, index):
    n = x.shape[axis]

    def error(value, read):
        values = _read_layout(read, Buf("in1"), index)
        return IndexError(f"{op.name}: index out of range [0, {n}) along axis {axis} (src shape "
                          f"{x.shape}, index range [{values.min()}, {values.max()}])")
    return error


def one_hot_plan(op, ins, outs):
    """``IndexingOneHot(axis, keepdims)``: ``in0`` (src) picked at ``in1`` (index: src's shape
    without ``axis``; no negative indices) into ``out0``; a ``Check`` whose error reads the index
    back for its range."""
    x, index = _inputs(op, ins, 2)
    launches, axis, ws, err = _along_axis(op, "get", ins, index, None, None, False, True)
    return Plan(tuple(launches), ws.size, (Check(err, _one_hot_error(op, axis, x, index),
                                                 np.int64),))


def _as_shape(layout, shape):
    """The strides of ``layout`` viewed as ``shape`` (same size) when size-1 dims alone differ,
    else ``None``."""
    if layout.contiguous:
        return dense_strides(shape)
    have = [(n, s) for n, s in zip(layout.shape, layout.element_strides) if n != 1]
    if [n for n, _ in have] != [n for n in shape if n != 1]:
        return None
    it = iter(s for _, s in have)
    return tuple(0 if n == 1 else next(it) for n in shape)


def set_one_hot_plan(op, ins, outs):
    """``IndexingSetOneHot(axis)``: a copy of ``in0`` (src) into ``out0`` with ``in2`` (value,
    index's size: the CPU kernel reshapes it to index's shape) written at ``in1`` (index) along
    ``axis``; a strided value that no view reshapes is copied dense into the workspace first."""
    x, index, value = _inputs(op, ins, 3)
    _same_dtype(op, ins, "value", value, x.dtype)
    if value.size != index.size:
        raise _fail(ValueError, op, f"a value of {value.size} elements for an index of "
                    f"{index.size}", ins)
    strides = _as_shape(value, index.shape)
    ws, pre, src = Workspace(), [], Buf("in2")
    if strides is None:  # no view of the value has index's shape: a dense copy first
        src = ws.add(value.size * value.dtype.itemsize)
        pre = [copy_launch(value.shape, value.element_strides, dense_strides(value.shape),
                           value.dtype.itemsize, Buf("in2"), src)]
        strides = dense_strides(index.shape)
    launches, axis, ws, err = _along_axis(op, "set", ins, index, src, strides, False, True, ws)
    return Plan(tuple(s for s in pre + launches if s is not None), ws.size,
                (Check(err, _one_hot_error(op, axis, x, index), np.int64),))


def _bcast_strides(shape, strides, target):
    """``strides`` of a view of ``shape`` broadcast to ``target`` (numpy's rule)."""
    lead = len(target) - len(shape)
    return (0,) * lead + tuple(0 if n == 1 and t != 1 else s for n, t, s in
                               zip(shape, target[lead:], strides))


# -- the multi-axis ops ---------------------------------------------------------------------------

_MODE = {IndexingMultiAxisVec: "get", IndexingSetMultiAxisVec: "set",
         IndexingIncrMultiAxisVec: "incr"}


def multi_axis_plan(op, ins, outs):
    """``IndexingMultiAxisVec`` (get), ``IndexingSetMultiAxisVec`` (set) or
    ``IndexingIncrMultiAxisVec`` (incr) with the op's ``items``.

    ``in0`` is x; the value of set/incr is ``in1`` (x's dtype; numpy's broadcast, leading size-1
    axes dropped); the index arrays and masks follow in the order of the items.  Get writes the
    dense ``out0`` of the result shape; set/incr copy x into ``out0`` and write there.  One
    ``Check`` per integer index array.  Masks first go through CondTake's count (a plan and a
    ``Readback`` per mask, see the module)."""
    mode = _MODE[type(op)]
    nv = 0 if mode == "get" else 1
    x = ins[0]
    kinds = [i[0] for i in op.items if i[0] in ("arr", "mask")]
    if len(ins) != 1 + nv + len(kinds):
        raise _fail(TypeError, op, f"{len(ins)} inputs for {len(kinds)} index arrays", ins)
    if nv:
        _same_dtype(op, ins, "value", ins[1], x.dtype)
    _value_dtype(op.name, mode, x.dtype)
    masks = [k for k, kind in enumerate(kinds) if kind == "mask"]
    for k in masks:
        if not ins[1 + nv + k].shape:
            raise _fail(NotImplementedError, op, "a 0-d mask", ins)
    return _mask_counts(op, ins, mode, masks, {})[0]


def _mask_counts(op, ins, mode, masks, totals):
    """(plan, output layouts or ``None``): the plan counting the next mask without a count (its
    count read back; a get's last one sizes the output through ``Readback.outs``), or the final
    plan once every mask has one."""
    nv = 0 if mode == "get" else 1
    todo = [k for k in masks if k not in totals]
    if not todo:
        return _multi_final(op, ins, mode, totals)
    k = todo[0]
    mask = ins[1 + nv + k]
    ws = Workspace()
    steps, total = _count_steps(ws, mask, Buf(f"in{1 + nv + k}"))
    memo = {}

    def resolve(value):
        if value not in memo:
            memo[value] = _mask_counts(op, ins, mode, masks, {**totals, k: int(value)})
        return memo[value]

    outs = (lambda value: resolve(value)[1]) if mode == "get" and len(todo) == 1 else None
    readback = Readback(total, np.dtype(np.int64), lambda value: resolve(value)[0], outs)
    return Plan(tuple(steps), ws.size, readback=readback,
                notes=(f"the count of mask {k} {mask.shape} read back",)), None


def _numpy_error(op, ins, mode, totals):
    """The CPU device's exception for an index whose shapes fit only given the masks' counts:
    numpy's own, on zero-stride stand-ins (no data, no copy of x)."""
    nv = 0 if mode == "get" else 1
    x = ins[0]
    probes, k = [], 0
    for item in op.items:
        if item[0] not in ("arr", "mask"):
            continue
        a = ins[1 + nv + k]
        if item[0] == "mask":
            m = np.zeros(a.shape, bool)
            m.reshape(-1)[:totals[k]] = True
            probes.append(m)
        else:
            probes.append(np.zeros(a.shape, a.dtype))  # in range: only the shapes speak
        k += 1
    target = np.lib.stride_tricks.as_strided(np.zeros(1, x.dtype), x.shape, (0,) * len(x.shape))
    idx = numpy_index(op.items, tuple(probes))
    try:
        if mode == "get":
            target[idx]
        elif mode == "set":
            target[idx] = np.broadcast_to(np.zeros((), x.dtype), ins[1].shape)
        else:
            value = np.broadcast_to(np.zeros((), x.dtype), ins[1].shape)
            region = shape_probe(x.shape)[idx].ndim
            while value.ndim > region and value.shape[0] == 1:
                value = value[0]
            np.add.at(target, idx, value)
    except IndexError as e:
        return IndexError(f"{op.name}: {e} (indexed shape {x.shape})")
    except ValueError as e:
        if mode == "incr":
            return ValueError(f"{op.name}: {e} (indexed shape {x.shape}, value shape "
                              f"{ins[1].shape})")
        return ValueError(f"{op.name}: {e} (indexed shape {x.shape})")
    return None


def _multi_final(op, ins, mode, totals):
    nv = 0 if mode == "get" else 1
    x = ins[0]
    dtype, itemsize = _value_dtype(op.name, mode, x.dtype)
    ws = Workspace()
    steps, indices, k = [], [], 0
    for item in op.items:
        if item[0] not in ("arr", "mask"):
            continue
        j = 1 + nv + k
        a = ins[j]
        if item[0] == "arr":
            indices.append((a.shape, a.element_strides, a.dtype, Buf(f"in{j}")))
        else:
            count = totals[k]
            flat = ws.add(4 * count)
            steps += _flat_index_steps(ws, a, Buf(f"in{j}"), flat) if count else []
            indices.append((count, a.shape, flat))
        k += 1
    if totals:  # shapes that fit only given the counts: numpy's own error, as the CPU raises
        error = _numpy_error(op, ins, mode, totals)
        if error is not None:
            raise error
    xst = x.element_strides if mode == "get" else dense_strides(x.shape)
    base, shape, it_xst, ents = _describe(op.name, op.items, x.shape, xst, indices)
    err = ws.add(8 * len(ents))
    if mode == "get":
        launch = _index_launch(mode, itemsize, dtype, shape, it_xst, dense_strides(shape), ents,
                               Buf("in0", base * itemsize), Buf("out0"), err)
        out_layouts = (Layout(shape, x.dtype),)
    else:
        value = ins[1]
        vshape, vst = value.shape, value.element_strides
        while len(vshape) > len(shape) and vshape[0] == 1:  # numpy drops leading size-1 axes
            vshape, vst = vshape[1:], vst[1:]
        try:
            ok = np.broadcast_shapes(vshape, shape) == tuple(shape)
        except ValueError:
            ok = False
        if not ok:
            raise _fail(ValueError, op, f"cannot assign a value of shape {value.shape} to an "
                        f"indexed region of shape {tuple(shape)}", ins)
        steps += _copy_x(x, itemsize)
        launch = _index_launch(mode, itemsize, dtype, shape, it_xst,
                               _bcast_strides(vshape, vst, shape), ents,
                               Buf("out0", base * itemsize), Buf("in1"), err)
        out_layouts = (Layout(x.shape, x.dtype),)
    steps += [launch] if launch is not None else []
    checks, k = [], 0
    for item in op.items:
        if item[0] == "arr":
            checks.append(Check(err + 8 * k, _multi_error(op, x, ents[k], shape, ins[
                1 + nv + k]), np.int64))
        if item[0] in ("arr", "mask"):
            k += 1
    return Plan(tuple(steps), ws.size, tuple(checks)), out_layouts


def _multi_error(op, x, entry, shape, index):
    """The IndexError of index array ``entry`` (``index``: its layout) for a check word: the bad
    element read back (its position from the iteration index the word keeps)."""
    def error(value, read):
        offset, rest = 0, first_bad(value)
        for n, s in zip(reversed(shape), reversed(entry.strides)):
            rest, c = divmod(rest, n)
            offset += c * s
        v = int(read(entry.buf + offset * index.dtype.itemsize, index.dtype, 1)[0])
        return IndexError(f"{op.name}: index {v} is out of bounds for axis {entry.axis} with "
                          f"size {entry.sizes[0]} (indexed shape {x.shape})")
    return error


def _describe(op_name, items, x_shape, x_strides, indices):
    """(base offset, iteration shape, x-side strides, [_Entry]) of ``x[items]`` by numpy's
    rules: ints and slices fold into the base and strides; the index arrays broadcast, their dims
    in place of the advanced indices when those are adjacent (ints count as advanced once any
    array is there), else first."""
    ndim = len(x_shape)
    if not any(i[0] in ("arr", "mask") for i in items):
        raise ValueError(f"CUDA {op_name}: no index array in {items} (basic indexing is "
                         f"relayout.py's subtensor_plan)")
    arrays = iter(indices)
    consumed, masks = 0, {}
    for k, item in enumerate(items):
        if item[0] in ("int", "slice", "arr"):
            consumed += 1
        if item[0] in ("arr", "mask"):
            ind = next(arrays)
            if item[0] == "mask":
                masks[k] = ind
                consumed += len(ind[1])
    if consumed > ndim:
        raise IndexError(f"{op_name}: too many indices for an array of dimension {ndim} "
                         f"(indexed shape {tuple(x_shape)})")
    seq = list(items) + ([] if any(i[0] == "ell" for i in items) else [("ell",)])
    base, a, arr = 0, 0, 0
    kinds, basic, entries = [], [], []  # kinds: "adv"/"basic" per item; basic: (size, stride, pos)
    for pos, item in enumerate(seq):
        kind = item[0]
        if kind == "int":
            n, v = x_shape[a], item[1]
            if not -n <= v < n:
                raise IndexError(f"{op_name}: index {v} is out of bounds for axis {a} with size "
                                 f"{n} (indexed shape {tuple(x_shape)})")
            base += (v % n) * x_strides[a]
            kinds.append("adv")
            a += 1
        elif kind == "slice":
            start, stop, step = slice(item[1], item[2], item[3]).indices(x_shape[a])
            length = len(range(start, stop, step))
            base += start * x_strides[a] if length else 0
            basic.append((length, step * x_strides[a], pos))
            kinds.append("basic")
            a += 1
        elif kind == "new":
            basic.append((1, 0, pos))
            kinds.append("basic")
        elif kind == "ell":
            for _ in range(ndim - consumed):
                basic.append((x_shape[a], x_strides[a], pos))
                a += 1
            kinds.append("basic" if ndim - consumed else "empty")
        elif kind == "arr":
            shape, strides, idt, buf = indices[arr]
            entries.append((_check_index_dtype(op_name, idt), tuple(shape), tuple(strides),
                            (x_shape[a],), (x_strides[a],), True, a, buf))
            kinds.append("adv")
            a, arr = a + 1, arr + 1
        elif kind == "mask":
            count, mshape, buf = indices[arr]
            mshape = tuple(mshape)
            if not mshape:
                raise NotImplementedError(f"CUDA {op_name}: a 0-d mask")
            if tuple(x_shape[a:a + len(mshape)]) != mshape:
                raise IndexError(f"{op_name}: boolean index of shape {mshape} does not match "
                                 f"the indexed axes {tuple(x_shape[a:a + len(mshape)])} (indexed "
                                 f"shape {tuple(x_shape)})")
            entries.append((np.dtype("int32"), (int(count),), (1,), mshape,
                            tuple(x_strides[a:a + len(mshape)]), False, a, buf))
            kinds.append("adv")
            a, arr = a + len(mshape), arr + 1
        else:
            raise ValueError(f"CUDA {op_name}: unknown index item {item!r}")
    adv = [p for p, k in enumerate(kinds) if k == "adv"]
    adjacent = "basic" not in kinds[adv[0]:adv[-1] + 1]
    try:
        bshape = tuple(np.broadcast_shapes(*[e[1] for e in entries]))
    except ValueError:
        raise IndexError(f"{op_name}: shape mismatch: indexing arrays could not be broadcast "
                         f"together with shapes {' '.join(str(e[1]) for e in entries)} (indexed "
                         f"shape {tuple(x_shape)})") from None
    before = [b for b in basic if b[2] < adv[0]] if adjacent else []
    after = [b for b in basic if b[2] > adv[0]] if adjacent else basic
    shape = tuple(b[0] for b in before) + bshape + tuple(b[0] for b in after)
    xst = tuple(b[1] for b in before) + (0,) * len(bshape) + tuple(b[1] for b in after)
    ents = [_Entry(buf, idt, (0,) * len(before) + _bcast_strides(ish, ist, bshape)
                   + (0,) * len(after), sizes, xstrides, negative, axis)
            for idt, ish, ist, sizes, xstrides, negative, axis, buf in entries]
    if not masks:  # the adjacency rule, checked against numpy on the shapes
        probes = tuple(shape_probe(tuple(ind[0]), np.intp) for ind in indices)
        want = shape_probe(tuple(x_shape))[numpy_index(tuple(items), probes)].shape
        if tuple(want) != shape:
            raise NotImplementedError(f"CUDA {op_name}: planned shape {shape}, numpy's {want} "
                                      f"for items {items}")
    return base, shape, xst, ents

# -- Where ----------------------------------------------------------------------------------------

def _mask_test(d, expr):
    if d == _F16:
        return f"(({expr}) & 0x7fff) != 0"  # the bits: -0 is false, NaN true
    return f"({expr}) != 0"


def where_kernel(mask_dtype, itemsize, contiguous=True, index_bits=64):
    """``Where`` by element size: ``(out, mask, x, y, long long n)`` (contiguous) or ``(out, mask,
    x, y, I n, mge_layout<4, I> layout)`` (broadcasting); the mask of ``mask_dtype``."""
    (m,) = _dtypes("Where kernel", [mask_dtype])
    return _where_kernel(m, _size("Where kernel", itemsize), bool(contiguous),
                         _bits("Where kernel", index_bits))


@functools.lru_cache(maxsize=None)
def _where_kernel(m, itemsize, contiguous, bits):
    t, mt = _UINT[itemsize], _storage(m)
    ptrs = (f"{t}* out", f"const {mt}* mask", f"const {t}* x", f"const {t}* y")
    if contiguous:
        name = f"mge_where_{_code(m)}_{itemsize}_c"
        params = ptrs + ("long long n",)
        body = (f"    MGE_LOOP(unsigned long long, i, n) out[i] = {_mask_test(m, 'mask[i]')} "
                f"? x[i] : y[i];\n")
    else:
        idx = _idx(bits)
        name = f"mge_where_{_code(m)}_{itemsize}_s{bits}"
        params = ptrs + (f"{idx} n", f"mge_layout<4, {idx}> layout")
        body = (f"    MGE_LOOP(unsigned {idx}, i, n) {{\n        {idx} off[4];\n"
                f"        mge_offsets<4, {idx}>(layout, ({idx})i, off);\n"
                f"        out[off[0]] = {_mask_test(m, 'mask[off[1]]')} ? x[off[2]] : y[off[3]];"
                f"\n    }}\n")
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n{body}}}\n"
    return KernelSource(name, _parts(name, text), params, contiguous, bits, 3)




def where_plan(op, ins, outs):
    """``Where``: ``in1`` (x) where ``in0`` (mask, any dtype: nonzero) else ``in2`` (y), all
    broadcast to the dense ``out0``; the contiguous kernel when nothing broadcasts or strides."""
    mask, x, y = _inputs(op, ins, 3)
    (o,) = outs
    _same_dtype(op, ins, "x", x, o.dtype)
    _same_dtype(op, ins, "y", y, o.dtype)
    try:
        (mdt,) = _dtypes("Where kernel", [mask.dtype])
        itemsize = _size("Where kernel", _dtypes("Where kernel", [o.dtype])[0].itemsize)
    except (TypeError, ValueError) as e:
        raise _fail(TypeError, op, str(e), ins) from None
    target = o.shape
    n = math.prod(target)
    if n == 0:
        return Plan(())
    try:
        strides = [_bcast_strides(a.shape, a.element_strides, target) for a in (mask, x, y)]
        if any(len(a.shape) > len(target) or any(s not in (1, t) for s, t in zip(
                a.shape[::-1], target[::-1])) for a in (mask, x, y)):
            raise ValueError
    except ValueError:
        raise _fail(ValueError, op, f"the inputs do not broadcast to {target}", ins) from None
    dense = dense_strides(target)
    ptrs = (Buf("out0"), Buf("in0"), Buf("in1"), Buf("in2"))
    if all(tuple(st) == dense for st in strides):
        return Plan((Launch(where_kernel(mdt, itemsize), grid_for(n), (THREADS, 1, 1),
                            ptrs + (np.int64(n),)),))
    simple, st = simplify_layout(target, [dense] + strides)
    bits = index_bits_for(simple, st)
    index = np.int32 if bits == 32 else np.int64
    return Plan((Launch(where_kernel(mdt, itemsize, False, bits), grid_for(n), (THREADS, 1, 1),
                        ptrs + (index(n), pack_layout(simple, st, bits))),))


# -- CondTake -------------------------------------------------------------------------------------

def _flags(m):
    """C: thread t's count of its _ITEMS flags of the tile (the mask's offsets through L)."""
    return (f"long long c = 0;\n"
            f"            for (int j = 0; j < {_ITEMS}; ++j) {{\n"
            f"                long long i = base + (long long)threadIdx.x * {_ITEMS} + j;\n"
            f"                if (i < n) {{\n"
            f"                    long long off[2];\n"
            f"                    mge_offsets<2, long long>(L, i, off);\n"
            f"                    c += {_mask_test(m, 'mask[off[0]]')};\n"
            f"                }}\n            }}")


def condtake_count_kernel(mask_dtype):
    """Pass one of CondTake: ``(const M* mask, long long n, mge_layout<2, long long> L, long long*
    counts)`` -- ``counts[b]`` the true flags of tile ``b`` (``CONDTAKE_TILE`` elements, row-major
    through ``L``: the mask's strides first, x's second).  Block (256, 1, 1), a block per tile."""
    (m,) = _dtypes("CondTake kernel", [mask_dtype])
    return _condtake_count(m)


@functools.lru_cache(maxsize=None)
def _condtake_count(m):
    name = f"mge_condtake_count_{_code(m)}"
    params = (f"const {_storage(m)}* mask", "long long n", "mge_layout<2, long long> L",
              "long long* counts")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_FOR_BLOCKS {{
        MGE_SHARED long long s[{THREADS}];
        MGE_THREADS {{
            long long base = (long long)blockIdx.x * {CONDTAKE_TILE};
            {_flags(m)}
            s[threadIdx.x] = c;
        }}
        MGE_SYNC
        for (int half = {THREADS // 2}; half > 0; half >>= 1) {{  /* a tree sum */
            MGE_THREADS {{
                if ((int)threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
            }}
            MGE_SYNC
        }}
        MGE_THREADS {{
            if (threadIdx.x == 0) counts[blockIdx.x] = s[0];
        }}
    }}
}}
"""
    return KernelSource(name, _parts(name, text, block=True), params, False, 64, 1)


# an inclusive Hillis-Steele scan of s[cur][0..256) in double-buffered shared memory; cur is
# block-uniform (it lives outside the thread phases)
_SCAN = f"""for (int step = 1; step < {THREADS}; step <<= 1) {{
            MGE_THREADS {{
                int t = threadIdx.x;
                s[cur ^ 1][t] = s[cur][t] + (t >= step ? s[cur][t - step] : 0);
            }}
            MGE_SYNC
            cur ^= 1;
        }}"""


def condtake_scan_kernel():
    """Between the passes: ``(long long* counts, long long nblocks, long long* total)`` -- the
    counts become their exclusive prefix sums, ``total[0]`` their sum.  One block of 256."""
    return _condtake_scan()


@functools.lru_cache(maxsize=None)
def _condtake_scan():
    name = "mge_condtake_scan"
    params = ("long long* counts", "long long nblocks", "long long* total")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_FOR_BLOCKS {{
        MGE_SHARED long long s[2][{THREADS}];
        MGE_SHARED long long carry[1];
        MGE_THREADS {{
            if (threadIdx.x == 0) carry[0] = 0;
        }}
        MGE_SYNC
        for (long long chunk = 0; chunk < nblocks; chunk += {THREADS}) {{
            int cur = 0;
            MGE_THREADS {{
                long long b = chunk + threadIdx.x;
                s[0][threadIdx.x] = b < nblocks ? counts[b] : 0;
            }}
            MGE_SYNC
            {_SCAN}
            MGE_THREADS {{
                long long b = chunk + threadIdx.x;
                if (b < nblocks) counts[b] = carry[0] + s[cur][threadIdx.x] - counts[b];
            }}
            MGE_SYNC
            MGE_THREADS {{
                if (threadIdx.x == 0) carry[0] += s[cur][{THREADS - 1}];
            }}
            MGE_SYNC
        }}
        MGE_THREADS {{
            if (threadIdx.x == 0) total[0] = carry[0];
        }}
    }}
}}
"""
    return KernelSource(name, _parts(name, text, block=True), params, False, 64, 0)


def condtake_write_kernel(mask_dtype, itemsize):
    """Pass two: ``(const M* mask, const T* x, long long n, mge_layout<2, long long> L, const long
    long* offsets, T* out, int* index)`` -- each tile's true elements at its offset, in order,
    with their flat indices (``out`` and ``x`` NULL: the indices only, a mask index's).  Block
    (256, 1, 1), a block per tile."""
    (m,) = _dtypes("CondTake kernel", [mask_dtype])
    return _condtake_write(m, _size("CondTake kernel", itemsize))


@functools.lru_cache(maxsize=None)
def _condtake_write(m, itemsize):
    t = _UINT[itemsize]
    name = f"mge_condtake_write_{_code(m)}_{itemsize}"
    params = (f"const {_storage(m)}* mask", f"const {t}* x", "long long n",
              "mge_layout<2, long long> L", "const long long* offsets", f"{t}* out", "int* index")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_FOR_BLOCKS {{
        MGE_SHARED long long s[2][{THREADS}];
        int cur = 0;
        MGE_THREADS {{
            long long base = (long long)blockIdx.x * {CONDTAKE_TILE};
            {_flags(m)}
            s[0][threadIdx.x] = c;
        }}
        MGE_SYNC
        {_SCAN}
        MGE_THREADS {{
            long long base = (long long)blockIdx.x * {CONDTAKE_TILE};
            {_flags(m)}
            long long at = offsets[blockIdx.x] + s[cur][threadIdx.x] - c;  /* exclusive prefix */
            for (int j = 0; j < {_ITEMS}; ++j) {{
                long long i = base + (long long)threadIdx.x * {_ITEMS} + j;
                if (i < n) {{
                    long long off[2];
                    mge_offsets<2, long long>(L, i, off);
                    if ({_mask_test(m, 'mask[off[0]]')}) {{
                        if (out) out[at] = x[off[1]];  /* NULL: the indices only */
                        index[at] = (int)i;
                        ++at;
                    }}
                }}
            }}
        }}
    }}
}}
"""
    return KernelSource(name, _parts(name, text, block=True), params, False, 64, 2)




def _count_steps(ws, mask, buf):
    """Pass one over ``mask`` (a ``Layout`` at ``buf``): the steps and the ``Buf`` of the total
    (int64); the tiles' exclusive offsets before it (see ``_tiles``).  An empty mask: a zero."""
    if mask.size == 0:
        total = ws.add(8)
        return [Memset(total, 8, 0)], total
    nblocks, layout = _tiles(mask, mask)
    counts, total = ws.add(8 * nblocks), ws.add(8)
    count = Launch(condtake_count_kernel(mask.dtype), (nblocks, 1, 1), (THREADS, 1, 1),
                   (buf, np.int64(mask.size), layout, counts))
    scan = Launch(condtake_scan_kernel(), (1, 1, 1), (THREADS, 1, 1),
                  (counts, np.int64(nblocks), total))
    return [count, scan], total


def _tiles(mask, x):
    """(tiles, the packed layout over the mask's shape: mask strides, x strides)."""
    simple, strides = simplify_layout(mask.shape, [mask.element_strides, x.element_strides])
    return -(-mask.size // CONDTAKE_TILE), pack_layout(simple, strides, 64)


def _write_steps(ws, mask, x, mbuf, xbuf, out, index):
    """Pass two: count and scan again (a plan's workspace is its own), then write the selected
    elements of ``x`` at ``xbuf`` to ``out`` (``None``: the indices only) and their int32 flat
    indices to ``index``."""
    nblocks, layout = _tiles(mask, x)
    counts, total = ws.add(8 * nblocks), ws.add(8)
    itemsize = x.dtype.itemsize if out is not None else 1
    return [Launch(condtake_count_kernel(mask.dtype), (nblocks, 1, 1), (THREADS, 1, 1),
                   (mbuf, np.int64(mask.size), layout, counts)),
            Launch(condtake_scan_kernel(), (1, 1, 1), (THREADS, 1, 1),
                   (counts, np.int64(nblocks), total)),
            Launch(condtake_write_kernel(mask.dtype, itemsize), (nblocks, 1, 1), (THREADS, 1, 1),
                   (mbuf, xbuf, np.int64(mask.size), layout, counts, out, index))]


def _flat_index_steps(ws, mask, buf, flat):
    """The steps writing the int32 flat indices of ``mask``'s nonzero elements to ``flat``."""
    return _write_steps(ws, mask, mask, buf, None, None, flat)


def condtake_plan(op, ins, outs):
    """``CondTake``: ``in0`` (mask) and ``in1`` (x) of one shape (any strides) -> ``out0`` = x
    where the mask is nonzero, ``out1`` = their flat indices (int32).  Pass one counts; its total
    is the ``Readback`` whose ``outs`` size the outputs and whose ``then`` is pass two."""
    mask, x = _inputs(op, ins, 2)
    if mask.shape != x.shape:
        raise _fail(ValueError, op, "mask and input must have the same shape", ins)
    try:
        _dtypes("CondTake kernel", [mask.dtype])
        _size("CondTake kernel", _dtypes("CondTake kernel", [x.dtype])[0].itemsize)
    except (TypeError, ValueError) as e:
        raise _fail(TypeError, op, str(e), ins) from None
    n = x.size
    if n > 2 ** 31 - 1:
        raise _fail(ValueError, op, f"{n} elements; the int32 index output holds at most "
                    f"2**31 - 1", ins)
    ws = Workspace()
    steps, total = _count_steps(ws, mask, Buf("in0"))

    def then(count):
        if int(count) == 0:
            return Plan((), notes=("nothing selected",))
        ws2 = Workspace()
        return Plan(tuple(_write_steps(ws2, mask, x, Buf("in0"), Buf("in1"), Buf("out0"),
                                       Buf("out1"))), ws2.size)

    def sizes(count):
        return [Layout((int(count),), x.dtype), Layout((int(count),), np.int32)]

    return Plan(tuple(steps), ws.size, readback=Readback(total, np.dtype(np.int64), then, sizes),
                notes=("the count read back",))


#: op class -> ``plan(op, ins, outs) -> launch.Plan``.
PLANS = {
    IndexingMultiAxisVec: multi_axis_plan, IndexingSetMultiAxisVec: multi_axis_plan,
    IndexingIncrMultiAxisVec: multi_axis_plan, IndexingOneHot: one_hot_plan,
    IndexingSetOneHot: set_one_hot_plan, Gather: gather_plan, Scatter: scatter_plan,
    ScatterAdd: scatter_plan, Where: where_plan, CondTake: condtake_plan,
}

#: Every op here reads its inputs' strides (see the module).
STRIDED = frozenset(PLANS)
