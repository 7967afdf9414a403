"""CUDA C for relayout (strided copies) and creation, and the ops' launch plans (``PLANS``).

Every view-materialising op is a strided copy between two layouts, by element size (1, 2, 4 or
8 bytes: a copy moves bits, so one kernel serves every dtype of that size, float16 and bool
included):

* ``Dimshuffle``, ``Broadcast``/``BroadcastTo`` (stride 0), ``Subtensor`` (slices: an offset and
  strides, negative steps included), ``Tile`` and ``Repeat`` (a view with stride-0 dims over the
  source), ``Diag`` of a matrix (a stride of ``s0 + s1``) are one copy from a view of the source
  into the output;
* ``Concat``, ``Split``, ``Stack``, ``Roll``, ``SetSubtensor`` and ``Diag`` of a vector are a few
  copies at offsets (``Roll``: two per rolled axis; ``SetSubtensor``: the input, then the value
  into the indexed region of the output; ``Diag``: a zero fill, then the diagonal).

**Plans.**  ``PLANS`` maps each op class to ``plan(op, ins, outs) -> launch.Plan`` (``ins``,
``outs``: ``launch.Layout``s; buffers ``"in0"``..., ``"out0"``...).  The plans compute the views in
Python (numpy's own stride arithmetic on a zero-stride stand-in, never on data), reduce each copy
with ``simplify_layout`` and ``copy_launch`` picks one of three kernels:

* **contiguous** (``mge_copy_<bytes>_c``): both sides dense in one order -- a flat grid-stride
  loop, 256 threads a block (``launch.grid_for``), each thread moving elements ``blockDim *
  gridDim`` apart, so a warp reads and writes 32 neighbours (coalesced).  The plan widens the
  element to the largest of 8, 4, 2 bytes that divides the byte count and both offsets (pool
  blocks are 512-byte aligned), so a float16 copy moves 8 bytes a thread;
* **transpose** (``mge_transpose_<bytes>``): a (batched) 2-D transpose, the destination dense
  along the last dim and the source along the one before it -- a block of 32 x 8 threads moves a
  32 x 32 tile through shared memory (``tile[32][33]``, static: the pad column keeps the column
  reads free of bank conflicts), reading 32 consecutive source elements and writing 32
  consecutive destination elements per warp, so both sides are coalesced.  Grid: (column tiles,
  row tiles, batch);
* **general** (``mge_copy_<bytes>_s32`` / ``_s64``): any layout of up to ``MAX_NDIM`` dims
  (``mge_layout<2, I>`` of elemwise.py, the destination first), a grid-stride loop over the
  destination's row-major order with 32-bit indices when every offset fits (``index_bits_for``).

Creation kernels, per dtype: ``Fill`` (the value's bits, by element size), ``Arange`` (int64 or
float64 arithmetic converted once, as ``cpu/kernels/creation.py``), ``Linspace`` (numpy's float64
formula, the last element exactly ``stop``), ``Eye`` (one and zero as bits).  complex64 too: its
bits by size (Fill, Eye), or the float64 value rounded once into the real part and 0 into the
imaginary one (Arange, Linspace: numpy's ``astype``).  No workspace, no checks: nothing here can
meet bad data (shapes and parameters are checked by the op's rule, and again by the plan
functions, which raise naming the op, shapes and dtypes).

**STRIDED.**  Every op here with inputs reads ``ins[k].strides`` (copying views is what they do),
so ``STRIDED`` holds them all; a view reaches the kernel without a dense copy first.  The inputs'
dtypes must be the output's (a copy moves bits): the device converts a ``Concat``/``Stack`` input
of another dtype, or a ``SetSubtensor`` value, first.  ``BroadcastTo``'s target is
``outs[0].shape`` (the device reads the shape tensor back to make it; ``in1`` is not read).

**Host build.**  The same text compiles as host C++ (``hostbuild.py``).  Grid-stride kernels use
elemwise.py's ``MGE_LOOP``, a serial loop there.  The transpose (blocks, threads and a barrier) is
written in phases with ``block.py``'s macros (``MGE_FOR_BLOCKS``, ``MGE_SHARED``,
``MGE_THREADS``, ``MGE_SYNC``): the host runs every emulated thread of a block through one phase
before the next, the plan's own grid and block set through ``mge_host_launch``.
"""
import functools
import math

import numpy as np

from ....ops.creation import Arange, Eye, Fill, Linspace, arange_length
from ....ops.indexing import SetSubtensor, Subtensor, numpy_index
from ....ops.shape import (
    Broadcast, BroadcastTo, Concat, Diag, Dimshuffle, Repeat, Roll, Split, Stack, Tile,
)
from .block import BLOCK_PARTS
from .elemwise import (
    MAX_NDIM, _F64, _dtypes, _code, _storage, _store, KernelSource, index_bits_for, pack_layout,
    simplify_layout,
)
from .launch import THREADS, Buf, Launch, Plan, dense_strides, grid_for

__all__ = ["NVRTC_OPTIONS", "DIFFERENCES", "ELEMENT_SIZES", "PLANS", "STRIDED",
           "copy_kernel", "transpose_kernel", "fill_kernel", "arange_kernel", "linspace_kernel",
           "eye_kernel", "copy_launch", "copy_launches", "fill_launch", "arange_launch",
           "linspace_launch", "eye_launch", "dimshuffle_plan", "broadcast_plan",
           "broadcast_to_plan", "subtensor_plan", "setsubtensor_plan", "concat_plan",
           "stack_plan", "split_plan", "tile_plan", "repeat_plan", "roll_plan", "diag_plan",
           "fill_plan", "arange_plan", "linspace_plan", "eye_plan"]

#: NVRTC flags (the same as elemwise.py's: nothing here gains from contraction).
NVRTC_OPTIONS = ("--fmad=false",)

#: Where these kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* None: copies move bits, and the creation kernels compute in float64/int64 with the formulas of
  the CPU kernels (no fused multiply-add), converting once.
"""

#: The element sizes the copy kernels move.
ELEMENT_SIZES = (1, 2, 4, 8)
_TILE, _TILE_ROWS = 32, 8  # the transpose's tile and its block's rows

_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_C64, _F32 = np.dtype("complex64"), np.dtype("float32")


def _source(name, text, params, contiguous=True, index_bits=64, nin=1, block=False):
    parts = list(BLOCK_PARTS if block else BLOCK_PARTS[:1])
    parts.append((name, text))
    return KernelSource(name, tuple(parts), tuple(params), contiguous, index_bits, nin)


def _size(what, itemsize):
    if itemsize not in ELEMENT_SIZES:
        raise ValueError(f"CUDA {what}: element size {itemsize!r} bytes; the kernels move "
                         f"{', '.join(map(str, ELEMENT_SIZES))}")
    return itemsize


def _bits(what, index_bits):
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA {what}: index_bits must be 32 or 64, got {index_bits!r}")
    return index_bits


def _idx(bits):
    return "int" if bits == 32 else "long long"


# -- copy kernels ---------------------------------------------------------------------------------

def copy_kernel(itemsize, contiguous=True, index_bits=64):
    """The copy of ``itemsize``-byte elements: ``contiguous`` -- ``(dst, src, long long n)``;
    general -- ``(dst, src, I n, mge_layout<2, I> layout)`` (the destination's strides first)."""
    _size("copy kernel", itemsize)
    return _copy_kernel(itemsize, bool(contiguous), _bits("copy kernel", index_bits))


@functools.lru_cache(maxsize=None)
def _copy_kernel(itemsize, contiguous, bits):
    t = _UINT[itemsize]
    if contiguous:
        name = f"mge_copy_{itemsize}_c"
        params = (f"{t}* dst", f"const {t}* src", "long long n")
        body = "    MGE_LOOP(unsigned long long, i, n) dst[i] = src[i];\n"
    else:
        name, idx = f"mge_copy_{itemsize}_s{bits}", _idx(bits)
        params = (f"{t}* dst", f"const {t}* src", f"{idx} n", f"mge_layout<2, {idx}> layout")
        body = (f"    MGE_LOOP(unsigned {idx}, i, n) {{\n        {idx} off[2];\n"
                f"        mge_offsets<2, {idx}>(layout, ({idx})i, off);\n"
                f"        dst[off[0]] = src[off[1]];\n    }}\n")
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n{body}}}\n"
    return _source(name, text, params, contiguous, bits)


def transpose_kernel(itemsize):
    """The tiled (batched) transpose of ``itemsize``-byte elements: ``(dst, src, long long rows,
    long long cols, long long dst_b, long long dst_r, long long dst_c, long long src_b,
    long long src_r, long long src_c)`` -- element ``(b, r, c)`` at ``b * dst_b + r * dst_r +
    c * dst_c`` of ``dst`` is that at ``b * src_b + ...`` of ``src``; fast when ``dst_c`` and
    ``src_r`` are 1.  Block (32, 8, 1); grid (column tiles, row tiles, batch)."""
    _size("transpose kernel", itemsize)
    return _transpose_kernel(itemsize)


@functools.lru_cache(maxsize=None)
def _transpose_kernel(itemsize):
    t, name = _UINT[itemsize], f"mge_transpose_{itemsize}"
    ll = "long long"
    params = (f"{t}* dst", f"const {t}* src", f"{ll} rows", f"{ll} cols", f"{ll} dst_b",
              f"{ll} dst_r", f"{ll} dst_c", f"{ll} src_b", f"{ll} src_r", f"{ll} src_c")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_FOR_BLOCKS {{
        /* tile[c][r]: a warp reads 32 rows of one column (consecutive in src), then writes 32
           columns of one row (consecutive in dst); the pad column avoids bank conflicts */
        MGE_SHARED {t} tile[{_TILE}][{_TILE + 1}];
        MGE_THREADS {{
            long long r = (long long)blockIdx.y * {_TILE} + threadIdx.x;
            const {t}* s = src + (long long)blockIdx.z * src_b;
            for (int j = threadIdx.y; j < {_TILE}; j += {_TILE_ROWS}) {{
                long long c = (long long)blockIdx.x * {_TILE} + j;
                if (r < rows && c < cols) tile[j][threadIdx.x] = s[r * src_r + c * src_c];
            }}
        }}
        MGE_SYNC
        MGE_THREADS {{
            long long c = (long long)blockIdx.x * {_TILE} + threadIdx.x;
            {t}* d = dst + (long long)blockIdx.z * dst_b;
            for (int j = threadIdx.y; j < {_TILE}; j += {_TILE_ROWS}) {{
                long long r = (long long)blockIdx.y * {_TILE} + j;
                if (r < rows && c < cols) d[r * dst_r + c * dst_c] = tile[threadIdx.x][j];
            }}
        }}
    }}
}}
"""
    return _source(name, text, params, False, 64, block=True)


# -- creation kernels -----------------------------------------------------------------------------

def fill_kernel(itemsize):
    """``(dst, long long n, unsigned long long bits)``: every element gets the low ``itemsize``
    bytes of ``bits`` (the value's bits in its dtype: ``fill_launch`` makes them)."""
    _size("Fill kernel", itemsize)
    return _fill_kernel(itemsize)


@functools.lru_cache(maxsize=None)
def _fill_kernel(itemsize):
    t, name = _UINT[itemsize], f"mge_fill_{itemsize}"
    params = (f"{t}* dst", "long long n", "unsigned long long bits")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {t} v = ({t})bits;\n"
            f"    MGE_LOOP(unsigned long long, i, n) dst[i] = v;\n}}\n")
    return _source(name, text, params, nin=0)


def arange_kernel(dtype, integer):
    """``Arange`` into ``dtype``: ``integer`` -- ``(dst, long long n, long long start, long long
    step)``, ``start + i * step`` in wrapping int64; else ``(dst, long long n, double start,
    double step)``, ``start + i * step`` in float64; either converted once to ``dtype``."""
    return _arange_kernel(_creation_dtype("Arange kernel", dtype), bool(integer))


@functools.lru_cache(maxsize=None)
def _arange_kernel(d, integer):
    storage, code, store = _created(d)
    name = f"mge_arange_{'i' if integer else 'f'}_{code}"
    t = "long long" if integer else "double"
    params = (f"{storage}* dst", "long long n", f"{t} start", f"{t} step")
    if integer:  # numpy's int64 arithmetic wraps: compute unsigned
        value = ("(long long)((unsigned long long)start + (unsigned long long)i * "
                 "(unsigned long long)step)")
        src = np.dtype("int64")
    else:
        value, src = "start + (double)i * step", _F64
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    MGE_LOOP(unsigned long long, i, n) {{\n        {t} v = {value};\n"
            f"        {store('v', src)}\n    }}\n}}\n")
    return _source(name, text, params, nin=0)


def linspace_kernel(dtype):
    """``Linspace`` into ``dtype``: ``(dst, long long n, double start, double stop, double step,
    double delta, double div, int how)`` -- numpy's float64 formula (``how`` 0: ``i * step``, 1:
    ``i / div * delta``, 2: ``i * delta``; plus ``start``; the last element ``stop``), converted
    once."""
    return _linspace_kernel(_creation_dtype("Linspace kernel", dtype))


@functools.lru_cache(maxsize=None)
def _linspace_kernel(d):
    storage, code, store = _created(d)
    name = f"mge_linspace_{code}"
    params = (f"{storage}* dst", "long long n", "double start", "double stop", "double step",
              "double delta", "double div", "int how")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_LOOP(unsigned long long, i, n) {{
        double y = (double)i;
        y = how == 0 ? y * step : (how == 1 ? y / div * delta : y * delta);
        y += start;
        if (n > 1 && i == (unsigned long long)(n - 1)) y = stop;
        {store('y', _F64)}
    }}
}}
"""
    return _source(name, text, params, nin=0)


def _creation_dtype(what, dtype):
    """``dtype`` as a dtype the creation kernels make: the elementwise kernels' and complex64."""
    try:
        if np.dtype(dtype) == _C64:
            return _C64
    except TypeError:
        pass  # (``_dtypes`` names it)
    return _dtypes(what, [dtype])[0]


def _created(d):
    """(storage C type, name code, ``store(value, src)``: the statement writing element ``i`` from
    ``value`` computed as ``src``) of a creation kernel of ``d``; a complex64 is stored as two
    floats, the value's in the real part and 0 in the imaginary one."""
    if d != _C64:
        return _storage(d), _code(d), lambda v, src: f"dst[i] = {_store(v, src, d)};"

    def store(v, src):
        return f"dst[2 * i] = {_store(v, src, _F32)}; dst[2 * i + 1] = 0.0f;"
    return "float", "c64", store


def eye_kernel(itemsize):
    """``Eye`` by element size: ``(dst, long long rows, long long cols, long long k, unsigned
    long long one, unsigned long long zero)`` -- ``one``'s bits where ``c - r == k``."""
    _size("Eye kernel", itemsize)
    return _eye_kernel(itemsize)


@functools.lru_cache(maxsize=None)
def _eye_kernel(itemsize):
    t, name = _UINT[itemsize], f"mge_eye_{itemsize}"
    params = (f"{t}* dst", "long long rows", "long long cols", "long long k",
              "unsigned long long one", "unsigned long long zero")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_LOOP(unsigned long long, i, rows * cols) {{
        long long r = (long long)(i / (unsigned long long)cols), c = (long long)i - r * cols;
        dst[i] = ({t})(c - r == k ? one : zero);
    }}
}}
"""
    return _source(name, text, params, nin=0)


# -- copy launches --------------------------------------------------------------------------------

def copy_launch(shape, src_strides, dst_strides, itemsize, src=Buf("in0"), dst=Buf("out0")):
    """The one ``launch.Launch`` copying the view at ``src`` (``shape``, ``src_strides`` in
    elements) into the view at ``dst``; ``None`` when there is nothing to copy.  Picks the
    contiguous kernel (widened elements), the tiled transpose or the general kernel (see the
    module)."""
    _size("copy", itemsize)
    shape = tuple(int(n) for n in shape)
    if len(src_strides) != len(shape) or len(dst_strides) != len(shape):
        raise ValueError(f"CUDA copy: strides {tuple(src_strides)} / {tuple(dst_strides)} for "
                         f"shape {shape}")
    n = math.prod(shape)
    if n == 0:
        return None
    shape, (dst_st, src_st) = simplify_layout(shape, [dst_strides, src_strides])
    if len(shape) <= 1 and all(s[0] == 1 for s in (dst_st, src_st) if s):
        size = next(w for w in (8, 4, 2, 1)
                    if (n * itemsize) % w == 0 and src.offset % w == 0 and dst.offset % w == 0)
        return Launch(copy_kernel(size), grid_for(n * itemsize // size), (THREADS, 1, 1),
                      (dst, src, np.int64(n * itemsize // size)))
    t = _transpose_shape(shape, dst_st, src_st)
    if t is not None:
        (b, rows, cols), (db, dr, dc), (sb, sr, sc) = t
        grid = (-(-cols // _TILE), -(-rows // _TILE), b)
        return Launch(transpose_kernel(itemsize), grid, (_TILE, _TILE_ROWS, 1),
                      (dst, src, *(np.int64(v) for v in (rows, cols, db, dr, dc, sb, sr, sc))))
    if len(shape) > MAX_NDIM:
        raise ValueError(f"CUDA copy: {len(shape)} dims after merging, at most {MAX_NDIM} "
                         f"(shape {shape}, strides {src_st} -> {dst_st})")
    bits = index_bits_for(shape, [dst_st, src_st])
    index = np.int32 if bits == 32 else np.int64
    return Launch(copy_kernel(itemsize, False, bits), grid_for(n), (THREADS, 1, 1),
                  (dst, src, index(n), pack_layout(shape, [dst_st, src_st], bits)))


def _transpose_shape(shape, dst_st, src_st):
    """((batch, rows, cols), dst strides, src strides) when the copy is a (batched) transpose
    worth tiling: the destination dense along the last dim, the source along the one before,
    both of at least a tile's half; else ``None``."""
    if len(shape) not in (2, 3) or dst_st[-1] != 1 or src_st[-2] != 1 or src_st[-1] == 1:
        return None
    if shape[-1] < _TILE // 2 or shape[-2] < _TILE // 2:
        return None
    if len(shape) == 2:
        shape, dst_st, src_st = (1, *shape), (0, *dst_st), (0, *src_st)
    if shape[0] > 65535 or -(-shape[1] // _TILE) > 65535:  # grid's y and z limits
        return None
    return shape, dst_st, src_st


def copy_launches(copies, itemsize):
    """The launches of ``copies``: ``(shape, src_strides, dst_strides, src Buf, dst Buf)``
    tuples, the empty ones dropped."""
    out = []
    for shape, sst, dst_st, src, dst in copies:
        launch = copy_launch(shape, sst, dst_st, itemsize, src, dst)
        if launch is not None:
            out.append(launch)
    return out


def _view(shape, strides, index):
    """(shape, strides, element offset) of the basic-indexed view ``x[index]`` of a view of
    ``shape`` and ``strides`` (elements): numpy's own arithmetic on a zero-data stand-in."""
    base = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape),
                                           tuple(int(s) for s in strides))
    v = base[index]
    offset = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return v.shape, v.strides, offset


def _dense(shape, strides, src=Buf("in0"), dst=Buf("out0")):
    return (tuple(shape), tuple(strides), dense_strides(shape), src, dst)


# -- plan helpers ---------------------------------------------------------------------------------

def _describe(ins):
    return ", ".join(f"{x.dtype} {x.shape}" for x in ins) or "none"


def _fail(exc, op, message, ins=()):
    return exc(f"CUDA {op.name}: {message} (inputs: {_describe(ins)})")


def _inputs(op, ins, n):
    if n is not None and len(ins) != n:
        raise _fail(TypeError, op, f"{len(ins)} input(s), the plan takes {n}", ins)
    return ins


def _itemsize(op, ins, outs, count=None):
    """The element size of the copies: every one of the first ``count`` inputs (all: ``None``)
    has the output's dtype (a copy moves bits; the device converts first)."""
    dtype = outs[0].dtype
    bad = [x.dtype for x in ins[:count] if x.dtype != dtype]
    if bad:
        raise _fail(TypeError, op, f"input dtype {bad[0]} is not the output's {dtype} (a copy "
                    f"moves bits: convert the input first)", ins)
    if dtype.itemsize not in ELEMENT_SIZES:
        raise _fail(TypeError, op, f"unsupported dtype {dtype} (the copy kernels move elements "
                    f"of {', '.join(map(str, ELEMENT_SIZES))} bytes)", ins)
    return dtype.itemsize


def _axis(op, axis, ndim, ins):
    if not -ndim <= axis < ndim:
        raise _fail(ValueError, op, f"axis {axis} is out of range for {ndim}-d input", ins)
    return axis % ndim


def _plan(launches, *notes):
    return Plan(tuple(s for s in launches if s is not None), notes=tuple(notes))


# -- copy plans -----------------------------------------------------------------------------------

def dimshuffle_plan(op, ins, outs):
    """``Dimshuffle(pattern)``: ``in0`` with permuted axes (``"x"``: a new one) into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    perm = [p for p in op.pattern if p != "x"]
    if sorted(perm) != list(range(len(x.shape))):
        raise _fail(ValueError, op, f"pattern {tuple(op.pattern)} is no permutation of the "
                    f"{len(x.shape)} axes", ins)
    st = x.element_strides
    oshape = [1 if p == "x" else x.shape[p] for p in op.pattern]
    ost = [0 if p == "x" else st[p] for p in op.pattern]
    return _plan(copy_launches([_dense(oshape, ost)], size))


def _broadcast(op, ins, outs, target):
    x = ins[0]
    size = _itemsize(op, ins, outs, 1)
    target = tuple(int(t) for t in target)
    lead = len(target) - len(x.shape)
    if lead < 0 or any(s not in (1, t) for s, t in zip(x.shape, target[lead:])):
        raise _fail(ValueError, op, f"shape {x.shape} does not broadcast to {target}", ins)
    st = [0] * lead + [0 if s == 1 and t != 1 else st for s, t, st in
                       zip(x.shape, target[lead:], x.element_strides)]
    return _plan(copy_launches([_dense(target, st)], size))


def broadcast_plan(op, ins, outs):
    """``Broadcast(shape)``: ``in0`` to ``shape`` (numpy's rule; stride 0 along the broadcast
    dims) into ``out0``."""
    _inputs(op, ins, 1)
    return _broadcast(op, ins, outs, op.shape)


def broadcast_to_plan(op, ins, outs):
    """``BroadcastTo``: ``in0`` to ``outs[0].shape`` (the shape tensor ``in1`` read back by the
    device) into ``out0``."""
    _inputs(op, ins, 2)
    return _broadcast(op, ins, outs, outs[0].shape)


def subtensor_plan(op, ins, outs):
    """``Subtensor(items)``: the basic index of ``in0`` (any strides) into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    vshape, vst, off = _view(x.shape, x.element_strides, numpy_index(op.items))
    return _plan(copy_launches([_dense(vshape, vst, Buf("in0", off * size))], size))


def _value_strides(op, ins, region):
    """The strides of the value ``in1`` broadcast over ``region`` (numpy's rule; its leading
    size-1 axes dropped)."""
    v = ins[1]
    vshape, vst = v.shape, v.element_strides
    while len(vshape) > len(region) and vshape[0] == 1:
        vshape, vst = vshape[1:], vst[1:]
    lead = len(region) - len(vshape)
    if lead < 0 or any(a not in (1, b) for a, b in zip(vshape, region[lead:])):
        raise _fail(ValueError, op, f"a value of shape {v.shape} does not fit the region of "
                    f"shape {tuple(region)}", ins)
    return (0,) * lead + tuple(0 if a == 1 and b != 1 else s for a, b, s in
                               zip(vshape, region[lead:], vst))


def setsubtensor_plan(op, ins, outs):
    """``SetSubtensor(items)``: ``in0`` (x) copied into ``out0``, then ``in1`` (the value, numpy's
    broadcast) into the region ``out0[items]``."""
    x, _ = _inputs(op, ins, 2)
    size = _itemsize(op, ins, outs)
    cst = dense_strides(x.shape)
    rshape, rst, off = _view(x.shape, cst, numpy_index(op.items))
    bst = _value_strides(op, ins, rshape)
    return _plan(copy_launches([_dense(x.shape, x.element_strides),
                                (rshape, bst, rst, Buf("in1"), Buf("out0", off * size))], size))


def concat_plan(op, ins, outs):
    """``Concat(axis)``: ``in0``, ``in1``... one after another along ``axis`` in ``out0``."""
    _inputs(op, ins, None)
    size = _itemsize(op, ins, outs)
    (o,) = outs
    axis = _axis(op, op.axis, len(o.shape), ins)
    ost = dense_strides(o.shape)
    copies, at = [], 0
    for k, x in enumerate(ins):
        copies.append((x.shape, x.element_strides, ost, Buf(f"in{k}"),
                       Buf("out0", at * ost[axis] * size)))
        at += x.shape[axis]
    return _plan(copy_launches(copies, size))


def stack_plan(op, ins, outs):
    """``Stack(axis)``: ``in0``, ``in1``... (one shape) along a new ``axis`` of ``out0``."""
    _inputs(op, ins, None)
    size = _itemsize(op, ins, outs)
    (o,) = outs
    axis = _axis(op, op.axis, len(o.shape), ins)
    ost = dense_strides(o.shape)
    dst_st = ost[:axis] + ost[axis + 1:]
    return _plan(copy_launches([(x.shape, x.element_strides, dst_st, Buf(f"in{k}"),
                                 Buf("out0", k * ost[axis] * size))
                                for k, x in enumerate(ins)], size))


def split_plan(op, ins, outs):
    """``Split(axis, sections)``: parts of ``in0`` along ``axis`` into ``out0``, ``out1``..."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    axis = _axis(op, op.axis, len(x.shape), ins)
    if sum(op.sections) != x.shape[axis] or len(op.sections) != len(outs):
        raise _fail(ValueError, op, f"sections {tuple(op.sections)} do not add up to "
                    f"{x.shape[axis]} (axis {axis}) in {len(outs)} outputs", ins)
    st = x.element_strides
    copies, at = [], 0
    for k, n in enumerate(op.sections):
        part = list(x.shape)
        part[axis] = n
        copies.append(_dense(part, st, Buf("in0", at * st[axis] * size), Buf(f"out{k}")))
        at += n
    return _plan(copy_launches(copies, size))


def tile_plan(op, ins, outs):
    """``Tile(reps)`` (``np.tile``): a view of shape (r0, n0, r1, n1...) of ``in0``, stride 0
    along each r, into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    if any(r < 0 for r in op.reps):
        raise _fail(ValueError, op, f"reps {tuple(op.reps)} must be non-negative", ins)
    n = max(len(x.shape), len(op.reps))
    shape = (1,) * (n - len(x.shape)) + x.shape
    strides = (0,) * (n - len(x.shape)) + x.element_strides
    reps = (1,) * (n - len(op.reps)) + tuple(op.reps)
    vshape = [v for r, s in zip(reps, shape) for v in (r, s)]
    vst = [v for st in strides for v in (0, st)]
    return _plan(copy_launches([_dense(vshape, vst)], size))


def repeat_plan(op, ins, outs):
    """``Repeat(repeats, axis)`` (``np.repeat``): a view of ``in0`` with a stride-0 dim of
    ``repeats`` after ``axis``, into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    if op.repeats < 0:
        raise _fail(ValueError, op, f"repeats must be non-negative, got {op.repeats}", ins)
    axis = _axis(op, op.axis, len(x.shape), ins)
    st = x.element_strides
    vshape = list(x.shape[:axis + 1]) + [op.repeats] + list(x.shape[axis + 1:])
    vst = list(st[:axis + 1]) + [0] + list(st[axis + 1:])
    return _plan(copy_launches([_dense(vshape, vst)], size))


def roll_plan(op, ins, outs):
    """``Roll(shift, axis)`` (``np.roll``; repeated axes add their shifts): per rolled axis the
    input splits in two, so up to ``2 ** axes`` copies at offsets from ``in0`` into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    if len(op.shift) != len(op.axis):
        raise _fail(ValueError, op, f"shift {tuple(op.shift)} and axis {tuple(op.axis)} differ "
                    f"in length", ins)
    shifts = {}
    for s, a in zip(op.shift, op.axis):
        a = _axis(op, a, len(x.shape), ins)
        shifts[a] = shifts.get(a, 0) + s
    st, cst = x.element_strides, dense_strides(x.shape)
    copies = [[list(x.shape), 0, 0]]  # (part shape, src offset, dst offset), in elements
    for a, s in sorted(shifts.items()):
        n = x.shape[a]
        s = s % n if n else 0
        nxt = []
        for cshape, so, do in copies:
            for start, length, dst in ((0, n - s, s), (n - s, s, 0)):  # x[start:] goes to dst
                if length == 0:
                    continue
                part = list(cshape)
                part[a] = length
                nxt.append([part, so + start * st[a], do + dst * cst[a]])
        copies = nxt
    return _plan(copy_launches([(part, st, cst, Buf("in0", so * size), Buf("out0", do * size))
                                for part, so, do in copies], size))


def diag_plan(op, ins, outs):
    """``Diag(k)``: a 1-d ``in0`` onto diagonal ``k`` of a zeroed square ``out0`` (a fill, then a
    copy with destination stride ``n + 1``), or diagonal ``k`` of a 2-d ``in0`` (source stride
    ``s0 + s1``) into ``out0``."""
    (x,) = _inputs(op, ins, 1)
    size = _itemsize(op, ins, outs)
    k, st = op.k, x.element_strides
    if len(x.shape) == 1:
        n = x.shape[0] + abs(k)
        start = k if k >= 0 else -k * n
        fill = fill_launch((n, n), 0, f"int{8 * size}")  # zero bits of that size
        return _plan([fill] + copy_launches([(x.shape, st, (n + 1,), Buf("in0"),
                                              Buf("out0", start * size))], size))
    if len(x.shape) == 2:
        n = max(0, min(x.shape[0] + min(k, 0), x.shape[1] - max(k, 0)))
        start = k * st[1] if k >= 0 else -k * st[0]
        return _plan(copy_launches([((n,), (st[0] + st[1],), (1,), Buf("in0", start * size),
                                     Buf("out0"))], size))
    raise _fail(ValueError, op, "input must be 1-d or 2-d", ins)


# -- creation -------------------------------------------------------------------------------------

def _uint_dtype(itemsize):
    return np.dtype(f"uint{8 * itemsize}")


def _bits_of(value, dtype):
    """The bits of ``value`` converted to ``dtype`` as numpy's ``np.full`` converts it."""
    v = np.full((), value, dtype=dtype)
    return np.uint64(int(v.view(_uint_dtype(v.itemsize))))


def fill_launch(shape, value, dtype=None, dst=Buf("out0")):
    """The ``Launch`` setting ``shape``'s elements at ``dst`` to ``value`` in ``dtype`` (default:
    ``value``'s); ``None`` when empty."""
    dtype = np.dtype(dtype) if dtype is not None else np.asarray(value).dtype
    dtype = _creation_dtype("Fill kernel", dtype)
    n = math.prod(shape)
    if n == 0:
        return None
    return Launch(fill_kernel(dtype.itemsize), grid_for(n), (THREADS, 1, 1),
                  (dst, np.int64(n), _bits_of(value, dtype)))


def arange_launch(start, stop, step, dtype, dst=Buf("out0")):
    """The ``Arange`` launch: integer arithmetic when ``start`` and ``step`` are Python ints and
    ``dtype`` is an integer type (the CPU kernel's test), else float64; ``None`` when empty."""
    dtype = _creation_dtype("Arange kernel", dtype)
    n = arange_length(start, stop, step)
    if n <= 0:
        return None
    integer = all(isinstance(v, int) for v in (start, step)) and dtype.kind in "iu"
    conv = np.int64 if integer else np.float64
    return Launch(arange_kernel(dtype, integer), grid_for(n), (THREADS, 1, 1),
                  (dst, np.int64(n), conv(start), conv(step)))


def linspace_launch(start, stop, num, dtype, dst=Buf("out0")):
    """The ``Linspace`` launch of ``num`` values (``np.linspace`` in float64, then ``dtype``);
    ``None`` when empty."""
    dtype = _creation_dtype("Linspace kernel", dtype)
    if num <= 0:
        return None
    start, stop = float(start), float(stop)
    div = num - 1
    delta = np.float64(stop) - np.float64(start)
    with np.errstate(all="ignore"):
        step = delta / div if div > 0 else np.nan
    how = 2 if div <= 0 else (1 if step == 0 else 0)
    return Launch(linspace_kernel(dtype), grid_for(num), (THREADS, 1, 1),
                  (dst, np.int64(num), np.float64(start), np.float64(stop), np.float64(step),
                   np.float64(delta), np.float64(div), np.int32(how)))


def eye_launch(n, m, k, dtype, dst=Buf("out0")):
    """The ``Eye(N, M, k)`` launch in ``dtype``; ``None`` when empty."""
    dtype = _creation_dtype("Eye kernel", dtype)
    if n * m == 0:
        return None
    return Launch(eye_kernel(dtype.itemsize), grid_for(n * m), (THREADS, 1, 1),
                  (dst, np.int64(n), np.int64(m), np.int64(k), _bits_of(1, dtype),
                   _bits_of(0, dtype)))


def _creation(op, ins, outs):
    _inputs(op, ins, 0)
    if len(outs) != 1 or outs[0].dtype != np.dtype(op.dtype):
        raise _fail(TypeError, op, f"outputs {[(o.dtype, o.shape) for o in outs]}, the op makes "
                    f"one of {np.dtype(op.dtype)}")
    try:
        _creation_dtype(f"{op.name} kernel", op.dtype)
    except TypeError as e:
        raise _fail(TypeError, op, str(e)) from None


def fill_plan(op, ins, outs):
    """``Fill(shape, value, dtype)`` into ``out0``."""
    _creation(op, ins, outs)
    return _plan([fill_launch(op.shape, op.value, op.dtype)])


def arange_plan(op, ins, outs):
    """``Arange(start, stop, step, dtype)`` into ``out0``."""
    _creation(op, ins, outs)
    return _plan([arange_launch(op.start, op.stop, op.step, op.dtype)])


def linspace_plan(op, ins, outs):
    """``Linspace(start, stop, num, dtype)`` into ``out0``."""
    _creation(op, ins, outs)
    return _plan([linspace_launch(op.start, op.stop, op.num, op.dtype)])


def eye_plan(op, ins, outs):
    """``Eye(N, M, k, dtype)`` into ``out0``."""
    _creation(op, ins, outs)
    return _plan([eye_launch(op.N, op.M, op.k, op.dtype)])


#: op class -> ``plan(op, ins, outs) -> launch.Plan``.
PLANS = {
    Dimshuffle: dimshuffle_plan, Broadcast: broadcast_plan, BroadcastTo: broadcast_to_plan,
    Subtensor: subtensor_plan, SetSubtensor: setsubtensor_plan, Concat: concat_plan,
    Stack: stack_plan, Split: split_plan, Tile: tile_plan, Repeat: repeat_plan, Roll: roll_plan,
    Diag: diag_plan, Fill: fill_plan, Arange: arange_plan, Linspace: linspace_plan, Eye: eye_plan,
}

#: The op classes whose plans read ``ins[k].strides``: every one with inputs (see the module).
STRIDED = frozenset({Dimshuffle, Broadcast, BroadcastTo, Subtensor, SetSubtensor, Concat, Stack,
                     Split, Tile, Repeat, Roll, Diag})
