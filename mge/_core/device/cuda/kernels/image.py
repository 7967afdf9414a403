"""CUDA kernels and launch plans for the image ops: ``Pad``, ``PadBackward`` (``ops/nn.py``),
``SlidingWindow``, ``SlidingWindowTranspose`` (``ops/nn_extra.py``), ``Resize``, ``Resize3D``,
``WarpAffine``, ``WarpPerspective``, ``Remap``, ``CvtColor`` and the part of ``VisionBackward``
that belongs to them (``ops/vision.py``).

As every family, each kernel is CUDA C per op and dtype signature (``KernelSource``) and each
op has a pure Python plan in ``kernels/launch.py``'s format: ``PLANS[op class](op, ins, outs)``
gives a ``launch.Plan`` of one ``Launch`` (none for an empty output) that the device runs and the
tests run on the host build (``tests/cuda_plans.run_plan``).  Buffers: the op's inputs
``"in0"``... in its order, its output ``"out0"``, and for ``WarpPerspective`` with ``mat_idx`` a
4-byte workspace word (the ``Check``).

**One thread per output element, gathers only** (no atomics, deterministic): a grid-stride loop
(``launch.grid_for``, ``launch.THREADS`` threads a block) over the output in memory order.  The
image kernels see one struct, ``mge_img`` (``IMG_DTYPE``): the logical dims ``(n, c, d, y, x)``
of the array read and of the output, the read array's strides per logical dim (so NCHW and NHWC
are one kernel), the output's memory order of the logical dims (``ord``, outermost first: a
thread decomposes its flat index ``i`` into coordinates and writes ``out[i]``), the per-axis
resize modes, the interpolation and border modes, a flag and the fill value.  Indices are 64-bit.

* ``Pad``: each output coordinate maps back per dim (constant: outside gives the constant,
  passed as its bits; reflect: numpy's mirror without the edge; replicate: clamped) -- a copy,
  bit-exact.  Dims that are not padded are merged (``MAX_PAD_DIMS`` padded runs at most).
* ``PadBackward``: constant is a crop (the same gather kernel with negative ``before``);
  reflect/replicate: each element of the result sums every gradient element that was copied
  from it -- the product over padded dims of the per-dim source lists (itself, the replicated
  border at an edge, its mirror image) -- in the compute type (float for float16).
* ``SlidingWindow``: a copy of the zero-padded input per window element (bit-exact).
  ``SlidingWindowTranspose``: each target sums its window elements in the CPU kernel's order
  (window offsets last to first), rounding each sum to the dtype as numpy's ``+=`` does: bit-exact.
* ``Resize``/``Resize3D``: separable taps per axis (``mge_rs_taps``: MegEngine's nearest, linear
  and cubic of the CPU's ``_resize_matrix``, the trilinear ``_linear3d_matrix``), the taps of one
  source index merged as the CPU's matrices are (``np.add.at``), the sum in float64, integers
  rounded half to even and clipped.  Their ``VisionBackward``: each element of ``dx`` finds, per
  axis, by binary search the contiguous range of output rows whose taps hold it (the taps move
  monotonically), and sums ``coef * dy`` over them.
* ``WarpAffine``/``WarpPerspective``/``Remap``: the sampling position per output position (the
  matrix, ``mat_idx``'s batch, the NHWC warps' 1/32-pixel quantization of the CPU kernel, or the
  map), then bilinear (4 taps, in the CPU's order) or nearest (``rint``) sampling with MegEngine's
  ``border_interpolate`` for every border mode (``constant``/``transparent``/``isolated`` read the
  fill outside), in float64.  ``mat_idx`` out of range sets the ``Check`` word and the element is
  not read; the check raises the CPU's ``IndexError`` (reading ``mat_idx`` back for its message).
  ``Remap``'s ``VisionBackward`` of the map (index 1): a thread per map position sums over the
  channels and taps ``dy * value * dweight`` (the CPU's ``_coord_grads``).
* ``CvtColor``: a thread per output element; channel copies for any dtype, MegEngine's integer
  formulas for uint8, float32 formulas for floats (as the CPU kernel: float64 computes in float32).

Not here (their plans raise ``NotImplementedError`` naming the op): the data gradients of the
warps and of ``Remap`` and the matrix gradient of the warps (scatters: a gather formulation needs
the inverse of the sampling map); ``VisionBackward`` of ``ROIAlign``/``ROIPooling``/
``Correlation`` is ``detection.py``'s plan (this module's plan hands those forward ops to it).

``STRIDED`` is empty: every input arrives dense.  Dtypes: ``Pad``, ``SlidingWindow`` and the
channel copies of ``CvtColor`` take every dtype of ``SUPPORTED_DTYPES``; ``SlidingWindowTranspose``
every one but bool; the resizes, warps and remap float16/32/64 and the integers (``Resize3D``,
``PadBackward`` of reflect/replicate and the gradients: floats).
"""
import functools

import numpy as np

from ....ops.base import INFER, TensorDesc, op_error
from ....ops.nn import Pad, PadBackward
from ....ops.nn_extra import SlidingWindow, SlidingWindowTranspose
from ....ops.vision import (
    BORDER_MODES, Correlation, CvtColor, Remap, Resize, Resize3D, ROIAlign, ROIPooling,
    VisionBackward, WarpAffine, WarpPerspective,
)
from . import detection as _detection
from .elemwise import _PRELUDE, SUPPORTED_DTYPES, KernelSource, _code, _load, _storage, _store
from .launch import THREADS, Buf, Check, Launch, Plan, Workspace, grid_for

__all__ = ["IMG_DTYPE", "PAD_DTYPE", "MAX_PAD_DIMS", "FLOAT_DTYPES", "pad_kernel",
           "pad_backward_kernel", "sliding_window_kernel", "sliding_window_transpose_kernel",
           "resize_kernel", "resize_backward_kernel", "sample_kernel", "remap_map_grad_kernel",
           "cvt_color_kernel", "PLANS", "STRIDED", "DIFFERENCES"]

_B, _F16, _F32, _F64 = (np.dtype(d) for d in ("bool", "float16", "float32", "float64"))
#: The float dtypes (the gradients, Resize3D, reflect/replicate PadBackward).
FLOAT_DTYPES = (_F16, _F32, _F64)
_INTS = tuple(d for d in SUPPORTED_DTYPES if d.kind in "iu")
_NUMERIC = FLOAT_DTYPES + _INTS
#: The most dims a Pad kernel takes after merging the dims that are not padded.
MAX_PAD_DIMS = 8

#: The ops whose plans read ``ins[k].strides``: none (every input arrives dense).
STRIDED = frozenset()

#: Where the CUDA image kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* Bit-exact: Pad (every mode), PadBackward constant (a crop), SlidingWindow,
  SlidingWindowTranspose (the CPU's order, each sum rounded to the dtype), nearest Resize, the
  channel copies and the uint8 and float formulas of CvtColor.
* Resize (linear, cubic), Resize3D, the warps and Remap sum their taps in float64 in tap order;
  the CPU's einsum sums over whole interpolation matrices (zeros included) in its own order:
  float64 results differ in the last bits, float32/float16 almost never (a double rounding), and
  integer results by at most 1 where the float64 sum lies within rounding of a half.
* PadBackward reflect/replicate sums in the compute type (float32 for float16) over every source
  at once; the CPU folds one axis after another in the dtype (float16 rounded per axis): float16
  differs in the last bit or two.
* The resize gradients sum coef * dy over the rows that hold an element (float64); the CPU
  contracts whole matrices: an infinite or NaN dy spreads over fewer elements here.
* A NaN or infinite sampling position (a singular perspective matrix) converts to an integer
  index as CUDA does (saturating) rather than as x86 does (the lowest int64).
"""

# -- C ---------------------------------------------------------------------------------------------

#: ``struct mge_img`` (see the module docstring); ``in_``/``in_st``: dims and strides of the array
#: read (``aux_st``: a second one's strides), ``out``: the output's dims, ``ord``: its memory order.
IMG_DTYPE = np.dtype([("in_", np.int64, (5,)), ("in_st", np.int64, (5,)),
                      ("aux_st", np.int64, (5,)), ("out", np.int64, (5,)),
                      ("ord", np.int32, (5,)), ("amode", np.int32, (3,)), ("imode", np.int32),
                      ("bmode", np.int32), ("flag", np.int32), ("fill", np.float64)], align=True)
#: ``struct mge_pad``: dims of the input and the output, ``before`` per dim.
PAD_DTYPE = np.dtype([("ndim", np.int32), ("mode", np.int32),
                      ("in_", np.int64, (MAX_PAD_DIMS,)), ("out", np.int64, (MAX_PAD_DIMS,)),
                      ("before", np.int64, (MAX_PAD_DIMS,)), ("after", np.int64, (MAX_PAD_DIMS,))],
                     align=True)

_IMAGE = r"""#ifndef MGE_IMAGE_PRELUDE
#define MGE_IMAGE_PRELUDE
#if defined(__CUDACC__)
#define MGE_IMG_FN static __device__ __forceinline__
#else
#define MGE_IMG_FN static inline
#endif
struct mge_img {
    long long in[5], in_st[5], aux_st[5], out[5];
    int ord[5], amode[3], imode, bmode, flag;
    double fill;
};
struct mge_pad {
    int ndim, mode;
    long long in[8], out[8], before[8], after[8];
};
/* the logical coordinates (n, c, d, y, x) of output element i (dims g.out, memory order g.ord) */
MGE_IMG_FN void mge_img_coords(const mge_img& g, long long i, long long* co) {
    for (int k = 4; k >= 0; --k) {
        int a = g.ord[k];
        co[a] = i % g.out[a];
        i /= g.out[a];
    }
}
MGE_IMG_FN long long mge_pmod(long long a, long long m) {
    long long r = a % m;
    return r < 0 ? r + m : r;
}
/* MegEngine's border_interpolate (the CPU kernel's _border): modes in BORDER_MODES' order */
MGE_IMG_FN long long mge_border(long long p, long long n, int mode, bool* valid) {
    *valid = true;
    if (mode >= 4) {
        bool in = p >= 0 && p < n;
        *valid = in;
        return in ? p : 0;
    }
    if (mode == 0) return p < 0 ? 0 : (p >= n ? n - 1 : p);
    if (mode == 3) return mge_pmod(p, n);
    if (n == 1) return 0;
    if (mode == 1) {
        long long m = mge_pmod(p, 2 * n);
        return m >= n ? 2 * n - 1 - m : m;
    }
    long long m = mge_pmod(p, 2 * n - 2);
    return m >= n ? 2 * n - 2 - m : m;
}
/* The taps of output row o of a 1-D resize from nin to nout (the CPU's matrices' row o, taps of
   one source index merged in order): their count.  Modes: 0 nearest, 1 linear, 2 cubic (Resize),
   3 trilinear with align_corners, 4 trilinear without (Resize3D), 5 identity. */
MGE_IMG_FN int mge_rs_taps(int mode, long long o, long long nin, long long nout, long long* idx,
                           double* w) {
    int k = 0;
    long long t[4];
    double c[4];
    if (mode == 5 || (mode == 1 && nin == 1)) {
        idx[0] = mode == 5 ? o : 0; w[0] = 1.0;
        return 1;
    }
    if (mode <= 2) {
        float scale = (float)nout / (float)nin;
        if (mode == 0) {
            long long s = (long long)((float)o / scale);
            idx[0] = s > nin - 1 ? nin - 1 : s; w[0] = 1.0;
            return 1;
        }
        double alpha = ((double)o + 0.5) / (double)scale - 0.5;
        double fb = floor(alpha);
        long long base = (long long)fb;
        alpha = alpha - fb;
        if (mode == 2) {
            const double A = -0.75, x = alpha;
            c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
            c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
            c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
            c[3] = 1 - c[0] - c[1] - c[2];
            for (int j = 0; j < 4; ++j) {
                long long p = base - 1 + j;
                t[j] = p < 0 ? 0 : (p > nin - 1 ? nin - 1 : p);
            }
            k = 4;
        } else {
            if (base < 0) { base = 0; alpha = 0.0; }
            else if (base + 1 >= nin) { base = nin - 2; alpha = 1.0; }
            t[0] = base; c[0] = 1 - alpha; t[1] = base + 1; c[1] = alpha;
            k = 2;
        }
    } else {
        double src;
        if (mode == 3)
            src = (double)o * (nout > 1 ? (double)(nin - 1) / (double)(nout - 1) : 0.0);
        else {
            src = ((double)o + 0.5) * ((double)nin / (double)nout) - 0.5;
            src = src > 0.0 ? src : 0.0;
        }
        double fl = floor(src);
        long long i0 = (long long)fl;
        i0 = i0 > nin - 1 ? nin - 1 : i0;
        long long i1 = i0 + 1 > nin - 1 ? nin - 1 : i0 + 1;
        double lam = src - (double)i0;
        t[0] = i0; c[0] = 1 - lam; t[1] = i1; c[1] = lam;
        k = 2;
    }
    int m = 0;
    for (int j = 0; j < k; ++j) {
        if (m > 0 && idx[m - 1] == t[j]) { w[m - 1] += c[j]; continue; }
        idx[m] = t[j]; w[m] = 0.0 + c[j]; ++m;
    }
    return m;
}
/* The coefficient of source index i in output row o (0 when no tap holds it). */
MGE_IMG_FN double mge_rs_coef(int mode, long long o, long long i, long long nin, long long nout) {
    long long idx[4]; double w[4];
    int k = mge_rs_taps(mode, o, nin, nout, idx, w);
    for (int j = 0; j < k; ++j) if (idx[j] == i) return w[j];
    return 0.0;
}
/* [*lo, *hi): the output rows whose taps hold source index i (contiguous: taps move
   monotonically with o) */
MGE_IMG_FN void mge_rs_range(int mode, long long i, long long nin, long long nout, long long* lo,
                             long long* hi) {
    long long idx[4]; double w[4];
    long long a = 0, b = nout;
    while (a < b) {
        long long m = a + (b - a) / 2;
        int k = mge_rs_taps(mode, m, nin, nout, idx, w);
        if (idx[k - 1] >= i) b = m; else a = m + 1;
    }
    *lo = a;
    b = nout;
    while (a < b) {
        long long m = a + (b - a) / 2;
        mge_rs_taps(mode, m, nin, nout, idx, w);
        if (idx[0] > i) b = m; else a = m + 1;
    }
    *hi = a;
}
/* Bilinear (imode 1: 4 taps (0,0) (0,1) (1,0) (1,1)) or nearest (imode 0: rint) taps at
   (ax, ay) in an h x w plane with border mode bmode: the count; plane offsets (y * sy + x * sx),
   validity, weights and their derivatives by x and y. */
MGE_IMG_FN int mge_sample_taps(int imode, int bmode, double ax, double ay, long long h,
                               long long w, long long sy, long long sx, long long* off,
                               bool* ok, double* wt, double* dwx, double* dwy) {
    if (imode == 0) {
        bool vr, vc;
        long long r = mge_border((long long)rint(ay), h, bmode, &vr);
        long long c = mge_border((long long)rint(ax), w, bmode, &vc);
        off[0] = r * sy + c * sx; ok[0] = vr && vc; wt[0] = 1.0; dwx[0] = 0.0; dwy[0] = 0.0;
        return 1;
    }
    double fx = floor(ax), fy = floor(ay);
    double u = ax - fx, v = ay - fy;
    long long x0 = (long long)fx, y0 = (long long)fy;
    for (int k = 0; k < 4; ++k) {
        int dy = k >> 1, dx = k & 1;
        bool vr, vc;
        long long r = mge_border(y0 + dy, h, bmode, &vr);
        long long c = mge_border(x0 + dx, w, bmode, &vc);
        off[k] = r * sy + c * sx;
        ok[k] = vr && vc;
    }
    wt[0] = (1 - v) * (1 - u); wt[1] = (1 - v) * u; wt[2] = v * (1 - u); wt[3] = v * u;
    dwx[0] = -(1 - v); dwx[1] = 1 - v; dwx[2] = -v; dwx[3] = v;
    dwy[0] = -(1 - u); dwy[1] = -u; dwy[2] = 1 - u; dwy[3] = u;
    return 4;
}
#endif /* MGE_IMAGE_PRELUDE */
"""

_KERNELS = r"""#ifndef MGE_IMAGE_KERNELS
#define MGE_IMAGE_KERNELS
/* Pad (and PadBackward's crop): out[o] = in[map(o)] per dim; constant outside. */
template <class S>
MGE_FN void mge_img_pad(S* y, const S* x, long long n, mge_pad g, unsigned long long cbits) {
    union { unsigned long long u; S s; } cv;
    cv.u = cbits;
    MGE_LOOP(unsigned long long, u, n) {
        long long i = (long long)u, off = 0, step = 1;
        bool inside = true;
        for (int d = g.ndim - 1; d >= 0; --d) {
            long long o = i % g.out[d];
            i /= g.out[d];
            long long s = o - g.before[d], m = g.in[d];
            if (s < 0 || s >= m) {
                if (g.mode == 0) inside = false;
                else if (g.mode == 1) s = s < 0 ? -s : 2 * (m - 1) - s;
                else s = s < 0 ? 0 : m - 1;
            }
            off += s * step;
            step *= m;
        }
        y[u] = inside ? x[off] : cv.s;
    }
}
/* The j-th source along a dim of PadBackward (mode 1 reflect, 2 replicate) of result index r
   (result size m, padding a, b); the count with j < 0. */
MGE_IMG_FN long long mge_pad_src(int mode, long long r, long long m, long long a, long long b,
                                 long long j) {
    long long cnt = 1;
    bool lo, hi;
    long long nlo, nhi;
    if (mode == 2) { lo = r == 0; hi = r == m - 1; nlo = a; nhi = b; }
    else { lo = r >= 1 && r <= a; hi = r >= m - 1 - b && r <= m - 2; nlo = 1; nhi = 1; }
    if (lo) cnt += nlo;
    if (hi) cnt += nhi;
    if (j < 0) return cnt;
    if (j == 0) return a + r;
    j -= 1;
    if (lo) {
        if (j < nlo) return mode == 2 ? j : a - r;
        j -= nlo;
    }
    return mode == 2 ? a + m + j : a + m + (m - 2 - r);
}
/* PadBackward reflect/replicate: each result element sums every gradient element copied from
   it (g.in: the gradient's dims, g.out: the result's). */
template <class T>
MGE_FN void mge_img_pad_backward(typename T::S* y, const typename T::S* x, long long n,
                                 mge_pad g) {
    MGE_LOOP(unsigned long long, u, n) {
        long long i = (long long)u, r[8], cnt[8], total = 1;
        for (int d = g.ndim - 1; d >= 0; --d) {
            r[d] = i % g.out[d];
            i /= g.out[d];
            cnt[d] = mge_pad_src(g.mode, r[d], g.out[d], g.before[d], g.after[d], -1);
            total *= cnt[d];
        }
        typename T::C acc = 0;
        for (long long t = 0; t < total; ++t) {
            long long q = t, off = 0, step = 1;
            for (int d = g.ndim - 1; d >= 0; --d) {
                long long j = q % cnt[d];
                q /= cnt[d];
                off += mge_pad_src(g.mode, r[d], g.out[d], g.before[d], g.after[d], j) * step;
                step *= g.in[d];
            }
            acc += T::load(x[off]);
        }
        y[u] = T::store(acc);
    }
}
/* SlidingWindow: out (N, C, OH, OW, KH, KW) from the zero-padded x (N, C, H, W); w.in = (N*C, H, W),
   w.out = (OH, OW, KH, KW) as in[0..2], out[0..3]; strides, padding, dilation in aux_st. */
template <class S>
MGE_FN void mge_img_window(S* y, const S* x, long long n, mge_img g) {
    MGE_LOOP(unsigned long long, u, n) {
        long long i = (long long)u;
        long long kw = i % g.out[3]; i /= g.out[3];
        long long kh = i % g.out[2]; i /= g.out[2];
        long long ow = i % g.out[1]; i /= g.out[1];
        long long oh = i % g.out[0]; i /= g.out[0];
        long long ih = oh * g.aux_st[0] - g.aux_st[2] + kh * g.aux_st[4];
        long long iw = ow * g.aux_st[1] - g.aux_st[3] + kw * g.in_st[0];
        bool in = ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2];
        y[u] = in ? x[(i * g.in[1] + ih) * g.in[2] + iw] : (S)0;
    }
}
/* SlidingWindowTranspose: each target of (N*C, H, W) sums its window elements, window offsets
   last to first, each sum rounded to the dtype (numpy's +=). */
template <class T>
MGE_FN void mge_img_window_t(typename T::S* y, const typename T::S* x, long long n, mge_img g) {
    const long long OH = g.out[0], OW = g.out[1], KH = g.out[2], KW = g.out[3];
    const long long sh = g.aux_st[0], sw = g.aux_st[1], ph = g.aux_st[2], pw = g.aux_st[3];
    const long long dh = g.aux_st[4], dw = g.in_st[0];
    MGE_LOOP(unsigned long long, u, n) {
        long long i = (long long)u;
        long long w = i % g.in[2]; i /= g.in[2];
        long long h = i % g.in[1]; i /= g.in[1];
        const typename T::S* src = x + i * OH * OW * KH * KW;
        typename T::S acc = T::store((typename T::C)0);
        for (long long a = KH - 1; a >= 0; --a) {
            long long th = h + ph - a * dh;
            if (th < 0 || th % sh != 0 || th / sh >= OH) continue;
            for (long long b = KW - 1; b >= 0; --b) {
                long long tw = w + pw - b * dw;
                if (tw < 0 || tw % sw != 0 || tw / sw >= OW) continue;
                long long at = (((th / sh) * OW + tw / sw) * KH + a) * KW + b;
                acc = T::store(mge_add<typename T::C>(T::load(acc), T::load(src[at])));
            }
        }
        y[u] = acc;
    }
}
/* Resize / Resize3D: separable taps per axis (d, y, x), the sum in float64; ROUND: integers,
   rounded half to even and clipped to [lo, hi]. */
template <class X, bool ROUND>
MGE_FN void mge_img_resize(typename X::S* y, const typename X::S* x, long long n, mge_img g,
                           double lo, double hi) {
    MGE_LOOP(unsigned long long, u, n) {
        long long co[5];
        mge_img_coords(g, (long long)u, co);
        long long id[4], iy[4], ix[4];
        double wd[4], wy[4], wx[4];
        int kd = mge_rs_taps(g.amode[0], co[2], g.in[2], g.out[2], id, wd);
        int ky = mge_rs_taps(g.amode[1], co[3], g.in[3], g.out[3], iy, wy);
        int kx = mge_rs_taps(g.amode[2], co[4], g.in[4], g.out[4], ix, wx);
        const typename X::S* src = x + co[0] * g.in_st[0] + co[1] * g.in_st[1];
        double acc = 0.0;
        for (int a = 0; a < kd; ++a)
            for (int b = 0; b < ky; ++b)
                for (int e = 0; e < kx; ++e)
                    acc += wd[a] * wy[b] * wx[e] *
                           X::load(src[id[a] * g.in_st[2] + iy[b] * g.in_st[3] + ix[e] * g.in_st[4]]);
        if (ROUND) {
            acc = rint(acc);
            acc = acc < lo ? lo : (acc > hi ? hi : acc);
        }
        y[u] = X::store(acc);
    }
}
/* The resizes' data gradient: dx (dims g.out) from dy (dims g.in, strides g.in_st); each dx
   element sums coef * dy over the output rows holding it, per axis. */
template <class X>
MGE_FN void mge_img_resize_backward(typename X::S* dx, const typename X::S* dy, long long n,
                                    mge_img g) {
    MGE_LOOP(unsigned long long, u, n) {
        long long co[5], lo[3], hi[3];
        mge_img_coords(g, (long long)u, co);
        for (int a = 0; a < 3; ++a)
            mge_rs_range(g.amode[a], co[2 + a], g.out[2 + a], g.in[2 + a], &lo[a], &hi[a]);
        const typename X::S* src = dy + co[0] * g.in_st[0] + co[1] * g.in_st[1];
        double acc = 0.0;
        for (long long od = lo[0]; od < hi[0]; ++od) {
            double cd = mge_rs_coef(g.amode[0], od, co[2], g.out[2], g.in[2]);
            for (long long oy = lo[1]; oy < hi[1]; ++oy) {
                double cy = cd * mge_rs_coef(g.amode[1], oy, co[3], g.out[3], g.in[3]);
                for (long long ox = lo[2]; ox < hi[2]; ++ox) {
                    double c = cy * mge_rs_coef(g.amode[2], ox, co[4], g.out[4], g.in[4]);
                    acc += c * X::load(src[od * g.in_st[2] + oy * g.in_st[3] + ox * g.in_st[4]]);
                }
            }
        }
        dx[u] = X::store(acc);
    }
}
/* The sampling position of output (n, oy, ox): KIND 0 affine, 1 perspective (mat: (N, rows, 3)),
   2 remap (mat: the map (N, OH, OW, 2)); g.flag bit 0: the NHWC warps' quantization. */
template <class M, int KIND>
MGE_IMG_FN void mge_img_position(const typename M::S* mat, long long nb, long long oy, long long ox,
                                 const mge_img& g, double* ax, double* ay) {
    if (KIND == 2) {
        const typename M::S* p = mat + ((nb * g.out[3] + oy) * g.out[4] + ox) * 2;
        *ax = M::load(p[0]);
        *ay = M::load(p[1]);
        return;
    }
    const typename M::S* m = mat + nb * (KIND == 1 ? 9 : 6);
    double gx = (double)ox, gy = (double)oy;
    double m00 = M::load(m[0]), m01 = M::load(m[1]), m02 = M::load(m[2]);
    double m10 = M::load(m[3]), m11 = M::load(m[4]), m12 = M::load(m[5]);
    double nx = m00 * gx + m01 * gy + m02, ny = m10 * gx + m11 * gy + m12;
    double d = KIND == 1 ? M::load(m[6]) * gx + M::load(m[7]) * gy + M::load(m[8]) : 1.0;
    double x = nx / d, y = ny / d;
    if (g.flag & 1) {
        if (KIND == 0) {
            const double ab = 1024.0;
            double rd = g.imode == 0 ? 512.0 : 16.0;
            double qx = rint((m01 * gy + m02) * ab) + rd + rint(m00 * gx * ab);
            double qy = rint((m11 * gy + m12) * ab) + rd + rint(m10 * gx * ab);
            if (g.imode == 0) { x = floor(qx / ab); y = floor(qy / ab); }
            else { x = floor(qx / 32.0) / 32.0; y = floor(qy / 32.0) / 32.0; }
        } else if (g.imode == 0) {
            x = floor(x); y = floor(y);
        } else {
            const double big = 2147483647.0;
            double vx = x * 32.0, vy = y * 32.0;
            vx = vx != vx ? 0.0 : (vx < -big ? -big : (vx > big ? big : vx));
            vy = vy != vy ? 0.0 : (vy < -big ? -big : (vy > big ? big : vy));
            x = rint(vx) / 32.0; y = rint(vy) / 32.0;
        }
    }
    *ax = x; *ay = y;
}
/* Warps and Remap: a thread per output element samples its input plane (batch idx[n] when idx,
   else n); an idx out of range sets *bad and the element is 0. */
template <class X, class M, class B, int KIND>
MGE_FN void mge_img_sample(typename X::S* y, const typename X::S* x, const typename M::S* mat,
                           const B* idx, long long n, mge_img g, int* bad) {
    MGE_LOOP(unsigned long long, u, n) {
        long long co[5];
        mge_img_coords(g, (long long)u, co);
        long long b = idx ? (long long)idx[co[0]] : co[0];
        if (b < 0 || b >= g.in[0]) {
            *bad = 1;
            y[u] = X::store(0.0);
            continue;
        }
        double ax, ay;
        mge_img_position<M, KIND>(mat, co[0], co[3], co[4], g, &ax, &ay);
        long long off[4]; bool ok[4]; double wt[4], dwx[4], dwy[4];
        int k = mge_sample_taps(g.imode, g.bmode, ax, ay, g.in[3], g.in[4], g.in_st[3],
                                g.in_st[4], off, ok, wt, dwx, dwy);
        const typename X::S* src = x + b * g.in_st[0] + co[1] * g.in_st[1];
        double acc = 0.0;
        for (int j = 0; j < k; ++j) acc += (ok[j] ? (double)X::load(src[off[j]]) : g.fill) * wt[j];
        y[u] = X::store(acc);
    }
}
/* Remap's map gradient: a thread per map position (n, oy, ox) writes (d/dx, d/dy): the sum over
   channels and taps of dy * value * dweight (dy: strides g.aux_st). */
template <class X, class M, class D>
MGE_FN void mge_img_remap_grad(typename M::S* out, const typename X::S* x,
                               const typename M::S* map, const typename D::S* dy, long long n,
                               mge_img g) {
    MGE_LOOP(unsigned long long, u, n) {
        long long p = (long long)u;
        long long ox = p % g.out[4], oy = (p / g.out[4]) % g.out[3], nb = p / g.out[4] / g.out[3];
        double ax, ay;
        mge_img_position<M, 2>(map, nb, oy, ox, g, &ax, &ay);
        long long off[4]; bool ok[4]; double wt[4], dwx[4], dwy[4];
        int k = mge_sample_taps(g.imode, g.bmode, ax, ay, g.in[3], g.in[4], g.in_st[3],
                                g.in_st[4], off, ok, wt, dwx, dwy);
        double cx = 0.0, cy = 0.0;
        for (long long c = 0; c < g.in[1]; ++c) {
            const typename X::S* src = x + nb * g.in_st[0] + c * g.in_st[1];
            double gv = D::load(dy[nb * g.aux_st[0] + c * g.aux_st[1] + oy * g.aux_st[3]
                                   + ox * g.aux_st[4]]);
            for (int j = 0; j < k; ++j) {
                double v = gv * (ok[j] ? (double)X::load(src[off[j]]) : g.fill);
                cx += v * dwx[j];
                cy += v * dwy[j];
            }
        }
        out[2 * p] = M::store(cx);
        out[2 * p + 1] = M::store(cy);
    }
}
/* CvtColor of NHWC images: a thread per output element; g.imode the mode (CVT_MODES' order),
   g.in[1] / g.out[1] the channels in and out.  KIND 0: channel copies, 1: uint8, 2: floats. */
MGE_IMG_FN long long mge_descale(long long v) { return (v + (1 << 13)) >> 14; }
MGE_IMG_FN long long mge_u8(long long v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }
template <class X, int KIND>
MGE_FN void mge_img_cvt(typename X::S* y, const typename X::S* x, long long n, mge_img g) {
    const long long ci = g.in[1], cout = g.out[1];
    const int m = g.imode;
    MGE_LOOP(unsigned long long, u, n) {
        long long c = (long long)u % cout, px = (long long)u / cout;
        const typename X::S* s = x + px * ci;
        if (KIND == 0) {
            /* RGB2BGR BGR2RGB RGBA2BGR: reversed; RGBA2RGB: same; GRAY2*: channel 0 */
            long long from = (m == 2 || m == 3 || m == 7) ? 2 - c : (m == 4 || m == 5) ? 0 : c;
            y[u] = s[from];
        } else if (KIND == 1) {
            long long v0 = s[0], v1 = ci > 1 ? s[1] : 0, v2 = ci > 2 ? s[2] : 0, r;
            if (m == 0 || m == 8) r = mge_descale(v0 * 4899 + v1 * 9617 + v2 * 1868);
            else if (m == 1) r = mge_descale(v2 * 4899 + v1 * 9617 + v0 * 1868);
            else if (m == 9) {
                long long yy = mge_descale(v0 * 1868 + v1 * 9617 + v2 * 4899);
                r = c == 0 ? yy : c == 1 ? mge_descale((v0 - yy) * 8061 + (128LL << 14))
                                         : mge_descale((v2 - yy) * 14369 + (128LL << 14));
            } else {
                long long cr = v1 - 128, cb = v2 - 128;
                r = c == 0 ? v0 + mge_descale(cr * 33292)
                  : c == 1 ? v0 + mge_descale(cb * -9519 + cr * -6472)
                           : v0 + mge_descale(cb * 18678);
            }
            y[u] = (typename X::S)mge_u8(r);
        } else {
            float v0 = X::load(s[0]), v1 = ci > 1 ? (float)X::load(s[1]) : 0.0f;
            float v2 = ci > 2 ? (float)X::load(s[2]) : 0.0f, r;
            if (m == 0 || m == 8) r = v0 * 0.299f + v1 * 0.587f + v2 * 0.114f;
            else if (m == 1) r = v2 * 0.299f + v1 * 0.587f + v0 * 0.114f;
            else if (m == 9) {
                float yy = v0 * 0.114f + v1 * 0.587f + v2 * 0.299f;
                r = c == 0 ? yy : c == 1 ? (v0 - yy) * 0.492f + 0.5f : (v2 - yy) * 0.877f + 0.5f;
            } else {
                float cr = v1 - 0.5f, cb = v2 - 0.5f;
                r = c == 0 ? v0 + cr * 2.032f
                  : c == 1 ? v0 + cb * -0.581f + cr * -0.395f : v0 + cb * 1.140f;
            }
            y[u] = X::store(r);
        }
    }
}
#endif /* MGE_IMAGE_KERNELS */
"""

_PARTS = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_IMAGE_PRELUDE", _IMAGE),
          ("MGE_IMAGE_KERNELS", _KERNELS))


def _traits(d, via):
    """(name, (guard, text)) of ``mge_it<via>_<code>``: a ``d`` element loads as ``via`` (the
    compute type of ``d``, or float32 or float64) and stores back from it."""
    via = np.dtype(via)
    cvia = _storage(_F32 if via == _F16 else via)
    name = f"mge_it{_code(via)}_{_code(d)}"
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"struct {name} {{\n    typedef {_storage(d)} S;\n    typedef {cvia} C;\n"
            f"    MGE_IMG_FN C load(S v) {{ return {_load('v', d, via)}; }}\n"
            f"    MGE_IMG_FN S store(C v) {{ return {_store('v', via, d)}; }}\n}};\n#endif\n")
    return name, (name, text)


def _dtype(what, d, allowed):
    try:
        d = np.dtype(d)
    except TypeError as e:
        raise TypeError(f"CUDA {what}: not a dtype ({e})") from None
    if d not in allowed:
        raise TypeError(f"CUDA {what}: unsupported dtype {d} (takes "
                        f"{', '.join(str(a) for a in allowed)})")
    return d


def _kernel(name, parts, params, call, nin):
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {call};\n}}\n"
    return KernelSource(name, (*_PARTS, *parts, (name, text)), tuple(params), False, 64, nin)


def pad_kernel(dtype):
    """The ``Pad`` gather of ``dtype`` (any of ``SUPPORTED_DTYPES``): params ``(S* y, const S*
    x, long long n, mge_pad g, unsigned long long cbits)``; ``cbits``: the constant's bytes."""
    return _pad_kernel(_dtype("Pad kernel", dtype, SUPPORTED_DTYPES))


@functools.lru_cache(maxsize=None)
def _pad_kernel(d):
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_pad g", "unsigned long long cbits"]
    return _kernel(f"mge_img_pad_{_code(d)}", (), params, f"mge_img_pad<{s}>(y, x, n, g, cbits)", 1)


def pad_backward_kernel(dtype):
    """The reflect/replicate ``PadBackward`` of a float ``dtype``: params ``(T* y, const T* x,
    long long n, mge_pad g)``."""
    d = _dtype("PadBackward kernel", dtype, FLOAT_DTYPES)
    return _pad_backward_kernel(d)


@functools.lru_cache(maxsize=None)
def _pad_backward_kernel(d):
    tr, part = _traits(d, d)
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_pad g"]
    return _kernel(f"mge_img_padbwd_{_code(d)}", (part,), params,
                   f"mge_img_pad_backward<{tr}>(y, x, n, g)", 1)


def sliding_window_kernel(dtype):
    """The ``SlidingWindow`` gather of ``dtype``: params ``(S* y, const S* x, long long n,
    mge_img g)``."""
    return _sliding_window_kernel(_dtype("SlidingWindow kernel", dtype, SUPPORTED_DTYPES))


@functools.lru_cache(maxsize=None)
def _sliding_window_kernel(d):
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_img g"]
    return _kernel(f"mge_img_window_{_code(d)}", (), params, f"mge_img_window<{s}>(y, x, n, g)", 1)


def sliding_window_transpose_kernel(dtype):
    """The ``SlidingWindowTranspose`` of ``dtype`` (not bool): params ``(S* y, const S* x, long
    long n, mge_img g)``."""
    return _sliding_window_t_kernel(_dtype("SlidingWindowTranspose kernel", dtype, _NUMERIC))


@functools.lru_cache(maxsize=None)
def _sliding_window_t_kernel(d):
    tr, part = _traits(d, d)
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_img g"]
    return _kernel(f"mge_img_window_t_{_code(d)}", (part,), params,
                   f"mge_img_window_t<{tr}>(y, x, n, g)", 1)


def resize_kernel(dtype):
    """The ``Resize``/``Resize3D`` kernel of ``dtype`` (floats and integers): params ``(S* y,
    const S* x, long long n, mge_img g, double lo, double hi)`` (integers clip to ``[lo, hi]``)."""
    return _resize_kernel(_dtype("Resize kernel", dtype, _NUMERIC))


@functools.lru_cache(maxsize=None)
def _resize_kernel(d):
    tr, part = _traits(d, _F64)
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_img g", "double lo", "double hi"]
    rnd = "true" if d.kind in "iu" else "false"
    return _kernel(f"mge_img_resize_{_code(d)}", (part,), params,
                   f"mge_img_resize<{tr}, {rnd}>(y, x, n, g, lo, hi)", 1)


def resize_backward_kernel(dtype):
    """The resizes' data gradient of a float ``dtype``: params ``(S* dx, const S* dy, long long
    n, mge_img g)``."""
    return _resize_backward_kernel(_dtype("Resize backward kernel", dtype, FLOAT_DTYPES))


@functools.lru_cache(maxsize=None)
def _resize_backward_kernel(d):
    tr, part = _traits(d, _F64)
    s = _storage(d)
    params = [f"{s}* dx", f"const {s}* dy", "long long n", "mge_img g"]
    return _kernel(f"mge_img_resizebwd_{_code(d)}", (part,), params,
                   f"mge_img_resize_backward<{tr}>(dx, dy, n, g)", 1)


_KINDS = {"affine": 0, "perspective": 1, "remap": 2}


def sample_kernel(kind, dtype, mat_dtype, idx_dtype=None):
    """The warp (``kind`` ``"affine"``/``"perspective"``) or ``"remap"`` kernel: params ``(S* y,
    const S* x, const M* mat, const B* idx, long long n, mge_img g, int* bad)``; ``idx`` (of
    ``idx_dtype``, an integer dtype; int32 when ``None``) may be NULL."""
    if kind not in _KINDS:
        raise ValueError(f"CUDA sample kernel: unknown kind {kind!r} (kinds: {', '.join(_KINDS)})")
    d = _dtype(f"{kind} kernel", dtype, _NUMERIC)
    m = _dtype(f"{kind} kernel (matrix or map)", mat_dtype, FLOAT_DTYPES)
    b = _dtype(f"{kind} kernel (mat_idx)", np.int32 if idx_dtype is None else idx_dtype, _INTS)
    return _sample_kernel(kind, d, m, b)


@functools.lru_cache(maxsize=None)
def _sample_kernel(kind, d, m, b):
    (tx, px), (tm, pm) = _traits(d, _F64), _traits(m, _F64)
    s, ms, bs = _storage(d), _storage(m), _storage(b)
    params = [f"{s}* y", f"const {s}* x", f"const {ms}* mat", f"const {bs}* idx", "long long n",
              "mge_img g", "int* bad"]
    name = f"mge_img_{kind}_{_code(d)}_{_code(m)}_{_code(b)}"
    return _kernel(name, (px, pm), params,
                   f"mge_img_sample<{tx}, {tm}, {bs}, {_KINDS[kind]}>(y, x, mat, idx, n, g, bad)",
                   3)


def remap_map_grad_kernel(dtype, map_dtype, dy_dtype):
    """``Remap``'s map gradient: params ``(M* out, const X* x, const M* map, const D* dy, long
    long n, mge_img g)``, ``n`` the map's positions (``out`` gets two values each)."""
    d = _dtype("Remap gradient kernel", dtype, _NUMERIC)
    m = _dtype("Remap gradient kernel (map)", map_dtype, FLOAT_DTYPES)
    g = _dtype("Remap gradient kernel (dy)", dy_dtype, FLOAT_DTYPES)
    return _remap_grad_kernel(d, m, g)


@functools.lru_cache(maxsize=None)
def _remap_grad_kernel(d, m, g):
    (tx, px), (tm, pm), (tg, pg) = _traits(d, _F64), _traits(m, _F64), _traits(g, _F64)
    params = [f"{_storage(m)}* out", f"const {_storage(d)}* x", f"const {_storage(m)}* map",
              f"const {_storage(g)}* dy", "long long n", "mge_img g"]
    parts = tuple(dict.fromkeys((px, pm, pg)))
    return _kernel(f"mge_img_remapgrad_{_code(d)}_{_code(m)}_{_code(g)}", parts, params,
                   f"mge_img_remap_grad<{tx}, {tm}, {tg}>(out, x, map, dy, n, g)", 3)


def cvt_color_kernel(kind, dtype):
    """The ``CvtColor`` kernel: ``kind`` ``"copy"`` (channel copies, any dtype), ``"u8"``
    (uint8 formulas) or ``"float"`` (float formulas in float32); params ``(S* y, const S* x,
    long long n, mge_img g)``."""
    allowed = {"copy": SUPPORTED_DTYPES, "u8": (np.dtype(np.uint8),), "float": FLOAT_DTYPES}
    if kind not in allowed:
        raise ValueError(f"CUDA CvtColor kernel: unknown kind {kind!r}")
    return _cvt_kernel(kind, _dtype(f"CvtColor({kind}) kernel", dtype, allowed[kind]))


@functools.lru_cache(maxsize=None)
def _cvt_kernel(kind, d):
    tr, part = _traits(d, _F32 if kind == "float" else d)
    s = _storage(d)
    params = [f"{s}* y", f"const {s}* x", "long long n", "mge_img g"]
    k = {"copy": 0, "u8": 1, "float": 2}[kind]
    return _kernel(f"mge_img_cvt_{kind}_{_code(d)}", (part,), params,
                   f"mge_img_cvt<{tr}, {k}>(y, x, n, g)", 1)


# -- plans ------------------------------------------------------------------------------------------


def _checked(op, ins, outs, names):
    """The inputs' ``TensorDesc``s after the op's rule (its errors first, naming the op, shapes
    and dtypes); ``outs`` must be the rule's and the inputs dense."""
    if len(ins) not in names:
        raise op_error(TypeError, op, f"CUDA plan: expects {' or '.join(map(str, names))} "
                       f"inputs, got {len(ins)}")
    descs = [TensorDesc(tuple(i.shape), np.dtype(i.dtype)) for i in ins]
    want = INFER[type(op)](op, descs)
    got = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
    rule = [(tuple(w.shape), np.dtype(w.dtype)) for w in want]
    if got != rule:
        raise op_error(ValueError, op, f"CUDA plan: outputs {got} are not the op's {rule}", descs)
    for k, i in enumerate(ins):
        if not i.contiguous:
            raise op_error(ValueError, op, f"CUDA plan: input {k} has strides {i.strides}; the "
                           f"plan takes dense inputs (the op is not in STRIDED)", descs)
    return descs


def _need(op, descs, d, allowed, what="input"):
    if d not in allowed:
        raise op_error(TypeError, op, f"CUDA plan: the {what}'s dtype {d} is not taken (takes "
                       f"{', '.join(str(a) for a in allowed)})", descs)


def _one(kernel, n, args, checks=(), workspace=0):
    if not n:
        return Plan((), notes=("empty output: nothing to launch",))
    return Plan((Launch(kernel, grid_for(n), (THREADS, 1, 1), args),), workspace, checks)


def _bufs(k):
    return [Buf("out0")] + [Buf(f"in{j}") for j in range(k)]


def _pack_pad(op, descs, shape, out_shape, before, after, mode):
    """The merged ``mge_pad`` of an input ``shape`` padded by ``before``/``after`` per dim."""
    dims = []
    for s, o, a, b in zip(shape, out_shape, before, after):
        if dims and a == 0 and b == 0 and dims[-1][2] == 0 and dims[-1][3] == 0:
            dims[-1] = (dims[-1][0] * s, dims[-1][1] * o, 0, 0)
        else:
            dims.append((s, o, a, b))
    dims = dims or [(1, 1, 0, 0)]
    if len(dims) > MAX_PAD_DIMS:
        raise op_error(ValueError, op, f"CUDA plan: more than {MAX_PAD_DIMS} dims after merging "
                       f"the unpadded ones", descs)
    g = np.zeros((), PAD_DTYPE)
    g["ndim"], g["mode"] = len(dims), mode
    for k, (s, o, a, b) in enumerate(dims):
        g["in_"][k], g["out"][k], g["before"][k], g["after"][k] = s, o, a, b
    return g[()]


def _widths(op, ndim):
    return tuple(op.pad_width) + ((0, 0),) * (ndim - len(op.pad_width))


def pad_plan(op, ins, outs):
    """The plan of ``Pad``: one gather launch, a thread per output element (every dtype)."""
    descs = _checked(op, ins, outs, (1,))
    (xs, d), = descs
    _need(op, descs, d, SUPPORTED_DTYPES)
    w = _widths(op, len(xs))
    mode = {"constant": 0, "reflect": 1, "replicate": 2}[op.mode]
    g = _pack_pad(op, descs, xs, outs[0].shape, [a for a, _ in w], [b for _, b in w], mode)
    raw = np.zeros(8, np.uint8)
    raw[:d.itemsize] = np.frombuffer(np.asarray(op.constant_value).astype(d).tobytes(), np.uint8)
    return _one(pad_kernel(d), outs[0].size,
                (*_bufs(1), np.int64(outs[0].size), g, raw.view(np.uint64)[0]))


def pad_backward_plan(op, ins, outs):
    """The plan of ``PadBackward``: constant a crop (the Pad gather); reflect/replicate a thread
    per result element summing its sources (floats)."""
    descs = _checked(op, ins, outs, (1,))
    (gs, d), = descs
    w = _widths(op, len(gs))
    n = outs[0].size
    if op.mode == "constant":
        _need(op, descs, d, SUPPORTED_DTYPES)
        g = _pack_pad(op, descs, gs, outs[0].shape, [-a for a, _ in w], [-b for _, b in w], 0)
        return _one(pad_kernel(d), n, (*_bufs(1), np.int64(n), g, np.uint64(0)))
    _need(op, descs, d, FLOAT_DTYPES)
    g = np.zeros((), PAD_DTYPE)
    if len(gs) > MAX_PAD_DIMS:
        raise op_error(ValueError, op, f"CUDA plan: at most {MAX_PAD_DIMS} dims", descs)
    g["ndim"], g["mode"] = max(len(gs), 1), 1 if op.mode == "reflect" else 2
    g["in_"][:], g["out"][:] = 1, 1
    for k, (s, o, (a, b)) in enumerate(zip(gs, outs[0].shape, w)):
        g["in_"][k], g["out"][k], g["before"][k], g["after"][k] = s, o, a, b
    return _one(pad_backward_kernel(d), n, (*_bufs(1), np.int64(n), g[()]))


def _window_struct(op, xs, kernel_out):
    g = np.zeros((), IMG_DTYPE)
    g["in_"][:3] = (xs[0] * xs[1], xs[2], xs[3])
    g["out"][:4] = kernel_out
    (sh, sw), (ph, pw), (dh, dw) = op.stride, op.padding, op.dilation
    g["aux_st"][:] = (sh, sw, ph, pw, dh)
    g["in_st"][0] = dw
    return g[()]


def sliding_window_plan(op, ins, outs):
    """The plan of ``SlidingWindow``: a thread per output element copies (every dtype)."""
    descs = _checked(op, ins, outs, (1,))
    (xs, d), = descs
    _need(op, descs, d, SUPPORTED_DTYPES)
    g = _window_struct(op, xs, outs[0].shape[2:])
    n = outs[0].size
    return _one(sliding_window_kernel(d), n, (*_bufs(1), np.int64(n), g))


def sliding_window_transpose_plan(op, ins, outs):
    """The plan of ``SlidingWindowTranspose``: a thread per output element sums its window
    elements in the CPU's order (every dtype but bool)."""
    descs = _checked(op, ins, outs, (1,))
    (ys, d), = descs
    _need(op, descs, d, _NUMERIC)
    g = _window_struct(op, outs[0].shape, ys[2:])
    n = outs[0].size
    return _one(sliding_window_transpose_kernel(d), n, (*_bufs(1), np.int64(n), g))


def _img(shape, fmt, three=False):
    """(dims (n, c, d, y, x), dense strides per logical dim, memory order) of an image array of
    ``shape`` in ``fmt`` (``"NHWC"``, else NCHW; ``three``: NCDHW)."""
    if three:
        n, c, dd, h, w = shape
        return (n, c, dd, h, w), (c * dd * h * w, dd * h * w, h * w, w, 1), (0, 1, 2, 3, 4)
    if fmt == "NHWC":
        n, h, w, c = shape
        return (n, c, 1, h, w), (h * w * c, 1, 0, w * c, c), (0, 2, 3, 4, 1)
    n, c, h, w = shape
    return (n, c, 1, h, w), (c * h * w, h * w, 0, w, 1), (0, 1, 2, 3, 4)


def _img_struct(src, out, **fields):
    g = np.zeros((), IMG_DTYPE)
    g["in_"][:], g["in_st"][:] = src[0], src[1]
    g["out"][:], g["ord"][:] = out[0], out[2]
    for k, v in fields.items():
        g[k] = v
    return g[()]


_AMODE = {"nearest": 0, "linear": 1, "cubic": 2}


def _resize_modes(op, descs):
    if isinstance(op, Resize3D):
        return (4 - bool(op.align_corners),) * 3  # every imode is trilinear (the CPU's)
    if op.imode not in _AMODE:
        raise NotImplementedError("Resize: the 'area' interpolation mode is not implemented "
                                  "in mge")
    return (5, _AMODE[op.imode], _AMODE[op.imode])


def _resize_check_sizes(op, descs, src, out):
    for a in (2, 3, 4):
        if src[0][a] == 0 and out[0][a]:
            raise op_error(ValueError, op, "CUDA plan: cannot resize an empty axis to a "
                           "non-empty one", descs)


def resize_plan(op, ins, outs):
    """The plan of ``Resize``/``Resize3D``: a thread per output element sums its separable taps
    (floats; integers rounded and clipped; ``Resize3D`` floats only)."""
    descs = _checked(op, ins, outs, (1,))
    (xs, d), = descs
    three = isinstance(op, Resize3D)
    _need(op, descs, d, FLOAT_DTYPES if three else _NUMERIC)
    fmt = "NCDHW" if three else op.format
    src, out = _img(xs, fmt, three), _img(outs[0].shape, fmt, three)
    g = _img_struct(src, out, amode=_resize_modes(op, descs))
    n = outs[0].size
    if n:
        _resize_check_sizes(op, descs, src, out)
    lo, hi = (float(np.iinfo(d).min), float(np.iinfo(d).max)) if d.kind in "iu" else (0.0, 0.0)
    return _one(resize_kernel(d), n, (*_bufs(1), np.int64(n), g, np.float64(lo), np.float64(hi)))


def _sample_struct(op, xs, out_shape, imode, bmode, fill, cv):
    src, out = _img(xs, op.format), _img(out_shape, op.format)
    return _img_struct(src, out, imode=imode, bmode=BORDER_MODES.index(bmode), flag=int(cv),
                       fill=float(fill))


def _imode_of(op):
    if op.imode not in ("linear", "nearest"):
        raise NotImplementedError(f"{op.name}: interpolation mode {op.imode!r} is not "
                                  "implemented in mge (linear and nearest are)")
    return 1 if op.imode == "linear" else 0


def _mat_idx_error(op, batch, count, dtype):
    def error(value, read):
        b = read(Buf("in2"), dtype, count).astype(np.int64).reshape(-1)
        return IndexError(f"{op.name}: mat_idx out of bound: {b.tolist()} (src batch {batch})")
    return error


def warp_plan(op, ins, outs):
    """The plan of ``WarpAffine``/``WarpPerspective`` (``(x, mat[, mat_idx])``): a thread per
    output element samples; ``mat_idx`` out of range is a ``Check`` (the CPU's ``IndexError``)."""
    descs = _checked(op, ins, outs, (2, 3) if isinstance(op, WarpPerspective) else (2,))
    imode = _imode_of(op)
    d, md = descs[0].dtype, descs[1].dtype
    _need(op, descs, d, _NUMERIC)
    _need(op, descs, md, FLOAT_DTYPES, "matrix")
    idx = descs[2].dtype if len(descs) == 3 else None
    if idx is not None:
        _need(op, descs, idx, _INTS, "mat_idx")
    kind = "perspective" if isinstance(op, WarpPerspective) else "affine"
    g = _sample_struct(op, descs[0].shape, outs[0].shape, imode, op.bmode, op.border_val,
                       op.format == "NHWC")
    n = outs[0].size
    kernel = sample_kernel(kind, d, md, idx)
    if idx is None:
        return _one(kernel, n, (*_bufs(2), None, np.int64(n), g, None))
    ws = Workspace()
    flag = ws.add(4)
    batch = _img(descs[0].shape, op.format)[0][0]
    check = Check(flag, _mat_idx_error(op, batch, descs[2].shape[0], idx))
    return _one(kernel, n, (*_bufs(3), np.int64(n), g, flag), (check,), ws.size)


def remap_plan(op, ins, outs):
    """The plan of ``Remap`` (``(x, map_xy)``): a thread per output element samples at the map."""
    descs = _checked(op, ins, outs, (2,))
    if op.imode not in ("linear", "nearest"):
        raise NotImplementedError(f"Remap: interpolation mode {op.imode!r} is not implemented "
                                  "in mge (linear and nearest are)")
    d, md = descs[0].dtype, descs[1].dtype
    _need(op, descs, d, _NUMERIC)
    _need(op, descs, md, FLOAT_DTYPES, "map")
    g = _sample_struct(op, descs[0].shape, outs[0].shape, _imode_of(op), op.border_type,
                       op.scalar, False)
    n = outs[0].size
    return _one(sample_kernel("remap", d, md), n, (*_bufs(2), None, np.int64(n), g, None))


_CVT_INDEX = {m: k for k, m in enumerate(("RGB2GRAY", "BGR2GRAY", "RGB2BGR", "BGR2RGB",
                                          "GRAY2RGB", "GRAY2BGR", "RGBA2RGB", "RGBA2BGR",
                                          "RGBA2GRAY", "RGB2YUV", "YUV2RGB"))}
_CVT_COPIES = ("RGB2BGR", "BGR2RGB", "RGBA2RGB", "RGBA2BGR", "GRAY2RGB", "GRAY2BGR")


def cvt_color_plan(op, ins, outs):
    """The plan of ``CvtColor`` (NHWC): channel copies of any dtype, the uint8 and the float
    formulas; other dtypes of a formula raise the CPU's ``TypeError``."""
    descs = _checked(op, ins, outs, (1,))
    (xs, d), = descs
    m = op.mode
    if m in _CVT_COPIES:
        kind = "copy"
        _need(op, descs, d, SUPPORTED_DTYPES)
    elif d == np.uint8:
        kind = "u8"
    elif d.kind == "f":
        kind = "float"
        _need(op, descs, d, FLOAT_DTYPES)
    else:
        raise TypeError(f"cvt_color: {m} takes float32 or uint8 images, got {d}")
    g = np.zeros((), IMG_DTYPE)
    g["in_"][1], g["out"][1], g["imode"] = xs[3], outs[0].shape[3], _CVT_INDEX[m]
    n = outs[0].size
    return _one(cvt_color_kernel(kind, d), n, (*_bufs(1), np.int64(n), g[()]))


def vision_backward_plan(op, ins, outs):
    """The plan of ``VisionBackward`` (``(*forward inputs, dy)``): the data gradients of
    ``Resize``/``Resize3D`` (a thread per ``dx`` element) and ``Remap``'s map gradient (a thread
    per map position); the others raise ``NotImplementedError`` naming the op."""
    f, index = op.forward, op.index
    descs = _checked(op, ins, outs, (len(ins),))
    if isinstance(f, (Resize, Resize3D)) and index == 0 and len(descs) == 2:
        (xs, xd), (gs, gd) = descs
        three = isinstance(f, Resize3D)
        _need(op, descs, gd, FLOAT_DTYPES, "gradient")
        if xd != gd:
            raise op_error(TypeError, op, "CUDA plan: x and dy must have one dtype", descs)
        fmt = "NCDHW" if three else f.format
        src, out = _img(gs, fmt, three), _img(xs, fmt, three)
        g = _img_struct(src, out, amode=_resize_modes(f, descs))
        n = outs[0].size
        if n and any(src[0][a] == 0 and out[0][a] for a in (2, 3, 4)):
            raise op_error(ValueError, op, "CUDA plan: an empty axis", descs)
        return _one(resize_backward_kernel(gd), n, (Buf("out0"), Buf("in1"), np.int64(n), g))
    if isinstance(f, Remap) and index == 1 and len(descs) == 3:
        if f.imode not in ("linear", "nearest"):
            raise NotImplementedError(f"Remap: interpolation mode {f.imode!r} is not "
                                      "implemented in mge (linear and nearest are)")
        (xs, xd), (ms, md), (gs, gd) = descs
        _need(op, descs, xd, _NUMERIC)
        _need(op, descs, md, FLOAT_DTYPES, "map")
        _need(op, descs, gd, FLOAT_DTYPES, "gradient")
        src, out = _img(xs, f.format), _img(gs, f.format)
        g = _img_struct(src, out, imode=_imode_of(f), bmode=BORDER_MODES.index(f.border_type),
                        fill=float(f.scalar), aux_st=out[1])
        n = ms[0] * ms[1] * ms[2]
        return _one(remap_map_grad_kernel(xd, md, gd), n,
                    (Buf("out0"), Buf("in0"), Buf("in1"), Buf("in2"), np.int64(n), g))
    if isinstance(f, (ROIAlign, ROIPooling, Correlation)):  # their gradients: detection.py's
        return _detection.vision_backward_plan(op, ins, outs)
    raise NotImplementedError(f"{op.name}: the gradient of input {index} of {f.name} has no "
                              f"CUDA kernel yet (only Resize/Resize3D's data gradient and "
                              f"Remap's map gradient run on the device)")


#: op class -> ``plan(op, ins, outs)`` -> ``launch.Plan``.
PLANS = {Pad: pad_plan, PadBackward: pad_backward_plan, SlidingWindow: sliding_window_plan,
         SlidingWindowTranspose: sliding_window_transpose_plan, Resize: resize_plan,
         Resize3D: resize_plan, WarpAffine: warp_plan, WarpPerspective: warp_plan,
         Remap: remap_plan, CvtColor: cvt_color_plan, VisionBackward: vision_backward_plan}
