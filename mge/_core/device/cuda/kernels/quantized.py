"""CUDA C for the quantized inference ops -- ``QuantizedTypeCvt``, ``QuantizedElemwise``,
``ElemwiseMultiType``, ``QuantizedMatrixMul``, ``ConvBias``, ``BatchConvBias`` and
``QuantizedConvolutionBackwardData`` (``ops/quantized.py``) -- with their launch plans
(``launch.py``'s one format).

Like the other families this only makes text and plans: NVRTC compiles the text for the GPU, and
the same text builds as host C++ under g++ for the tests (``block.py``'s phases emulate blocks,
threads and barriers there).  The CPU kernels (``device/cpu/kernels/quantized.py``) are the
reference: every step below does the CPU's arithmetic in the CPU's precision and rounding, so the
results are bit-identical to the CPU device's (``DIFFERENCES`` says where they are not).  A
quantized dtype's scale and zero point are the op's parameters (its qspecs), never read from the
buffers; they reach the kernels as scalar arguments, so one kernel serves every scale.

**The conversions** (``_QPRELUDE``), shared by every kernel:

* *dequantize* -- ``(float(q) - float(zero_point)) * float(scale)`` in float32, the CPU's two
  float32 ops (a symmetric dtype's zero point is 0: subtracting 0 from an integer-valued float
  changes nothing);
* *quantize* -- ``clip(round(v / scale) + zero_point, qmin, qmax)`` in the precision of ``v``
  (float16, float32 or float64: numpy's), each step rounded there (``mge_qp16`` rounds every
  intermediate to float16, as numpy's float16 ops do), ``round`` MegEngine's
  ``sign(t) * floor(|t| + 0.5)``, the scale, zero point and bounds rounded to that precision first
  (numpy's 0-d operands of the value's dtype), then the store;
* *float -> integer stores* -- numpy's ``astype`` as x86-64 does it (``mge_q_f2i``): 8- to 32-bit
  targets through a truncating int32 conversion whose NaN or out-of-range result is INT32_MIN
  (so 0 in 8 and 16 bits), int64 likewise.  (``elemwise.py``'s ``TypeCvt`` saturates instead;
  here the clipped value of QuantizedS32 -- float32(2**31 - 1) is 2**31 -- must give what numpy
  gives, INT32_MIN.)

**Elementwise kernels** (a grid-stride loop over the output; dense inputs of the output's shape
take the flat ``_c`` variant, broadcasting ones the strided ``_s32``/``_s64`` variant over
``elemwise.py``'s ``mge_layout``):

* ``QuantizedTypeCvt`` -- dequantize (a quantized input) or load (a plain one), then quantize (a
  quantized output) or ``astype`` (a plain one).
* ``QuantizedElemwise`` -- each input converted to the op's quantization where its own differs
  (the float bias of a quantized ``Linear``: quantized in its own precision), ``add`` or ``relu``
  in int64, clipped to the quantization's range.
* ``ElemwiseMultiType`` -- one fused kernel per mode: the quantized inputs dequantized, then the
  float mode -- or the CPU kernel's composition of modes (``fuse_mul_add3``, ``prelu``, ``erfc``...)
  -- step by step through ``elemwise.py``'s scalar functions, each intermediate stored as numpy
  stores it (float16 rounded), then quantized, ``astype``-d, or stored as the float result.

**Integer GEMM** (``mge_qgemm``), the core of the matmul and the convolutions (cuBLAS's GEMM takes
float types only): a 2-D grid of output tiles (``16*RM x 16*RN``; a 16 x 16 block, each thread
``RM x RN`` outputs 16 rows / 16 columns apart, so a warp's shared-memory reads and global stores
are consecutive) per batch item (grid z; batch item ``b = outer * groups + inner``, each operand
with its own outer and inner stride, so one launch covers a grouped conv or a batch).  K-tiles of
16: the block loads ``A`` and ``B`` tiles into shared memory with the zero points subtracted
(padding rows and columns 0), then every thread sums its products.  Two accumulation modes, the
plan's choice from the operands' value bounds:

* ``i32`` -- int32 products summed in int32 within a K-tile (exact: the plan checks that 16 of the
  largest products fit), each tile's sum added into int64 accumulators.  Every 8-bit operand pair
  (qint8, quint8, qint4...) takes this mode: exact for any K, as the CPU's float64 sums are exact
  (every partial sum below 2**53).
* ``f64`` -- values, products and sums in float64, the CPU's own precision: a qint32 operand (or
  a zero point so far out that 16 products could pass int32), whose products the CPU's float64
  may round too.

The accumulators of a thread cross the K-loop's barriers: on the GPU they are registers
(``MGE_Q_REGS``: ``T name[1][count]``), on the host one slot per emulated thread.  The shared
tiles' rows are padded by one element, so a tile loaded k-fastest (a row-major ``A``) stores to
distinct banks.  The epilogue
(``mge_qep_*``) is the CPU's ``_from_acc``: the bias added (float64), ``relu``, saturation to
int32, then the accumulator's conversion to the output (none for the accumulator's own qspec;
dequantize with the accumulator's scale, then quantize or ``astype``) -- or the raw accumulator
(``mge_qep_raw``: the transposed convolution's columns); the conversion is an out-of-line call
(``MGE_Q_COLD``: it runs once per output, and inlined in every unrolled store it would make the
kernel several times larger and slower to compile).  Tile shapes: ``4x4`` (64 x 64) in
general, ``1x16`` (16 x 256) for ``M <= 16`` (depthwise and narrow convs), ``16x1`` (256 x 16)
for ``N <= 16`` (matrix-vector products).

**The ops on it:**

* ``QuantizedMatrixMul`` -- one GEMM: ``A``'s leading batch dims fold into its rows (``B`` is one
  matrix), the transposes are strides; the qint32 result saturated.
* ``ConvBias`` / ``BatchConvBias`` -- ``mge_qim2col`` per batch chunk writes the column matrix
  (rows ``c * K + kpos``, columns ``image * P + p``, as ``conv.py``'s) in the input's storage type,
  padding with the input's zero point (so a padded entry's value is 0, as the CPU's zero padding
  of the values), its kernel positions reversed for ``conv_mode="convolution"`` (MegEngine's
  flipped kernel); then one GEMM batched over the groups (ConvBias: the images of the chunk side
  by side in its columns, split back per image in the output's indexing) or over the images
  (BatchConvBias: a weight per image).  A 1x1, stride-1, unpadded convolution reads ``x`` itself.
  The qint32 bias is first converted per channel into a float64 workspace (``mge_qbias``: its
  values, rescaled with numpy's round-half-even where its scale is not the accumulator's, as
  ``_add_bias``).
* ``QuantizedConvolutionBackwardData`` -- the transposed convolution: the GEMM ``W^T @ x`` per
  image into columns of raw accumulators (int64 or float64), then ``mge_qcol2im``: a thread per
  output element adds the column entries of its window (``conv.py``'s col2im order) and applies
  the epilogue.  1x1, stride 1, no padding: the GEMM writes the output.

The convolutions reuse ``conv.py``'s geometry: ``pack_window``'s ``mge_window`` (and its
prelude), ``batch_chunks`` (a batch cut so the columns stay under ``workspace_limit`` bytes) and
``launch_index_bits`` (32-bit index variants whenever they fit; ``index_bits=64`` asks for the
64-bit ones).

**Speed.**  Correctness first: the GEMM is a plain shared-memory tiling on the integer (or
float64) pipes -- no ``dp4a``, no tensor-core IMMA, no double-buffered tiles -- and the
transposed convolution's columns are 8-byte accumulators.  Each K-tile of a 64 x 64 tile costs
two 16 x 64 loads for 4096 multiply-adds, so the kernels are bound by the integer throughput, not
by memory; the elementwise kernels are one pass over their data.

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` first runs the op's own shape/dtype rule on ``ins``
(its errors name the op, shapes and dtypes; ``outs`` must be what it gives), then refuses what the
kernels lack with errors naming the op, shapes and dtypes (``TypeError`` for a dtype outside
``PLAIN_DTYPES``; ``NotImplementedError`` for a zero point the input's storage cannot hold, which
im2col's padding needs).  No kernel finds anything wrong with data: no ``Check``s.  ``STRIDED`` is
empty: every input arrives dense.  ``NVRTC_OPTIONS`` is elemwise's (no contraction into fused
multiply-adds: every float step rounds as on the CPU).
"""
import functools
import math
import warnings

import numpy as np

from ....ops.base import op_error
from ....ops.quantized import (BatchConvBias, ConvBias, ElemwiseMultiType,
                               QuantizedConvolutionBackwardData, QuantizedElemwise,
                               QuantizedMatrixMul, QuantizedTypeCvt, float_mode, qspec_range,
                               qspec_storage)
from .block import BLOCK_PARTS
from .conv import (_WINDOW_PRELUDE, DEFAULT_WORKSPACE_LIMIT, WORKSPACE_ALIGNMENT, batch_chunks,
                   launch_index_bits, pack_window)
from .elemwise import _plan as _elemwise_plan
from .elemwise import (SUPPORTED_DTYPES, KernelSource, _code, _ctype, _load,
                       _scalar_function, _storage, _store, _to_compute, elemwise_out_dtype,
                       index_bits_for, pack_layout, simplify_layout)
from .launch import THREADS, Buf, Launch, Plan, Workspace, dense_strides, grid_for
from .norm import _rule

__all__ = ["NVRTC_OPTIONS", "NOT_DONE", "DIFFERENCES", "PLAIN_DTYPES", "QUANT_STORAGE",
           "GEMM_TILES", "KT", "SHAPE_DTYPE", "QOUT_DTYPE", "gemm_mode", "qtypecvt_kernel",
           "qelemwise_kernel", "elemwise_multi_type_kernel", "qgemm_kernel", "qim2col_kernel",
           "qcol2im_kernel", "qbias_kernel", "qtypecvt_plan", "qelemwise_plan",
           "elemwise_multi_type_plan", "qmatmul_plan", "conv_bias_plan", "batch_conv_bias_plan",
           "qdeconv_plan", "PLANS", "STRIDED"]

#: NVRTC flags (elemwise.py's: no contraction into fused multiply-adds).
NVRTC_OPTIONS = ("--fmad=false",)
#: The quantized ops (or cases) the CUDA kernels do not run.
NOT_DONE = ("a convolution whose input zero point lies outside its storage range (im2col pads "
            "with it): NotImplementedError",)

DIFFERENCES = """\
* Integer sums are exact on both devices wherever the CPU's float64 sums are (every partial sum
  below 2**53 in magnitude: always for 8-bit operands, whose sums here are int64): bit-identical.
  With a qint32 operand both devices sum in float64, in other orders: beyond 2**53 the rounding
  differs.
* Every float step (dequantize, quantize, the bias rescale, the ElemwiseMultiType mode) is the
  CPU's operation in its precision and rounding, so the quantized results are bit-identical --
  except where a float mode is one of elemwise.py's DIFFERENCES: a transcendental function
  (exp, tanh, sigmoid, erf...) is CUDA's, a few ulp from numpy's, so a value that lands next to a
  rounding boundary of the quantization can take the neighbouring integer (one quantum); a fused
  float16 formula (non-quantized float16 inputs only) rounds once.
* Float -> integer stores follow numpy on x86-64 (out-of-range and NaN give INT_MIN's low bits);
  on an aarch64 host numpy saturates, and the CPU device's results there differ from these.
* QuantizedConvolutionBackwardData ignores conv_mode, as the CPU kernel does.
"""

#: The plain (non-quantized) dtypes the kernels read and write.
PLAIN_DTYPES = tuple(SUPPORTED_DTYPES)
#: The storage dtypes of the quantized dtypes.
QUANT_STORAGE = tuple(np.dtype(d) for d in ("int8", "uint8", "int32"))
#: GEMM tile shapes ``(RM, RN)``: a 16 x 16 block, each thread RM x RN outputs.
GEMM_TILES = ((4, 4), (1, 16), (16, 1))
#: The GEMM's K-tile (a thread's int32 partial sums span this many products).
KT = 16

_B, _F16, _F32, _F64 = (np.dtype(d) for d in ("bool", "float16", "float32", "float64"))
_I32, _I64 = np.dtype("int32"), np.dtype("int64")
_GEMM_THREADS = (16, 16, 1)
_MAX_GRID_YZ = 65535
_MAX_GRID_X = 2 ** 31 - 1

# -- the C preludes -------------------------------------------------------------------------------

_QPRELUDE = r"""#ifndef MGE_QUANT_PRELUDE
#define MGE_QUANT_PRELUDE
/* The quantized kernels' conversions (kernels/quantized.py). */
#if defined(__CUDACC__)
/* a thread's array that lives across barriers: registers on the GPU... */
#define MGE_Q_REGS(T, name, count) T name[1][count];
#define MGE_Q_SLOT 0
/* a static member function kept out of line (called from many unrolled places) */
#define MGE_Q_COLD static __device__ __noinline__
#else
#define MGE_Q_COLD static inline
/* ...and one slot per emulated thread on the host (a phase runs every thread in turn) */
#define MGE_Q_REGS(T, name, count) static T name[1024][count];
#define MGE_Q_SLOT tid
#endif
/* numpy's float -> integer astype on x86-64 (truncating cvttss2si / cvttsd2si): 8- to 32-bit
   targets through int32, NaN or out of range giving INT32_MIN; int64 likewise */
template <class T, class F> MGE_FN T mge_q_f2i(F v) {
    if (sizeof(T) == 8)
        return (T)((v >= (F)-9223372036854775808.0 && v < (F)9223372036854775808.0)
                   ? (long long)v : (-9223372036854775807LL - 1));
    return (T)((v >= (F)-2147483648.0 && v < (F)2147483648.0) ? (int)v : (-2147483647 - 1));
}
/* The precisions numpy quantizes in: each intermediate rounded to the value's dtype */
struct mge_qp16 {
    typedef float T;
    MGE_MEMBER float r(float x) { return mge_h2f(mge_f2h(x)); }
};
struct mge_qp32 {
    typedef float T;
    MGE_MEMBER float r(float x) { return x; }
};
struct mge_qp64 {
    typedef double T;
    MGE_MEMBER double r(double x) { return x; }
};
/* clip(round(v / s) + zp, lo, hi).astype(S), MegEngine's round (halves away from zero) */
template <class P, class S>
MGE_FN S mge_q_quantize(typename P::T v, typename P::T s, typename P::T zp, typename P::T lo,
                        typename P::T hi) {
    typedef typename P::T T;
    T t = P::r(v / s);
    T r = mge_sign<T>(t) * mge_floor(P::r(mge_fabs(t) + (T)0.5));
    r = P::r(r + zp);
    r = r < lo ? lo : (r > hi ? hi : r);
    return mge_q_f2i<S, T>(r);
}
/* (float32(q) - zp) * s */
template <class S> MGE_FN float mge_q_dequant(S q, float zp, float s) {
    float v = (float)q;
    v = v - zp;
    return v * s;
}
/* The accumulator (bias added) as MegEngine's int32: relu, then saturated */
MGE_FN int mge_q_saturate(double a, int relu) {
    if (relu) a = a > 0.0 ? a : 0.0;
    a = a < -2147483648.0 ? -2147483648.0 : (a > 2147483647.0 ? 2147483647.0 : a);
    return (int)a;
}
/* The epilogues' parameters: the accumulator's scale, the output quantization (float32) */
struct mge_qout {
    float acc_scale, scale, zp, lo, hi;
    int relu;
};
/* The raw accumulator (the transposed convolution's columns) */
template <class TA> struct mge_qep_raw {
    typedef TA O;
    template <class A>
    MGE_MEMBER void store(O* c, long long i, A acc, double bias, const mge_qout& p) {
        c[i] = (O)acc;
    }
};
#endif /* MGE_QUANT_PRELUDE */
"""

_QGEMM = r"""#ifndef MGE_QGEMM
#define MGE_QGEMM
#define MGE_QG_KT @KT@
/* A batched GEMM C = A @ B of M x K and K x N; batch item b = outer * groups + inner; strides in
   elements; C's column n at (n / np_split) * c_nhi + (n % np_split) * c_n */
struct mge_qgemm_shape {
    long long M, N, K, batch, groups, np_split;
    long long a_outer, a_inner, a_m, a_k;
    long long b_outer, b_inner, b_k, b_n;
    long long c_outer, c_inner, c_m, c_n, c_nhi;
    long long bias_inner, bias_m;
    long long za, zb;
};
/* SA, SB: storage types; V: a tile's values (zero point removed); TT: a K-tile's sums; TA: the
   accumulators; EP: the epilogue; a 16 x 16 block, each thread RM x RN outputs */
template <class SA, class SB, class V, class TT, class TA, class EP, int RM, int RN>
MGE_BLOCK_FN void mge_qgemm(const SA* A, const SB* B, typename EP::O* C, const double* bias,
                            const mge_qgemm_shape& s, const mge_qout& p)
{
    /* rows padded by one: a tile loaded k-fastest stores to distinct banks */
    MGE_SHARED V as[MGE_QG_KT][16 * RM + 1];
    MGE_SHARED V bs[MGE_QG_KT][16 * RN + 1];
    MGE_Q_REGS(TA, acc, RM * RN)
    const int TM = 16 * RM, TN = 16 * RN, KTILE = MGE_QG_KT;
    const long long tiles_m = (s.M + TM - 1) / TM, tiles_n = (s.N + TN - 1) / TN;
    MGE_FOR_BLOCKS
    for (long long z = blockIdx.z; z < s.batch; z += gridDim.z)
    for (long long tm = blockIdx.y; tm < tiles_m; tm += gridDim.y)
    for (long long tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const long long outer = z / s.groups, inner = z - outer * s.groups;
        const SA* a = A + outer * s.a_outer + inner * s.a_inner;
        const SB* b = B + outer * s.b_outer + inner * s.b_inner;
        const long long m0 = tm * TM, n0 = tn * TN;
        MGE_THREADS { MGE_THREAD_IDS
            MGE_UNROLL
            for (int e = 0; e < RM * RN; ++e) acc[MGE_Q_SLOT][e] = 0;
        }
        for (long long k0 = 0; k0 < s.K; k0 += KTILE) {
            MGE_THREADS { MGE_THREAD_IDS
                /* consecutive threads read consecutive addresses of whichever index is dense */
                for (int e = (int)tid; e < KTILE * TM; e += 256) {
                    int kk, mm;
                    if (s.a_k == 1) { kk = e % KTILE; mm = e / KTILE; }
                    else { mm = e % TM; kk = e / TM; }
                    long long m = m0 + mm, k = k0 + kk;
                    as[kk][mm] = (m < s.M && k < s.K)
                        ? (V)((V)a[m * s.a_m + k * s.a_k] - (V)s.za) : (V)0;
                }
                for (int e = (int)tid; e < KTILE * TN; e += 256) {
                    int kk, nn;
                    if (s.b_n == 1) { nn = e % TN; kk = e / TN; }
                    else { kk = e % KTILE; nn = e / KTILE; }
                    long long n = n0 + nn, k = k0 + kk;
                    bs[kk][nn] = (n < s.N && k < s.K)
                        ? (V)((V)b[k * s.b_k + n * s.b_n] - (V)s.zb) : (V)0;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                TT t[RM * RN];
                MGE_UNROLL
                for (int e = 0; e < RM * RN; ++e) t[e] = 0;
                for (int kk = 0; kk < KTILE; ++kk) {
                    TT av[RM], bv[RN];
                    MGE_UNROLL
                    for (int i = 0; i < RM; ++i) av[i] = (TT)as[kk][ty + 16 * i];
                    MGE_UNROLL
                    for (int j = 0; j < RN; ++j) bv[j] = (TT)bs[kk][tx + 16 * j];
                    MGE_UNROLL
                    for (int i = 0; i < RM; ++i) {
                        MGE_UNROLL
                        for (int j = 0; j < RN; ++j) t[i * RN + j] += av[i] * bv[j];
                    }
                }
                MGE_UNROLL
                for (int e = 0; e < RM * RN; ++e) acc[MGE_Q_SLOT][e] += (TA)t[e];
            }
            MGE_SYNC
        }
        MGE_THREADS { MGE_THREAD_IDS
            /* column j of this thread is n0 + tx + 16 j: one division, then steps of 16 */
            long long n = n0 + tx;
            long long nh = n / s.np_split, nl = n - nh * s.np_split;
            MGE_UNROLL
            for (int j = 0; j < RN; ++j) {
                if (n < s.N) {
                    long long col = outer * s.c_outer + inner * s.c_inner + nh * s.c_nhi
                                    + nl * s.c_n;
                    MGE_UNROLL
                    for (int i = 0; i < RM; ++i) {
                        long long m = m0 + ty + 16 * i;
                        if (m < s.M) {
                            double bv = bias ? bias[inner * s.bias_inner + m * s.bias_m] : 0.0;
                            EP::store(C, col + m * s.c_m, acc[MGE_Q_SLOT][i * RN + j], bv, p);
                        }
                    }
                }
                n += 16;
                nl += 16;
                while (nl >= s.np_split) { nl -= s.np_split; ++nh; }
            }
        }
    }
}
#endif /* MGE_QGEMM */
""".replace("@KT@", str(KT))

_QIM2COL = r"""#ifndef MGE_QIM2COL
#define MGE_QIM2COL
/* x: (images, channels, *in) -> col: row c * K + kpos (K - 1 - kpos when flip), column
   n * P + p; a padded entry is pad (the zero point).  A thread per (c, n, p), p fastest. */
template <class S, class I>
MGE_FN void mge_qim2col(S* col, const S* x, I n, I channels, I images, mge_window w, S pad,
                        int flip)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in), K = mge_volume<I>(w.k);
    const I row = images * P;
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % P, r = i / P;
        I img = r % images, c = r / images;
        int o2 = (int)(p % w.out[2]);
        I q = p / w.out[2];
        int o1 = (int)(q % w.out[1]), o0 = (int)(q / w.out[1]);
        const S* src = x + (img * channels + c) * IN;
        S* dst = col + (c * K + (flip ? K - 1 : 0)) * row + img * P + p;
        const I step = flip ? -row : row;
        for (int a = 0; a < w.k[0]; ++a) {
            int i0 = o0 * w.stride[0] - w.pad[0] + a * w.dil[0];
            bool v0 = i0 >= 0 && i0 < w.in[0];
            for (int b = 0; b < w.k[1]; ++b) {
                int i1 = o1 * w.stride[1] - w.pad[1] + b * w.dil[1];
                bool v1 = v0 && i1 >= 0 && i1 < w.in[1];
                for (int e = 0; e < w.k[2]; ++e) {
                    int i2 = o2 * w.stride[2] - w.pad[2] + e * w.dil[2];
                    *dst = (v1 && i2 >= 0 && i2 < w.in[2])
                               ? src[((I)i0 * w.in[1] + i1) * w.in[2] + i2] : pad;
                    dst += step;
                }
            }
        }
    }
}
#endif /* MGE_QIM2COL */
"""

_QCOL2IM = r"""#ifndef MGE_QCOL2IM
#define MGE_QCOL2IM
/* The transposed convolution's sum: col (rows c * K + kpos of raw accumulators TA, columns
   n * P + p) -> out (images, channels, *in) through the epilogue EP.  A thread per output
   element adds, in kernel-position order, the entries of every position whose window reads it
   (deterministic: no atomics). */
template <class TA, class EP, class I>
MGE_FN void mge_qcol2im(typename EP::O* out, const TA* col, I n, I channels, I images,
                        mge_window w, mge_qout prm)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in), K = mge_volume<I>(w.k);
    const I row = images * P;
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I s = i % IN, r = i / IN;
        I c = r % channels, img = r / channels;
        int x2 = (int)(s % w.in[2]);
        I q = s / w.in[2];
        int x1 = (int)(q % w.in[1]), x0 = (int)(q / w.in[1]);
        const TA* base = col + c * K * row + img * P;
        TA acc = 0;
        for (int a = 0; a < w.k[0]; ++a) {
            int t0 = x0 + w.pad[0] - a * w.dil[0];
            if (t0 < 0 || t0 % w.stride[0] != 0 || t0 / w.stride[0] >= w.out[0]) continue;
            for (int b = 0; b < w.k[1]; ++b) {
                int t1 = x1 + w.pad[1] - b * w.dil[1];
                if (t1 < 0 || t1 % w.stride[1] != 0 || t1 / w.stride[1] >= w.out[1]) continue;
                for (int e = 0; e < w.k[2]; ++e) {
                    int t2 = x2 + w.pad[2] - e * w.dil[2];
                    if (t2 < 0 || t2 % w.stride[2] != 0 || t2 / w.stride[2] >= w.out[2]) continue;
                    I kpos = ((I)a * w.k[1] + b) * w.k[2] + e;
                    I p = ((I)(t0 / w.stride[0]) * w.out[1] + t1 / w.stride[1]) * w.out[2]
                          + t2 / w.stride[2];
                    acc += base[kpos * row + p];
                }
            }
        }
        EP::store(out, (long long)i, acc, 0.0, prm);
    }
}
#endif /* MGE_QCOL2IM */
"""

_QBIAS = r"""#ifndef MGE_QBIAS
#define MGE_QBIAS
/* The CPU's _add_bias per channel, in float64: b - zp, rescaled to the accumulator's scale
   (numpy's round, half to even: rint) where the scales differ */
template <class S>
MGE_FN void mge_qbias(double* out, const S* b, long long n, double zp, double sb, double acc,
                      int rescale) {
    MGE_LOOP(unsigned long long, i, n) {
        double v = (double)b[i] - zp;
        out[i] = rescale ? rint(v * sb / acc) : v;
    }
}
#endif /* MGE_QBIAS */
"""

_BASE = BLOCK_PARTS + (("MGE_WINDOW_PRELUDE", _WINDOW_PRELUDE),
                       ("MGE_QUANT_PRELUDE", _QPRELUDE))

#: ``struct mge_qgemm_shape``'s bytes.
SHAPE_DTYPE = np.dtype([(f, np.int64) for f in (
    "M", "N", "K", "batch", "groups", "np_split", "a_outer", "a_inner", "a_m", "a_k", "b_outer",
    "b_inner", "b_k", "b_n", "c_outer", "c_inner", "c_m", "c_n", "c_nhi", "bias_inner",
    "bias_m", "za", "zb")], align=True)
#: ``struct mge_qout``'s bytes.
QOUT_DTYPE = np.dtype([("acc_scale", np.float32), ("scale", np.float32), ("zp", np.float32),
                       ("lo", np.float32), ("hi", np.float32), ("relu", np.int32)], align=True)


# -- dtypes and targets ---------------------------------------------------------------------------

def _precision(d):
    """The float dtype numpy quantizes a value of dtype ``d`` in (float32 for non-floats)."""
    return d if d.kind == "f" else _F32


_PREC = {_F16: "mge_qp16", _F32: "mge_qp32", _F64: "mge_qp64"}


def _rounded(value, dtype):
    """``value`` as numpy's 0-d array of ``dtype`` holds it (float16 overflows to inf)."""
    with np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(np.asarray(value, dtype=dtype))


def _param_scalar(value, dtype):
    """The kernel argument of a float parameter computed in ``dtype`` (float16: as a float)."""
    return np.float64(value) if dtype == _F64 else np.float32(value)


def _target(spec):
    """A dtype parameter as a target: ``("q", storage, spec)`` or ``("plain", dtype, None)``."""
    if isinstance(spec, tuple):
        return ("q", qspec_storage(spec), spec)
    return ("plain", np.dtype(spec), None)


def _target_code(target):
    kind, d, _ = target
    return ("q" if kind == "q" else "") + _code(d)


class _Params:
    """The scalar parameters a kernel body asks for: C declarations (their names numbered) and
    the plan's values for them."""

    def __init__(self):
        self.decls, self.values = [], []

    def add(self, ctype, value, hint="p"):
        """A new parameter of C type ``ctype`` given ``value``; its C name."""
        name = f"{hint}{len(self.decls)}"
        self.decls.append(f"{ctype} {name}")
        self.values.append(value)
        return name


def _dequant_expr(load, spec, params):
    """C (float) of the stored value ``load`` of quantization ``spec``, dequantized."""
    storage = qspec_storage(spec)
    zp = params.add("float", np.float32(_rounded(spec[2] or 0, _F32)), "dzp")
    s = params.add("float", np.float32(_rounded(spec[1], _F32)), "ds")
    return f"mge_q_dequant<{_storage(storage)}>({load}, {zp}, {s})"


def _quantize_expr(expr, src, spec, params):
    """C of the value ``expr`` (computed as dtype ``src``) quantized to ``spec``, in numpy's
    precision for ``src``; the storage value."""
    prec = _precision(src)
    v = _to_compute(expr, src, prec)
    lo, hi = qspec_range(spec)
    ctype = _ctype(prec)
    names = [params.add(ctype, _param_scalar(_rounded(x, prec), prec), h) for x, h in
             ((spec[1], "qs"), (spec[2] or 0, "qzp"), (lo, "qlo"), (hi, "qhi"))]
    storage = _storage(qspec_storage(spec))
    return f"mge_q_quantize<{_PREC[prec]}, {storage}>({v}, {', '.join(names)})"


def _astype_expr(expr, src, dst):
    """C of the value ``expr`` (computed as ``src``) stored as numpy's ``astype(dst)`` stores it
    (x86-64's float -> integer conversion)."""
    if src.kind == "f" and dst.kind in "iu":
        return f"mge_q_f2i<{_storage(dst)}, {_ctype(src)}>({expr})"
    return _store(expr, src, dst)


def _convert_expr(expr, src, target, params):
    """C of the value ``expr`` (computed as ``src``) converted to ``target`` (``_target``): the
    storage value the CPU's ``typecvt(v, None, target)`` gives."""
    kind, d, spec = target
    if kind == "q":
        return _quantize_expr(expr, src, spec, params)
    return _astype_expr(expr, src, d)


def _value_expr(expr, src, dst):
    """C of ``expr`` (computed as ``src``) as a value of dtype ``dst`` in ``dst``'s compute type:
    what numpy stores, read back (a float16 result rounded)."""
    return _load(_store(expr, src, dst), dst, dst)


def _literal(value, d):
    """A C constant of dtype ``d`` holding numpy's ``np.asarray(value, d)``."""
    v = np.asarray(value, dtype=d)
    if d == _B:
        return "true" if bool(v) else "false"
    if d.kind == "f":
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"CUDA quantized kernel: constant {value!r} is not finite in {d}")
        return f"({_ctype(d)}){f!r}"
    return f"({_ctype(d)}){int(v)}"


def _check_plain(op, d, descs):
    if d not in PLAIN_DTYPES:
        raise op_error(TypeError, op, f"CUDA plan: unsupported dtype {d} (the kernels take "
                       f"{', '.join(str(x) for x in PLAIN_DTYPES)})", descs)


# -- elementwise kernels --------------------------------------------------------------------------

def _ew_kernel(name, ins, out, contiguous, index_bits, body, params, parts=()):
    """The grid-stride kernel ``name`` over arrays of storage dtypes ``ins`` into ``out``:
    ``body(loads)`` gives ``(statements, expression)`` of one output element from the inputs'
    element expressions; ``params`` (a ``_Params``, filled by ``body``) follow the other
    parameters; ``parts()`` gives the pieces the body calls (after it ran)."""
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA kernel {name}: index_bits must be 32 or 64, got {index_bits!r}")
    ptrs = [f"{_storage(out)}* out"] + [f"const {_storage(d)}* in{k}" for k, d in enumerate(ins)]
    if contiguous:
        head = ["long long n"]
        loads = [f"in{k}[i]" for k in range(len(ins))]
        where, index = "out[i]", ""
        loop = "MGE_LOOP(unsigned long long, i, n)"
        name += "_c"
    else:
        idx = "int" if index_bits == 32 else "long long"
        k = len(ins) + 1
        head = [f"{idx} n", f"mge_layout<{k}, {idx}> layout"]
        loads = [f"in{j}[off[{j + 1}]]" for j in range(len(ins))]
        where = "out[off[0]]"
        index = (f"        {idx} off[{k}];\n"
                 f"        mge_offsets<{k}, {idx}>(layout, ({idx})i, off);\n")
        loop = f"MGE_LOOP(unsigned {idx}, i, n)"
        name += f"_s{index_bits}"
    statements, expr = body(loads)
    stmts = "".join(f"        {s}\n" for s in statements)
    allp = ptrs + head + list(params.decls)
    text = (f"MGE_KERNEL {name}({', '.join(allp)})\n{{\n    {loop} {{\n{index}{stmts}"
            f"        {where} = {expr};\n    }}\n}}\n")
    pieces = tuple(parts() if callable(parts) else parts)
    return KernelSource(name, (*_BASE, *pieces, (name, text)), tuple(allp), bool(contiguous),
                        index_bits, len(ins))


def _leaf(load, stored, spec, params):
    """``(C expression, dtype)`` of an input element: dequantized (float32) where ``spec`` is a
    qspec, else the stored value of dtype ``stored`` in its compute type."""
    if isinstance(spec, tuple):
        return _dequant_expr(load, spec, params), _F32
    return _load(load, stored, stored), stored


def qtypecvt_kernel(src, dtype, stored, contiguous=True, index_bits=64):
    """The ``QuantizedTypeCvt`` kernel from input storage ``stored`` (quantization ``src``, a
    qspec or None) to ``dtype`` (a qspec or a plain dtype); ``(kernel, scalar arguments)``:
    params ``(out, in0, n[, layout], *scalars)``."""
    return _qtypecvt_kernel(src, dtype, np.dtype(stored), bool(contiguous), index_bits)


@functools.lru_cache(maxsize=4096)  # (keyed by the scales too; the text is not)
def _qtypecvt_kernel(src, dtype, stored, contiguous, index_bits):
    params = _Params()
    target = _target(dtype)

    def body(loads):
        v, vd = _leaf(loads[0], stored, src, params)
        return [], _convert_expr(v, vd, target, params)

    tag = ("q" if src is not None else "") + _code(stored)
    name = f"mge_qcvt_{tag}_to_{_target_code(target)}"
    kernel = _ew_kernel(name, (stored,), target[1], contiguous, index_bits, body, params)
    return kernel, tuple(params.values)


def qelemwise_kernel(op, stored, contiguous=True, index_bits=64):
    """The ``QuantizedElemwise`` kernel of ``op`` (its mode, quantization and inputs' ``in_q``) on
    inputs stored as ``stored``; ``(kernel, scalar arguments)``."""
    return _qelemwise_kernel(op, tuple(np.dtype(d) for d in stored), bool(contiguous),
                             index_bits)


@functools.lru_cache(maxsize=4096)
def _qelemwise_kernel(op, stored, contiguous, index_bits):
    params = _Params()
    spec = op.dtype
    storage = qspec_storage(spec)
    target = _target(spec)
    lo, hi = qspec_range(spec)
    specs = [op.input_spec(k) for k in range(len(stored))]

    def body(loads):
        vals = []
        for load, d, s in zip(loads, stored, specs):
            if s == spec:
                vals.append(f"(long long){load}")
                continue
            v, vd = _leaf(load, d, s if isinstance(s, tuple) else None, params)
            vals.append(f"(long long){_convert_expr(v, vd, target, params)}")
        r = f"{vals[0]} + {vals[1]}" if op.mode == "add" else f"({vals[0]} > 0 ? {vals[0]} : 0)"
        stmts = [f"long long r = {r};",
                 f"r = r < {lo}LL ? {lo}LL : (r > {hi}LL ? {hi}LL : r);"]
        return stmts, f"({_storage(storage)})r"

    # an input of the op's quantization by its storage; another by "q" (quantized) or "f"
    tags = [_code(d) if s == spec else ("q" if isinstance(s, tuple) else "f") + _code(d)
            for d, s in zip(stored, specs)]
    name = f"mge_qew_{op.mode}_{'_'.join(tags)}_to_q{_code(storage)}"
    kernel = _ew_kernel(name, stored, storage, contiguous, index_bits, body, params)
    return kernel, tuple(params.values)


class _Steps:
    """The statements of a fused float formula: every step is a C local of its dtype's compute
    type holding what numpy's step stores (``elemwise.py``'s scalar functions do the modes)."""

    def __init__(self):
        self.lines, self.parts = [], []

    def let(self, expr, d):
        """A new local of dtype ``d`` holding ``expr``: ``(name, d)``."""
        name = f"v{len(self.lines)}"
        self.lines.append(f"{_ctype(d)} {name} = {expr};")
        return name, d

    def __call__(self, mode, *vals):
        ins = tuple(d for _, d in vals)
        out = elemwise_out_dtype(mode, ins)
        plan = _elemwise_plan(mode, ins, out)
        fn, text = _scalar_function(mode, plan)
        if all(g != fn for g, _ in self.parts):
            self.parts.append((fn, text))
        args = [_to_compute(v, d, a) for (v, d), a in zip(vals, plan.args)]
        return self.let(_value_expr(f"{fn}({', '.join(args)})", plan.ret, out), out)

    @staticmethod
    def like(val, value):
        """``value`` as a 0-d array of ``val``'s dtype (the CPU kernel's ``_like``)."""
        return _literal(value, val[1]), val[1]


# MegEngine's float modes mge composes of its own (device/cpu/kernels/quantized.py's _COMPOSED),
# in the same steps: e(mode, *values), e.like(value, number)
_COMPOSED = {
    "fuse_mul_add3": lambda e, a, b, c: e("add", e("mul", a, b), c),
    "fuse_mul_add4": lambda e, a, b, c, d: e("add", e("mul", a, b), e("mul", c, d)),
    "fuse_add_sigmoid": lambda e, a, b: e("sigmoid", e("add", a, b)),
    "fuse_add_tanh": lambda e, a, b: e("tanh", e("add", a, b)),
    "fuse_add_h_swish": lambda e, a, b: e("hswish", e("add", a, b)),
    "erfc": lambda e, a: e("sub", e.like(a, 1), e("erf", a)),
    "prelu": lambda e, x, w: e("add", e("max", x, e.like(x, 0)),
                               e("mul", w, e("min", x, e.like(x, 0)))),
    "fast_tanh_grad": lambda e, x, dy: e("tanh_grad", e("tanh", x), dy),
}


def elemwise_multi_type_kernel(op, stored, out_dtype, contiguous=True, index_bits=64):
    """The fused ``ElemwiseMultiType`` kernel of ``op`` on inputs stored as ``stored`` giving
    ``out_dtype`` (the rule's); ``(kernel, scalar arguments)``."""
    return _emt_kernel(op, tuple(np.dtype(d) for d in stored), np.dtype(out_dtype),
                       bool(contiguous), index_bits)


@functools.lru_cache(maxsize=4096)
def _emt_kernel(op, stored, out_dtype, contiguous, index_bits):
    params = _Params()
    steps = _Steps()
    mode, _ = float_mode(op.mode)
    target = _target(op.dtype) if op.dtype is not None else None

    def body(loads):
        vals = [steps.let(*_leaf(load, d, q, params)) for load, d, q in
                zip(loads, stored, op.in_q)]
        fn = _COMPOSED.get(mode)
        v, vd = fn(steps, *vals) if fn is not None else steps(mode, *vals)
        if target is None:
            return steps.lines, _store(v, vd, out_dtype)
        return steps.lines, _convert_expr(v, vd, target, params)

    store = out_dtype if target is None else target[1]
    tags = [("q" if q is not None else "") + _code(d) for d, q in zip(stored, op.in_q)]
    # the float result itself ("v"), or a target
    out_tag = "v" + _code(out_dtype) if target is None else _target_code(target)
    name = f"mge_qemt_{mode}_{'_'.join(tags)}_to_{out_tag}"
    kernel = _ew_kernel(name, stored, store, contiguous, index_bits, body, params,
                        lambda: steps.parts)
    return kernel, tuple(params.values)


# -- GEMM, im2col, col2im, bias -------------------------------------------------------------------

def _epilogue(target, acc_spec):
    """``(struct name, guarded text)`` of the epilogue converting the saturated accumulator (qspec
    ``acc_spec``) to ``target``; ``None`` target: the raw accumulator (``mge_qep_raw``)."""
    kind, d, spec = target
    if kind == "q" and spec == acc_spec:
        name, conv = "mge_qep_acc", "q"
    else:
        name = f"mge_qep_{_target_code(target)}"
        v = "mge_q_dequant<int>(q, 0.0f, acc_scale)"
        if kind == "q":
            conv = f"mge_q_quantize<mge_qp32, {_storage(d)}>({v}, scale, zp, lo, hi)"
        else:
            conv = _astype_expr(v, _F32, d)
    store = _storage(d)
    # the conversion is a call (MGE_Q_COLD): a tile's stores are many, each runs once per tile
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"struct {name} {{\n    typedef {store} O;\n"
            f"    MGE_Q_COLD {store} convert(int q, float acc_scale, float scale, float zp, "
            f"float lo, float hi) {{\n        return {conv};\n    }}\n"
            f"    template <class A>\n"
            f"    MGE_MEMBER void store(O* c, long long i, A acc, double bias, "
            f"const mge_qout& p) {{\n"
            f"        c[i] = convert(mge_q_saturate((double)acc + bias, p.relu), p.acc_scale, "
            f"p.scale, p.zp, p.lo, p.hi);\n    }}\n}};\n#endif\n")
    return name, text


def _qout(acc_spec, target, relu):
    """The ``mge_qout`` argument: the accumulator's scale and the output quantization (float32),
    ``relu``."""
    v = np.zeros((), QOUT_DTYPE)
    v["acc_scale"] = _rounded(acc_spec[1], _F32)
    if target is not None and target[0] == "q":
        spec = target[2]
        lo, hi = qspec_range(spec)
        v["scale"], v["zp"] = _rounded(spec[1], _F32), _rounded(spec[2] or 0, _F32)
        v["lo"], v["hi"] = _rounded(lo, _F32), _rounded(hi, _F32)
    else:
        v["scale"] = 1.0
    v["relu"] = int(bool(relu))
    return v[()]


def gemm_mode(a_stored, a_spec, b_stored, b_spec):
    """``"i32"`` when int32 sums of ``KT`` products of the operands' values (storage values minus
    the zero points) are exact, else ``"f64"`` (see the module docstring)."""
    def bound(stored, spec):
        info = np.iinfo(stored)
        zp = spec[2] or 0
        return max(abs(info.min - zp), abs(info.max - zp))
    ba, bb = bound(a_stored, a_spec), bound(b_stored, b_spec)
    return "i32" if ba * bb * KT < 2 ** 31 and max(ba, bb) < 2 ** 31 else "f64"


_MODE_TYPES = {"i32": ("int", "int", "long long"), "f64": ("double", "double", "double")}


def qgemm_kernel(a_stored, b_stored, mode, target, acc_spec, tile=(4, 4)):
    """The integer GEMM kernel of operands stored as ``a_stored``/``b_stored``, accumulating in
    ``mode`` (``gemm_mode``), its epilogue converting to ``target`` (``("q", storage, spec)``,
    ``("plain", dtype, None)``, or ``None``: the raw accumulators), tile ``(RM, RN)`` of
    ``GEMM_TILES``: params ``(const SA* a, const SB* b, O* c, const double* bias,
    mge_qgemm_shape s, mge_qout p)``, launched on 16 x 16 blocks."""
    if mode not in _MODE_TYPES:
        raise ValueError(f"CUDA quantized GEMM kernel: mode must be 'i32' or 'f64', got {mode!r}")
    if tuple(tile) not in GEMM_TILES:
        raise ValueError(f"CUDA quantized GEMM kernel: tile must be one of {GEMM_TILES}, got "
                         f"{tile!r}")
    ds = tuple(np.dtype(d) for d in (a_stored, b_stored))
    for d in ds:
        if d not in QUANT_STORAGE:
            raise TypeError(f"CUDA quantized GEMM kernel: unsupported operand dtype {d} (takes "
                            f"{', '.join(str(q) for q in QUANT_STORAGE)})")
    return _qgemm_kernel(*ds, mode, target, acc_spec, tuple(tile))


@functools.lru_cache(maxsize=None)
def _qgemm_cached(a, b, mode, tile, ep_name, ep_text):
    v, tt, ta = _MODE_TYPES[mode]
    if ep_name is None:  # the raw accumulators
        ep, parts, out, tag = f"mge_qep_raw<{ta}>", (), ta, "raw"
    else:
        ep, parts, tag = ep_name, ((ep_name, ep_text),), ep_name[len("mge_qep_"):]
        out = _epilogue_out(ep_text)
    rm, rn = tile
    name = f"mge_qgemm_{_code(a)}_{_code(b)}_{mode}_{tag}_{rm}x{rn}"
    params = (f"const {_storage(a)}* a", f"const {_storage(b)}* b", f"{out}* c",
              "const double* bias", "mge_qgemm_shape s", "mge_qout p")
    call = (f"mge_qgemm<{_storage(a)}, {_storage(b)}, {v}, {tt}, {ta}, {ep}, {rm}, {rn}>"
            f"(a, b, c, bias, s, p)")
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {call};\n}}\n"
    return KernelSource(name, (*_BASE, *parts, ("MGE_QGEMM", _QGEMM), (name, text)), params,
                        False, 64, 2)


def _epilogue_out(text):
    # the epilogue's output C type, from its typedef
    return text.split("typedef ", 1)[1].split(" O;", 1)[0]


def _qgemm_kernel(a, b, mode, target, acc_spec, tile):
    if target is None:
        return _qgemm_cached(a, b, mode, tile, None, None)
    ep_name, ep_text = _epilogue(target, acc_spec)
    return _qgemm_cached(a, b, mode, tile, ep_name, ep_text)


def qim2col_kernel(stored, index_bits=32):
    """The quantized ``im2col`` of storage ``stored``: params ``(S* col, const S* x, I n,
    I channels, I images, mge_window w, S pad, int flip)``, ``n = channels * images * P``."""
    d = np.dtype(stored)
    if d not in QUANT_STORAGE:
        raise TypeError(f"CUDA quantized im2col kernel: unsupported dtype {d}")
    return _qim2col_kernel(d, index_bits)


@functools.lru_cache(maxsize=None)
def _qim2col_kernel(d, index_bits):
    idx, s = _index_type("im2col", index_bits), _storage(d)
    params = (f"{s}* col", f"const {s}* x", f"{idx} n", f"{idx} channels", f"{idx} images",
              "mge_window w", f"{s} pad", "int flip")
    name = f"mge_qim2col_{_code(d)}_s{index_bits}"
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    mge_qim2col<{s}, {idx}>(col, x, n, "
            f"channels, images, w, pad, flip);\n}}\n")
    return KernelSource(name, (*_BASE, ("MGE_QIM2COL", _QIM2COL), (name, text)), params, False,
                        index_bits, 1)


def qcol2im_kernel(mode, target, acc_spec, index_bits=32):
    """The transposed convolution's ``col2im`` summing raw accumulators of ``mode`` into
    ``target`` through the epilogue: params ``(O* out, const TA* col, I n, I channels,
    I images, mge_window w, mge_qout p)``, ``n = images * channels * IN``."""
    if mode not in _MODE_TYPES:
        raise ValueError(f"CUDA quantized col2im kernel: mode must be 'i32' or 'f64', got "
                         f"{mode!r}")
    ep_name, ep_text = _epilogue(target, acc_spec)
    return _qcol2im_kernel(mode, ep_name, ep_text, index_bits)


@functools.lru_cache(maxsize=None)
def _qcol2im_kernel(mode, ep_name, ep_text, index_bits):
    idx = _index_type("col2im", index_bits)
    ta = _MODE_TYPES[mode][2]
    params = (f"{_epilogue_out(ep_text)}* out", f"const {ta}* col", f"{idx} n", f"{idx} channels",
              f"{idx} images", "mge_window w", "mge_qout p")
    name = f"mge_qcol2im_{mode}_{ep_name[len('mge_qep_'):]}_s{index_bits}"
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    mge_qcol2im<{ta}, {ep_name}, {idx}>"
            f"(out, col, n, channels, images, w, p);\n}}\n")
    return KernelSource(name, (*_BASE, (ep_name, ep_text), ("MGE_QCOL2IM", _QCOL2IM),
                               (name, text)), params, False, index_bits, 1)


def qbias_kernel(stored):
    """The bias conversion of storage ``stored`` into float64: params ``(double* out,
    const S* b, long long n, double zp, double sb, double acc, int rescale)``."""
    d = np.dtype(stored)
    if d not in QUANT_STORAGE:
        raise TypeError(f"CUDA quantized bias kernel: unsupported dtype {d}")
    return _qbias_kernel(d)


@functools.lru_cache(maxsize=None)
def _qbias_kernel(d):
    s = _storage(d)
    params = ("double* out", f"const {s}* b", "long long n", "double zp", "double sb",
              "double acc", "int rescale")
    name = f"mge_qbias_{_code(d)}"
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    mge_qbias<{s}>(out, b, n, zp, sb, "
            f"acc, rescale);\n}}\n")
    return KernelSource(name, (*_BASE, ("MGE_QBIAS", _QBIAS), (name, text)), params, True, 64, 1)


def _index_type(what, index_bits):
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA quantized {what} kernel: index_bits must be 32 or 64, got "
                         f"{index_bits!r}")
    return "int" if index_bits == 32 else "long long"


def _index(bits, value):
    return np.int32(value) if bits == 32 else np.int64(value)


# -- elementwise plans ----------------------------------------------------------------------------

def _broadcast_layout(out_shape, ins):
    """``(contiguous, n, layout, bits)`` of an elementwise launch over ``out_shape`` reading
    ``ins`` (dense ``Layout``s, numpy-broadcast against it)."""
    out_shape = tuple(out_shape)
    if all(tuple(i.shape) == out_shape for i in ins):
        return True, math.prod(out_shape), None, 64
    nd = len(out_shape)
    strides = [dense_strides(out_shape)]
    for i in ins:
        shape = (1,) * (nd - len(i.shape)) + tuple(i.shape)
        dense = dense_strides(shape)
        strides.append(tuple(0 if s == 1 and o != 1 else st
                             for s, o, st in zip(shape, out_shape, dense)))
    shape, strides = simplify_layout(out_shape, strides)
    bits = index_bits_for(shape, strides)
    return False, math.prod(out_shape), pack_layout(shape, strides, bits), bits


def _ew_launch(make, out_shape, ins):
    """The ``Plan`` of one elementwise launch: ``make(contiguous, bits)`` gives ``(kernel,
    scalars)``."""
    contiguous, n, layout, bits = _broadcast_layout(out_shape, ins)
    if n == 0:
        return Plan((), notes=("empty: nothing to write",))
    kernel, scalars = make(contiguous, bits)
    head = (np.int64(n),) if contiguous else (_index(bits, n), layout)
    ptrs = (Buf("out0"),) + tuple(Buf(f"in{k}") for k in range(len(ins)))
    note = "dense" if contiguous else f"broadcast, {bits}-bit indices"
    return Plan((Launch(kernel, grid_for(n), (THREADS,), ptrs + head + scalars),),
                notes=(note,))


def _descs(ins):
    return [(tuple(i.shape), np.dtype(i.dtype)) for i in ins]


def qtypecvt_plan(op, ins, outs):
    """The ``Plan`` of ``QuantizedTypeCvt``: one elementwise launch (dequantize or load, then
    quantize or ``astype``)."""
    (desc,) = _rule(op, ins, outs)
    x = ins[0]
    _check_plain(op, np.dtype(x.dtype), _descs(ins))
    if not isinstance(op.dtype, tuple):
        _check_plain(op, np.dtype(op.dtype), _descs(ins))
    return _ew_launch(lambda c, b: qtypecvt_kernel(op.src, op.dtype, x.dtype, c, b), desc.shape,
                      ins)


def qelemwise_plan(op, ins, outs):
    """The ``Plan`` of ``QuantizedElemwise``: one elementwise launch (inputs of other
    quantizations converted first, int64 ``add``/``relu``, clipped)."""
    (desc,) = _rule(op, ins, outs)
    for i in ins:
        _check_plain(op, np.dtype(i.dtype), _descs(ins))
    stored = tuple(np.dtype(i.dtype) for i in ins)
    return _ew_launch(lambda c, b: qelemwise_kernel(op, stored, c, b), desc.shape, ins)


def elemwise_multi_type_plan(op, ins, outs):
    """The ``Plan`` of ``ElemwiseMultiType``: one fused elementwise launch (dequantize, the float
    mode's steps, quantize)."""
    (desc,) = _rule(op, ins, outs)
    descs = _descs(ins)
    for i in ins:
        _check_plain(op, np.dtype(i.dtype), descs)
    if op.dtype is not None and not isinstance(op.dtype, tuple):
        _check_plain(op, np.dtype(op.dtype), descs)
    stored = tuple(np.dtype(i.dtype) for i in ins)
    out = np.dtype(desc.dtype)

    def make(contiguous, bits):
        try:
            return elemwise_multi_type_kernel(op, stored, out, contiguous, bits)
        except (TypeError, NotImplementedError) as e:  # a step's mode refuses these dtypes
            raise op_error(type(e), op, f"CUDA plan: {e}", descs) from None
    return _ew_launch(make, desc.shape, ins)


# -- GEMM plans -----------------------------------------------------------------------------------

def _tile(m, n):
    """The GEMM tile for an ``m x n`` output: narrow ones waste fewer threads."""
    if m <= 16 < n:
        return (1, 16)
    if n <= 16 < m:
        return (16, 1)
    return (4, 4)


def _shape(**fields):
    v = np.zeros((), SHAPE_DTYPE)
    v["groups"] = v["np_split"] = 1
    for k, x in fields.items():
        v[k] = int(x)
    if v["np_split"] < 1:
        v["np_split"] = 1
    return v[()]


def _gemm_launch(kernel, a, b, c, bias, shape, qout, tile):
    """A GEMM launch: 16 x 16 blocks over the output tiles and batch items (grid-stride past the
    grid's limits)."""
    rm, rn = tile
    m, n, batch = int(shape["M"]), int(shape["N"]), int(shape["batch"])
    grid = (min(_MAX_GRID_X, max(1, -(-n // (16 * rn)))),
            min(_MAX_GRID_YZ, max(1, -(-m // (16 * rm)))), min(_MAX_GRID_YZ, max(1, batch)))
    return Launch(kernel, grid, _GEMM_THREADS, (a, b, c, bias, shape, qout))


def qmatmul_plan(op, ins, outs):
    """The ``Plan`` of ``QuantizedMatrixMul``: one integer GEMM (``A``'s batch dims folded into
    its rows), the qint32 result saturated."""
    (desc,) = _rule(op, ins, outs)
    a, b = ins
    descs = _descs(ins)
    for i in ins:
        _check_quant(op, np.dtype(i.dtype), descs)
    if len(a.shape) == 1:
        m, k = 1, a.shape[0]
        a_m, a_k = k, 1
    elif op.transposeA:
        k, m = a.shape
        a_m, a_k = 1, m
    else:
        m, k = math.prod(a.shape[:-1]), a.shape[-1]
        a_m, a_k = k, 1
    if op.transposeB:
        n = b.shape[0]
        b_k, b_n = 1, k
    else:
        n = b.shape[1]
        b_k, b_n = n, 1
    if m * n == 0:
        return Plan((), notes=("empty: nothing to write",))
    mode = gemm_mode(a.dtype, op.a_q, b.dtype, op.b_q)
    tile = _tile(m, n)
    acc = op.acc_spec
    target = _target(acc)
    kernel = qgemm_kernel(a.dtype, b.dtype, mode, target, acc, tile)
    shape = _shape(M=m, N=n, K=k, batch=1, np_split=n, a_m=a_m, a_k=a_k, b_k=b_k, b_n=b_n,
                   c_m=n, c_n=1, za=op.a_q[2] or 0, zb=op.b_q[2] or 0)
    return Plan((_gemm_launch(kernel, Buf("in0"), Buf("in1"), Buf("out0"), None, shape,
                              _qout(acc, target, False), tile),),
                notes=(f"{mode} GEMM {m}x{n}x{k}, tile {tile}",))


def _check_quant(op, d, descs):
    if d not in QUANT_STORAGE:
        raise op_error(TypeError, op, f"CUDA plan: unsupported storage dtype {d} (takes "
                       f"{', '.join(str(q) for q in QUANT_STORAGE)})", descs)


# -- convolution plans ----------------------------------------------------------------------------

def _pad_value(op, stored, spec, descs):
    """The stored value of im2col's padding: the input's zero point (a value of 0)."""
    zp = spec[2] or 0
    info = np.iinfo(stored)
    if not info.min <= zp <= info.max:
        raise op_error(NotImplementedError, op, f"CUDA plan: the input's zero point {zp} lies "
                       f"outside its storage {stored} (im2col pads with it)", descs)
    return np.dtype(stored).type(zp)


def _bias_steps(op, ins, space, cout):
    """``(steps, Buf or None)``: the bias converted per channel into a float64 workspace array
    (``mge_qbias``)."""
    if len(ins) < 3:
        return [], None
    bias = ins[2]
    buf = space.add(cout * 8)
    spec, acc = op.bias_q, op.acc_spec
    s_b = float(spec[1])
    acc_scale = np.float32(acc[1])
    rescale = not np.isclose(s_b, acc_scale, rtol=1e-6)
    kernel = qbias_kernel(bias.dtype)
    step = Launch(kernel, grid_for(cout), (THREADS,),
                  (buf, Buf("in2"), np.int64(cout), np.float64(spec[2] or 0), np.float64(s_b),
                   np.float64(acc_scale), np.int32(rescale)))
    return [step], buf


def _conv_plan(op, ins, outs, batched, workspace_limit, index_bits):
    descs_t = _rule(op, ins, outs)
    out = outs[0]
    x, w = ins[0], ins[1]
    descs = _descs(ins)
    for i in ins:
        _check_quant(op, np.dtype(i.dtype), descs)
    _check_plain(op, np.dtype(descs_t[0].dtype), descs)
    images, cin = x.shape[0], x.shape[1]
    groups = 1 if batched else op.groups
    if batched:
        cout, ig, kernel = w.shape[1], w.shape[2], tuple(w.shape[3:])
    elif len(w.shape) == 5:
        cout, ig, kernel = w.shape[0] * w.shape[1], w.shape[2], tuple(w.shape[3:])
    else:
        cout, ig, kernel = w.shape[0], w.shape[1], tuple(w.shape[2:])
    og = cout // groups
    out_sp, in_sp = tuple(out.shape[2:]), tuple(x.shape[2:])
    P, K = math.prod(out_sp), math.prod(kernel)
    ck = ig * K
    if out.size == 0:
        return Plan((), notes=("empty: nothing to write",))
    xd, wd, od = np.dtype(x.dtype), np.dtype(w.dtype), np.dtype(out.dtype)
    mode = gemm_mode(wd, op.weight_q, xd, op.inp_q)
    acc, target = op.acc_spec, _target(op.out_spec)
    relu = str(op.nonlinear_mode).lower() == "relu"
    qout = _qout(acc, target, relu)
    space = Workspace(WORKSPACE_ALIGNMENT)
    steps, bias = _bias_steps(op, ins, space, cout)
    za, zb = op.weight_q[2] or 0, op.inp_q[2] or 0
    w_image = cout * ck if batched else 0
    y_image = cout * P
    oe, we = od.itemsize, wd.itemsize
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in op.stride) \
        and not any(op.padding)
    notes = [f"{mode} GEMM"]
    if pointwise:  # the column matrix of an image is the image: the GEMMs read x
        tile = _tile(og, P)
        kern = qgemm_kernel(wd, xd, mode, target, acc, tile)
        shape = _shape(M=og, N=P, K=ck, batch=images * groups, groups=groups, np_split=P,
                       a_outer=w_image, a_inner=og * ck, a_m=ck, a_k=1,
                       b_outer=cin * P, b_inner=ig * P, b_k=P, b_n=1,
                       c_outer=y_image, c_inner=og * P, c_m=P, c_n=1,
                       bias_inner=og, bias_m=1, za=za, zb=zb)
        steps.append(_gemm_launch(kern, Buf("in1"), Buf("in0"), Buf("out0"), bias, shape,
                                  qout, tile))
        notes.append("pointwise: the GEMM reads x")
        return Plan(tuple(steps), space.size, notes=tuple(notes))
    pad = _pad_value(op, xd, op.inp_q, descs)
    flip = int(str(op.conv_mode).lower() == "convolution")
    window = pack_window(in_sp, out_sp, kernel, op.stride, op.padding, op.dilation)
    chunks = batch_chunks(images, cin * K * P * xd.itemsize, workspace_limit, space.size)
    nb = max(c for _, c in chunks)
    col = space.add(cin * K * nb * P * xd.itemsize)
    for n0, count in chunks:
        n = cin * count * P
        bits = max(index_bits, launch_index_bits(n * K, count * cin * math.prod(in_sp)))
        steps.append(Launch(qim2col_kernel(xd, bits), grid_for(n), (THREADS,),
                            (col, Buf("in0", n0 * cin * math.prod(in_sp) * xd.itemsize),
                             _index(bits, n), _index(bits, cin), _index(bits, count), window,
                             pad, np.int32(flip))))
        row = count * P
        c_buf = Buf("out0", n0 * y_image * oe)
        if batched:  # a weight per image: one GEMM per image of the chunk
            tile = _tile(og, P)
            shape = _shape(M=og, N=P, K=ck, batch=count, np_split=P,
                           a_outer=w_image, a_m=ck, a_k=1, b_outer=P, b_k=row, b_n=1,
                           c_outer=y_image, c_m=P, c_n=1, bias_m=1, za=za, zb=zb)
            a_buf = Buf("in1", n0 * w_image * we)
        else:  # the chunk's images side by side in the columns, one GEMM per group
            tile = _tile(og, row)
            shape = _shape(M=og, N=row, K=ck, batch=groups, groups=groups, np_split=P,
                           a_inner=og * ck, a_m=ck, a_k=1, b_inner=ck * row, b_k=row, b_n=1,
                           c_inner=og * P, c_m=P, c_n=1, c_nhi=y_image, bias_inner=og,
                           bias_m=1, za=za, zb=zb)
            a_buf = Buf("in1")
        kern = qgemm_kernel(wd, xd, mode, target, acc, tile)
        steps.append(_gemm_launch(kern, a_buf, col, c_buf, bias, shape, qout, tile))
    notes.append(f"batch in {len(chunks)} chunks of up to {nb} images")
    return Plan(tuple(steps), space.size, notes=tuple(notes))


def conv_bias_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT, index_bits=32):
    """The ``Plan`` of ``ConvBias`` on ``(inp, weight[, bias])``: the bias into float64, then per
    batch chunk (its columns under ``workspace_limit`` bytes where one image fits) im2col and one
    GEMM over the groups; a 1x1 stride-1 unpadded one is GEMMs on ``x``.  ``index_bits=64``: the
    64-bit im2col even where 32 bits do."""
    return _conv_plan(op, ins, outs, False, workspace_limit, _least(op, index_bits))


def batch_conv_bias_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT, index_bits=32):
    """The ``Plan`` of ``BatchConvBias``: as ``conv_bias_plan`` with one GEMM per image (its own
    weight)."""
    return _conv_plan(op, ins, outs, True, workspace_limit, _least(op, index_bits))


def _least(op, index_bits):
    if index_bits not in (32, 64):
        raise op_error(ValueError, op, f"CUDA plan: index_bits must be 32 or 64, got "
                       f"{index_bits!r}")
    return index_bits


def qdeconv_plan(op, ins, outs, workspace_limit=DEFAULT_WORKSPACE_LIMIT, index_bits=32):
    """The ``Plan`` of ``QuantizedConvolutionBackwardData`` on ``(weight, inp)``: per batch chunk
    the GEMM ``W^T @ x`` into raw accumulator columns, then ``mge_qcol2im`` with the epilogue;
    1x1, stride 1, no padding: one GEMM into the output."""
    least = _least(op, index_bits)
    _rule(op, ins, outs)
    descs = _descs(ins)
    for i in ins:
        _check_quant(op, np.dtype(i.dtype), descs)
    w, x = ins
    out = outs[0]
    _check_plain(op, np.dtype(out.dtype), descs)
    ic, oc, kernel = w.shape[0], w.shape[1], tuple(w.shape[2:])
    images, in_sp, out_sp = x.shape[0], tuple(x.shape[2:]), tuple(out.shape[2:])
    P, K = math.prod(in_sp), math.prod(kernel)
    if out.size == 0:
        return Plan((), notes=("empty: nothing to write",))
    wd, xd, od = np.dtype(w.dtype), np.dtype(x.dtype), np.dtype(out.dtype)
    mode = gemm_mode(wd, op.weight_q, xd, op.inp_q)
    acc, target = op.acc_spec, _target(op.out_spec)
    qout = _qout(acc, target, False)
    za, zb = op.weight_q[2] or 0, op.inp_q[2] or 0
    out_image = oc * math.prod(out_sp)
    if all(k == 1 for k in kernel) and all(s == 1 for s in op.stride) and not any(op.padding) \
            and in_sp == out_sp:
        tile = _tile(oc, P)
        shape = _shape(M=oc, N=P, K=ic, batch=images, np_split=P, a_m=1, a_k=oc,
                       b_outer=ic * P, b_k=P, b_n=1, c_outer=out_image, c_m=P, c_n=1, za=za,
                       zb=zb)
        kern = qgemm_kernel(wd, xd, mode, target, acc, tile)
        return Plan((_gemm_launch(kern, Buf("in0"), Buf("in1"), Buf("out0"), None, shape, qout,
                                  tile),), notes=(f"{mode} GEMM", "pointwise: the GEMM writes "
                                                  "the output"))
    window = pack_window(out_sp, in_sp, kernel, op.stride, op.padding, op.dilation)
    m = oc * K
    chunks = batch_chunks(images, m * P * 8, workspace_limit)
    nb = max(c for _, c in chunks)
    space = Workspace(WORKSPACE_ALIGNMENT)
    col = space.add(m * nb * P * 8)
    steps = []
    for n0, count in chunks:
        row = count * P
        tile = _tile(m, P)
        shape = _shape(M=m, N=P, K=ic, batch=count, np_split=P, a_m=1, a_k=m,
                       b_outer=ic * P, b_k=P, b_n=1, c_outer=P, c_m=row, c_n=1, za=za, zb=zb)
        kern = qgemm_kernel(wd, xd, mode, None, acc, tile)
        steps.append(_gemm_launch(kern, Buf("in0"), Buf("in1", n0 * ic * P * xd.itemsize), col,
                                  None, shape, qout, tile))
        n = count * out_image
        bits = max(least, launch_index_bits(n, m * row))
        steps.append(Launch(qcol2im_kernel(mode, target, acc, bits), grid_for(n), (THREADS,),
                            (Buf("out0", n0 * out_image * od.itemsize), col, _index(bits, n),
                             _index(bits, oc), _index(bits, count), window, qout)))
    return Plan(tuple(steps), space.size,
                notes=(f"{mode} GEMM", f"batch in {len(chunks)} chunks of up to {nb} images"))


#: op class -> ``plan(op, ins, outs)`` -> ``launch.Plan``.
PLANS = {QuantizedTypeCvt: qtypecvt_plan, QuantizedElemwise: qelemwise_plan,
         ElemwiseMultiType: elemwise_multi_type_plan, QuantizedMatrixMul: qmatmul_plan,
         ConvBias: conv_bias_plan, BatchConvBias: batch_conv_bias_plan,
         QuantizedConvolutionBackwardData: qdeconv_plan}

#: The ops whose plans read ``ins[k].strides``: none (every kernel reads dense inputs).
STRIDED = frozenset()
