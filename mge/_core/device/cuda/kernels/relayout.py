"""CUDA C for relayout (strided copies) and creation, and the launch plans the device follows.

Every view-materialising op is a strided copy between two layouts, by element size (1, 2, 4 or
8 bytes: a copy moves bits, so one kernel serves every dtype of that size, float16 and bool
included):

* ``Dimshuffle``, ``Broadcast`` (stride 0), ``Subtensor`` (slices: an offset and strides,
  negative steps included), ``Tile`` and ``Repeat`` (a view with stride-0 dims over the source),
  ``Diag`` (a stride of ``n + 1``) are one copy from a view of the source into the output;
* ``Concat``, ``Split``, ``Stack``, ``Roll`` and ``SetSubtensor`` are a few copies at offsets
  (``Roll``: two per rolled axis; ``SetSubtensor``: the input, then the value into the indexed
  region of the output).

The plans below compute those views in Python (numpy's own stride arithmetic on a zero-stride
stand-in, never on data) and reduce each copy with ``simplify_layout``; ``copy_launch`` then picks
one of three kernels:

* **contiguous** (``mge_copy_<bytes>_c``): both sides dense in one order -- a flat grid-stride
  loop, 256 threads a block, each thread moving elements ``blockDim * gridDim`` apart, so a warp
  reads and writes 32 neighbours (coalesced).  The plan widens the element to the largest of 8,
  4, 2 bytes that divides the byte count and both offsets (pool blocks are 512-byte aligned), so
  a float16 copy moves 8 bytes a thread;
* **transpose** (``mge_transpose_<bytes>``): a (batched) 2-D transpose, the destination dense
  along the last dim and the source along the one before it -- a block of 32 x 8 threads moves a
  32 x 32 tile through shared memory (``tile[32][33]``: the pad column keeps the column reads
  free of bank conflicts), reading 32 consecutive source elements and writing 32 consecutive
  destination elements per warp, so both sides are coalesced.  Grid: (column tiles, row tiles,
  batch);
* **general** (``mge_copy_<bytes>_s32`` / ``_s64``): any layout of up to ``MAX_NDIM`` dims
  (``mge_layout<2, I>`` of elemwise.py, the destination first), a grid-stride loop over the
  destination's row-major order with 32-bit indices when every offset fits (``index_bits_for``).

Creation kernels, per dtype: ``Fill`` (the value's bits, by element size), ``Arange`` (int64 or
float64 arithmetic converted once, as ``cpu/kernels/creation.py``), ``Linspace`` (numpy's float64
formula, the last element exactly ``stop``), ``Eye`` (one and zero as bits).

**Host build.**  The same text compiles as host C++ (``hostbuild.py``).  Grid-stride kernels use
elemwise.py's ``MGE_LOOP``, a serial loop there.  Kernels that use blocks, threads and barriers
(the transpose here, the scans of ``indexing.py``) are written in phases with ``block.py``'s
macros (``MGE_FOR_BLOCKS``, ``MGE_SHARED``, ``MGE_THREADS``, ``MGE_SYNC``), the one block prelude
of every family; the runner gives them the plan's own grid and block through
``mge_host_launch`` before the call.

**Launches.**  A plan returns ``Launch`` records: the kernel, ``grid`` and ``block`` (3-tuples),
and ``args`` in the kernel's parameter order -- ``Ptr(buffer, offset)`` for a pointer (the device
maps the buffer name, ``"in0"``, ``"out0"``..., to its address and adds the byte offset), numpy
scalars for numbers and ``numpy.void`` for the layout structs (pycuda passes them by value).
Launches of one plan run in order on one stream.
"""
import functools
import math
from dataclasses import dataclass

import numpy as np

from ....ops.creation import arange_length
from .block import BLOCK_PARTS
from .elemwise import (
    _PRELUDE, MAX_NDIM, _F64, _dtypes, _error, _code, _storage, _store, KernelSource,
    SUPPORTED_DTYPES, index_bits_for, pack_layout, simplify_layout,
)

__all__ = ["Ptr", "Launch", "NVRTC_OPTIONS", "DIFFERENCES", "ELEMENT_SIZES",
           "copy_kernel", "transpose_kernel", "fill_kernel", "arange_kernel", "linspace_kernel",
           "eye_kernel", "copy_launch", "copy_launches", "fill_launch", "arange_launch",
           "linspace_launch", "eye_launch", "dimshuffle_plan", "broadcast_plan", "subtensor_plan",
           "setsubtensor_plan", "concat_plan", "stack_plan", "split_plan", "tile_plan",
           "repeat_plan", "roll_plan", "diag_plan", "grid_for", "THREADS", "MAX_GRID"]

#: NVRTC flags (the same as elemwise.py's: nothing here gains from contraction).
NVRTC_OPTIONS = ("--fmad=false",)

#: Where these kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* None: copies move bits, and the creation kernels compute in float64/int64 with the formulas of
  the CPU kernels (no fused multiply-add), converting once.
"""

#: The element sizes the copy kernels move.
ELEMENT_SIZES = (1, 2, 4, 8)
#: Threads per block of the grid-stride kernels.
THREADS = 256
#: The most blocks a grid-stride launch takes (each thread then loops): enough to fill any GPU.
MAX_GRID = 8192
_TILE, _TILE_ROWS = 32, 8  # the transpose's tile and its block's rows

_UINT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}

# -- launches -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ptr:
    """A pointer argument: the buffer named ``buffer`` (``"in0"``, ``"out0"``, a workspace...)
    plus ``offset`` bytes."""

    buffer: str
    offset: int = 0


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``kernel`` (a ``KernelSource``) on ``grid`` x ``block`` threads (both
    3-tuples) with ``args`` in its parameters' order (``Ptr``, numpy scalars, ``numpy.void``
    structs).  Shared memory is static (declared in the kernel), so there is no dynamic size."""

    kernel: KernelSource
    grid: tuple
    block: tuple
    args: tuple


def grid_for(n, threads=THREADS):
    """The grid of a grid-stride launch over ``n`` elements (at least one block)."""
    return (max(1, min(MAX_GRID, -(-int(n) // threads))), 1, 1)


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
    (d,) = _dtypes("Arange kernel", [dtype])
    return _arange_kernel(d, bool(integer))


@functools.lru_cache(maxsize=None)
def _arange_kernel(d, integer):
    name = f"mge_arange_{'i' if integer else 'f'}_{_code(d)}"
    t = "long long" if integer else "double"
    params = (f"{_storage(d)}* dst", "long long n", f"{t} start", f"{t} step")
    if integer:  # numpy's int64 arithmetic wraps: compute unsigned
        value = ("(long long)((unsigned long long)start + (unsigned long long)i * "
                 "(unsigned long long)step)")
        src = np.dtype("int64")
    else:
        value, src = "start + (double)i * step", _F64
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    MGE_LOOP(unsigned long long, i, n) {{\n        {t} v = {value};\n"
            f"        dst[i] = {_store('v', src, d)};\n    }}\n}}\n")
    return _source(name, text, params, nin=0)


def linspace_kernel(dtype):
    """``Linspace`` into ``dtype``: ``(dst, long long n, double start, double stop, double step,
    double delta, double div, int how)`` -- numpy's float64 formula (``how`` 0: ``i * step``, 1:
    ``i / div * delta``, 2: ``i * delta``; plus ``start``; the last element ``stop``), converted
    once."""
    (d,) = _dtypes("Linspace kernel", [dtype])
    return _linspace_kernel(d)


@functools.lru_cache(maxsize=None)
def _linspace_kernel(d):
    name = f"mge_linspace_{_code(d)}"
    params = (f"{_storage(d)}* dst", "long long n", "double start", "double stop", "double step",
              "double delta", "double div", "int how")
    text = f"""MGE_KERNEL {name}({', '.join(params)})
{{
    MGE_LOOP(unsigned long long, i, n) {{
        double y = (double)i;
        y = how == 0 ? y * step : (how == 1 ? y / div * delta : y * delta);
        y += start;
        if (n > 1 && i == (unsigned long long)(n - 1)) y = stop;
        dst[i] = {_store('y', _F64, d)};
    }}
}}
"""
    return _source(name, text, params, nin=0)


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


# -- copy plans -----------------------------------------------------------------------------------

def _contiguous_strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def copy_launch(shape, src_strides, dst_strides, itemsize, src=Ptr("in0"), dst=Ptr("out0")):
    """The one launch copying the view ``src`` (``shape``, ``src_strides`` in elements, from the
    pointer ``src``) into the view ``dst``; ``None`` when there is nothing to copy.  Picks the
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
    """The launches of ``copies``: ``(shape, src_strides, dst_strides, src Ptr, dst Ptr)``
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


def _at(ptr, elements, itemsize):
    return Ptr(ptr.buffer, ptr.offset + elements * itemsize)


def _contig_copy(shape, strides, itemsize, src=Ptr("in0"), dst=Ptr("out0")):
    return (tuple(shape), tuple(strides), _contiguous_strides(shape), src, dst)


def dimshuffle_plan(pattern, shape, strides, itemsize):
    """``Dimshuffle(pattern)`` of the input view ``in0`` (``shape``, ``strides`` in elements)
    into the dense ``out0``."""
    perm = [p for p in pattern if p != "x"]
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"CUDA Dimshuffle: pattern {tuple(pattern)} is no permutation of the "
                         f"{len(shape)} axes of shape {tuple(shape)}")
    oshape = [1 if p == "x" else shape[p] for p in pattern]
    ost = [0 if p == "x" else strides[p] for p in pattern]
    return copy_launches([_contig_copy(oshape, ost, itemsize)], itemsize)


def broadcast_plan(target, shape, strides, itemsize):
    """``Broadcast`` of ``in0`` to ``target`` (numpy's rule; stride 0 along the broadcast
    dims) into ``out0``."""
    target = tuple(target)
    lead = len(target) - len(shape)
    if lead < 0 or any(s not in (1, t) for s, t in zip(shape, target[lead:])):
        raise ValueError(f"CUDA Broadcast: shape {tuple(shape)} does not broadcast to {target}")
    st = [0] * lead + [0 if s == 1 and t != 1 else st for s, t, st in
                       zip(shape, target[lead:], strides)]
    return copy_launches([_contig_copy(target, st, itemsize)], itemsize)


def subtensor_plan(index, shape, strides, itemsize):
    """``Subtensor``: the basic index ``index`` (``ops.indexing.numpy_index`` of the op's items)
    of ``in0`` into ``out0``."""
    vshape, vst, off = _view(shape, strides, index)
    return copy_launches([_contig_copy(vshape, vst, itemsize, Ptr("in0", off * itemsize))],
                         itemsize)


def setsubtensor_plan(index, shape, strides, value_shape, value_strides, itemsize):
    """``SetSubtensor``: ``in0`` (``x``) copied into ``out0``, then ``in1`` (``value``, numpy's
    broadcast) into the region ``out0[index]``."""
    cst = _contiguous_strides(shape)
    rshape, rst, off = _view(shape, cst, index)
    vshape, vst = tuple(value_shape), tuple(value_strides)
    while len(vshape) > len(rshape) and vshape[0] == 1:  # numpy drops leading size-1 axes
        vshape, vst = vshape[1:], vst[1:]
    try:
        if np.broadcast_shapes(vshape, rshape) != tuple(rshape):
            raise ValueError
    except ValueError:
        raise ValueError(f"CUDA SetSubtensor: a value of shape {tuple(value_shape)} does not "
                         f"fit the region of shape {tuple(rshape)}") from None
    lead = len(rshape) - len(vshape)
    bst = [0] * lead + [0 if v == 1 and r != 1 else s for v, r, s in
                        zip(vshape, rshape[lead:], vst)]
    return copy_launches([_contig_copy(shape, strides, itemsize),
                          (rshape, bst, rst, Ptr("in1"), Ptr("out0", off * itemsize))],
                         itemsize)


def _axis(what, axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"CUDA {what}: axis {axis} is out of range for {ndim}-d input")
    return axis % ndim


def concat_plan(axis, shapes, strides, itemsize):
    """``Concat(axis)`` of ``in0``, ``in1``... (``shapes``, ``strides``) into ``out0``."""
    axis = _axis("Concat", axis, len(shapes[0]))
    oshape = list(shapes[0])
    oshape[axis] = sum(s[axis] for s in shapes)
    ost = _contiguous_strides(oshape)
    copies, at = [], 0
    for k, (shape, st) in enumerate(zip(shapes, strides)):
        copies.append((shape, st, ost, Ptr(f"in{k}"), Ptr("out0", at * ost[axis] * itemsize)))
        at += shape[axis]
    return copy_launches(copies, itemsize)


def stack_plan(axis, shapes, strides, itemsize):
    """``Stack(axis)`` of ``in0``, ``in1``... (one shape) into ``out0``."""
    axis = _axis("Stack", axis, len(shapes[0]) + 1)
    oshape = list(shapes[0])
    oshape.insert(axis, len(shapes))
    ost = _contiguous_strides(oshape)
    dst_st = ost[:axis] + ost[axis + 1:]
    return copy_launches([(shape, st, dst_st, Ptr(f"in{k}"), Ptr("out0", k * ost[axis] * itemsize))
                          for k, (shape, st) in enumerate(zip(shapes, strides))], itemsize)


def split_plan(axis, sections, shape, strides, itemsize):
    """``Split(axis, sections)`` of ``in0`` into ``out0``, ``out1``..."""
    axis = _axis("Split", axis, len(shape))
    if sum(sections) != shape[axis]:
        raise ValueError(f"CUDA Split: sections {tuple(sections)} do not add up to {shape[axis]}"
                         f" (shape {tuple(shape)}, axis {axis})")
    copies, at = [], 0
    for k, n in enumerate(sections):
        part = list(shape)
        part[axis] = n
        copies.append(_contig_copy(part, strides, itemsize, Ptr("in0", at * strides[axis] *
                                                              itemsize), Ptr(f"out{k}")))
        at += n
    return copy_launches(copies, itemsize)


def tile_plan(reps, shape, strides, itemsize):
    """``Tile(reps)`` (``np.tile``) of ``in0`` into ``out0``: a view of shape (r0, n0, r1, n1...)
    with stride 0 along each r."""
    n = max(len(shape), len(reps))
    shape = (1,) * (n - len(shape)) + tuple(shape)
    strides = (0,) * (n - len(strides)) + tuple(strides)
    reps = (1,) * (n - len(reps)) + tuple(reps)
    vshape = [v for r, s in zip(reps, shape) for v in (r, s)]
    vst = [v for st in strides for v in (0, st)]
    return copy_launches([_contig_copy(vshape, vst, itemsize)], itemsize)


def repeat_plan(repeats, axis, shape, strides, itemsize):
    """``Repeat(repeats, axis)`` (``np.repeat``) of ``in0`` into ``out0``: a view with a stride-0
    dim of ``repeats`` after ``axis``."""
    axis = _axis("Repeat", axis, len(shape))
    vshape = list(shape[:axis + 1]) + [repeats] + list(shape[axis + 1:])
    vst = list(strides[:axis + 1]) + [0] + list(strides[axis + 1:])
    return copy_launches([_contig_copy(vshape, vst, itemsize)], itemsize)


def roll_plan(shift, axis, shape, strides, itemsize):
    """``Roll(shift, axis)`` (``np.roll``; repeated axes add their shifts) of ``in0`` into
    ``out0``: per rolled axis the input splits in two, so ``2 ** axes`` copies at offsets."""
    shifts = {}
    for s, a in zip(shift, axis):
        a = _axis("Roll", a, len(shape))
        shifts[a] = shifts.get(a, 0) + s
    cst = _contiguous_strides(shape)
    copies = [[list(shape), 0, 0]]  # (part shape, src offset, dst offset), in elements
    for a, s in sorted(shifts.items()):
        n = shape[a]
        s = s % n if n else 0
        nxt = []
        for cshape, so, do in copies:
            for start, length, dst in ((0, n - s, s), (n - s, s, 0)):  # x[start:] goes to dst
                if length == 0:
                    continue
                part = list(cshape)
                part[a] = length
                nxt.append([part, so + start * strides[a], do + dst * cst[a]])
        copies = nxt
    return copy_launches([(part, strides, cst, Ptr("in0", so * itemsize),
                           Ptr("out0", do * itemsize)) for part, so, do in copies], itemsize)


def diag_plan(k, shape, strides, itemsize):
    """``Diag(k)``: a 1-d ``in0`` onto diagonal ``k`` of a zeroed square ``out0`` (a fill, then a
    copy with destination stride ``n + 1``), or diagonal ``k`` of a 2-d ``in0`` (source stride
    ``s0 + s1``)."""
    if len(shape) == 1:
        n = shape[0] + abs(k)
        start = k if k >= 0 else -k * n
        fill = fill_launch((n, n), 0, f"int{8 * itemsize}")  # zero bits of that size
        return [fill] + copy_launches([((shape[0],), strides, (n + 1,), Ptr("in0"),
                                        Ptr("out0", start * itemsize))], itemsize)
    if len(shape) == 2:
        n = max(0, min(shape[0] + min(k, 0), shape[1] - max(k, 0)))
        start = k * strides[1] if k >= 0 else -k * strides[0]
        return copy_launches([((n,), (strides[0] + strides[1],), (1,),
                               Ptr("in0", start * itemsize), Ptr("out0"))], itemsize)
    raise ValueError(f"CUDA Diag: input must be 1-d or 2-d, got shape {tuple(shape)}")


# -- creation plans -------------------------------------------------------------------------------

def _uint_dtype(itemsize):
    return np.dtype(f"uint{8 * itemsize}")


def _bits_of(value, dtype):
    """The bits of ``value`` converted to ``dtype`` as numpy's ``np.full`` converts it."""
    v = np.full((), value, dtype=dtype)
    return np.uint64(int(v.view(_uint_dtype(v.itemsize))))


def fill_launch(shape, value, dtype=None, dst=Ptr("out0")):
    """``Fill``: ``out0`` of ``shape`` set to ``value`` in ``dtype`` (default: ``value``'s);
    ``None`` when empty."""
    dtype = np.dtype(dtype) if dtype is not None else np.asarray(value).dtype
    (dtype,) = _dtypes("Fill kernel", [dtype])
    n = math.prod(shape)
    if n == 0:
        return None
    return Launch(fill_kernel(dtype.itemsize), grid_for(n), (THREADS, 1, 1),
                  (dst, np.int64(n), _bits_of(value, dtype)))


def arange_launch(start, stop, step, dtype, dst=Ptr("out0")):
    """``Arange``: integer arithmetic when ``start`` and ``step`` are ints and ``dtype`` is an
    integer type (as the CPU kernel), else float64; ``None`` when empty."""
    (dtype,) = _dtypes("Arange kernel", [dtype])
    n = arange_length(start, stop, step)
    if n <= 0:
        return None
    integer = all(isinstance(v, (int, np.integer)) for v in (start, step)) and dtype.kind in "iu"
    conv = np.int64 if integer else np.float64
    return Launch(arange_kernel(dtype, integer), grid_for(n), (THREADS, 1, 1),
                  (dst, np.int64(n), conv(start), conv(step)))


def linspace_launch(start, stop, num, dtype, dst=Ptr("out0")):
    """``Linspace`` of ``num`` values (``np.linspace`` in float64, then ``dtype``); ``None``
    when empty."""
    (dtype,) = _dtypes("Linspace kernel", [dtype])
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


def eye_launch(n, m, k, dtype, dst=Ptr("out0")):
    """``Eye(N, M, k)`` in ``dtype``; ``None`` when empty."""
    (dtype,) = _dtypes("Eye kernel", [dtype])
    if n * m == 0:
        return None
    return Launch(eye_kernel(dtype.itemsize), grid_for(n * m), (THREADS, 1, 1),
                  (dst, np.int64(n), np.int64(m), np.int64(k), _bits_of(1, dtype),
                   _bits_of(0, dtype)))
