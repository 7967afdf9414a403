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

**One thread per output element, gathers only** (no atomics, deterministic; the scatters of the
sampling ops' gradients are ``image_grad.py``'s): a grid-stride loop
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

Elsewhere: the data gradients of the warps and of ``Remap`` (scatters with atomic adds: a gather
formulation needs the inverse of the sampling map, which a general warp with its border modes
does not have) and the warps' matrix gradients (deterministic two-pass sums) are
``image_grad.py``'s plan; ``VisionBackward`` of ``ROIAlign``/``ROIPooling``/``Correlation`` is
``detection.py``'s.  This module's ``VisionBackward`` plan hands those forward ops to them
(imports run one way: image -> image_grad -> image_common, image -> detection).  The ``mge_img``
struct, the C prelude (coordinates, ``border_interpolate``, the resize and sampling taps, the
sampling position) and the plans' small helpers are ``image_common.py``'s, shared with
``image_grad.py``.

``STRIDED`` is empty: every input arrives dense.  Dtypes: ``Pad``, ``SlidingWindow`` and the
channel copies of ``CvtColor`` take every dtype of ``SUPPORTED_DTYPES``; ``SlidingWindowTranspose``
every one but bool; the resizes, warps and remap float16/32/64 and the integers (``Resize3D``,
``PadBackward`` of reflect/replicate and the gradients: floats).
"""
import functools

import numpy as np

from ....ops.base import op_error
from ....ops.nn import Pad, PadBackward
from ....ops.nn_extra import SlidingWindow, SlidingWindowTranspose
from ....ops.vision import (
    BORDER_MODES, Correlation, CvtColor, Remap, Resize, Resize3D, ROIAlign, ROIPooling,
    VisionBackward, WarpAffine, WarpPerspective,
)
from . import detection as _detection
from . import image_grad as _grad
from .elemwise import SUPPORTED_DTYPES, KernelSource, _code, _storage
from .image_common import (
    FLOAT_DTYPES, IMG_DTYPE, PARTS, check_dtype as _dtype, checked as _checked,
    img_layout as _img, img_struct as _img_struct, imode_of as _imode_of,
    mat_idx_error as _mat_idx_error, need as _need, one as _one, sample_struct as _sample_struct,
    traits as _traits,
)
from .image_common import INT_DTYPES as _INTS, NUMERIC_DTYPES as _NUMERIC
from .launch import Buf, Check, Workspace

__all__ = ["IMG_DTYPE", "PAD_DTYPE", "MAX_PAD_DIMS", "FLOAT_DTYPES", "pad_kernel",
           "pad_backward_kernel", "sliding_window_kernel", "sliding_window_transpose_kernel",
           "resize_kernel", "resize_backward_kernel", "sample_kernel", "remap_map_grad_kernel",
           "cvt_color_kernel", "PLANS", "STRIDED", "DIFFERENCES"]

_F32, _F64 = np.dtype("float32"), np.dtype("float64")
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
""" + _grad.DIFFERENCES

# -- C ---------------------------------------------------------------------------------------------

#: ``struct mge_pad``: dims of the input and the output, ``before`` per dim.
PAD_DTYPE = np.dtype([("ndim", np.int32), ("mode", np.int32),
                      ("in_", np.int64, (MAX_PAD_DIMS,)), ("out", np.int64, (MAX_PAD_DIMS,)),
                      ("before", np.int64, (MAX_PAD_DIMS,)), ("after", np.int64, (MAX_PAD_DIMS,))],
                     align=True)


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

_PARTS = (*PARTS, ("MGE_IMAGE_KERNELS", _KERNELS))


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
    per map position) here; the warps' and ``Remap``'s data gradients and the warps' matrix
    gradients are ``image_grad.py``'s, the RoI ops' and ``Correlation``'s ``detection.py``'s;
    the others raise ``NotImplementedError`` naming the op."""
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
    if isinstance(f, (WarpAffine, WarpPerspective, Remap)):  # the scatters: image_grad.py's
        return _grad.sample_grad_plan(op, ins, outs)
    if isinstance(f, (ROIAlign, ROIPooling, Correlation)):  # their gradients: detection.py's
        return _detection.vision_backward_plan(op, ins, outs)
    raise NotImplementedError(f"{op.name}: the gradient of input {index} of {f.name} has no "
                              f"CUDA kernel")


#: op class -> ``plan(op, ins, outs)`` -> ``launch.Plan``.
PLANS = {Pad: pad_plan, PadBackward: pad_backward_plan, SlidingWindow: sliding_window_plan,
         SlidingWindowTranspose: sliding_window_transpose_plan, Resize: resize_plan,
         Resize3D: resize_plan, WarpAffine: warp_plan, WarpPerspective: warp_plan,
         Remap: remap_plan, CvtColor: cvt_color_plan, VisionBackward: vision_backward_plan}
