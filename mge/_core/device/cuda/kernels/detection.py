"""CUDA C for the detection ops -- ``ROIAlign``, ``ROIPooling``, ``NMSKeep``, ``Correlation``, their
gradients (``VisionBackward`` of the first two and of ``Correlation``) -- and ``CTCLoss``, with the
launch plans (``launch.py``'s one format) the CUDA device follows to run them.

Like every family this only makes text and plans: NVRTC compiles the text, and the same text
builds as host C++ (g++) for the tests, where block.py's prelude emulates blocks, threads and
barriers.  Every kernel computes in double, as the CPU kernels (``cpu/kernels/vision.py``,
``nn_extra.py``) compute in float64; float16, float32 and float64 data are loaded into double
and the result rounded once at the store (float16 as its bits).

**RoI ops.**  ``mge_det_roi_batch`` (a grid-stride loop over the RoIs) turns each RoI's first
column into its batch index -- numpy's ``astype(int64)`` truncation, a negative index counting from
the end as ``x[b]`` does -- and flags the first index out of range (a ``Check``: the CPU's very
``IndexError``).  The forward kernels take a thread per output element ``(k, c, ph, pw)``:

* ``ROIAlign``: the bin's ``sample_height * sample_width`` bilinear samples (constant border 0,
  the CPU's ``_bilinear_taps``), their maximum (numpy's ``argmax``: the first maximum, a NaN wins)
  and its sample index, or their mean (index ``-1``);
* ``ROIPooling``: the bin's rectangle (C ``round`` of the scaled box, the float32 bin edges of
  the CPU kernel), its maximum and flat ``h * w`` index (``-1`` and 0 for an empty bin), or its
  mean.

The gradients are **deterministic** (no float atomics): a thread per input element ``(n, c, y,
x)`` loops over the RoIs of its batch item and adds the contributions of the samples whose taps
(align) or the bins whose arg-max / rectangle (pooling) hit it, in RoI order.  Max modes first
run the forward kernel into the workspace for the arg-max indices (the CPU recomputes them too).

**NMSKeep** is the standard bitmask NMS: ``mge_det_nms_mask`` -- a block of 64 threads per (row
tile, column tile, batch item), the tile's column boxes in shared memory -- writes, for every box
``i``, 64-bit words whose bit ``j`` says box ``j > i`` overlaps it by more than ``iou_thresh``
(the CPU's float32 IoU, to the bit); ``mge_det_nms_scan``, a block per batch item, walks the
boxes in score order: thread 0 picks the next box not yet suppressed, then the whole block ORs
its mask row into the suppressed words (in the workspace), until ``max_output`` are kept or no
box is left -- the CPU's selection order exactly, one pass of the block per *kept* box.  The
outputs have fixed shapes (``(B, max_output)`` indices zero-padded, ``(B,)`` counts), so the
data-dependent count needs no ``Readback``: the kernel writes it.

**Correlation** (FlowNet): a thread per output ``(n, displacement, i, j)`` sums its window's
products (or absolute differences) over the channels, window position by position; the
gradients take a thread per element of the input they belong to and gather, over the kernel
window and the displacements, the output gradients that element fed (no atomics).

**CTCLoss**: a block per batch item (``MGE_BLOCK_LOOP``), its threads over the extended label
sequence (``L = 2S + 1`` states).  The alpha recursion in log space (numpy's ``logaddexp``, the
CPU's ``log(tiny)`` start for unreachable states) writes ``alpha`` for every time step to the
workspace, one barrier per step; the beta recursion runs backwards in a double buffer and gives
each step's state occupancies, summed per class in state order (each class's first state walks
the chain of its later states: no atomics) into ``grad = -occupancy / p``.  Labels out of the
class range, and ``pred_lengths``/``label_lengths`` the CPU kernel cannot index with, are
``Check``s raising the CPU kernel's (numpy's) ``IndexError``; negative values within range count
from the end, as there.  The op outputs the per-sample loss; ``F.nn.ctc_loss`` applies the
reduction with ordinary ops, as on the CPU device.

``STRIDED`` is empty: every kernel reads dense inputs.  Where results may differ from the CPU
device's: ``DIFFERENCES``.
"""
import functools

import numpy as np

from ....ops.base import INFER, TensorDesc
from ....ops.nn_extra import CTCLoss
from ....ops.vision import Correlation, NMSKeep, ROIAlign, ROIPooling, VisionBackward
from .block import BLOCK_PARTS
from .elemwise import KernelSource
from .launch import THREADS, Buf, Check, Launch, Memset, Plan, Workspace, grid_for

__all__ = ["FLOAT_DTYPES", "INT_DTYPES", "NVRTC_OPTIONS", "DIFFERENCES", "NMS_TILE", "PLANS",
           "STRIDED", "roi_batch_kernel", "roi_align_kernel", "roi_align_backward_kernel",
           "roi_pooling_kernel", "roi_pooling_backward_kernel", "nms_kernels",
           "correlation_kernel", "correlation_backward_kernel", "ctc_kernel", "roi_align_plan",
           "roi_pooling_plan", "nms_plan", "correlation_plan", "vision_backward_plan",
           "ctc_loss_plan"]

#: NVRTC flags: no contraction into fused multiply-adds (the CPU kernels' rounding).
NVRTC_OPTIONS = ("--fmad=false",)
#: Boxes per NMS tile (the bits of one mask word).
NMS_TILE = 64

DIFFERENCES = """\
* ROIAlign, ROIPooling (average), Correlation and every gradient here sum in double in their own
  order (samples, window positions and channels in turn; a gradient adds its RoIs' or
  displacements' contributions per input element); the CPU sums with numpy (einsum, bincount,
  pairwise sums) in float64: the results agree to float64 rounding before the cast to the
  output dtype, not always bit for bit in float64 outputs.  Where two samples of a max bin tie
  within that rounding, the arg-max may differ.
* ROIPooling max, NMSKeep and CTCLoss follow the CPU's order of operations: the same bits (the
  CTC recursions to the last bits of libm's and CUDA's exp/log1p).
* NMSKeep with ``max_output < 1`` is refused at the plan (a ValueError); the CPU kernel fails on
  the assignment of its kept list instead.
* ROIAlign's gradient with a negative batch index (within range) counts from the end, as the
  forward does; the CPU kernel's gradient fails there (a ValueError of np.bincount).
* An error found by a check (a RoI's batch index, a CTC label or length out of range) names the
  first bad element in row-major order, as numpy does for these one-array indexes.
"""

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The float dtypes the kernels take.
FLOAT_DTYPES = (_F16, _F32, _F64)
_CODE = {_F16: "f16", _F32: "f32", _F64: "f64"}
_STORAGE = {_F16: "unsigned short", _F32: "float", _F64: "double"}
#: Integer (and bool) dtypes the CTC loss takes for labels and lengths, by their load code.
INT_DTYPES = tuple(np.dtype(d) for d in ("int8", "uint8", "int16", "uint16", "int32", "uint32",
                                         "int64", "uint64", "bool"))
_INT_CODE = {d: k for k, d in enumerate(INT_DTYPES)}
_INT_CODE[np.dtype("bool")] = 1  # one byte 0 or 1
_LLONG_MAX = 2 ** 63 - 1
_LOG_TINY = float(np.log(np.finfo(np.float32).tiny))

# -- the prelude ----------------------------------------------------------------------------------

_PRELUDE = r"""#ifndef MGE_DET_PRELUDE
#define MGE_DET_PRELUDE
/* detection.py: loads into double, stores from it, numpy's NaN-propagating extrema, the first
   bad element's flag, integer loads by dtype code, numpy's logaddexp. */
MGE_FN double mge_det_ld(const unsigned short* p, long long i) { return (double)mge_h2f(p[i]); }
MGE_FN double mge_det_ld(const float* p, long long i) { return (double)p[i]; }
MGE_FN double mge_det_ld(const double* p, long long i) { return p[i]; }
MGE_FN void mge_det_st(unsigned short* p, long long i, double v) { p[i] = mge_d2h(v); }
MGE_FN void mge_det_st(float* p, long long i, double v) { p[i] = (float)v; }
MGE_FN void mge_det_st(double* p, long long i, double v) { p[i] = v; }
MGE_FN float mge_det_ldf(const unsigned short* p, long long i) { return mge_h2f(p[i]); }
MGE_FN float mge_det_ldf(const float* p, long long i) { return p[i]; }
MGE_FN float mge_det_ldf(const double* p, long long i) { return (float)p[i]; }
template <class T> MGE_FN T mge_det_max(T a, T b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
template <class T> MGE_FN T mge_det_min(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
/* numpy's float64 -> int64 on x86: truncation; NaN and out of range give the most negative */
MGE_FN long long mge_det_i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (long long)v
                                                                       : (-9223372036854775807LL - 1);
}
/* record the first bad element i: the largest LLONG_MAX - i wins */
MGE_FN void mge_det_flag(long long* word, long long i) {
#if defined(__CUDACC__)
    atomicMax(word, 9223372036854775807LL - i);
#else
    if (*word < 9223372036854775807LL - i) *word = 9223372036854775807LL - i;
#endif
}
/* integer element i of an array of dtype code (INT_DTYPES' order; bool as uint8) */
MGE_FN long long mge_det_int(const void* p, long long i, int code) {
    switch (code) {
    case 0: return ((const signed char*)p)[i];
    case 1: return ((const unsigned char*)p)[i];
    case 2: return ((const short*)p)[i];
    case 3: return ((const unsigned short*)p)[i];
    case 4: return ((const int*)p)[i];
    case 5: return ((const unsigned int*)p)[i];
    default: return ((const long long*)p)[i];
    }
}
/* numpy's npy_logaddexp */
MGE_FN double mge_det_logaddexp(double x, double y) {
    if (x == y) return x + 0.693147180559945309417232121458176568;
    double d = x - y;
    if (d > 0) return x + log1p(exp(-d));
    if (d <= 0) return y + log1p(exp(d));
    return d;
}
#endif /* MGE_DET_PRELUDE */
"""

_PARTS = BLOCK_PARTS + (("MGE_DET_PRELUDE", _PRELUDE),)

# -- RoI ops --------------------------------------------------------------------------------------

_ROI = r"""#ifndef MGE_DET_ROI
#define MGE_DET_ROI
/* each RoI's batch index (x[b]: negative counts from the end); the first bad one flagged */
template <class R> MGE_FN void mge_det_roi_batch(const R* rois, long long K, long long N,
                                                long long* bidx, long long* err) {
    MGE_GRID_LOOP(k, K) {
        long long b = mge_det_i64(mge_det_ld(rois, k * 5));
        if (b < -N || b >= N) { mge_det_flag(err, k); b = 0; }
        else if (b < 0) b += N;
        bidx[k] = b;
    }
}
/* the bilinear sample of plane (H x W) at (hy, wx): the CPU's four taps, constant border 0 */
template <class X> MGE_FN double mge_det_bilinear(const X* plane, long long H, long long W,
                                                 double hy, double wx) {
    double fx = floor(wx), fy = floor(hy);
    double u = wx - fx, v = hy - fy;
    long long x0 = (fx >= -4.0e18 && fx <= 4.0e18) ? (long long)fx : -(1LL << 62);
    long long y0 = (fy >= -4.0e18 && fy <= 4.0e18) ? (long long)fy : -(1LL << 62);
    double w4[4] = {(1 - v) * (1 - u), (1 - v) * u, v * (1 - u), v * u};
    double acc = 0.0;
    for (int t = 0; t < 4; ++t) {
        long long r = y0 + (t >> 1), c = x0 + (t & 1);
        double val = (r >= 0 && r < H && c >= 0 && c < W) ? mge_det_ld(plane, r * W + c) : 0.0;
        acc = t == 0 ? val * w4[0] : acc + val * w4[t];
    }
    return acc;
}
struct mge_det_align {
    long long N, K, C, H, W, PH, PW, SH, SW;
    double scale, offset;
    int max_mode;
};
/* a RoI's start (h, w) and bin size (h, w), as the CPU's _roi_align_setup */
template <class R> MGE_FN void mge_det_align_geo(const R* rois, long long k, const mge_det_align& g,
                                                double* sh, double* sw, double* bh, double* bw) {
    *sw = mge_det_ld(rois, k * 5 + 1) * g.scale - g.offset;
    *sh = mge_det_ld(rois, k * 5 + 2) * g.scale - g.offset;
    double ew = mge_det_ld(rois, k * 5 + 3) * g.scale - g.offset;
    double eh = mge_det_ld(rois, k * 5 + 4) * g.scale - g.offset;
    *bh = mge_det_max<double>(eh - *sh, 0.0) / (double)g.PH;
    *bw = mge_det_max<double>(ew - *sw, 0.0) / (double)g.PW;
}
template <class X, class R> MGE_FN void mge_det_roi_align(X* out, int* idx, const X* x,
                                                         const R* rois, const long long* bidx,
                                                         mge_det_align g) {
    long long total = g.K * g.C * g.PH * g.PW;
    MGE_GRID_LOOP(e, total) {
        long long q = e % g.PW, p = (e / g.PW) % g.PH, c = (e / (g.PW * g.PH)) % g.C;
        long long k = e / (g.PW * g.PH * g.C);
        double sh, sw, bh, bw;
        mge_det_align_geo(rois, k, g, &sh, &sw, &bh, &bw);
        const X* plane = x + (bidx[k] * g.C + c) * g.H * g.W;
        double best = 0.0, sum = 0.0;
        long long bi = 0;
        for (long long i = 0; i < g.SH; ++i) {
            double hy = sh + bh * ((double)p + ((double)i + 0.5) / (double)g.SH);
            for (long long j = 0; j < g.SW; ++j) {
                double wx = sw + bw * ((double)q + ((double)j + 0.5) / (double)g.SW);
                double v = mge_det_bilinear(plane, g.H, g.W, hy, wx);
                long long s = i * g.SW + j;
                if (s == 0) { best = v; sum = v; }
                else {
                    sum += v;
                    if (best == best && (v != v || v > best)) { best = v; bi = s; }
                }
            }
        }
        if (out) mge_det_st(out, e, g.max_mode ? best : sum / (double)(g.SH * g.SW));
        idx[e] = g.max_mode ? (int)bi : -1;
    }
}
/* dx: a thread per input element, over the RoIs of its batch item and the samples whose taps
   hit it (RoI order: deterministic) */
template <class X, class R> MGE_FN void mge_det_roi_align_bwd(X* dx, const X* dy, const R* rois,
                                                             const long long* bidx,
                                                             const int* idx, mge_det_align g) {
    long long total = g.N * g.C * g.H * g.W;
    long long S = g.SH * g.SW;
    MGE_GRID_LOOP(e, total) {
        long long xx = e % g.W, yy = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C;
        long long n = e / (g.W * g.H * g.C);
        double acc = 0.0;
        for (long long k = 0; k < g.K; ++k) {
            if (bidx[k] != n) continue;
            double sh, sw, bh, bw;
            mge_det_align_geo(rois, k, g, &sh, &sw, &bh, &bw);
            for (long long p = 0; p < g.PH; ++p)
            for (long long i = 0; i < g.SH; ++i) {
                double hy = sh + bh * ((double)p + ((double)i + 0.5) / (double)g.SH);
                double fy = floor(hy), v = hy - fy;
                if (!(fy >= -4.0e18 && fy <= 4.0e18)) continue;
                long long y0 = (long long)fy;
                double wy;
                if (yy == y0) wy = 1 - v; else if (yy == y0 + 1) wy = v; else continue;
                for (long long q = 0; q < g.PW; ++q) {
                    long long o = ((k * g.C + c) * g.PH + p) * g.PW + q;
                    double go = mge_det_ld(dy, o);
                    for (long long j = 0; j < g.SW; ++j) {
                        double wx = sw + bw * ((double)q + ((double)j + 0.5) / (double)g.SW);
                        double fx = floor(wx), u = wx - fx;
                        if (!(fx >= -4.0e18 && fx <= 4.0e18)) continue;
                        long long x0 = (long long)fx;
                        double wgt;
                        if (xx == x0) wgt = wy * (1 - u); else if (xx == x0 + 1) wgt = wy * u;
                        else continue;
                        double gs;
                        if (g.max_mode) gs = idx[o] == (int)(i * g.SW + j) ? go : 0.0;
                        else gs = go / (double)S;
                        acc += gs * wgt;
                    }
                }
            }
        }
        mge_det_st(dx, e, acc);
    }
}
struct mge_det_pool {
    long long N, K, C, H, W, PH, PW;
    double scale;
    int max_mode;
};
MGE_FN long long mge_det_cround(double a) {
    double r = a < 0 ? -floor(-a + 0.5) : (a > 0 ? floor(a + 0.5) : a);
    return mge_det_i64(r);
}
/* a RoI's start (h, w) and size (h, w) in pixels, as the CPU's _roi_pool_masks */
template <class R> MGE_FN void mge_det_pool_geo(const R* rois, long long k, const mge_det_pool& g,
                                               long long* sh, long long* sw, long long* rh,
                                               long long* rw) {
    *sw = mge_det_cround(mge_det_ld(rois, k * 5 + 1) * g.scale);
    *sh = mge_det_cround(mge_det_ld(rois, k * 5 + 2) * g.scale);
    long long ew = mge_det_cround(mge_det_ld(rois, k * 5 + 3) * g.scale);
    long long eh = mge_det_cround(mge_det_ld(rois, k * 5 + 4) * g.scale);
    *rw = ew - *sw + 1; if (*rw < 1) *rw = 1;
    *rh = eh - *sh + 1; if (*rh < 1) *rh = 1;
}
/* bin b's [lo, hi) of an axis: float32 edges, clipped to [0, size] */
MGE_FN void mge_det_pool_bin(long long start, long long len, long long pooled, long long size,
                             long long b, long long* lo, long long* hi) {
    float bins = (float)len / (float)pooled;
    long long l = (long long)floorf((float)b * bins) + start;
    long long h = (long long)ceilf(((float)b + 1.0f) * bins) + start;
    *lo = l < 0 ? 0 : (l > size ? size : l);
    *hi = h < 0 ? 0 : (h > size ? size : h);
}
template <class X, class R> MGE_FN void mge_det_roi_pool(X* out, int* idx, const X* x,
                                                        const R* rois, const long long* bidx,
                                                        mge_det_pool g) {
    long long total = g.K * g.C * g.PH * g.PW;
    MGE_GRID_LOOP(e, total) {
        long long q = e % g.PW, p = (e / g.PW) % g.PH, c = (e / (g.PW * g.PH)) % g.C;
        long long k = e / (g.PW * g.PH * g.C);
        long long sh, sw, rh, rw, hl, hh, wl, wh;
        mge_det_pool_geo(rois, k, g, &sh, &sw, &rh, &rw);
        mge_det_pool_bin(sh, rh, g.PH, g.H, p, &hl, &hh);
        mge_det_pool_bin(sw, rw, g.PW, g.W, q, &wl, &wh);
        long long cnt = (hh > hl && wh > wl) ? (hh - hl) * (wh - wl) : 0;
        const X* plane = x + (bidx[k] * g.C + c) * g.H * g.W;
        double y = 0.0;
        long long bi = 0;
        if (cnt == 0) { bi = g.max_mode ? -1 : 0; }
        else if (g.max_mode) {
            double best = -MGE_INF_D;
            bi = -1;
            for (long long r = hl; r < hh; ++r)
            for (long long s = wl; s < wh; ++s) {
                double v = mge_det_ld(plane, r * g.W + s);
                if (bi < 0 ? (v != v || v > best) : (best == best && (v != v || v > best))) {
                    best = v; bi = r * g.W + s;
                }
            }
            if (bi < 0) bi = 0;  /* every value -inf: numpy's argmax gives 0 */
            y = best;
        } else {
            for (long long r = hl; r < hh; ++r)
            for (long long s = wl; s < wh; ++s) y += mge_det_ld(plane, r * g.W + s);
            y = y / (double)cnt;
        }
        if (out) mge_det_st(out, e, y);
        idx[e] = (int)bi;
    }
}
template <class X, class R> MGE_FN void mge_det_roi_pool_bwd(X* dx, const X* dy, const R* rois,
                                                            const long long* bidx,
                                                            const int* idx, mge_det_pool g) {
    long long total = g.N * g.C * g.H * g.W;
    MGE_GRID_LOOP(e, total) {
        long long xx = e % g.W, yy = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C;
        long long n = e / (g.W * g.H * g.C);
        double acc = 0.0;
        for (long long k = 0; k < g.K; ++k) {
            if (bidx[k] != n) continue;
            long long sh, sw, rh, rw, hl, hh, wl, wh;
            mge_det_pool_geo(rois, k, g, &sh, &sw, &rh, &rw);
            for (long long p = 0; p < g.PH; ++p) {
                mge_det_pool_bin(sh, rh, g.PH, g.H, p, &hl, &hh);
                if (hh <= hl || (!g.max_mode && (yy < hl || yy >= hh))) continue;
                for (long long q = 0; q < g.PW; ++q) {
                    mge_det_pool_bin(sw, rw, g.PW, g.W, q, &wl, &wh);
                    if (wh <= wl) continue;
                    long long o = ((k * g.C + c) * g.PH + p) * g.PW + q;
                    if (g.max_mode) {
                        if (idx[o] == (int)(yy * g.W + xx)) acc += mge_det_ld(dy, o);
                    } else if (xx >= wl && xx < wh) {
                        acc += mge_det_ld(dy, o) * (1.0 / (double)((hh - hl) * (wh - wl)));
                    }
                }
            }
        }
        mge_det_st(dx, e, acc);
    }
}
#endif /* MGE_DET_ROI */
"""

# -- NMS ------------------------------------------------------------------------------------------

_NMS = r"""#ifndef MGE_DET_NMS
#define MGE_DET_NMS
/* numpy's float32 IoU of boxes a (the kept one) and b */
MGE_FN float mge_det_iou(const float* a, const float* b) {
    float area_a = (a[2] - a[0]) * (a[3] - a[1]);
    float area_b = (b[2] - b[0]) * (b[3] - b[1]);
    float xx1 = mge_det_max<float>(a[0], b[0]), yy1 = mge_det_max<float>(a[1], b[1]);
    float xx2 = mge_det_min<float>(a[2], b[2]), yy2 = mge_det_min<float>(a[3], b[3]);
    float inter = mge_det_max<float>(xx2 - xx1, 0.0f) * mge_det_max<float>(yy2 - yy1, 0.0f);
    return inter / ((area_a + area_b) - inter);
}
/* mask[(b * n + i) * words + w] bit j: box 64 w + j (> i) overlaps box i by more than thresh */
template <class B> MGE_FN void mge_det_nms_mask(const B* boxes, long long n, long long words,
                                               float thresh, unsigned long long* mask) {
    MGE_FOR_BLOCKS {
        MGE_SHARED float cols[64 * 4];
        const long long b = blockIdx.z, r0 = (long long)blockIdx.y * 64,
                        c0 = (long long)blockIdx.x * 64;
        MGE_THREADS { MGE_THREAD_IDS
            long long cidx = c0 + tid;
            for (int d = 0; d < 4; ++d)
                cols[tid * 4 + d] = cidx < n ? mge_det_ldf(boxes, (b * n + cidx) * 4 + d) : 0.0f;
        }
        MGE_SYNC
        MGE_THREADS { MGE_THREAD_IDS
            long long i = r0 + tid;
            if (i < n) {
                float row[4];
                for (int d = 0; d < 4; ++d) row[d] = mge_det_ldf(boxes, (b * n + i) * 4 + d);
                unsigned long long bits = 0;
                for (int j = 0; j < 64; ++j) {
                    long long cidx = c0 + j;
                    if (cidx > i && cidx < n && mge_det_iou(row, cols + j * 4) > thresh)
                        bits |= 1ULL << j;
                }
                mask[(b * n + i) * words + blockIdx.x] = bits;
            }
        }
        MGE_SYNC
    }
}
/* a block per batch item: thread 0 picks the next box not suppressed, the block ORs its row */
MGE_FN void mge_det_nms_scan_block(const unsigned long long* mask, long long nb, long long n,
                             long long words, long long max_out, int* idx, int* cnt,
                             unsigned long long* removed) {
    MGE_BLOCK_LOOP(b, nb) {
        MGE_SHARED long long s_cur, s_sel, s_cnt;
        MGE_SHARED int s_stop;
        unsigned long long* rem = removed + b * words;
        MGE_THREADS { MGE_THREAD_IDS
            for (long long w = tid; w < words; w += blockDim.x) rem[w] = 0;
            if (tid == 0) { s_cur = 0; s_cnt = 0; }
        }
        MGE_SYNC
        for (;;) {
            MGE_THREADS { MGE_THREAD_IDS
                if (tid == 0) {
                    long long j = s_cur;
                    while (j < n && ((rem[j >> 6] >> (j & 63)) & 1ULL)) ++j;
                    if (j >= n || s_cnt >= max_out) s_stop = 1;
                    else {
                        s_stop = 0; idx[b * max_out + s_cnt] = (int)j;
                        s_cnt += 1; s_sel = j; s_cur = j + 1;
                    }
                }
            }
            MGE_SYNC
            if (s_stop) break;
            MGE_THREADS { MGE_THREAD_IDS
                const unsigned long long* row = mask + (b * n + s_sel) * words;
                for (long long w = tid; w < words; w += blockDim.x) rem[w] |= row[w];
            }
            MGE_SYNC
        }
        MGE_THREADS { MGE_THREAD_IDS
            for (long long c = s_cnt + tid; c < max_out; c += blockDim.x) idx[b * max_out + c] = 0;
            if (tid == 0) cnt[b] = (int)s_cnt;
        }
        MGE_SYNC
    }
}
#endif /* MGE_DET_NMS */
"""

# -- correlation ----------------------------------------------------------------------------------

_CORR = r"""#ifndef MGE_DET_CORR
#define MGE_DET_CORR
struct mge_det_corr {
    long long N, C, H, W, OH, OW;
    int ks, md, s1, s2, pad, mult, border, rad, gw;
};
template <class X> MGE_FN double mge_det_at(const X* plane, long long H, long long W, long long y,
                                           long long x) {
    return (y >= 0 && y < H && x >= 0 && x < W) ? mge_det_ld(plane, y * W + x) : 0.0;
}
template <class X> MGE_FN void mge_det_corr_fwd(X* out, const X* a, const X* b, mge_det_corr g) {
    long long D = (long long)g.gw * g.gw, total = g.N * D * g.OH * g.OW;
    int kr = (g.ks - 1) / 2;
    double norm = (double)((long long)g.ks * g.ks * g.C);
    MGE_GRID_LOOP(e, total) {
        long long j = e % g.OW, i = (e / g.OW) % g.OH, d = (e / (g.OW * g.OH)) % D;
        long long n = e / (g.OW * g.OH * D);
        long long dyy = (d / g.gw - g.rad) * g.s2, dxx = (d % g.gw - g.rad) * g.s2;
        double acc = 0.0;
        for (int ky = -kr; ky <= kr; ++ky)
        for (int kx = -kr; kx <= kr; ++kx) {
            long long y1 = g.border + ky + i * g.s1 - g.pad, x1 = g.border + kx + j * g.s1 - g.pad;
            double ws = 0.0;
            for (long long c = 0; c < g.C; ++c) {
                const X* pa = a + (n * g.C + c) * g.H * g.W;
                const X* pb = b + (n * g.C + c) * g.H * g.W;
                double va = mge_det_at(pa, g.H, g.W, y1, x1);
                double vb = mge_det_at(pb, g.H, g.W, y1 + dyy, x1 + dxx);
                ws += g.mult ? va * vb : fabs(va - vb);
            }
            acc += ws;
        }
        mge_det_st(out, e, acc / norm);
    }
}
MGE_FN double mge_det_sign(double v) { return v > 0 ? 1.0 : (v < 0 ? -1.0 : (v == 0 ? 0.0 : v)); }
/* the gradient of input `which` (0: a, 1: b): a thread per element of it */
template <class X> MGE_FN void mge_det_corr_bwd(X* d, const X* a, const X* b, const X* dy,
                                               mge_det_corr g, int which) {
    long long D = (long long)g.gw * g.gw, total = g.N * g.C * g.H * g.W;
    int kr = (g.ks - 1) / 2;
    double norm = (double)((long long)g.ks * g.ks * g.C);
    MGE_GRID_LOOP(e, total) {
        long long xx = e % g.W, yy = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C;
        long long n = e / (g.W * g.H * g.C);
        const X* pa = a + (n * g.C + c) * g.H * g.W;
        const X* pb = b + (n * g.C + c) * g.H * g.W;
        double self = mge_det_ld(which ? pb : pa, yy * g.W + xx);
        double acc = 0.0;
        for (long long dd = 0; dd < D; ++dd) {
            long long dyy = (dd / g.gw - g.rad) * g.s2, dxx = (dd % g.gw - g.rad) * g.s2;
            long long sy = which ? -dyy : 0, sx = which ? -dxx : 0;  /* this element's offset */
            for (int ky = -kr; ky <= kr; ++ky) {
                long long r = yy + g.pad + sy - g.border - ky;
                if (r < 0 || r % g.s1 || r / g.s1 >= g.OH) continue;
                long long i = r / g.s1;
                for (int kx = -kr; kx <= kr; ++kx) {
                    long long q = xx + g.pad + sx - g.border - kx;
                    if (q < 0 || q % g.s1 || q / g.s1 >= g.OW) continue;
                    long long j = q / g.s1;
                    double gk = mge_det_ld(dy, ((n * D + dd) * g.OH + i) * g.OW + j) / norm;
                    double other = which ? mge_det_at(pa, g.H, g.W, yy - dyy, xx - dxx)
                                         : mge_det_at(pb, g.H, g.W, yy + dyy, xx + dxx);
                    if (g.mult) acc += gk * other;
                    else if (which) acc += gk * mge_det_sign(other - self) * -1.0;
                    else acc += gk * mge_det_sign(self - other);
                }
            }
        }
        mge_det_st(d, e, acc);
    }
}
#endif /* MGE_DET_CORR */
"""

# -- CTC loss -------------------------------------------------------------------------------------

_CTC = r"""#ifndef MGE_DET_CTC
#define MGE_DET_CTC
struct mge_det_ctc_args {
    long long T, N, C, S, L;
    long long blank;
    int label_code, plen_code, llen_code;
};
/* a block per batch item; ws arrays: ext, nxt (L), alpha (T L), beta (2 L), occ (L) per item */
template <class P> MGE_FN void mge_det_ctc(P* loss, P* grad, const P* pred, const void* plen,
                                          const void* label, const void* llen, long long* ext_ws,
                                          long long* nxt_ws, double* alpha_ws, double* beta_ws,
                                          double* occ_ws, double* ll_ws, long long* err,
                                          mge_det_ctc_args g) {
    const double tiny = 1.1754943508222875e-38, log_tiny = @LOG_TINY@;
    const long long T = g.T, N = g.N, C = g.C, L = g.L;
    MGE_BLOCK_LOOP(n, N) {
        long long* ext = ext_ws + n * L;
        long long* nxt = nxt_ws + n * L;
        double* alpha = alpha_ws + n * T * L;
        double* beta = beta_ws + n * 2 * L;
        double* occ = occ_ws + n * L;
        MGE_SHARED long long s_last, s_e0, s_e1;
        MGE_THREADS { MGE_THREAD_IDS
            long long ll2 = 2 * mge_det_int(llen, n, g.llen_code);
            for (long long s = tid; s < L; s += blockDim.x) {
                long long v = g.blank;
                if ((s & 1) && s <= ll2) {
                    v = mge_det_int(label, n * g.S + (s - 1) / 2, g.label_code);
                    if (v < -C || v >= C) { mge_det_flag(err, n * L + s); v = g.blank; }
                    else if (v < 0) v += C;
                }
                ext[s] = v;
            }
            if (tid == 0) {
                long long last = mge_det_int(plen, n, g.plen_code) - 1;
                if (last < -T || last >= T) { mge_det_flag(err + 1, n); last = T - 1; }
                long long e0 = ll2, e1 = ll2 - 1;
                if (e0 < -L || e0 >= L) { mge_det_flag(err + 2, n); e0 = L - 1; e1 = L - 2; }
                if (e0 < 0) e0 += L;
                if (e1 < 0) e1 += L;
                s_last = last; s_e0 = e0; s_e1 = e1;
            }
        }
        MGE_SYNC
        /* the chain of states of one class: nxt[s] the next state of ext[s]'s class (-1: none),
           -3 - that for a class's first state */
        MGE_THREADS { MGE_THREAD_IDS
            for (long long s = tid; s < L; s += blockDim.x) {
                long long nx = -1;
                for (long long r = s + 1; r < L; ++r) if (ext[r] == ext[s]) { nx = r; break; }
                int first = 1;
                for (long long r = 0; r < s; ++r) if (ext[r] == ext[s]) { first = 0; break; }
                nxt[s] = first ? -3 - nx : nx;
            }
            for (long long s = tid; s < L; s += blockDim.x) {
                double p = mge_det_ld(pred, n * C + ext[s]);
                alpha[s] = s < 2 ? log(mge_det_max<double>(p, tiny)) : log_tiny;
            }
        }
        MGE_SYNC
        for (long long t = 1; t < T; ++t) {
            MGE_THREADS { MGE_THREAD_IDS
                const double* a = alpha + (t - 1) * L;
                for (long long s = tid; s < L; s += blockDim.x) {
                    double b = mge_det_logaddexp(a[s], s >= 1 ? a[s - 1] : -MGE_INF_D);
                    if (s >= 2 && ext[s] != ext[s - 2]) b = mge_det_logaddexp(b, a[s - 2]);
                    double p = mge_det_ld(pred, (t * N + n) * C + ext[s]);
                    alpha[t * L + s] = b + log(mge_det_max<double>(p, tiny));
                }
            }
            MGE_SYNC
        }
        MGE_THREADS { MGE_THREAD_IDS
            if (tid == 0) {
                long long lw = s_last < 0 ? s_last + T : s_last;
                double ll = mge_det_logaddexp(alpha[lw * L + s_e0], alpha[lw * L + s_e1]);
                ll_ws[n] = ll;
                mge_det_st(loss, n, -ll);
            }
        }
        MGE_SYNC
        for (long long t = T - 1; t >= 0; --t) {
            MGE_THREADS { MGE_THREAD_IDS
                const double* old = beta + ((t + 1) & 1) * L;
                double* cur = beta + (t & 1) * L;
                const double ll = ll_ws[n];
                const long long last = mge_det_int(plen, n, g.plen_code) - 1;
                for (long long s = tid; s < L; s += blockDim.x) {
                    double bv;
                    if (t == last) bv = (s == s_e0 || s == s_e1) ? 0.0 : -MGE_INF_D;
                    else if (t < last) {
                        double gs[3];
                        for (int d = 0; d < 3; ++d) {
                            long long r = s + d;
                            gs[d] = -MGE_INF_D;
                            if (r < L && (d < 2 || ext[r] != ext[r - 2])) {
                                double p = mge_det_ld(pred, ((t + 1) * N + n) * C + ext[r]);
                                gs[d] = old[r] + log(mge_det_max<double>(p, tiny));
                            }
                        }
                        bv = mge_det_logaddexp(mge_det_logaddexp(gs[0], gs[1]), gs[2]);
                    } else bv = -MGE_INF_D;
                    cur[s] = bv;
                    occ[s] = (t == 0 && s >= 2) ? 0.0 : exp(alpha[t * L + s] + bv - ll);
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                for (long long c = tid; c < C; c += blockDim.x) {
                    long long o = (t * N + n) * C + c;
                    double p = mge_det_ld(pred, o);
                    mge_det_st(grad, o, p >= tiny ? -0.0 / mge_det_max<double>(p, tiny) : 0.0);
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                for (long long s = tid; s < L; s += blockDim.x) {
                    if (nxt[s] > -2) continue;
                    double sum = 0.0;
                    for (long long r = s; r >= 0; r = nxt[r] <= -2 ? -3 - nxt[r] : nxt[r])
                        sum += occ[r];
                    long long o = (t * N + n) * C + ext[s];
                    double p = mge_det_ld(pred, o);
                    mge_det_st(grad, o, p >= tiny ? -sum / mge_det_max<double>(p, tiny) : 0.0);
                }
            }
            MGE_SYNC
        }
    }
}
#endif /* MGE_DET_CTC */
""".replace("@LOG_TINY@", repr(_LOG_TINY))


# -- kernels --------------------------------------------------------------------------------------

def _kernel(name, piece, params, template, targs, call_args):
    """A ``KernelSource``: ``extern "C"`` ``name`` calling ``template<targs>(call_args)``."""
    targ = f"<{', '.join(targs)}>" if targs else ""
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    {template}{targ}({', '.join(call_args)});\n}}\n")
    return KernelSource(name, _PARTS + (piece, (name, text)), tuple(params), False, 64, 0)


def _float(op, what, d, ins=()):
    d = np.dtype(d)
    if d not in FLOAT_DTYPES:
        raise _fail(TypeError, op, f"{what} must be float16, float32 or float64, got {d}", ins)
    return d


def _describe(ins):
    return ", ".join(f"{x.dtype} {x.shape}" for x in ins) or "none"


def _fail(exc, op, message, ins=()):
    name = op if isinstance(op, str) else op.name
    return exc(f"CUDA {name}: {message} (inputs: {_describe(ins)})")


_ROI_PIECE = ("MGE_DET_ROI", _ROI)


@functools.lru_cache(maxsize=None)
def roi_batch_kernel(rois_dtype):
    """The kernel of each RoI's batch index (and the check of its range)."""
    r = np.dtype(rois_dtype)
    return _kernel(f"mge_det_roi_batch_{_CODE[r]}", _ROI_PIECE,
                   [f"const {_STORAGE[r]}* rois", "long long K", "long long N", "long long* bidx",
                    "long long* err"], "mge_det_roi_batch", [_STORAGE[r]],
                   ["rois", "K", "N", "bidx", "err"])


@functools.lru_cache(maxsize=None)
def roi_align_kernel(x_dtype, rois_dtype):
    """``ROIAlign``'s forward kernel (``out`` may be NULL: the arg-max indices only)."""
    x, r = np.dtype(x_dtype), np.dtype(rois_dtype)
    return _kernel(f"mge_det_roi_align_{_CODE[x]}_{_CODE[r]}", _ROI_PIECE,
                   [f"{_STORAGE[x]}* out", "int* idx", f"const {_STORAGE[x]}* x",
                    f"const {_STORAGE[r]}* rois", "const long long* bidx", "mge_det_align g"],
                   "mge_det_roi_align", [_STORAGE[x], _STORAGE[r]],
                   ["out", "idx", "x", "rois", "bidx", "g"])


@functools.lru_cache(maxsize=None)
def roi_align_backward_kernel(x_dtype, rois_dtype):
    """``ROIAlign``'s input gradient."""
    x, r = np.dtype(x_dtype), np.dtype(rois_dtype)
    return _kernel(f"mge_det_roi_align_bwd_{_CODE[x]}_{_CODE[r]}", _ROI_PIECE,
                   [f"{_STORAGE[x]}* dx", f"const {_STORAGE[x]}* dy", f"const {_STORAGE[r]}* rois",
                    "const long long* bidx", "const int* idx", "mge_det_align g"],
                   "mge_det_roi_align_bwd", [_STORAGE[x], _STORAGE[r]],
                   ["dx", "dy", "rois", "bidx", "idx", "g"])


@functools.lru_cache(maxsize=None)
def roi_pooling_kernel(x_dtype, rois_dtype):
    """``ROIPooling``'s forward kernel (``out`` may be NULL: the arg-max indices only)."""
    x, r = np.dtype(x_dtype), np.dtype(rois_dtype)
    return _kernel(f"mge_det_roi_pool_{_CODE[x]}_{_CODE[r]}", _ROI_PIECE,
                   [f"{_STORAGE[x]}* out", "int* idx", f"const {_STORAGE[x]}* x",
                    f"const {_STORAGE[r]}* rois", "const long long* bidx", "mge_det_pool g"],
                   "mge_det_roi_pool", [_STORAGE[x], _STORAGE[r]],
                   ["out", "idx", "x", "rois", "bidx", "g"])


@functools.lru_cache(maxsize=None)
def roi_pooling_backward_kernel(x_dtype, rois_dtype):
    """``ROIPooling``'s input gradient."""
    x, r = np.dtype(x_dtype), np.dtype(rois_dtype)
    return _kernel(f"mge_det_roi_pool_bwd_{_CODE[x]}_{_CODE[r]}", _ROI_PIECE,
                   [f"{_STORAGE[x]}* dx", f"const {_STORAGE[x]}* dy", f"const {_STORAGE[r]}* rois",
                    "const long long* bidx", "const int* idx", "mge_det_pool g"],
                   "mge_det_roi_pool_bwd", [_STORAGE[x], _STORAGE[r]],
                   ["dx", "dy", "rois", "bidx", "idx", "g"])


@functools.lru_cache(maxsize=None)
def nms_kernels(boxes_dtype):
    """``{"mask": ..., "scan": ...}``: NMSKeep's two kernels."""
    b = np.dtype(boxes_dtype)
    piece = ("MGE_DET_NMS", _NMS)
    mask = _kernel(f"mge_det_nms_mask_{_CODE[b]}", piece,
                   [f"const {_STORAGE[b]}* boxes", "long long n", "long long words",
                    "float thresh", "unsigned long long* mask"], "mge_det_nms_mask",
                   [_STORAGE[b]], ["boxes", "n", "words", "thresh", "mask"])
    scan = _kernel("mge_det_nms_scan", piece,
                   ["const unsigned long long* mask", "long long nb", "long long n",
                    "long long words", "long long max_out", "int* idx", "int* cnt",
                    "unsigned long long* removed"], "mge_det_nms_scan_block", [],
                   ["mask", "nb", "n", "words", "max_out", "idx", "cnt", "removed"])
    return {"mask": mask, "scan": scan}


@functools.lru_cache(maxsize=None)
def correlation_kernel(dtype):
    """``Correlation``'s forward kernel."""
    d = np.dtype(dtype)
    s = _STORAGE[d]
    return _kernel(f"mge_det_corr_{_CODE[d]}", ("MGE_DET_CORR", _CORR),
                   [f"{s}* out", f"const {s}* a", f"const {s}* b", "mge_det_corr g"],
                   "mge_det_corr_fwd", [s], ["out", "a", "b", "g"])


@functools.lru_cache(maxsize=None)
def correlation_backward_kernel(dtype):
    """``Correlation``'s gradient of input ``which`` (0 or 1, a parameter)."""
    d = np.dtype(dtype)
    s = _STORAGE[d]
    return _kernel(f"mge_det_corr_bwd_{_CODE[d]}", ("MGE_DET_CORR", _CORR),
                   [f"{s}* d", f"const {s}* a", f"const {s}* b", f"const {s}* dy",
                    "mge_det_corr g", "int which"], "mge_det_corr_bwd", [s],
                   ["d", "a", "b", "dy", "g", "which"])


@functools.lru_cache(maxsize=None)
def ctc_kernel(dtype):
    """``CTCLoss``'s kernel (loss and gradient) for ``pred`` of ``dtype``."""
    d = np.dtype(dtype)
    s = _STORAGE[d]
    return _kernel(f"mge_det_ctc_{_CODE[d]}", ("MGE_DET_CTC", _CTC),
                   [f"{s}* loss", f"{s}* grad", f"const {s}* pred", "const void* plen",
                    "const void* label", "const void* llen", "long long* ext", "long long* nxt",
                    "double* alpha", "double* beta", "double* occ", "double* ll",
                    "long long* err", "mge_det_ctc_args g"], "mge_det_ctc", [s],
                   ["loss", "grad", "pred", "plen", "label", "llen", "ext", "nxt", "alpha",
                    "beta", "occ", "ll", "err", "g"])


# -- structs --------------------------------------------------------------------------------------

def _struct(fields, values):
    dt = np.dtype(fields, align=True)
    v = np.zeros((), dt)
    for (name, _), val in zip(fields, values):
        v[name] = val
    return v[()]


_ALIGN_FIELDS = [(k, np.int64) for k in ("N", "K", "C", "H", "W", "PH", "PW", "SH", "SW")] + \
    [("scale", np.float64), ("offset", np.float64), ("max_mode", np.int32)]
_POOL_FIELDS = [(k, np.int64) for k in ("N", "K", "C", "H", "W", "PH", "PW")] + \
    [("scale", np.float64), ("max_mode", np.int32)]
_CORR_FIELDS = [(k, np.int64) for k in ("N", "C", "H", "W", "OH", "OW")] + \
    [(k, np.int32) for k in ("ks", "md", "s1", "s2", "pad", "mult", "border", "rad", "gw")]
_CTC_FIELDS = [(k, np.int64) for k in ("T", "N", "C", "S", "L", "blank")] + \
    [(k, np.int32) for k in ("label_code", "plen_code", "llen_code")]


# -- plans ----------------------------------------------------------------------------------------

def _rule(op, ins, outs, n):
    if len(ins) != n:
        raise _fail(TypeError, op, f"{len(ins)} input(s), the plan takes {n}", ins)
    descs = INFER[type(op)](op, [TensorDesc(x.shape, x.dtype) for x in ins])
    want = [(tuple(d.shape), np.dtype(d.dtype)) for d in descs]
    got = [(tuple(o.shape), o.dtype) for o in outs]
    if got != want:
        raise _fail(ValueError, op, f"outputs {got} are not the rule's {want}", ins)
    return descs


def _i64(v):
    return np.int64(v)


def _roi_batch(op, x, rois, ws, steps):
    """The batch-index pass (appended to ``steps``): ``(bidx Buf, check)``."""
    k = rois.shape[0]
    bidx = ws.add(8 * k)
    err = ws.add(8)
    steps.append(Launch(roi_batch_kernel(rois.dtype), grid_for(k), (THREADS, 1, 1),
                        (Buf("in1"), _i64(k), _i64(x.shape[0]), bidx, err)))
    n, itemsize, rdt = x.shape[0], rois.dtype.itemsize, rois.dtype

    def error(value, read):
        i = _LLONG_MAX - int(value)
        v = read(Buf("in1", i * 5 * itemsize), rdt, 1).astype(np.float64)
        with np.errstate(invalid="ignore"):
            b = int(v.astype(np.int64)[0])
        return IndexError(f"index {b} is out of bounds for axis 0 with size {n}")
    return bidx, Check(err, error, np.dtype(np.int64))


def _roi_dtypes(op, ins):
    x, rois = ins[0], ins[1]
    return _float(op, "the input", x.dtype, ins), _float(op, "rois", rois.dtype, ins)


def roi_align_plan(op, ins, outs):
    """``ROIAlign``: ``in0`` (x, NCHW), ``in1`` (rois ``(K, 5)``) -> ``out0`` (pooled),
    ``out1`` (int32 arg-max sample, ``-1`` in average mode); a ``Check`` for a batch index."""
    _rule(op, ins, outs, 2)
    x, rois = ins
    xd, rd = _roi_dtypes(op, ins)
    if not outs[0].size:
        return Plan(())
    ws, steps = Workspace(), []
    bidx, check = _roi_batch(op, x, rois, ws, steps)
    g = _align_struct(op, x, rois)
    steps.append(Launch(roi_align_kernel(xd, rd), grid_for(outs[0].size), (THREADS, 1, 1),
                        (Buf("out0"), Buf("out1"), Buf("in0"), Buf("in1"), bidx, g)))
    return Plan(tuple(steps), ws.size, (check,))


def _align_struct(op, x, rois):
    n, c, h, w = x.shape
    return _struct(_ALIGN_FIELDS, (n, rois.shape[0], c, h, w, op.pooled_height, op.pooled_width,
                                   op.sample_height, op.sample_width, op.spatial_scale,
                                   op.offset, int(op.mode == "max")))


def _pool_struct(op, x, rois):
    n, c, h, w = x.shape
    return _struct(_POOL_FIELDS, (n, rois.shape[0], c, h, w, op.out_shape[0], op.out_shape[1],
                                  float(np.float32(op.scale)), int(op.mode == "max")))


def roi_pooling_plan(op, ins, outs):
    """``ROIPooling``: ``in0`` (x), ``in1`` (rois) -> ``out0`` (pooled), ``out1`` (int32 flat
    arg-max, ``-1`` for an empty bin in max mode, 0 in average mode); a ``Check`` for a batch
    index."""
    _rule(op, ins, outs, 2)
    x, rois = ins
    xd, rd = _roi_dtypes(op, ins)
    if not outs[0].size:
        return Plan(())
    ws, steps = Workspace(), []
    bidx, check = _roi_batch(op, x, rois, ws, steps)
    steps.append(Launch(roi_pooling_kernel(xd, rd), grid_for(outs[0].size), (THREADS, 1, 1),
                        (Buf("out0"), Buf("out1"), Buf("in0"), Buf("in1"), bidx,
                         _pool_struct(op, x, rois))))
    return Plan(tuple(steps), ws.size, (check,))


def _roi_backward_plan(op, ins, outs):
    f = op.forward
    x, rois, dy = ins
    xd, rd = _roi_dtypes(f, ins[:2])
    if dy.dtype != xd:
        raise _fail(TypeError, op, f"the output gradient ({dy.dtype}) must have the input's "
                    f"dtype {xd}", ins)
    k = rois.shape[0]
    pooled = (f.pooled_height, f.pooled_width) if isinstance(f, ROIAlign) else f.out_shape
    if tuple(dy.shape) != (k, x.shape[1]) + tuple(pooled):
        raise _fail(ValueError, op, f"the output gradient must have shape "
                    f"{(k, x.shape[1]) + tuple(pooled)}", ins)
    if not x.size:
        return Plan(())
    if not k:  # nothing pooled: a zero gradient
        return Plan((_zero(outs[0]),))
    ws, steps = Workspace(), []
    bidx, check = _roi_batch(f, x, rois, ws, steps)
    if isinstance(f, ROIAlign):
        g = _align_struct(f, x, rois)
        fwd, bwd = roi_align_kernel(xd, rd), roi_align_backward_kernel(xd, rd)
    else:
        g = _pool_struct(f, x, rois)
        fwd, bwd = roi_pooling_kernel(xd, rd), roi_pooling_backward_kernel(xd, rd)
    idx = None
    if f.mode == "max" and dy.size:
        idx = ws.add(4 * dy.size)
        steps.append(Launch(fwd, grid_for(dy.size), (THREADS, 1, 1),
                            (None, idx, Buf("in0"), Buf("in1"), bidx, g)))
    steps.append(Launch(bwd, grid_for(x.size), (THREADS, 1, 1),
                        (Buf("out0"), Buf("in2"), Buf("in1"), bidx, idx, g)))
    return Plan(tuple(steps), ws.size, (check,))


def _zero(layout):
    return Memset(Buf("out0"), layout.size * layout.dtype.itemsize, 0)


def nms_plan(op, ins, outs):
    """``NMSKeep``: ``in0`` (boxes ``(B, N, 4)`` sorted by score) -> ``out0`` (int32 ``(B,
    max_output)`` kept indices, zero-padded), ``out1`` (int32 ``(B,)`` counts)."""
    _rule(op, ins, outs, 1)
    boxes, = ins
    bd = _float(op, "boxes", boxes.dtype, ins)
    if op.max_output < 1:
        raise _fail(ValueError, op, f"max_output must be >= 1, got {op.max_output}", ins)
    nb, n, _ = boxes.shape
    if not nb:
        return Plan(())
    if not n:
        return Plan((Memset(Buf("out0"), outs[0].size * 4, 0), Memset(Buf("out1"), nb * 4, 0)))
    words = -(-n // NMS_TILE)
    if words > 65535 or nb > 65535:
        raise _fail(ValueError, op, f"at most {65535 * NMS_TILE} boxes and 65535 batch items "
                    f"per launch, got {boxes.shape}", ins)
    ks = nms_kernels(bd)
    ws = Workspace()
    mask = ws.add(8 * nb * n * words)
    removed = ws.add(8 * nb * words)
    steps = (Launch(ks["mask"], (words, words, nb), (NMS_TILE, 1, 1),
                    (Buf("in0"), _i64(n), _i64(words), np.float32(op.iou_thresh), mask)),
             Launch(ks["scan"], (min(nb, 65535), 1, 1), (THREADS, 1, 1),
                    (mask, _i64(nb), _i64(n), _i64(words), _i64(op.max_output), Buf("out0"),
                     Buf("out1"), removed)))
    return Plan(steps, ws.size, notes=(f"{words}x{words} mask tiles per batch item",))


def _corr_struct(op, a):
    n, c, h, w = a.shape
    oh, ow, border, rad, gw = op.geometry(h, w)
    return _struct(_CORR_FIELDS, (n, c, h, w, oh, ow, op.kernel_size, op.max_displacement,
                                  op.stride1, op.stride2, op.pad_size, int(op.is_multiply),
                                  border, rad, gw))


def _corr_check(op, ins):
    a, b = ins[0], ins[1]
    d = _float(op, "data1", a.dtype, ins)
    if b.dtype != d:
        raise _fail(TypeError, op, f"data1 ({d}) and data2 ({b.dtype}) must have one dtype", ins)
    if op.kernel_size < 1 or op.stride1 < 1 or op.stride2 < 1:
        raise _fail(ValueError, op, "kernel_size, stride1 and stride2 must be >= 1", ins)
    return d


def correlation_plan(op, ins, outs):
    """``Correlation``: ``in0``, ``in1`` (NCHW, one shape) -> ``out0`` ``(N, D, OH, OW)``."""
    _rule(op, ins, outs, 2)
    d = _corr_check(op, ins)
    if not outs[0].size:
        return Plan(())
    return Plan((Launch(correlation_kernel(d), grid_for(outs[0].size), (THREADS, 1, 1),
                        (Buf("out0"), Buf("in0"), Buf("in1"), _corr_struct(op, ins[0]))),))


def _corr_backward_plan(op, ins, outs):
    f = op.forward
    d = _corr_check(f, ins)
    a, _, dy = ins
    oh, ow, _, _, gw = f.geometry(a.shape[2], a.shape[3])
    want = (a.shape[0], gw * gw, oh, ow)
    if tuple(dy.shape) != want or dy.dtype != d:
        raise _fail(ValueError, op, f"the output gradient must be {d} {want}", ins)
    if not a.size:
        return Plan(())
    return Plan((Launch(correlation_backward_kernel(d), grid_for(a.size), (THREADS, 1, 1),
                        (Buf("out0"), Buf("in0"), Buf("in1"), Buf("in2"), _corr_struct(f, a),
                         np.int32(op.index))),))


def vision_backward_plan(op, ins, outs):
    """``VisionBackward`` of ``ROIAlign`` / ``ROIPooling`` (input 0: ``(x, rois, dy)`` ->
    ``dx``) and of ``Correlation`` (input 0 or 1: ``(a, b, dy)`` -> its gradient); the other
    forward ops are ``image.py``'s: its plan, registered after this one (families register in
    name order), hands these three here (imports run one way, image -> detection)."""
    f = op.forward
    if isinstance(f, (ROIAlign, ROIPooling, Correlation)):
        if len(ins) != 3:
            raise _fail(TypeError, op, f"{len(ins)} input(s), the plan takes 3", ins)
        if len(outs) != 1 or tuple(outs[0].shape) != tuple(ins[op.index].shape) or \
                outs[0].dtype != ins[op.index].dtype:
            raise _fail(ValueError, op, f"the output must be input {op.index}'s "
                        f"{ins[op.index].dtype} {ins[op.index].shape}", ins)
    if isinstance(f, (ROIAlign, ROIPooling)):
        if op.index != 0:
            raise _fail(NotImplementedError, op, f"no gradient of {f.name}'s input {op.index}",
                        ins)
        return _roi_backward_plan(op, ins, outs)
    if isinstance(f, Correlation):
        if op.index not in (0, 1):
            raise _fail(ValueError, op, f"input index {op.index} of Correlation", ins)
        return _corr_backward_plan(op, ins, outs)
    raise NotImplementedError(f"VisionBackward of {f.name} has no CUDA kernel yet (detection.py "
                              f"covers ROIAlign, ROIPooling and Correlation)")


def _int_code(op, what, d, ins):
    d = np.dtype(d)
    if d not in _INT_CODE:
        raise _fail(TypeError, op, f"{what} must be an integer or bool dtype, got {d}", ins)
    return _INT_CODE[d]


def ctc_loss_plan(op, ins, outs):
    """``CTCLoss``: ``in0`` (pred ``(T, N, C)`` probabilities), ``in1`` (pred_lengths),
    ``in2`` (labels ``(N, S)``), ``in3`` (label_lengths) -> ``out0`` (loss ``(N,)``),
    ``out1`` (its gradient w.r.t. pred); ``Check``s for a label, a pred length and a label length
    the CPU kernel cannot index with (its ``IndexError``s)."""
    _rule(op, ins, outs, 4)
    pred, plen, label, llen = ins
    d = _float(op, "pred", pred.dtype, ins)
    t, n, c = pred.shape
    s = label.shape[1]
    codes = [_int_code(op, w, a.dtype, ins) for w, a in
             (("label", label), ("pred_lengths", plen), ("label_lengths", llen))]
    if plen.size != n or llen.size != n:
        raise _fail(ValueError, op, f"pred_lengths and label_lengths must have {n} elements", ins)
    if not n:
        return Plan(())
    if not t:
        raise _fail(ValueError, op, "pred has no time steps", ins)
    big_l = 2 * s + 1
    ws = Workspace()
    ext, nxt = ws.add(8 * n * big_l), ws.add(8 * n * big_l)
    alpha = ws.add(8 * n * t * big_l)
    beta, occ, ll = ws.add(16 * n * big_l), ws.add(8 * n * big_l), ws.add(8 * n)
    err = ws.add(24)
    g = _struct(_CTC_FIELDS, (t, n, c, s, big_l, op.blank, *codes))
    step = Launch(ctc_kernel(d), (min(n, 65535), 1, 1), (THREADS, 1, 1),
                  (Buf("out0"), Buf("out1"), Buf("in0"), Buf("in1"), Buf("in2"), Buf("in3"),
                   ext, nxt, alpha, beta, occ, ll, err, g))
    ldt, pdt, lldt = label.dtype, plen.dtype, llen.dtype

    def label_error(value, read):
        i = _LLONG_MAX - int(value)
        k, pos = divmod(i, big_l)
        v = int(read(Buf("in2", (k * s + (pos - 1) // 2) * ldt.itemsize), ldt, 1)[0])
        return IndexError(f"index {v} is out of bounds for axis 2 with size {c}")

    def plen_error(value, read):
        k = _LLONG_MAX - int(value)
        v = int(read(Buf("in1", k * pdt.itemsize), pdt, 1).astype(np.int64)[0]) - 1
        return IndexError(f"index {v} is out of bounds for axis 0 with size {t}")

    def llen_error(value, read):
        k = _LLONG_MAX - int(value)
        v = 2 * int(read(Buf("in3", k * lldt.itemsize), lldt, 1).astype(np.int64)[0])
        return IndexError(f"index {v} is out of bounds for axis 2 with size {big_l}")

    checks = (Check(err, label_error, np.dtype(np.int64)),
              Check(err + 8, plen_error, np.dtype(np.int64)),
              Check(err + 16, llen_error, np.dtype(np.int64)))
    return Plan((step,), ws.size, checks,
                notes=(f"a block per batch item over {big_l} states, {t} steps",))


#: op class -> plan function (``launch.py``'s format).
PLANS = {ROIAlign: roi_align_plan, ROIPooling: roi_pooling_plan, NMSKeep: nms_plan,
         Correlation: correlation_plan, VisionBackward: vision_backward_plan,
         CTCLoss: ctc_loss_plan}
#: No plan reads input strides: the device makes inputs dense first.
STRIDED = frozenset()
