"""CUDA kernels and launch plans of the sampling ops' gradients: the data gradient (input 0) of
``WarpAffine``, ``WarpPerspective`` and ``Remap``, and the matrix gradient (input 1) of the two
warps -- the parts of ``VisionBackward`` that ``image.py``'s plan hands here
(``sample_grad_plan``).  ``Remap``'s map gradient and the resizes' gradients stay in ``image.py``.

Imports run one way: ``image.py`` -> this module -> ``image_common.py`` (the ``mge_img`` struct,
the C prelude with the sampling taps and positions, the plans' helpers); this module never
imports ``image.py`` and has no ``PLANS`` table of its own (the device registers image.py's).

**Data gradient: a scatter with atomics.**  The CPU kernel (``cpu/kernels/vision.py``'s
``_scatter``) sends each output-gradient element ``dy`` back through the taps of its sampling
position: every tap adds ``dy * (weight * valid)`` to the input pixel it read (bilinear: 4 taps,
nearest: 1; every border mode maps a tap to a pixel of the plane, ``constant``/``transparent``/
``isolated`` taps outside are invalid and add 0).  Several output positions reach one pixel and
the sampling map of a general warp cannot be inverted (replicate and wrap borders fold whole
regions onto a pixel), so the kernel is a scatter: a thread per ``dy`` element (in ``dy``'s
memory order, NCHW or NHWC through the struct's strides) computes the position and taps exactly
as the forward kernel does and adds each non-zero contribution with an atomic add.  The sums are
in ``float`` for float16 (a float32 workspace, then one rounding to float16) and float32 (into
the output itself), in ``double`` for float64 -- ``atomicAdd`` on double is hardware from sm_60;
older architectures get a compare-and-swap loop.  The output (or workspace) is zeroed first by a
``Memset``.  A contribution that is exactly 0 is skipped (the CPU's ``bincount`` adds +0.0 to a
+0.0 start: the same result), a NaN or infinite one is added, as the CPU adds it.

**Matrix gradient: deterministic.**  ``d out / d mat`` needs, per output position, ``cx, cy`` --
the sum over channels and taps of ``dy * value * dweight/dx`` (``/dy``), divided by the
perspective denominator -- times ``(gx, gy, 1)`` for each row of the matrix (the third row of a
perspective: ``-(cx * ax + cy * ay)``), summed over the positions of the matrix's output.  Pass
one (``mge_img_mat_grad_part``, block.py's phases) gives each block a chunk of ``MAT_GRAD_CHUNK``
positions of one matrix: its threads sum their positions' terms in double, a fixed shared-memory
tree sums the threads', and the block writes its 9 partial sums to the workspace; pass two (a
thread per output element) sums a matrix's chunks in chunk order and rounds once to the matrix's
dtype.  No atomics: the same inputs give the same bits on every run and every GPU.

``mat_idx`` out of range sets a ``Check`` word (read back: the CPU's ``IndexError``), the element
or block then reads nothing.  Dtypes: the data gradient takes float16/32/64 images (``dy`` of the
image's dtype) with float matrices or maps; the matrix gradient float or integer images, float
matrices and float ``dy``.  Where results may differ from the CPU device's: ``DIFFERENCES``.

**Host build.**  The scatter is a grid-stride loop (``MGE_LOOP``: a serial loop on the host) and
its atomic add is, on the host, a compare-and-swap loop on the value's bits with GCC's
``__atomic`` builtins: correct under any threading, and the host emulation runs a launch's threads
one after another anyway (so the host's sums are in ``dy``'s memory order, deterministic).
"""
import functools

import numpy as np

from ....ops.base import INFER, op_error
from ....ops.vision import Remap, WarpAffine, WarpPerspective
from .block import BLOCK_PRELUDE
from .elemwise import KernelSource, _code, _storage
from .image_common import (
    FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, PARTS, check_dtype, checked, img_layout, imode_of,
    mat_idx_error, need, sample_struct, traits,
)
from .launch import THREADS, Buf, Check, Launch, Memset, Plan, Workspace, grid_for

__all__ = ["ACCUMULATE", "MAT_GRAD_CHUNK", "MAT_GRAD_TERMS", "MAX_ROW_BLOCKS", "DIFFERENCES",
           "sample_grad_kernel", "to_half_kernel", "warp_mat_grad_kernels", "sample_grad_plan"]

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The dtype each data gradient's atomic sums run in (float for float16, as the CPU's float32).
ACCUMULATE = {_F16: _F32, _F32: _F32, _F64: _F64}
#: Output positions of one matrix that one block of the matrix gradient's first pass sums.
MAT_GRAD_CHUNK = 4 * THREADS
#: Partial sums a block writes (the 3 x 3 of a perspective; an affine matrix uses the first 6).
MAT_GRAD_TERMS = 9
#: The most blocks of the matrix gradient's first pass (``MGE_BLOCK_LOOP`` walks the rest).
MAX_ROW_BLOCKS = 65535

#: Where these gradients may differ from the CPU device's.
DIFFERENCES = """\
* The data gradients of WarpAffine, WarpPerspective and Remap add each tap's dy * weight with
  atomicAdd, in whatever order the GPU's threads arrive: the sums are not deterministic from run
  to run and not bit-identical to the CPU's (which sums in float64 in element order); float32
  and float16 sum in float32 (then float16 rounds once), float64 in float64, so a result is
  within a few rounding errors of the accumulating type times the sum of the magnitudes of its
  terms.  The host build sums in dy's memory order.
* The warps' matrix gradients are deterministic (a fixed tree per block, chunks in order) and
  sum in float64 in another order than numpy: float32/float16 matrices almost always get the
  CPU's bits, float64 ones differ in the last bits.
"""

_KIND = {WarpAffine: 0, WarpPerspective: 1, Remap: 2}
_KIND_NAMES = {"affine": 0, "perspective": 1, "remap": 2}

_SCATTER = r"""#ifndef MGE_IMAGE_SCATTER
#define MGE_IMAGE_SCATTER
/* *p += v atomically.  CUDA: atomicAdd (double from sm_60; before, a compare-and-swap loop on
   the bits).  Host: a compare-and-swap loop with GCC's __atomic builtins, correct whatever
   threads run a kernel (the host emulation runs them one after another). */
#if defined(__CUDACC__)
MGE_IMG_FN void mge_ig_atomic_add(float* p, float v) { atomicAdd(p, v); }
MGE_IMG_FN void mge_ig_atomic_add(double* p, double v) {
#if __CUDA_ARCH__ >= 600
    atomicAdd(p, v);
#else
    unsigned long long* w = (unsigned long long*)p;
    unsigned long long old = *w, assumed;
    do {
        assumed = old;
        old = atomicCAS(w, assumed, __double_as_longlong(__longlong_as_double(assumed) + v));
    } while (assumed != old);
#endif
}
#else
template <class T, class U> MGE_IMG_FN void mge_ig_cas_add(T* p, T v) {
    U* w = (U*)p;
    U old = __atomic_load_n(w, __ATOMIC_RELAXED), next;
    do {
        T cur;
        __builtin_memcpy(&cur, &old, sizeof(T));
        T sum = cur + v;
        __builtin_memcpy(&next, &sum, sizeof(T));
    } while (!__atomic_compare_exchange_n(w, &old, next, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
}
MGE_IMG_FN void mge_ig_atomic_add(float* p, float v) { mge_ig_cas_add<float, unsigned int>(p, v); }
MGE_IMG_FN void mge_ig_atomic_add(double* p, double v) {
    mge_ig_cas_add<double, unsigned long long>(p, v);
}
#endif
/* The data gradient of the warps and Remap: a thread per dy element (dims g.out, memory order
   g.ord) adds dy * (weight * valid) of each tap of its sampling position to acc (the input's
   dims g.in and strides g.in_st); batch idx[n] when idx, else n (out of range: *bad). */
template <class A, class D, class M, class B, int KIND>
MGE_FN void mge_img_sample_grad(A* acc, const typename D::S* dy, const typename M::S* mat,
                                const B* idx, long long n, mge_img g, int* bad) {
    MGE_LOOP(unsigned long long, u, n) {
        long long co[5];
        mge_img_coords(g, (long long)u, co);
        long long b = idx ? (long long)idx[co[0]] : co[0];
        if (b < 0 || b >= g.in[0]) {
            *bad = 1;
            continue;
        }
        double ax, ay;
        mge_img_position<M, KIND>(mat, co[0], co[3], co[4], g, &ax, &ay);
        long long off[4]; bool ok[4]; double wt[4], dwx[4], dwy[4];
        int k = mge_sample_taps(g.imode, g.bmode, ax, ay, g.in[3], g.in[4], g.in_st[3],
                                g.in_st[4], off, ok, wt, dwx, dwy);
        double gv = D::load(dy[u]);
        A* dst = acc + b * g.in_st[0] + co[1] * g.in_st[1];
        for (int j = 0; j < k; ++j) {
            /* the CPU's g * (w * valid): an invalid tap's 0 * inf is NaN there too */
            double c = gv * (wt[j] * (ok[j] ? 1.0 : 0.0));
            if (c != 0.0) mge_ig_atomic_add(dst + off[j], (A)c);
        }
    }
}
#endif /* MGE_IMAGE_SCATTER */
"""

# (its own piece: the host has mge_f2h only where g++ has _Float16)
_TO_HALF = r"""#ifndef MGE_IMAGE_TO_HALF
#define MGE_IMAGE_TO_HALF
/* float16 data gradients: the float32 sums rounded once */
MGE_FN void mge_img_to_half(unsigned short* y, const float* x, long long n) {
    MGE_LOOP(unsigned long long, u, n) y[u] = mge_f2h(x[u]);
}
#endif /* MGE_IMAGE_TO_HALF */
"""

_MATGRAD = r"""#ifndef MGE_IMAGE_MATGRAD
#define MGE_IMAGE_MATGRAD
#define MGE_IG_TERMS @TERMS@
#define MGE_IG_THREADS @THREADS@
/* The matrix-gradient terms of matrix nb's output positions p, p + step, ... < p1 added to t:
   per position cx, cy (channels and taps of dy * value * dweight, over the denominator) times
   (gx, gy, 1), and for a perspective -(cx * ax + cy * ay) times them (src: the image read). */
template <class X, class M, class D, int KIND>
MGE_IMG_FN void mge_img_mat_terms(double* t, const typename X::S* src, const typename M::S* mat,
                                  const typename D::S* dy, long long nb, long long p,
                                  long long p1, long long step, const mge_img& g) {
    for (; p < p1; p += step) {
        long long oy = p / g.out[4], ox = p % g.out[4];
        double ax, ay, den;
        mge_img_position<M, KIND>(mat, nb, oy, ox, g, &ax, &ay, &den);
        long long off[4]; bool ok[4]; double wt[4], dwx[4], dwy[4];
        int k = mge_sample_taps(g.imode, g.bmode, ax, ay, g.in[3], g.in[4], g.in_st[3],
                                g.in_st[4], off, ok, wt, dwx, dwy);
        double cx = 0.0, cy = 0.0;
        for (long long c = 0; c < g.in[1]; ++c) {
            double gv = D::load(dy[nb * g.aux_st[0] + c * g.aux_st[1] + oy * g.aux_st[3]
                                   + ox * g.aux_st[4]]);
            const typename X::S* s = src + c * g.in_st[1];
            for (int j = 0; j < k; ++j) {
                double v = gv * (ok[j] ? (double)X::load(s[off[j]]) : g.fill);
                cx += v * dwx[j];
                cy += v * dwy[j];
            }
        }
        cx = cx / den;
        cy = cy / den;
        const double gx = (double)ox, gy = (double)oy;
        t[0] += cx * gx; t[1] += cx * gy; t[2] += cx;
        t[3] += cy * gx; t[4] += cy * gy; t[5] += cy;
        if (KIND == 1) {
            double cd = -(cx * ax + cy * ay);
            t[6] += cd * gx; t[7] += cd * gy; t[8] += cd;
        }
    }
}
/* Pass one: block row r = nb * chunks + j sums chunk j (positions [j * per, (j + 1) * per)) of
   matrix nb: each thread its positions, then a fixed tree over the threads (blockDim.x a power
   of two, at most MGE_IG_THREADS); part[r * MGE_IG_TERMS + k] gets the block's sums. */
template <class X, class M, class D, class B, int KIND>
MGE_BLOCK_FN void mge_img_mat_grad_part(double* part, const typename X::S* x,
                                        const typename M::S* mat, const B* idx,
                                        const typename D::S* dy, long long rows,
                                        long long chunks, long long per, mge_img g, int* bad) {
    const long long npos = g.out[3] * g.out[4];
    MGE_BLOCK_LOOP(r, rows) {
        MGE_SHARED double s[MGE_IG_TERMS * MGE_IG_THREADS];
        MGE_THREADS { MGE_THREAD_IDS
            double t[MGE_IG_TERMS];
            for (int k = 0; k < MGE_IG_TERMS; ++k) t[k] = 0.0;
            const long long nb = r / chunks, p0 = (r % chunks) * per;
            const long long p1 = p0 + per < npos ? p0 + per : npos;
            const long long b = idx ? (long long)idx[nb] : nb;
            if (b < 0 || b >= g.in[0]) *bad = 1;
            else mge_img_mat_terms<X, M, D, KIND>(t, x + b * g.in_st[0], mat, dy, nb, p0 + tid,
                                                 p1, (long long)blockDim.x, g);
            for (int k = 0; k < MGE_IG_TERMS; ++k) s[k * MGE_IG_THREADS + tid] = t[k];
        }
        MGE_SYNC
        for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
            MGE_THREADS { MGE_THREAD_IDS
                if (tid < h)
                    for (int k = 0; k < MGE_IG_TERMS; ++k)
                        s[k * MGE_IG_THREADS + tid] += s[k * MGE_IG_THREADS + tid + h];
            }
            MGE_SYNC
        }
        MGE_THREADS { MGE_THREAD_IDS
            if (tid < MGE_IG_TERMS) part[r * MGE_IG_TERMS + tid] = s[tid * MGE_IG_THREADS];
        }
        MGE_SYNC  /* (the next row's first phase overwrites s) */
    }
}
/* Pass two: out[nb * terms + k] = the chunks' partial sums of matrix nb, in chunk order. */
template <class M>
MGE_FN void mge_img_mat_grad_sum(typename M::S* out, const double* part, long long n,
                                 long long chunks, int terms) {
    MGE_LOOP(unsigned long long, u, n) {
        const long long nb = (long long)u / terms, k = (long long)u % terms;
        double acc = 0.0;
        for (long long j = 0; j < chunks; ++j) acc += part[(nb * chunks + j) * MGE_IG_TERMS + k];
        out[u] = M::store(acc);
    }
}
#endif /* MGE_IMAGE_MATGRAD */
""".replace("@TERMS@", str(MAT_GRAD_TERMS)).replace("@THREADS@", str(THREADS))


def _kernel(name, parts, params, call, nin, block=False):
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {call};\n}}\n"
    head = (PARTS[0], ("MGE_BLOCK_PRELUDE", BLOCK_PRELUDE), PARTS[1]) if block else PARTS
    return KernelSource(name, (*head, *parts, (name, text)), tuple(params), False, 64, nin)


def _kind(kind):
    if kind not in _KIND_NAMES:
        raise ValueError(f"CUDA sampling gradient kernel: unknown kind {kind!r} (kinds: "
                         f"{', '.join(_KIND_NAMES)})")
    return kind


def sample_grad_kernel(kind, dtype, mat_dtype, idx_dtype=None):
    """The data-gradient scatter of ``kind`` (``"affine"``, ``"perspective"``, ``"remap"``) for a
    float ``dtype`` (the image's and ``dy``'s) and a float ``mat_dtype`` (the matrix or map):
    params ``(A* acc, const S* dy, const M* mat, const B* idx, long long n, mge_img g, int*
    bad)``, ``A`` the accumulating type (``ACCUMULATE``), ``n`` the elements of ``dy``; ``idx``
    (of ``idx_dtype``, an integer dtype; int32 when ``None``) may be NULL."""
    kind = _kind(kind)
    d = check_dtype(f"{kind} gradient kernel", dtype, FLOAT_DTYPES)
    m = check_dtype(f"{kind} gradient kernel (matrix or map)", mat_dtype, FLOAT_DTYPES)
    b = check_dtype(f"{kind} gradient kernel (mat_idx)",
                    np.int32 if idx_dtype is None else idx_dtype, INT_DTYPES)
    return _sample_grad_kernel(kind, d, m, b)


@functools.lru_cache(maxsize=None)
def _sample_grad_kernel(kind, d, m, b):
    (td, pd), (tm, pm) = traits(d, _F64), traits(m, _F64)
    a, bs = _storage(ACCUMULATE[d]), _storage(b)
    params = [f"{a}* acc", f"const {_storage(d)}* dy", f"const {_storage(m)}* mat",
              f"const {bs}* idx", "long long n", "mge_img g", "int* bad"]
    name = f"mge_img_{kind}_dgrad_{_code(d)}_{_code(m)}_{_code(b)}"
    parts = tuple(dict.fromkeys((pd, pm))) + (("MGE_IMAGE_SCATTER", _SCATTER),)
    return _kernel(name, parts, params, f"mge_img_sample_grad<{a}, {td}, {tm}, {bs}, "
                   f"{_KIND_NAMES[kind]}>(acc, dy, mat, idx, n, g, bad)", 3)


@functools.lru_cache(maxsize=None)
def to_half_kernel():
    """float32 sums to float16 bits: params ``(unsigned short* y, const float* x, long long
    n)``."""
    params = ["unsigned short* y", "const float* x", "long long n"]
    return _kernel("mge_img_grad_f32_to_f16", (("MGE_IMAGE_TO_HALF", _TO_HALF),), params,
                   "mge_img_to_half(y, x, n)", 1)


def warp_mat_grad_kernels(kind, dtype, mat_dtype, dy_dtype, idx_dtype=None):
    """The two passes of a warp's matrix gradient (``kind`` ``"affine"``/``"perspective"``) for
    an image of ``dtype`` (float or integer), a float matrix and a float ``dy``: ``(part, sum)``.
    ``part``: params ``(double* part, const X* x, const M* mat, const B* idx, const D* dy, long
    long rows, long long chunks, long long per, mge_img g, int* bad)``, a block per row (blocks
    of ``THREADS``); ``sum``: ``(M* out, const double* part, long long n, long long chunks, int
    terms)``, a thread per output element."""
    kind = _kind(kind)
    if kind == "remap":
        raise ValueError("CUDA matrix gradient kernel: only the warps have a matrix (Remap's "
                         "map gradient is image.py's remap_map_grad_kernel)")
    x = check_dtype(f"{kind} matrix gradient kernel", dtype, NUMERIC_DTYPES)
    m = check_dtype(f"{kind} matrix gradient kernel (matrix)", mat_dtype, FLOAT_DTYPES)
    g = check_dtype(f"{kind} matrix gradient kernel (dy)", dy_dtype, FLOAT_DTYPES)
    b = check_dtype(f"{kind} matrix gradient kernel (mat_idx)",
                    np.int32 if idx_dtype is None else idx_dtype, INT_DTYPES)
    return _mat_grad_part_kernel(kind, x, m, g, b), _mat_grad_sum_kernel(m)


@functools.lru_cache(maxsize=None)
def _mat_grad_part_kernel(kind, x, m, g, b):
    (tx, px), (tm, pm), (tg, pg) = traits(x, _F64), traits(m, _F64), traits(g, _F64)
    bs = _storage(b)
    params = ["double* part", f"const {_storage(x)}* x", f"const {_storage(m)}* mat",
              f"const {bs}* idx", f"const {_storage(g)}* dy", "long long rows", "long long chunks",
              "long long per", "mge_img g", "int* bad"]
    name = f"mge_img_{kind}_mgrad_{_code(x)}_{_code(m)}_{_code(g)}_{_code(b)}"
    parts = tuple(dict.fromkeys((px, pm, pg))) + (("MGE_IMAGE_MATGRAD", _MATGRAD),)
    return _kernel(name, parts, params,
                   f"mge_img_mat_grad_part<{tx}, {tm}, {tg}, {bs}, {_KIND_NAMES[kind]}>"
                   f"(part, x, mat, idx, dy, rows, chunks, per, g, bad)", 4, block=True)


@functools.lru_cache(maxsize=None)
def _mat_grad_sum_kernel(m):
    tm, pm = traits(m, _F64)
    params = [f"{_storage(m)}* out", "const double* part", "long long n", "long long chunks",
              "int terms"]
    return _kernel(f"mge_img_mgrad_sum_{_code(m)}", (pm, ("MGE_IMAGE_MATGRAD", _MATGRAD)), params,
                   f"mge_img_mat_grad_sum<{tm}>(out, part, n, chunks, terms)", 1, block=True)


# -- plans ------------------------------------------------------------------------------------------


def _forward_descs(op, descs):
    """The forward op's inputs after its own rule (its errors name it); ``dy`` must have the
    shape and dtype of the forward's output."""
    f = op.forward
    nins = {WarpAffine: (2,), WarpPerspective: (2, 3), Remap: (2,)}[type(f)]
    fins, dy = descs[:-1], descs[-1]
    if len(fins) not in nins:
        raise op_error(TypeError, op, f"CUDA plan: {f.name} takes {' or '.join(map(str, nins))} "
                       f"inputs, got {len(fins)} before dy", descs)
    (y,) = INFER[type(f)](f, fins)
    if tuple(dy.shape) != tuple(y.shape):
        raise op_error(ValueError, op, f"CUDA plan: dy has shape {tuple(dy.shape)}, the "
                       f"output of {f.name} {tuple(y.shape)}", descs)
    return fins, dy


def _modes(f):
    """(border mode, fill, whether the NHWC warps' quantization applies) of a warp or remap."""
    if isinstance(f, Remap):
        return f.border_type, f.scalar, False
    return f.bmode, f.border_val, f.format == "NHWC"


def _kind_name(f):
    return {0: "affine", 1: "perspective", 2: "remap"}[_KIND[type(f)]]


def _no_empty_plane(op, descs, fins, dy):
    # the CPU kernel cannot sample an image without pixels (numpy's IndexError); the kernels
    # would read outside it
    dims = img_layout(fins[0].shape, op.forward.format)[0]
    if dims[3] * dims[4] == 0 and dims[1] and int(np.prod(dy.shape)):
        raise op_error(ValueError, op, f"CUDA plan: {op.forward.name} cannot sample an image of "
                       f"no pixels ({tuple(fins[0].shape)})", descs)


def _idx_check(f, fins, ws):
    """(the ``Check`` word's ``Buf``, the checks) for ``mat_idx``, when the op has one."""
    if len(fins) < 3:
        return None, ()
    flag = ws.add(4)
    batch = img_layout(fins[0].shape, f.format)[0][0]
    return flag, (Check(flag, mat_idx_error(f, batch, fins[2].shape[0], fins[2].dtype)),)


def _data_grad_plan(op, descs, outs, fins, dy):
    f = op.forward
    xd, md = fins[0].dtype, fins[1].dtype
    need(op, descs, xd, FLOAT_DTYPES)
    if dy.dtype != xd:
        raise op_error(TypeError, op, "CUDA plan: x and dy must have one dtype", descs)
    need(op, descs, md, FLOAT_DTYPES, "matrix" if _KIND[type(f)] < 2 else "map")
    idx = fins[2].dtype if len(fins) == 3 else None
    if idx is not None:
        need(op, descs, idx, INT_DTYPES, "mat_idx")
    bmode, fill, cv = _modes(f)
    g = sample_struct(f, fins[0].shape, dy.shape, imode_of(f), bmode, fill, cv)
    ndx, ndy = outs[0].size, int(np.prod(dy.shape))
    if not ndx:
        return Plan((), notes=("empty gradient: nothing to launch",))
    acc = ACCUMULATE[xd]
    ws = Workspace()
    # float16 sums in a float32 workspace, rounded once at the end; the others in the output
    target = ws.add(ndx * acc.itemsize) if acc != xd else Buf("out0")
    steps = [Memset(target, ndx * acc.itemsize, 0)]
    checks = ()
    if ndy:
        flag, checks = _idx_check(f, fins, ws)
        kernel = sample_grad_kernel(_kind_name(f), xd, md, idx)
        steps.append(Launch(kernel, grid_for(ndy), (THREADS, 1, 1),
                            (target, Buf(f"in{len(fins)}"), Buf("in1"),
                             Buf("in2") if idx is not None else None, np.int64(ndy), g, flag)))
    if acc != xd:
        steps.append(Launch(to_half_kernel(), grid_for(ndx), (THREADS, 1, 1),
                            (Buf("out0"), target, np.int64(ndx))))
    return Plan(tuple(steps), ws.size, checks,
                notes=(f"data gradient: atomic adds in {acc}, a thread per dy element",))


def _mat_grad_plan(op, descs, outs, fins, dy):
    f = op.forward
    xd, md = fins[0].dtype, fins[1].dtype
    need(op, descs, xd, NUMERIC_DTYPES)
    need(op, descs, md, FLOAT_DTYPES, "matrix")
    need(op, descs, dy.dtype, FLOAT_DTYPES, "gradient")
    idx = fins[2].dtype if len(fins) == 3 else None
    if idx is not None:
        need(op, descs, idx, INT_DTYPES, "mat_idx")
    bmode, fill, cv = _modes(f)
    g = sample_struct(f, fins[0].shape, dy.shape, imode_of(f), bmode, fill, cv,
                      aux_st=img_layout(dy.shape, f.format)[1])
    n = outs[0].size
    if not n:
        return Plan((), notes=("empty gradient: nothing to launch",))
    nm, npos = fins[1].shape[0], int(np.prod(f.out_shape))
    per = int(MAT_GRAD_CHUNK)
    chunks = max(1, -(-npos // per))
    rows = nm * chunks
    ws = Workspace()
    part = ws.add(rows * MAT_GRAD_TERMS * 8)
    flag, checks = _idx_check(f, fins, ws)
    kpart, ksum = warp_mat_grad_kernels(_kind_name(f), xd, md, dy.dtype, idx)
    first = Launch(kpart, (min(rows, MAX_ROW_BLOCKS), 1, 1), (THREADS, 1, 1),
                   (part, Buf("in0"), Buf("in1"), Buf("in2") if idx is not None else None,
                    Buf(f"in{len(fins)}"), np.int64(rows), np.int64(chunks), np.int64(per), g,
                    flag))
    second = Launch(ksum, grid_for(n), (THREADS, 1, 1),
                    (Buf("out0"), part, np.int64(n), np.int64(chunks), np.int32(n // nm)))
    return Plan((first, second), ws.size, checks,
                notes=(f"matrix gradient: {chunks} chunk(s) of {per} positions per matrix",))


def sample_grad_plan(op, ins, outs):
    """The plan of ``VisionBackward`` of ``WarpAffine``/``WarpPerspective``/``Remap`` (inputs:
    the forward's, then ``dy``): the data gradient (index 0: a ``Memset``, the scatter, and for
    float16 the rounding launch) or a warp's matrix gradient (index 1: two passes); any other
    index raises ``NotImplementedError`` naming the op."""
    f, index = op.forward, op.index
    if type(f) not in _KIND:
        raise TypeError(f"sample_grad_plan: {f.name} is not a warp or Remap")
    descs = checked(op, ins, outs, (len(ins),))
    fins, dy = _forward_descs(op, descs)
    if index == 0:
        _no_empty_plane(op, descs, fins, dy)
        return _data_grad_plan(op, descs, outs, fins, dy)
    if index == 1 and not isinstance(f, Remap):
        _no_empty_plane(op, descs, fins, dy)
        return _mat_grad_plan(op, descs, outs, fins, dy)
    raise NotImplementedError(f"{op.name}: the gradient of input {index} of {f.name} has no "
                              f"CUDA kernel here (image_grad.py has the data gradients and the "
                              f"warps' matrix gradients)")
