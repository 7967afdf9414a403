"""CUDA C for ``BatchNorm``, ``BatchNormBackward``, ``LayerNorm`` and ``LayerNormBackward``, and
the launch plans (``launch.py``'s one format) the CUDA device follows to run them.

Like ``elemwise.py`` this only makes text (and plans); NVRTC compiles it, and the same text
builds as host C++ under g++ for the tests.  Each algorithm is written once as a C++ template
over its storage types and the type it computes in (float for float16 and float32 data, double
for float64, as the CPU kernels do); a kernel is an ``extern "C"`` entry per dtype signature that
instantiates it (``mge_bn_stats_f32_f32``...).  The dtypes are float16, float32 and float64, each
input with its own (the CPU kernels convert every parameter to the computing type).

**Thread decomposition.**  ``x`` of ``BatchNorm`` is seen as ``(N, C, S)`` (``S`` the spatial
size); each channel reduces ``m = N * S`` elements.  A numerically sound two-level reduction:

1. ``*_partial``: the channel's ``m`` elements are cut into ``P`` chunks; a block per (channel,
   chunk) -- ``C * P`` blocks of up to ``NTHREADS`` threads -- walks its chunk with consecutive
   threads on consecutive elements (coalesced along ``S``), each thread keeping a Welford
   (count, mean, M2) triple (forward) or plain sums (backward); a shared-memory tree (Chan et
   al.'s pairwise combination) gives the block's result, written to the workspace;
2. ``*_final``: a block per channel combines its ``P`` partials the same way and writes the
   statistics (outputs and, in the computing type, the workspace);
3. ``*_apply``: a grid-stride elementwise pass writes ``y`` (or ``dx``) from the workspace.

No atomics: the result is the same at every launch.  ``P`` grows with ``m`` until about
``TARGET_BLOCKS`` blocks are in flight (``_chunks``).

``LayerNorm`` normalises rows: ``x`` is ``(O, M, I)`` (the axes before, in and after
``[axis_start, axis_end)``) and each of the ``R = O * I`` rows reduces ``M`` elements: a block
per row (grid-stride over rows) does Welford + tree and then writes the row's ``y`` in the same
kernel.  ``LayerNormBackward``: a block per row for ``dx`` (two sums per row); with ``affine``,
``dweight``/``dbias`` are column sums over the ``R`` rows: ``ln_bwd_cols_partial`` gives each
thread one column (consecutive threads, consecutive columns: coalesced when ``I == 1``) and a
chunk of rows, ``ln_bwd_cols_final`` adds a column's chunks in order.

**The host build's emulation.**  A kernel never keeps a thread's local variables across a
barrier: every value that crosses one is in shared memory.  So a block is a sequence of phases
between barriers written with ``block.py``'s macros (the one block prelude of every family):
``MGE_THREADS { const unsigned t = threadIdx.x; ... }`` is one phase (on the host a serial loop
over the emulated block's threads), ``MGE_SYNC`` a barrier, ``MGE_BLOCK_LOOP(r, n)`` walks ``r =
blockIdx.x, + gridDim.x, ...`` (host: every emulated block in turn) and ``MGE_GRID_LOOP(i, n)``
is the grid-stride loop over the emulated blocks and threads.  The runner sets the launch shape
with ``mge_host_launch`` before each call, so the plans' very grids and blocks run on the host;
``__shared__`` arrays (``MGE_SHARED``) are ``static`` there (one emulated block at a time).

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` (``ins``/``outs``: ``launch.Layout``s) returns a
``launch.Plan``: ``Launch``es in stream order on 1-D grids and blocks (static shared memory only:
``shared_bytes`` 0), their pointers ``Buf("in0")``..., ``Buf("out0")``... and workspace arrays
(``launch.Workspace``: BatchNorm's partial triples/sums and per-channel ``mean``/``scale``, or
LayerNormBackward's column partials), scalars of each parameter's exact C type.  A plan first
runs the op's own shape/dtype rule on ``ins`` (its errors name the op, shapes and dtypes) and
checks that ``outs`` are what the rule gives; an unsupported dtype is a ``TypeError`` naming the
op and the dtypes.  The kernels find nothing wrong with data, so no plan has ``checks``.

``STRIDED`` is empty: every kernel indexes its inputs as dense ``(N, C, S)`` / ``(O, M, I)``
arrays, so the device makes them dense first.  The statistics pass and the apply pass (or, in
the backward ops, the two sums and ``dx``) each read ``x`` again, so one dense copy up front
costs less than strided index arithmetic in every pass, and keeps the chunked reads coalesced.

``BatchNorm`` itself updates no running statistics: the op outputs the batch mean and biased
variance, and ``mge.module.BatchNorm`` folds them into its running buffers with ordinary ops,
exactly as on the CPU device.  Where results may differ from the CPU device: ``DIFFERENCES``.
"""
import functools
import math

import numpy as np

from ....ops.base import INFER, TensorDesc
from ....ops.nn_norm import (
    BatchNorm, BatchNormBackward, LayerNorm, LayerNormBackward, layer_norm_range,
)
from .block import BLOCK_PARTS
from .elemwise import KernelSource
from .launch import Buf, Launch, Plan, Workspace, grid_for

__all__ = ["FLOAT_DTYPES", "NTHREADS", "TARGET_BLOCKS", "MAX_ROW_BLOCKS", "NVRTC_OPTIONS",
           "DIFFERENCES", "batch_norm_kernels", "batch_norm_backward_kernels",
           "layer_norm_kernels", "layer_norm_backward_kernels", "batch_norm_plan",
           "batch_norm_backward_plan", "layer_norm_plan", "layer_norm_backward_plan", "PLANS",
           "STRIDED"]

#: Threads of a reducing block (a power of two; the shared arrays hold this many).
NTHREADS = 256
#: About how many blocks a reduction aims to have in flight (an H100/H200 has 132 SMs).
TARGET_BLOCKS = 1024
#: The most blocks of a block-per-row launch (``MGE_BLOCK_LOOP`` walks the rows beyond).
MAX_ROW_BLOCKS = 65535
#: NVRTC flags: no contraction into fused multiply-adds, so elementwise formulas round as the
#: CPU device's do (elemwise.py's flags).
NVRTC_OPTIONS = ("--fmad=false",)

DIFFERENCES = """\
* Training BatchNorm and LayerNorm compute the mean and variance with Welford's algorithm in
  the computing type (float for float16/float32, double for float64), combined pairwise over a
  tree of threads and chunks; numpy sums pairwise in a different order and takes the variance
  in a second pass.  The statistics (and so y) agree to a few ulp of the computing type times
  log2 of the reduced size, not bit for bit.  BatchNormBackward's and LayerNormBackward's sums
  (dbias, dweight, and the row means of dx) likewise.
* Inference BatchNorm and every elementwise step after the statistics follow the CPU kernel's
  order of operations (no fused multiply-add), so given the same statistics they give the same
  bits.
* An empty reduction gives NaN statistics, as numpy's mean of nothing does (without a warning).
"""

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The dtypes these kernels take.
FLOAT_DTYPES = (_F16, _F32, _F64)
_CODE = {_F16: "f16", _F32: "f32", _F64: "f64"}
_STORAGE = {_F16: "unsigned short", _F32: "float", _F64: "double"}


def _acc(d):
    """The computing dtype of data of dtype ``d``: float32 for float16, as the CPU kernels."""
    return _F32 if d == _F16 else d


def _ctype(d):
    return "float" if d in (_F16, _F32) else "double"


# -- launch shapes --------------------------------------------------------------------------------

def _i64(v):
    return np.int64(v)


def _f64(v):
    return np.float64(v)


def _rows_grid(rows):
    """The grid of a block-per-row kernel over ``rows`` rows (a block loop takes the rest)."""
    return (max(1, min(MAX_ROW_BLOCKS, int(rows))),)


def _pow2_block(n, lo=32, hi=NTHREADS):
    """The smallest power of two >= ``n`` within ``[lo, hi]``: a reducing block's threads."""
    b = lo
    while b < n and b < hi:
        b *= 2
    return b


def _chunks(groups, m, block):
    """(P, chunk): cut each of ``groups`` reductions of ``m`` elements into ``P`` chunks of
    ``chunk`` elements (the last may be shorter, none empty), enough for about
    ``TARGET_BLOCKS`` blocks and at least 4 elements per thread."""
    if m <= 0:
        return 1, 1
    by_work = -(-m // (block * 4))
    by_blocks = max(1, -(-TARGET_BLOCKS // max(groups, 1)))
    p = max(1, min(by_work, by_blocks))
    chunk = -(-m // p)
    return -(-m // chunk), chunk


# -- the shared prelude: block emulation and reduction helpers ------------------------------------

# Norm's block helpers (kernels/block.py holds the phase macros): float loads and stores, the
# Welford combination and the block trees.
_NORM_BLOCK = r"""#ifndef MGE_NORM_BLOCK
#define MGE_NORM_BLOCK
#define MGE_NTHREADS_MAX @NTHREADS@
/* Loads of float data into the computing type, stores of it (float16 as bits, one rounding). */
MGE_FN float mge_ldf(const unsigned short* p, long long i) { return mge_h2f(p[i]); }
MGE_FN float mge_ldf(const float* p, long long i) { return p[i]; }
MGE_FN double mge_ldf(const double* p, long long i) { return p[i]; }
MGE_FN void mge_stf(unsigned short* p, long long i, float v) { p[i] = mge_f2h(v); }
MGE_FN void mge_stf(unsigned short* p, long long i, double v) { p[i] = mge_d2h(v); }
MGE_FN void mge_stf(float* p, long long i, float v) { p[i] = v; }
MGE_FN void mge_stf(float* p, long long i, double v) { p[i] = (float)v; }
MGE_FN void mge_stf(double* p, long long i, float v) { p[i] = (double)v; }
MGE_FN void mge_stf(double* p, long long i, double v) { p[i] = v; }
template <class T> MGE_FN T mge_qnan() { T z = 0; return z / z; }
/* Chan et al.'s pairwise combination of Welford triples: (na, ma, sa) += (nb, mb, sb). */
template <class T> MGE_FN void mge_welford_merge(long long& na, T& ma, T& sa,
                                                 long long nb, T mb, T sb) {
    if (nb == 0) return;
    if (na == 0) { na = nb; ma = mb; sa = sb; return; }
    long long n = na + nb;
    T d = mb - ma, fb = (T)nb / (T)n;
    ma = ma + d * fb;
    sa = sa + sb + d * d * (T)na * fb;
    na = n;
}
/* The shared-memory tree over a block's Welford triples in sh_n/sh_m/sh_s[0, blockDim.x):
   the result lands in slot 0.  Called by every thread (it holds barriers). */
template <class T> MGE_FN void mge_block_welford(long long* sh_n, T* sh_m, T* sh_s) {
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t < s) mge_welford_merge<T>(sh_n[t], sh_m[t], sh_s[t],
                                            sh_n[t + s], sh_m[t + s], sh_s[t + s]);
        }
        MGE_SYNC
    }
}
/* The same tree for K sums per thread, in sh[k * MGE_NTHREADS_MAX + t]. */
template <int K, class T> MGE_FN void mge_block_sums(T* sh) {
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t < s) {
                for (int k = 0; k < K; ++k)
                    sh[k * MGE_NTHREADS_MAX + t] += sh[k * MGE_NTHREADS_MAX + t + s];
            }
        }
        MGE_SYNC
    }
}
#endif /* MGE_NORM_BLOCK */
""".replace("@NTHREADS@", str(NTHREADS))

#: The parts every kernel of norm.py, rng.py and optimizer.py starts with.
_PRELUDE_PARTS = BLOCK_PARTS + (("MGE_NORM_BLOCK", _NORM_BLOCK),)

# -- the algorithms, as templates -----------------------------------------------------------------

_TEMPLATES = r"""#ifndef MGE_NORM_TEMPLATES
#define MGE_NORM_TEMPLATES
/* BatchNorm stage 1: block r = c * P + p reduces chunk p of channel c of x (N, C, S) into
   Welford triples ws_n/ws_m/ws_s[r]. */
template <class TX, class T>
MGE_FN void mge_bn_stats_partial(const TX* x, long long* ws_n, T* ws_m, T* ws_s,
                                 long long C, long long S, long long m, long long P,
                                 long long chunk) {
    MGE_SHARED long long sh_n[MGE_NTHREADS_MAX];
    MGE_SHARED T sh_m[MGE_NTHREADS_MAX], sh_s[MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(r, C * P) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long c = r / P, lo = (r % P) * chunk, hi = lo + chunk < m ? lo + chunk : m;
            long long n = 0;
            T mean = 0, m2 = 0;
            for (long long j = lo + t; j < hi; j += blockDim.x) {
                T v = (T)mge_ldf(x, ((j / S) * C + c) * S + j % S);
                ++n;
                T d = v - mean;
                mean = mean + d / (T)n;
                m2 = m2 + d * (v - mean);
            }
            sh_n[t] = n; sh_m[t] = mean; sh_s[t] = m2;
        }
        MGE_SYNC
        mge_block_welford<T>(sh_n, sh_m, sh_s);
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t == 0) { ws_n[r] = sh_n[0]; ws_m[r] = sh_m[0]; ws_s[r] = sh_s[0]; }
        }
        MGE_SYNC  /* slot 0 is read before the next block's phase overwrites it */
    }
}
/* BatchNorm stage 2: block c combines its P partials; writes mean/var (x's dtype), and
   ws_mean[c], ws_scale[c] = w / sqrt(var + eps) in the computing type. */
template <class TO, class TW, class T>
MGE_FN void mge_bn_stats_final(const long long* ws_n, const T* ws_m, const T* ws_s,
                               const TW* w, TO* mean_out, TO* var_out, T* ws_mean, T* ws_scale,
                               long long C, long long P, double eps) {
    MGE_SHARED long long sh_n[MGE_NTHREADS_MAX];
    MGE_SHARED T sh_m[MGE_NTHREADS_MAX], sh_s[MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(c, C) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long n = 0;
            T mean = 0, m2 = 0;
            for (long long p = t; p < P; p += blockDim.x)
                mge_welford_merge<T>(n, mean, m2, ws_n[c * P + p], ws_m[c * P + p],
                                     ws_s[c * P + p]);
            sh_n[t] = n; sh_m[t] = mean; sh_s[t] = m2;
        }
        MGE_SYNC
        mge_block_welford<T>(sh_n, sh_m, sh_s);
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t == 0) {
                long long n = sh_n[0];
                T mean = n ? sh_m[0] : mge_qnan<T>(), var = n ? sh_s[0] / (T)n : mge_qnan<T>();
                mge_stf(mean_out, c, mean);
                mge_stf(var_out, c, var);
                ws_mean[c] = mean;
                ws_scale[c] = (T)mge_ldf(w, c) / mge_sqrt(var + (T)eps);
            }
        }
        MGE_SYNC
    }
}
/* Inference BatchNorm's statistics: ws_mean[c] = mean, ws_scale[c] = w / sqrt(var + eps). */
template <class TM, class TV, class TW, class T>
MGE_FN void mge_bn_prepare(const TM* mean, const TV* var, const TW* w, T* ws_mean, T* ws_scale,
                           long long C, double eps) {
    MGE_GRID_LOOP(c, C) {
        ws_mean[c] = (T)mge_ldf(mean, c);
        ws_scale[c] = (T)mge_ldf(w, c) / mge_sqrt((T)mge_ldf(var, c) + (T)eps);
    }
}
/* BatchNorm stage 3: y = (x - mean) * scale + b, the CPU kernel's order. */
template <class TX, class TB, class T>
MGE_FN void mge_bn_apply(const TX* x, const TB* b, const T* ws_mean, const T* ws_scale, TX* y,
                         long long n, long long C, long long S) {
    MGE_GRID_LOOP(i, n) {
        long long c = (i / S) % C;
        T v = ((T)mge_ldf(x, i) - ws_mean[c]) * ws_scale[c] + (T)mge_ldf(b, c);
        mge_stf(y, i, v);
    }
}
/* BatchNormBackward stage 1: sums of dy and dy * xhat over chunk p of channel c, with
   xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps). */
template <class TX, class TG, class TM, class TV, class T>
MGE_FN void mge_bnb_partial(const TX* x, const TG* dy, const TM* mean, const TV* var, T* ws_g,
                            T* ws_gx, long long C, long long S, long long m, long long P,
                            long long chunk, double eps) {
    MGE_SHARED T sh[2 * MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(r, C * P) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long c = r / P, lo = (r % P) * chunk, hi = lo + chunk < m ? lo + chunk : m;
            T mu = (T)mge_ldf(mean, c), rstd = (T)1 / mge_sqrt((T)mge_ldf(var, c) + (T)eps);
            T sg = 0, sgx = 0;
            for (long long j = lo + t; j < hi; j += blockDim.x) {
                long long i = ((j / S) * C + c) * S + j % S;
                T g = (T)mge_ldf(dy, i), xhat = ((T)mge_ldf(x, i) - mu) * rstd;
                sg += g;
                sgx += g * xhat;
            }
            sh[t] = sg; sh[MGE_NTHREADS_MAX + t] = sgx;
        }
        MGE_SYNC
        mge_block_sums<2, T>(sh);
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t == 0) { ws_g[r] = sh[0]; ws_gx[r] = sh[MGE_NTHREADS_MAX]; }
        }
        MGE_SYNC
    }
}
/* BatchNormBackward stage 2: channel c's sums in partial order -> dbias, dweight (weight's
   dtype); ws_k[3c..3c+2] = dw / m, db / m, w * rstd for stage 3. */
template <class TM, class TV, class TW, class T>
MGE_FN void mge_bnb_final(const T* ws_g, const T* ws_gx, const TM* mean, const TV* var,
                          const TW* w, TW* dw_out, TW* db_out, T* ws_k, long long C, long long P,
                          long long m, double eps) {
    MGE_SHARED T sh[2 * MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(c, C) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            T sg = 0, sgx = 0;
            for (long long p = t; p < P; p += blockDim.x) {
                sg += ws_g[c * P + p];
                sgx += ws_gx[c * P + p];
            }
            sh[t] = sg; sh[MGE_NTHREADS_MAX + t] = sgx;
        }
        MGE_SYNC
        mge_block_sums<2, T>(sh);
        MGE_THREADS { const unsigned t = threadIdx.x;
            if (t == 0) {
                T db = sh[0], dw = sh[MGE_NTHREADS_MAX];
                T rstd = (T)1 / mge_sqrt((T)mge_ldf(var, c) + (T)eps);
                mge_stf(dw_out, c, dw);
                mge_stf(db_out, c, db);
                ws_k[3 * c] = dw / (T)m;
                ws_k[3 * c + 1] = db / (T)m;
                ws_k[3 * c + 2] = (T)mge_ldf(w, c) * rstd;
            }
        }
        MGE_SYNC
    }
}
/* BatchNormBackward stage 3: dx = ((dy - xhat * (dw / m)) - db / m) * (w * rstd). */
template <class TX, class TG, class TM, class TV, class T>
MGE_FN void mge_bnb_apply(const TX* x, const TG* dy, const TM* mean, const TV* var,
                          const T* ws_k, TX* dx, long long n, long long C, long long S,
                          double eps) {
    MGE_GRID_LOOP(i, n) {
        long long c = (i / S) % C;
        T rstd = (T)1 / mge_sqrt((T)mge_ldf(var, c) + (T)eps);
        T xhat = ((T)mge_ldf(x, i) - (T)mge_ldf(mean, c)) * rstd;
        T v = ((T)mge_ldf(dy, i) - xhat * ws_k[3 * c]) - ws_k[3 * c + 1];
        mge_stf(dx, i, v * ws_k[3 * c + 2]);
    }
}
/* LayerNorm: block per row r = o * I + i of x (O, M, I): Welford over the row, then
   y = (x - mean) * rstd [* w + b]; mean and rstd outputs at r. */
template <bool AFFINE, class TX, class TW, class TB, class T>
MGE_FN void mge_ln_fwd(const TX* x, const TW* w, const TB* b, TX* y, TX* mean_out,
                       TX* rstd_out, long long R, long long M, long long I, double eps) {
    MGE_SHARED long long sh_n[MGE_NTHREADS_MAX];
    MGE_SHARED T sh_m[MGE_NTHREADS_MAX], sh_s[MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(r, R) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long base = (r / I) * M * I + r % I;
            long long n = 0;
            T mean = 0, m2 = 0;
            for (long long j = t; j < M; j += blockDim.x) {
                T v = (T)mge_ldf(x, base + j * I);
                ++n;
                T d = v - mean;
                mean = mean + d / (T)n;
                m2 = m2 + d * (v - mean);
            }
            sh_n[t] = n; sh_m[t] = mean; sh_s[t] = m2;
        }
        MGE_SYNC
        mge_block_welford<T>(sh_n, sh_m, sh_s);
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long base = (r / I) * M * I + r % I;
            T mean = sh_m[0], rstd = (T)1 / mge_sqrt(sh_s[0] / (T)M + (T)eps);
            for (long long j = t; j < M; j += blockDim.x) {
                T v = ((T)mge_ldf(x, base + j * I) - mean) * rstd;
                if (AFFINE) v = v * (T)mge_ldf(w, j) + (T)mge_ldf(b, j);
                mge_stf(y, base + j * I, v);
            }
            if (t == 0) { mge_stf(mean_out, r, mean); mge_stf(rstd_out, r, rstd); }
        }
        MGE_SYNC
    }
}
/* LayerNormBackward's dx: block per row; gw = dy [* w], c1 = mean(gw), c2 = mean(gw * xhat),
   dx = ((gw - xhat * c2) - c1) * rstd. */
template <bool AFFINE, class TX, class TG, class TS, class TW, class T>
MGE_FN void mge_ln_bwd_rows(const TX* x, const TG* dy, const TS* mean, const TS* rstd,
                            const TW* w, TX* dx, long long R, long long M, long long I) {
    MGE_SHARED T sh[2 * MGE_NTHREADS_MAX];
    MGE_BLOCK_LOOP(r, R) {
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long base = (r / I) * M * I + r % I;
            T mu = (T)mge_ldf(mean, r), rs = (T)mge_ldf(rstd, r), s1 = 0, s2 = 0;
            for (long long j = t; j < M; j += blockDim.x) {
                T g = (T)mge_ldf(dy, base + j * I);
                if (AFFINE) g = g * (T)mge_ldf(w, j);
                s1 += g;
                s2 += g * (((T)mge_ldf(x, base + j * I) - mu) * rs);
            }
            sh[t] = s1; sh[MGE_NTHREADS_MAX + t] = s2;
        }
        MGE_SYNC
        mge_block_sums<2, T>(sh);
        MGE_THREADS { const unsigned t = threadIdx.x;
            long long base = (r / I) * M * I + r % I;
            T mu = (T)mge_ldf(mean, r), rs = (T)mge_ldf(rstd, r);
            T c1 = sh[0] / (T)M, c2 = sh[MGE_NTHREADS_MAX] / (T)M;
            for (long long j = t; j < M; j += blockDim.x) {
                T g = (T)mge_ldf(dy, base + j * I);
                if (AFFINE) g = g * (T)mge_ldf(w, j);
                T xhat = ((T)mge_ldf(x, base + j * I) - mu) * rs;
                mge_stf(dx, base + j * I, ((g - xhat * c2) - c1) * rs);
            }
        }
        MGE_SYNC
    }
}
/* LayerNormBackward's dweight/dbias, stage 1: thread per column j (of M) and chunk p of rows:
   ws_dw/ws_db[p * M + j] = sums of dy * xhat and dy over the chunk's rows. */
template <class TX, class TG, class TS, class T>
MGE_FN void mge_ln_bwd_cols_partial(const TX* x, const TG* dy, const TS* mean, const TS* rstd,
                                    T* ws_dw, T* ws_db, long long R, long long M, long long I,
                                    long long P, long long chunk) {
    MGE_GRID_LOOP(k, M * P) {
        long long p = k / M, j = k % M;
        long long lo = p * chunk, hi = lo + chunk < R ? lo + chunk : R;
        T sw = 0, sb = 0;
        for (long long r = lo; r < hi; ++r) {
            long long i = ((r / I) * M + j) * I + r % I;
            T g = (T)mge_ldf(dy, i);
            sw += g * (((T)mge_ldf(x, i) - (T)mge_ldf(mean, r)) * (T)mge_ldf(rstd, r));
            sb += g;
        }
        ws_dw[k] = sw; ws_db[k] = sb;
    }
}
/* Stage 2: column j's chunks in order -> dweight, dbias in weight's dtype. */
template <class TW, class T>
MGE_FN void mge_ln_bwd_cols_final(const T* ws_dw, const T* ws_db, TW* dw, TW* db, long long M,
                                  long long P) {
    MGE_GRID_LOOP(j, M) {
        T sw = 0, sb = 0;
        for (long long p = 0; p < P; ++p) { sw += ws_dw[p * M + j]; sb += ws_db[p * M + j]; }
        mge_stf(dw, j, sw);
        mge_stf(db, j, sb);
    }
}
#endif /* MGE_NORM_TEMPLATES */
"""

_PARTS = _PRELUDE_PARTS + (("MGE_NORM_TEMPLATES", _TEMPLATES),)


# -- kernels --------------------------------------------------------------------------------------

def _check_dtypes(what, dtypes):
    """``dtypes`` as numpy dtypes, each a float one these kernels take; a ``TypeError`` naming
    ``what`` and the dtypes otherwise."""
    try:
        out = tuple(np.dtype(d) for d in dtypes)
    except TypeError as e:
        raise TypeError(f"CUDA {what} kernel: not a dtype ({e}) (dtypes: {dtypes})") from None
    bad = [d for d in out if d not in FLOAT_DTYPES]
    if bad:
        names = ", ".join(str(d) for d in out)
        raise TypeError(f"CUDA {what} kernel: unsupported dtype {bad[0]} (these kernels take "
                        f"float16, float32 and float64; dtypes: {names})")
    return out


def _entry(name, template, targs, params, call_args):
    """A ``KernelSource``: ``extern "C"`` ``name`` calling ``template<targs>(call_args)``."""
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    {template}<{', '.join(targs)}>({', '.join(call_args)});\n}}\n")
    return KernelSource(name, _PARTS + ((name, text),), tuple(params), False, 64, 0)


def _ptr(d, name, const=True):
    return f"{'const ' if const else ''}{_STORAGE[d]}* {name}"


def _sig(dtypes):
    return "_".join(_CODE[d] for d in dtypes)


def batch_norm_kernels(fwd_mode, x_dtype, param_dtypes):
    """The kernels of ``BatchNorm(fwd_mode)`` on ``x`` of ``x_dtype``, ``param_dtypes`` those of
    ``(weight, bias)`` (training) or ``(weight, bias, mean, var)`` (inference): a dict with keys
    ``partial``, ``final``, ``apply`` (training) or ``prepare``, ``apply`` (inference)."""
    mode = str(fwd_mode).lower()
    if mode not in ("training", "inference"):
        raise ValueError(f"CUDA BatchNorm kernel: fwd_mode must be 'training' or 'inference', "
                         f"got {fwd_mode!r}")
    want = 2 if mode == "training" else 4
    dts = _check_dtypes(f"BatchNorm({mode!r})", (x_dtype, *param_dtypes))
    if len(dts) != want + 1:
        raise TypeError(f"CUDA BatchNorm({mode!r}) kernel: {want} parameter dtypes expected, got "
                        f"{len(dts) - 1}")
    return _bn_kernels(mode, dts)


@functools.lru_cache(maxsize=None)
def _bn_kernels(mode, dts):
    x, w, b = dts[:3]
    T = _ctype(x)
    out = {}
    if mode == "training":
        out["partial"] = _entry(
            f"mge_bn_stats_partial_{_sig([x])}", "mge_bn_stats_partial", [_STORAGE[x], T],
            [_ptr(x, "x"), "long long* ws_n", f"{T}* ws_m", f"{T}* ws_s", "long long C",
             "long long S", "long long m", "long long P", "long long chunk"],
            ["x", "ws_n", "ws_m", "ws_s", "C", "S", "m", "P", "chunk"])
        out["final"] = _entry(
            f"mge_bn_stats_final_{_sig([x, w])}", "mge_bn_stats_final",
            [_STORAGE[x], _STORAGE[w], T],
            ["const long long* ws_n", f"const {T}* ws_m", f"const {T}* ws_s", _ptr(w, "w"),
             _ptr(x, "mean_out", False), _ptr(x, "var_out", False), f"{T}* ws_mean",
             f"{T}* ws_scale", "long long C", "long long P", "double eps"],
            ["ws_n", "ws_m", "ws_s", "w", "mean_out", "var_out", "ws_mean", "ws_scale", "C", "P",
             "eps"])
    else:
        mean, var = dts[3:]
        out["prepare"] = _entry(
            f"mge_bn_prepare_{_sig([x, mean, var, w])}", "mge_bn_prepare",
            [_STORAGE[mean], _STORAGE[var], _STORAGE[w], T],
            [_ptr(mean, "mean"), _ptr(var, "var"), _ptr(w, "w"), f"{T}* ws_mean",
             f"{T}* ws_scale", "long long C", "double eps"],
            ["mean", "var", "w", "ws_mean", "ws_scale", "C", "eps"])
    out["apply"] = _entry(
        f"mge_bn_apply_{_sig([x, b])}", "mge_bn_apply", [_STORAGE[x], _STORAGE[b], T],
        [_ptr(x, "x"), _ptr(b, "b"), f"const {T}* ws_mean", f"const {T}* ws_scale",
         _ptr(x, "y", False), "long long n", "long long C", "long long S"],
        ["x", "b", "ws_mean", "ws_scale", "y", "n", "C", "S"])
    return out


def batch_norm_backward_kernels(dtypes):
    """The kernels of ``BatchNormBackward`` on ``(x, dy, mean, var, weight)`` of ``dtypes``: a
    dict with keys ``partial``, ``final``, ``apply``."""
    dts = _check_dtypes("BatchNormBackward", dtypes)
    if len(dts) != 5:
        raise TypeError(f"CUDA BatchNormBackward kernel: 5 dtypes (x, dy, mean, var, weight) "
                        f"expected, got {len(dts)}")
    return _bnb_kernels(dts)


@functools.lru_cache(maxsize=None)
def _bnb_kernels(dts):
    x, g, mean, var, w = dts
    T = _ctype(x)
    st = [_STORAGE[d] for d in dts]
    return {
        "partial": _entry(
            f"mge_bnb_partial_{_sig([x, g, mean, var])}", "mge_bnb_partial", st[:4] + [T],
            [_ptr(x, "x"), _ptr(g, "dy"), _ptr(mean, "mean"), _ptr(var, "var"), f"{T}* ws_g",
             f"{T}* ws_gx", "long long C", "long long S", "long long m", "long long P",
             "long long chunk", "double eps"],
            ["x", "dy", "mean", "var", "ws_g", "ws_gx", "C", "S", "m", "P", "chunk", "eps"]),
        "final": _entry(
            f"mge_bnb_final_{_sig([x, mean, var, w])}", "mge_bnb_final", st[2:] + [T],
            [f"const {T}* ws_g", f"const {T}* ws_gx", _ptr(mean, "mean"), _ptr(var, "var"),
             _ptr(w, "w"), _ptr(w, "dw", False), _ptr(w, "db", False), f"{T}* ws_k",
             "long long C", "long long P", "long long m", "double eps"],
            ["ws_g", "ws_gx", "mean", "var", "w", "dw", "db", "ws_k", "C", "P", "m", "eps"]),
        "apply": _entry(
            f"mge_bnb_apply_{_sig([x, g, mean, var])}", "mge_bnb_apply", st[:4] + [T],
            [_ptr(x, "x"), _ptr(g, "dy"), _ptr(mean, "mean"), _ptr(var, "var"),
             f"const {T}* ws_k", _ptr(x, "dx", False), "long long n", "long long C",
             "long long S", "double eps"],
            ["x", "dy", "mean", "var", "ws_k", "dx", "n", "C", "S", "eps"]),
    }


def layer_norm_kernels(affine, x_dtype, param_dtypes=()):
    """The kernel of ``LayerNorm(affine)`` on ``x`` of ``x_dtype`` (``param_dtypes``: those of
    ``(weight, bias)`` with ``affine``): a dict with the key ``forward``."""
    affine = bool(affine)
    dts = _check_dtypes("LayerNorm", (x_dtype, *param_dtypes))
    if len(dts) != (3 if affine else 1):
        raise TypeError(f"CUDA LayerNorm(affine={affine}) kernel: {2 if affine else 0} parameter "
                        f"dtypes expected, got {len(dts) - 1}")
    return _ln_kernels(affine, dts)


@functools.lru_cache(maxsize=None)
def _ln_kernels(affine, dts):
    x = dts[0]
    w, b = dts[1:] if affine else (x, x)  # unused pointers without affine
    T = _ctype(x)
    tag = f"a_{_sig([x, w, b])}" if affine else f"n_{_sig([x])}"
    return {"forward": _entry(
        f"mge_ln_fwd_{tag}", "mge_ln_fwd",
        ["true" if affine else "false", _STORAGE[x], _STORAGE[w], _STORAGE[b], T],
        [_ptr(x, "x"), _ptr(w, "w"), _ptr(b, "b"), _ptr(x, "y", False),
         _ptr(x, "mean_out", False), _ptr(x, "rstd_out", False), "long long R", "long long M",
         "long long I", "double eps"],
        ["x", "w", "b", "y", "mean_out", "rstd_out", "R", "M", "I", "eps"])}


def layer_norm_backward_kernels(affine, dtypes):
    """The kernels of ``LayerNormBackward(affine)`` on ``(x, dy, mean, rstd[, weight])`` of
    ``dtypes`` (mean and rstd of one dtype): a dict with keys ``rows`` and, with ``affine``,
    ``cols_partial`` and ``cols_final``."""
    affine = bool(affine)
    dts = _check_dtypes("LayerNormBackward", dtypes)
    if len(dts) != (5 if affine else 4):
        raise TypeError(f"CUDA LayerNormBackward(affine={affine}) kernel: {5 if affine else 4} "
                        f"dtypes expected, got {len(dts)}")
    if dts[2] != dts[3]:
        raise TypeError(f"CUDA LayerNormBackward kernel: mean and rstd must have one dtype, got "
                        f"{dts[2]} and {dts[3]}")
    return _lnb_kernels(affine, dts)


@functools.lru_cache(maxsize=None)
def _lnb_kernels(affine, dts):
    x, g, s = dts[:3]
    w = dts[4] if affine else x
    T = _ctype(x)
    tag = f"a_{_sig([x, g, s, w])}" if affine else f"n_{_sig([x, g, s])}"
    out = {"rows": _entry(
        f"mge_ln_bwd_rows_{tag}", "mge_ln_bwd_rows",
        ["true" if affine else "false", _STORAGE[x], _STORAGE[g], _STORAGE[s], _STORAGE[w], T],
        [_ptr(x, "x"), _ptr(g, "dy"), _ptr(s, "mean"), _ptr(s, "rstd"), _ptr(w, "w"),
         _ptr(x, "dx", False), "long long R", "long long M", "long long I"],
        ["x", "dy", "mean", "rstd", "w", "dx", "R", "M", "I"])}
    if affine:
        out["cols_partial"] = _entry(
            f"mge_ln_bwd_cols_partial_{_sig([x, g, s])}", "mge_ln_bwd_cols_partial",
            [_STORAGE[x], _STORAGE[g], _STORAGE[s], T],
            [_ptr(x, "x"), _ptr(g, "dy"), _ptr(s, "mean"), _ptr(s, "rstd"), f"{T}* ws_dw",
             f"{T}* ws_db", "long long R", "long long M", "long long I", "long long P",
             "long long chunk"],
            ["x", "dy", "mean", "rstd", "ws_dw", "ws_db", "R", "M", "I", "P", "chunk"])
        out["cols_final"] = _entry(
            f"mge_ln_bwd_cols_final_{_sig([x, w])}", "mge_ln_bwd_cols_final", [_STORAGE[w], T],
            [f"const {T}* ws_dw", f"const {T}* ws_db", _ptr(w, "dw", False),
             _ptr(w, "db", False), "long long M", "long long P"],
            ["ws_dw", "ws_db", "dw", "db", "M", "P"])
    return out


# -- plans ----------------------------------------------------------------------------------------

def _rule(op, ins, outs):
    """The op's own shape/dtype rule on ``ins`` (its errors name the op, shapes and dtypes);
    a ``ValueError`` when ``outs`` are not what it gives (a caller's bug, named)."""
    descs = INFER[type(op)](op, [TensorDesc(tuple(a.shape), np.dtype(a.dtype)) for a in ins])
    want = [(tuple(d.shape), np.dtype(d.dtype)) for d in descs]
    got = [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]
    if want != got:
        raise ValueError(f"CUDA {op.name} plan: outputs {_names(got)} given, the op's rule gives "
                         f"{_names(want)} (inputs: {_names((a.shape, a.dtype) for a in ins)})")
    return descs


def _names(pairs):
    return ", ".join(f"{tuple(s)} {np.dtype(d)}" for s, d in pairs) or "none"


def _ins(n):
    return [Buf(f"in{k}") for k in range(n)]


def _ncs(shape):
    return shape[0], shape[1], math.prod(shape[2:])


def batch_norm_plan(op, ins, outs):
    """The ``Plan`` of ``BatchNorm`` ``op`` on ``ins`` ``(x, weight, bias)`` (training) or
    ``(x, weight, bias, mean, var)`` (inference); ``outs`` ``(y, mean, var)`` or ``(y,)``, as the
    op's rule declares.  Training: partial Welford triples per (channel, chunk), a block per
    channel combining them, the elementwise ``y``; inference: per-channel scale, then ``y``."""
    _rule(op, ins, outs)
    ks = batch_norm_kernels(op.fwd_mode, ins[0].dtype, [a.dtype for a in ins[1:]])
    n, c, s = _ncs(ins[0].shape)
    size, t_size = n * c * s, _acc(ins[0].dtype).itemsize
    if c == 0:
        return Plan((), notes=("no channels: nothing to compute",))
    x, w, b = _ins(3)
    ws = Workspace()
    steps, notes = [], []
    if op.fwd_mode == "training":
        m = n * s
        block = _pow2_block(m)
        p, chunk = _chunks(c, m, block)
        ws_n, ws_m, ws_s = ws.add(c * p * 8), ws.add(c * p * t_size), ws.add(c * p * t_size)
        ws_mean, ws_scale = ws.add(c * t_size), ws.add(c * t_size)
        steps.append(Launch(ks["partial"], _rows_grid(c * p), (block,), (
            x, ws_n, ws_m, ws_s, _i64(c), _i64(s), _i64(m), _i64(p), _i64(chunk))))
        steps.append(Launch(ks["final"], _rows_grid(c), (_pow2_block(p),), (
            ws_n, ws_m, ws_s, w, Buf("out1"), Buf("out2"), ws_mean, ws_scale, _i64(c), _i64(p),
            _f64(op.epsilon))))
        notes.append(f"{p} chunk(s) of {chunk} element(s) per channel")
    else:
        ws_mean, ws_scale = ws.add(c * t_size), ws.add(c * t_size)
        steps.append(Launch(ks["prepare"], grid_for(c, NTHREADS), (NTHREADS,), (
            Buf("in3"), Buf("in4"), w, ws_mean, ws_scale, _i64(c), _f64(op.epsilon))))
    if size:
        steps.append(Launch(ks["apply"], grid_for(size, NTHREADS), (NTHREADS,), (
            x, b, ws_mean, ws_scale, Buf("out0"), _i64(size), _i64(c), _i64(s))))
    return Plan(tuple(steps), ws.size, notes=tuple(notes))


def batch_norm_backward_plan(op, ins, outs):
    """The ``Plan`` of ``BatchNormBackward`` on ``ins`` ``(x, dy, mean, var, weight)``; ``outs``
    ``(dx, dweight, dbias)``.  Partial sums per (channel, chunk), a block per channel giving
    ``dweight``/``dbias`` and dx's factors, the elementwise ``dx``."""
    _rule(op, ins, outs)
    ks = batch_norm_backward_kernels([a.dtype for a in ins])
    n, c, s = _ncs(ins[0].shape)
    m, size, t_size = n * s, n * c * s, _acc(ins[0].dtype).itemsize
    if c == 0:
        return Plan((), notes=("no channels: nothing to compute",))
    block = _pow2_block(m)
    p, chunk = _chunks(c, m, block)
    ws = Workspace()
    ws_g, ws_gx, ws_k = ws.add(c * p * t_size), ws.add(c * p * t_size), ws.add(3 * c * t_size)
    eps = _f64(op.epsilon)
    x, dy, mean, var, w = _ins(5)
    steps = [
        Launch(ks["partial"], _rows_grid(c * p), (block,), (
            x, dy, mean, var, ws_g, ws_gx, _i64(c), _i64(s), _i64(m), _i64(p), _i64(chunk),
            eps)),
        Launch(ks["final"], _rows_grid(c), (_pow2_block(p),), (
            ws_g, ws_gx, mean, var, w, Buf("out1"), Buf("out2"), ws_k, _i64(c), _i64(p),
            _i64(m), eps))]
    if size:
        steps.append(Launch(ks["apply"], grid_for(size, NTHREADS), (NTHREADS,), (
            x, dy, mean, var, ws_k, Buf("out0"), _i64(size), _i64(c), _i64(s), eps)))
    return Plan(tuple(steps), ws.size, notes=(f"{p} chunk(s) of {chunk} element(s) per channel",))


def _rmi(op, shape):
    start, end = layer_norm_range(op, len(shape))
    o, m, i = math.prod(shape[:start]), math.prod(shape[start:end]), math.prod(shape[end:])
    return o * i, m, i


def layer_norm_plan(op, ins, outs):
    """The ``Plan`` of ``LayerNorm`` on ``ins`` ``(x[, weight, bias])``; ``outs``
    ``(y, mean, rstd)``.  A block per row (a block loop over rows beyond the grid), no
    workspace."""
    _rule(op, ins, outs)
    k = layer_norm_kernels(op.affine, ins[0].dtype, [a.dtype for a in ins[1:]])["forward"]
    r, m, i = _rmi(op, ins[0].shape)
    if r == 0:
        return Plan((), notes=("no rows: nothing to compute",))
    x, w, b = _ins(3) if op.affine else (Buf("in0"),) * 3  # unused without affine
    return Plan((Launch(k, _rows_grid(r), (_pow2_block(m),), (
        x, w, b, Buf("out0"), Buf("out1"), Buf("out2"), _i64(r), _i64(m), _i64(i),
        _f64(op.eps))),))


def layer_norm_backward_plan(op, ins, outs):
    """The ``Plan`` of ``LayerNormBackward`` on ``ins`` ``(x, dy, mean, rstd[, weight])``;
    ``outs`` ``(dx[, dweight, dbias])``.  A block per row for ``dx``; with ``affine``, column
    partial sums over chunks of rows into the workspace, then each column's chunks in order."""
    _rule(op, ins, outs)
    ks = layer_norm_backward_kernels(op.affine, [a.dtype for a in ins])
    r, m, i = _rmi(op, ins[0].shape)
    x, dy, mean, rstd = _ins(4)
    w = Buf("in4") if op.affine else x  # unused without affine
    steps, notes = [], []
    if r:
        steps.append(Launch(ks["rows"], _rows_grid(r), (_pow2_block(m),), (
            x, dy, mean, rstd, w, Buf("out0"), _i64(r), _i64(m), _i64(i))))
    ws = Workspace()
    if op.affine:
        # each thread a column and a chunk of rows: chunks until about TARGET_BLOCKS blocks
        p = max(1, min(-(-r // 16), -(-TARGET_BLOCKS * NTHREADS // max(m, 1))))
        chunk = max(1, -(-r // p))
        p = max(1, -(-r // chunk))
        t_size = _acc(ins[0].dtype).itemsize
        ws_dw, ws_db = ws.add(m * p * t_size), ws.add(m * p * t_size)
        steps.append(Launch(ks["cols_partial"], grid_for(m * p, NTHREADS), (NTHREADS,), (
            x, dy, mean, rstd, ws_dw, ws_db, _i64(r), _i64(m), _i64(i), _i64(p), _i64(chunk))))
        steps.append(Launch(ks["cols_final"], grid_for(m, NTHREADS), (NTHREADS,), (
            ws_dw, ws_db, Buf("out1"), Buf("out2"), _i64(m), _i64(p))))
        notes.append(f"dweight/dbias: {p} chunk(s) of {chunk} row(s)")
    return Plan(tuple(steps), ws.size, notes=tuple(notes))


#: The plan of each norm op (the CUDA device's table): ``PLANS[type(op)](op, ins, outs)``.
PLANS = {BatchNorm: batch_norm_plan, BatchNormBackward: batch_norm_backward_plan,
         LayerNorm: layer_norm_plan, LayerNormBackward: layer_norm_backward_plan}

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()
