"""CUDA C for the indexing ops, their launch plans, and the launcher's error checks.

**One kernel for every index op.**  ``IndexingMultiAxisVec`` (get), ``IndexingSetMultiAxisVec``
(set), ``IndexingIncrMultiAxisVec`` (incr), ``Gather``, ``Scatter``, ``ScatterAdd``,
``IndexingOneHot`` and ``IndexingSetOneHot`` are all the kernel ``mge_index_<mode>_...``: a
grid-stride loop over an *iteration space* (the indexed region's shape), with up to
``MAX_INDEX`` index arrays.  Per element it finds, through one ``mge_layout<2 + M, I>`` (the
general kernels' layout of elemwise.py), the offset of the *x side* (the indexed array: base plus
the strides of the sliced dims), of the *other side* (the dense result of a get, the broadcast
value or source of a set) and of each index array (broadcast: stride 0 along the dims it does not
have).  Index ``k`` then adds ``wrap(v) * stride`` along the x axis it indexes (a mask's flat
index instead unravels over the axes the mask covers).  Get: ``other = x[...]``; set:
``x[...] = other``; incr: an atomic add.  The plans turn each op into that form in Python:
``multi_axis_plan`` follows numpy's rules (ints and slices fold into the base and the strides,
the broadcast index dims go in place when the advanced indices are adjacent and first otherwise);
the along-axis ops index one axis with an index array of the iteration's own shape.  Gets and sets
move bits, so they are generated per element size; incr per dtype.  Index arrays of any integer
dtype are read through a switch on a per-array dtype code (uniform over the launch: no divergence),
so one kernel serves every index dtype.

**Errors.**  A kernel cannot raise: an out-of-range index sets, in the launch's error record (one
zeroed ``long long`` per index array, the buffer ``"err"``), ``LLONG_MAX - i`` by ``atomicMax``
for the iteration index ``i`` it was met at -- so the record keeps the *first* bad element in
row-major order, which is the element numpy names.  The element is not written.  The device reads
the record back and calls the plan's ``error(record, read_index)`` (pure Python): ``None``, or the
``IndexError`` the CPU device raises, with the same message (``read_index(k, offset)`` reads one
element of index array ``k``: the message names its value; the one-hot ops name the index's range,
so they read the whole index array, ``read_index(k, None)``, on that rare path only).

**Where** is an elementwise select by element size (contiguous, or general with broadcasting);
the mask of any dtype is true where nonzero (float16 by its bits, so -0 is false and NaN true).

**CondTake** has a data-dependent size: a two-pass plan (``condtake_plan``).  Pass one:
``mge_condtake_count`` -- a block of 256 threads per tile of 1024 elements, each thread counting
4 consecutive flags, a shared-memory tree sum giving the tile's count -- then
``mge_condtake_scan``, one block scanning the tiles' counts (an exclusive scan in chunks of 256,
Hillis-Steele in double-buffered shared memory, a running carry) into offsets and the total.  The
device reads the total back (8 bytes), allocates the outputs and runs pass two:
``mge_condtake_write`` -- each block scans its threads' counts again and each thread writes its
elements in order at the tile's offset plus its prefix: the values and their int32 flat indices,
in the order of ``np.flatnonzero``.  An empty result launches nothing in pass two.  A mask index
(``x[mask]``) uses the same plan for its flat indices, which ``multi_axis_plan`` takes.

Kernels with blocks and barriers use block.py's ``BLOCK_PRELUDE`` (phases, emulated serially on
the host build); the rest run serially there through ``MGE_LOOP``.
"""
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ....ops.indexing import numpy_index, shape_probe
from .elemwise import (
    _PRELUDE, MAX_NDIM, _F16, _dtypes, _code, _storage, KernelSource, index_bits_for,
    pack_layout, simplify_layout,
)
from .block import BLOCK_PARTS
from .relayout import (
    THREADS, Launch, Ptr, _UINT, _bits, _contiguous_strides, _idx, _size,
    copy_launch, grid_for,
)

__all__ = ["MAX_INDEX", "INDEX_DTYPES", "MODES", "DIFFERENCES", "NVRTC_OPTIONS", "LLONG_MAX",
           "index_kernel", "where_kernel", "condtake_count_kernel", "condtake_scan_kernel",
           "condtake_write_kernel", "IndexPlan", "CondTakePlan", "multi_axis_plan", "gather_plan",
           "scatter_plan", "one_hot_plan", "set_one_hot_plan", "where_launch", "condtake_plan",
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
  indices are still written (the output is discarded when the error is raised).
"""

_INDEX_CODE = {d: k for k, d in enumerate(INDEX_DTYPES)}

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


# -- plans ----------------------------------------------------------------------------------------

@dataclass
class IndexPlan:
    """The launches of an index op (in order), its output shape, the error record's size
    (``err_words`` zeroed ``long long``s in the buffer ``"err"``, 0: none) and ``error(record,
    read_index)`` -- the exception the CPU device raises for the record read back, or ``None``."""

    launches: list
    out_shape: tuple
    err_words: int
    check: object = field(repr=False, default=None)

    def error(self, record, read_index=None):
        """``None`` when ``record`` (the ``err`` words read back) shows no bad index, else the
        ``IndexError`` to raise; ``read_index(k, offset)`` reads element ``offset`` (elements,
        from the pointer passed) of index array ``k``, or all of it for ``offset=None``."""
        bad = [first_bad(w) for w in np.asarray(record).reshape(-1)[:self.err_words]]
        if not any(b is not None for b in bad):
            return None
        return self.check(bad, read_index)


def first_bad(word):
    """The iteration index an error word records (``None``: no error)."""
    word = int(word)
    return None if word == 0 else LLONG_MAX - word


@dataclass(frozen=True)
class _Entry:
    """One index array: ``ptr``, ``dtype``, its strides over the iteration space and the x axes
    it indexes (sizes, strides; one axis, or a mask's axes for a flat index)."""

    ptr: Ptr
    dtype: np.dtype
    strides: tuple
    sizes: tuple
    xstrides: tuple
    negative: bool
    axis: int = 0  # the (first) x axis it indexes, for messages


def _index_launch(mode, itemsize, dtype, shape, xs_strides, os_strides, entries, xs, os):
    """The index kernel's launch over ``shape``; ``None`` when it is empty."""
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
                  (xs, os, *(e.ptr for e in entries), index(n), pack_layout(shape, strides, bits),
                   packed[()], Ptr("err")))


def _check_index_dtype(what, dtype):
    d = np.dtype(dtype)
    if d not in _INDEX_CODE:
        raise TypeError(f"CUDA {what}: index dtype {d} (the kernels read "
                        f"{', '.join(str(x) for x in INDEX_DTYPES)})")
    return d


def _value_dtype(what, mode, dtype, itemsize):
    if mode == "incr":
        (dtype,) = _dtypes(f"{what} kernel", [dtype])
        return dtype, dtype.itemsize
    if itemsize is None and dtype is not None:
        itemsize = _dtypes(f"{what} kernel", [dtype])[0].itemsize
    return None, _size(f"{what} kernel", itemsize)


def _copy_x(shape, strides, itemsize):
    """set/incr start from a copy of x: in0 into the dense out0."""
    launch = copy_launch(shape, strides, _contiguous_strides(shape), itemsize)
    return [] if launch is None else [launch]


def _axis(what, axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"CUDA {what}: axis {axis} is out of range for {ndim}-d input")
    return axis % ndim


def _along_axis(what, mode, axis, x_shape, x_strides, index_shape, index_strides, index_dtype,
                itemsize, dtype, other_strides, negative, keep=None):
    """The plan of an along-axis op: iteration over ``index_shape`` (x's shape, with the
    ``keep`` axis -- the one-hot ops -- or ``axis`` indexed)."""
    ndim = len(x_shape)
    axis = _axis(what, axis, ndim)
    index_dtype = _check_index_dtype(what, index_dtype)
    dtype, itemsize = _value_dtype(what, mode, dtype, itemsize)
    n = x_shape[axis]
    launches = []
    if mode == "get":
        xst, xs, os = x_strides, Ptr("in0"), Ptr("out0")
    else:
        xst = _contiguous_strides(x_shape)
        launches += _copy_x(x_shape, x_strides, itemsize)
        xs, os = Ptr("out0"), Ptr("in2")
    if keep is None:  # Gather / Scatter: the index has x's rank
        it_shape = tuple(index_shape)
        it_xst = tuple(0 if d == axis else s for d, s in enumerate(xst))
        it_ist = tuple(index_strides)
    else:  # one-hot: the index is x's shape without axis
        it_shape = tuple(index_shape)
        it_xst = tuple(s for d, s in enumerate(xst) if d != axis)
        it_ist = tuple(index_strides)
    ost = _contiguous_strides(it_shape) if mode == "get" else tuple(other_strides)
    entry = _Entry(Ptr("in1"), index_dtype, it_ist, (n,), (xst[axis],), negative, axis)
    launch = _index_launch(mode, itemsize, dtype, it_shape, it_xst, ost, [entry], xs, os)
    if launch is not None:
        launches.append(launch)
    return launches, axis


def gather_plan(axis, x_shape, x_strides, index_shape, index_strides, index_dtype, itemsize,
                op_name="Gather"):
    """``Gather(axis)`` of ``in0`` (x) at ``in1`` (index) into ``out0`` (index's shape)."""
    launches, axis = _along_axis(op_name, "get", axis, x_shape, x_strides, index_shape,
                                 index_strides, index_dtype, itemsize, None, None, True)
    n = x_shape[axis]

    def check(bad, read):
        return IndexError(f"{op_name}: index out of range for axis {axis} of size {n} "
                          f"(input shape {tuple(x_shape)})")
    return IndexPlan(launches, tuple(index_shape), 1, check)


def scatter_plan(axis, x_shape, x_strides, index_shape, index_strides, index_dtype,
                 source_strides, itemsize=None, dtype=None, add=False):
    """``Scatter`` (``add=False``: set) or ``ScatterAdd`` (incr, by ``dtype``): a copy of
    ``in0`` (x) into ``out0``, then ``in2`` (source, x's dtype, index's shape) written or added at
    ``in1`` (index) along ``axis``."""
    name = "ScatterAdd" if add else "Scatter"
    if dtype is not None and itemsize is None:
        itemsize = np.dtype(dtype).itemsize
    launches, axis = _along_axis(name, "incr" if add else "set", axis, x_shape, x_strides,
                                 index_shape, index_strides, index_dtype, itemsize, dtype,
                                 source_strides, True)
    n = x_shape[axis]

    def check(bad, read):
        return IndexError(f"{name}: index out of range for axis {axis} of size {n} "
                          f"(input shape {tuple(x_shape)})")
    return IndexPlan(launches, tuple(x_shape), 1, check)


def _one_hot_check(op_name, axis, x_shape, what="index", src="src"):
    n = x_shape[axis]

    def check(bad, read):
        values = np.asarray(read(0, None))
        return IndexError(f"{op_name}: {what} out of range [0, {n}) along axis {axis} "
                          f"({src} shape {tuple(x_shape)}, {what} range [{values.min()}, "
                          f"{values.max()}])")
    return check


def one_hot_plan(axis, keepdims, x_shape, x_strides, index_shape, index_strides, index_dtype,
                 itemsize):
    """``IndexingOneHot(axis, keepdims)``: ``in0`` (src) picked at ``in1`` (index: src's shape
    without ``axis``; no negative indices) into ``out0``."""
    launches, axis = _along_axis("IndexingOneHot", "get", axis, x_shape, x_strides, index_shape,
                                 index_strides, index_dtype, itemsize, None, None, False, keep=1)
    out = tuple(x_shape[:axis]) + ((1,) if keepdims else ()) + tuple(x_shape[axis + 1:])
    return IndexPlan(launches, out, 1, _one_hot_check("IndexingOneHot", axis, x_shape))


def set_one_hot_plan(axis, x_shape, x_strides, index_shape, index_strides, index_dtype,
                     value_strides, itemsize):
    """``IndexingSetOneHot(axis)``: a copy of ``in0`` (src) into ``out0`` with ``in2`` (value,
    index's shape: ``value_strides`` of that shape) written at ``in1`` (index) along ``axis``."""
    launches, axis = _along_axis("IndexingSetOneHot", "set", axis, x_shape, x_strides,
                                 index_shape, index_strides, index_dtype, itemsize, None,
                                 value_strides, False, keep=1)
    return IndexPlan(launches, tuple(x_shape), 1,
                     _one_hot_check("IndexingSetOneHot", axis, x_shape))


def _bcast_strides(shape, strides, target):
    """``strides`` of a view of ``shape`` broadcast to ``target`` (numpy's rule)."""
    lead = len(target) - len(shape)
    return (0,) * lead + tuple(0 if n == 1 and t != 1 else s for n, t, s in
                               zip(shape, target[lead:], strides))


def multi_axis_plan(op_name, mode, items, x_shape, x_strides, indices, itemsize=None, dtype=None,
                    value_shape=None, value_strides=None):
    """``IndexingMultiAxisVec`` (``mode="get"``), ``IndexingSetMultiAxisVec`` (``"set"``) or
    ``IndexingIncrMultiAxisVec`` (``"incr"``, by ``dtype``) with the op's ``items``.

    ``in0`` is x (``x_shape``, ``x_strides``); the value of set/incr is ``in1`` (x's dtype,
    ``value_shape``/``value_strides``; numpy's broadcast, leading size-1 axes dropped); index
    array ``k`` is the buffer ``idx<k>`` -- ``indices[k]`` is ``(shape, strides, dtype)`` for an
    ``("arr",)`` item, and for a ``("mask",)`` item ``(count, mask_shape)``: its flat nonzero
    indices (int32, dense; ``condtake_plan``'s index output) and the mask's shape.  Get writes the
    dense ``out0`` of the result shape; set/incr copy x into ``out0`` and write there."""
    dtype, itemsize = _value_dtype(op_name, mode, dtype, itemsize)
    if mode == "get":
        base, shape, xst, ents = _describe(op_name, items, x_shape, x_strides, indices)
        launch = _index_launch(mode, itemsize, dtype, shape, xst, _contiguous_strides(shape),
                               ents, Ptr("in0", base * itemsize), Ptr("out0"))
        return IndexPlan([launch] if launch else [], shape, len(ents),
                         _multi_check(op_name, x_shape, ents, shape))
    base, region, xst, ents = _describe(op_name, items, x_shape, _contiguous_strides(x_shape),
                                        indices)
    vshape, vst = tuple(value_shape), tuple(value_strides)
    while len(vshape) > len(region) and vshape[0] == 1:  # numpy drops leading size-1 axes
        vshape, vst = vshape[1:], vst[1:]
    try:
        ok = np.broadcast_shapes(vshape, region) == tuple(region)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"CUDA {op_name}: cannot assign a value of shape {tuple(value_shape)} "
                         f"to an indexed region of shape {tuple(region)}")
    launches = _copy_x(x_shape, x_strides, itemsize)
    launch = _index_launch(mode, itemsize, dtype, region, xst, _bcast_strides(vshape, vst, region),
                           ents, Ptr("out0", base * itemsize), Ptr("in1"))
    launches += [launch] if launch else []
    return IndexPlan(launches, tuple(x_shape), len(ents),
                     _multi_check(op_name, x_shape, ents, region))


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
            shape, strides, idt = indices[arr]
            entries.append((_check_index_dtype(op_name, idt), tuple(shape), tuple(strides),
                            (x_shape[a],), (x_strides[a],), True, a))
            kinds.append("adv")
            a, arr = a + 1, arr + 1
        elif kind == "mask":
            count, mshape = indices[arr]
            mshape = tuple(mshape)
            if not mshape:
                raise NotImplementedError(f"CUDA {op_name}: a 0-d mask")
            if tuple(x_shape[a:a + len(mshape)]) != mshape:
                raise IndexError(f"{op_name}: boolean index of shape {mshape} does not match "
                                 f"the indexed axes {tuple(x_shape[a:a + len(mshape)])} (indexed "
                                 f"shape {tuple(x_shape)})")
            entries.append((np.dtype("int32"), (int(count),), (1,), mshape,
                            tuple(x_strides[a:a + len(mshape)]), False, a))
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
    ents = [_Entry(Ptr(f"idx{k}"), idt, (0,) * len(before) + _bcast_strides(ish, ist, bshape)
                   + (0,) * len(after), sizes, xstrides, negative, axis)
            for k, (idt, ish, ist, sizes, xstrides, negative, axis) in enumerate(entries)]
    if not masks:  # the adjacency rule, checked against numpy on the shapes
        probes = tuple(shape_probe(tuple(ind[0]), np.intp) for ind in indices)
        want = shape_probe(tuple(x_shape))[numpy_index(tuple(items), probes)].shape
        if tuple(want) != shape:
            raise NotImplementedError(f"CUDA {op_name}: planned shape {shape}, numpy's {want} "
                                      f"for items {items}")
    return base, shape, xst, ents


def _multi_check(op_name, x_shape, entries, shape):
    def check(bad, read):
        for k, i in enumerate(bad):
            if i is None:
                continue
            e = entries[k]
            offset, rest = 0, i
            for n, s in zip(reversed(shape), reversed(e.strides)):
                rest, c = divmod(rest, n)
                offset += c * s
            v = int(read(k, offset))
            return IndexError(f"{op_name}: index {v} is out of bounds for axis {e.axis} with "
                              f"size {e.sizes[0]} (indexed shape {tuple(x_shape)})")
        return None
    return check


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


def where_launch(shape, mask_dtype, itemsize, mask_strides, x_strides, y_strides, out_shape=None):
    """``Where`` into the dense ``out0`` of the broadcast shape ``out_shape`` (``in0`` mask,
    ``in1`` x, ``in2`` y; each ``(shape, strides)``); ``None`` when empty.  ``shape`` is the
    tuple of the three input shapes."""
    mshape, xshape, yshape = (tuple(s) for s in shape)
    target = tuple(out_shape) if out_shape is not None else tuple(
        np.broadcast_shapes(mshape, xshape, yshape))
    n = math.prod(target)
    if n == 0:
        return None
    ins = [_bcast_strides(s, st, target) for s, st in
           ((mshape, mask_strides), (xshape, x_strides), (yshape, y_strides))]
    dense = _contiguous_strides(target)
    ptrs = (Ptr("out0"), Ptr("in0"), Ptr("in1"), Ptr("in2"))
    if all(tuple(st) == dense for st in ins):
        return Launch(where_kernel(mask_dtype, itemsize), grid_for(n), (THREADS, 1, 1),
                      ptrs + (np.int64(n),))
    simple, strides = simplify_layout(target, [dense] + ins)
    bits = index_bits_for(simple, strides)
    index = np.int32 if bits == 32 else np.int64
    return Launch(where_kernel(mask_dtype, itemsize, False, bits), grid_for(n), (THREADS, 1, 1),
                  ptrs + (index(n), pack_layout(simple, strides, bits)))


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
    with their flat indices.  Block (256, 1, 1), a block per tile."""
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
                        out[at] = x[off[1]];
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


@dataclass
class CondTakePlan:
    """CondTake's two passes.  ``workspace``: buffer name -> bytes (``"counts"``, ``"total"``);
    ``count_launches`` run first; the device then reads ``total`` (one int64) back, allocates
    ``out0`` (``total`` elements of x's dtype) and ``out1`` (``total`` int32) and runs
    ``write_launches(total)`` (empty for ``total == 0``)."""

    count_launches: list
    workspace: dict
    n: int
    _write: object = field(repr=False, default=None)

    def write_launches(self, total):
        """Pass two, once ``total`` is known."""
        return [] if int(total) == 0 else [self._write]


def condtake_plan(shape, mask_dtype, itemsize, mask_strides, x_strides):
    """``CondTake``: ``in0`` (mask) and ``in1`` (x) of one ``shape`` (any strides) ->
    ``out0`` = x where the mask is nonzero, ``out1`` = their flat indices (int32)."""
    n = math.prod(shape)
    if n > 2 ** 31 - 1:
        raise ValueError(f"CUDA CondTake: {n} elements (shape {tuple(shape)}); the int32 index "
                         f"output holds at most 2**31 - 1")
    if n == 0:
        return CondTakePlan([], {}, 0)
    nblocks = -(-n // CONDTAKE_TILE)
    simple, strides = simplify_layout(tuple(shape), [tuple(mask_strides), tuple(x_strides)])
    layout = pack_layout(simple, strides, 64)
    count = Launch(condtake_count_kernel(mask_dtype), (nblocks, 1, 1), (THREADS, 1, 1),
                   (Ptr("in0"), np.int64(n), layout, Ptr("counts")))
    scan = Launch(condtake_scan_kernel(), (1, 1, 1), (THREADS, 1, 1),
                  (Ptr("counts"), np.int64(nblocks), Ptr("total")))
    write = Launch(condtake_write_kernel(mask_dtype, itemsize), (nblocks, 1, 1), (THREADS, 1, 1),
                   (Ptr("in0"), Ptr("in1"), np.int64(n), layout, Ptr("counts"), Ptr("out0"),
                    Ptr("out1")))
    return CondTakePlan([count, scan], {"counts": 8 * nblocks, "total": 8}, n, write)
