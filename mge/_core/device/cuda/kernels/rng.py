"""CUDA C for the random number ops (``UniformRNG``, ``GaussianRNG``, ``GammaRNG``, ``BetaRNG``,
``PoissonRNG``, ``PermutationRNG``, ``ShuffleRNG``) and ``Dropout``/``DropoutBackward``, with
their launch plans (``launch.py``'s one format).

**The generator** is Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
easy as 1, 2, 3", SC'11; the Random123 library): a bijection of a 128-bit counter under a 64-bit
key, ten rounds of two 32x32->64 multiplications.  Nothing is carried from one number to the next,
so the numbers of element ``i`` are a pure function of the op's ``seed`` (the key), a 32-bit
``stream`` and ``i`` -- never of the grid, the block or the order in which threads run:

* key ``(seed & 0xffffffff, seed >> 32)``;
* counter ``(g & 0xffffffff, g >> 32, sub, stream)``: ``g`` the index of a *group* of elements
  that one Philox call serves (4 float32/float16 elements, 2 float64 ones), ``sub`` the draw
  number of a rejection sampler's element (0 for the others).

**How the seed reaches a plan.**  The op carries it: ``ops/rng.py`` gives every RNG handle a
*seed stream* (a numpy generator; handle 0 is the global one ``mge.random.seed`` resets), and
each call draws a fresh 64-bit ``seed`` from its handle's stream into the op's ``seed`` field
(``Dropout`` from the global handle's, ``F.nn.dropout``).  A plan reads ``op.seed`` and nothing
else, so the op alone fixes its numbers: a replay of the op (DTR, a trace) gives them again, and
re-seeding a handle reproduces a whole sequence of calls.  ``stream`` is a keyword of the plan
functions (default 0, what the device uses): it separates the numbers of several launches of one
seed.

**Values.**  float32 uniform: ``(w >> 8) * 2**-24`` in ``[0, 1)``, word ``i % 4`` of group
``i // 4``; float64: 53 bits of two words, group ``i // 2``; float16: the float32 value rounded,
kept below 1 as the CPU kernel keeps it.  Gaussian: Box-Muller, the pair ``(w0, w1)`` giving
elements ``4g, 4g+1`` and ``(w2, w3)`` elements ``4g+2, 4g+3`` (float64: one pair of 53-bit
uniforms per group of 2), then ``z * std + mean`` in the CPU kernel's type (float32 below
float64).  Gamma: Marsaglia and Tsang's squeeze-rejection method in double, attempt ``k`` drawing
its normal and uniform from ``sub = k`` (at most 64 attempts; shape below 1: boosted by
``u ** (1/shape)`` in log space, ``u`` from ``sub = 64``); Beta: ``X / (X + Y)`` of two gammas
drawn from the even and the odd ``sub``s, in log space so that small parameters do not
underflow to 0/0.  Dropout's mask is ``u >= drop_prob`` of the
float32 uniform of element ``i`` (the very value ``UniformRNG`` gives with that seed and stream).

**Launches.**  Each kernel is a grid-stride loop over groups (``MGE_GRID_LOOP`` of
``block.py``'s prelude: on the host it walks the emulated blocks and threads, so the tests run
the same kernel under different grids and blocks); a thread writes its group's consecutive
elements.  One ``Launch`` per plan, ``launch.grid_for(groups, NTHREADS)`` blocks of ``NTHREADS``
threads (the keywords ``grid``/``block`` override them: the values do not change), no shared
memory; none when the output is empty.

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` (``launch.Layout``s) gives a ``launch.Plan``.  A
plan first runs the op's own shape/dtype rule on ``ins`` (its errors name the op, shapes and
dtypes; ``outs`` must be what it gives), refuses a dtype the kernels lack (``TypeError``) and a
seed or stream that does not fit the key (``ValueError``).  ``STRIDED`` is empty: the kernels
read element ``i`` of dense inputs (``GammaRNG``/``BetaRNG`` parameters, ``Dropout``'s ``x``,
``DropoutBackward``'s ``dy`` and ``mask``), which keeps a group's loads coalesced; the device makes
strided inputs dense first.

**Checks.**  ``GammaRNG`` and ``BetaRNG`` check their parameters in the kernel: a non-positive
(or NaN) one sets a flag -- one int32 word per parameter in the plan's workspace, zeroed by the
device before the launch -- and the element gets NaN.  The plan's two ``Check``s, in the CPU
kernel's order (shape before scale, alpha before beta), raise the CPU kernel's
``ValueError("GammaRNG: shape must be positive")`` (``scale``, ``BetaRNG: alpha``, ``beta``)
for the first one set, as the CPU kernel raises for the first parameter it finds bad.

**PoissonRNG** is per element too: Knuth's product of uniforms for ``lam < 10`` (32-bit uniforms
in (0, 1), four per draw ``sub = 0, 1, ...``), Hormann's transformed rejection with squeeze
(PTRS, 1993) from 10 on (attempt ``k`` takes its ``U`` and ``V`` from draw ``sub = k``) -- numpy's
two methods and threshold.  Two ``Check``s: a negative or NaN ``lam`` raises the CPU kernel's
``ValueError("PoissonRNG: lam must be non-negative")``, one above numpy's ``POISSON_LAM_MAX``
(infinity too) numpy's ``ValueError("lam value too large")``.

**PermutationRNG** and **ShuffleRNG** sort random keys: element ``i`` gets the 64-bit key of
words ``x, y`` of its draw 0, and a bitonic network sorts (key, index) pairs -- a total order
(ties by index), so the permutation is a function of the seed and stream alone, never of the
launch.  The length is padded to a power of two ``m`` with the largest key; tiles of
``SORT_TILE`` (1024) sort in shared memory (``mge_perm_tile_k``: the whole first stages, and the
``j < 1024`` steps of each later stage), the larger steps are global launches
(``mge_perm_step_k``): any length, ``O(log^2 m)`` launches.  The sorted indices are the
permutation (``op.dtype``, numpy's ``astype``), and ``ShuffleRNG`` gathers ``x``'s rows by them
(words of the largest size dividing a row's bytes) and outputs them as int32.  The workspace
holds ``16 * m`` bytes.

Values differ from the CPU device's: see ``DIFFERENCES``.
"""
import functools

import numpy as np

from ....ops.nn import Dropout, DropoutBackward
from ....ops.rng import (
    BetaRNG, GammaRNG, GaussianRNG, PermutationRNG, PoissonRNG, ShuffleRNG, UniformRNG,
)
from .elemwise import KernelSource
from .launch import Buf, Check, Launch, Plan, Workspace, grid_for
from .norm import _PRELUDE_PARTS, FLOAT_DTYPES, _rule

__all__ = ["PHILOX_M", "PHILOX_W", "NTHREADS", "NOT_DONE", "DIFFERENCES", "philox_kernel",
           "uniform_kernel", "gaussian_kernel", "gamma_kernel", "beta_kernel", "dropout_kernel",
           "dropout_backward_kernel", "uniform_plan", "gaussian_plan", "gamma_plan", "beta_plan",
           "dropout_plan", "dropout_backward_plan", "group_size", "PLANS", "STRIDED",
           "POISSON_LAM_MAX", "SORT_TILE", "poisson_kernel", "sort_kernels", "perm_out_kernel",
           "gather_rows_kernel", "poisson_plan", "permutation_plan", "shuffle_plan"]

#: Philox4x32's multipliers and Weyl key increments (Random123's PHILOX_M4x32_*, PHILOX_W32_*).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
#: Threads per block of the grid-stride kernels.
NTHREADS = 256
#: The RNG ops the CUDA device has no kernel for yet: none.
NOT_DONE = ()

DIFFERENCES = """\
* The CPU device draws from numpy's PCG64 generator, the CUDA device from Philox4x32-10: the
  same seed gives different numbers (each device's are reproducible, and the CUDA device's do
  not depend on the launch configuration).  Dropout's masks differ likewise.
* Gaussian values are Box-Muller of 24-bit (float64: 53-bit) uniforms, so float32 samples lie
  within about 5.8 standard deviations (numpy's ziggurat reaches further); float64 within 8.6.
* Gamma and Beta use Marsaglia-Tsang (numpy: the same for Gamma with shape >= 1, other methods
  for small shapes and for Beta): the same distributions, other samples.  A non-positive
  parameter makes the element NaN and sets its flag, from which the device raises the CPU
  kernel's ValueError (same message) after the launch.
* Poisson samples use numpy's methods (Knuth below 10, PTRS above) on Philox uniforms: the same
  distribution, other samples.  Permutations (and shuffles) are those of sorted Philox keys:
  uniformly random, reproducible per seed, different from numpy's Fisher-Yates on PCG64.
"""

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
_CODE = {_F16: "f16", _F32: "f32", _F64: "f64"}
_STORAGE = {_F16: "unsigned short", _F32: "float", _F64: "double"}
_MASK32 = 0xFFFFFFFF

_PHILOX = r"""#ifndef MGE_PHILOX
#define MGE_PHILOX
/* Philox4x32-10 (Random123): counter c, key (k0, k1). */
struct mge_u4 { unsigned x, y, z, w; };
MGE_FN mge_u4 mge_philox4x32_10(mge_u4 c, unsigned k0, unsigned k1) {
    MGE_UNROLL
    for (int r = 0; r < 10; ++r) {
        unsigned long long p0 = (unsigned long long)@M0@u * c.x;
        unsigned long long p1 = (unsigned long long)@M1@u * c.z;
        mge_u4 n;
        n.x = (unsigned)(p1 >> 32) ^ c.y ^ k0;
        n.y = (unsigned)p1;
        n.z = (unsigned)(p0 >> 32) ^ c.w ^ k1;
        n.w = (unsigned)p0;
        c = n;
        k0 += @W0@u;
        k1 += @W1@u;
    }
    return c;
}
/* The four words of group g, draw sub, stream s under seed. */
MGE_FN mge_u4 mge_philox_at(unsigned long long seed, unsigned stream, long long g,
                            unsigned sub) {
    mge_u4 c;
    c.x = (unsigned)g; c.y = (unsigned)((unsigned long long)g >> 32); c.z = sub; c.w = stream;
    return mge_philox4x32_10(c, (unsigned)seed, (unsigned)(seed >> 32));
}
/* Uniforms: [0, 1) from 24 bits (float) or 53 bits of two words (double); (0, 1] for logs. */
MGE_FN float mge_u01f(unsigned w) { return (float)(w >> 8) * 5.9604644775390625e-08f; }
MGE_FN float mge_u01f_open0(unsigned w) {
    return (float)((w >> 8) + 1u) * 5.9604644775390625e-08f;
}
MGE_FN double mge_u01d(unsigned a, unsigned b) {
    return (double)(((unsigned long long)(a >> 11) << 32) | b) * 1.1102230246251565e-16;
}
MGE_FN double mge_u01d_open0(unsigned a, unsigned b) {
    return (double)((((unsigned long long)(a >> 11) << 32) | b) + 1ull)
           * 1.1102230246251565e-16;
}
/* float16 of a float32 uniform, below 1 as the CPU kernel keeps it (0x3bff: 1 - 2**-11). */
MGE_FN unsigned short mge_u01h(unsigned w) {
    unsigned short h = mge_f2h(mge_u01f(w));
    return h > 0x3bffu ? (unsigned short)0x3bffu : h;
}
/* Box-Muller: two normals from two uniforms. */
template <class T> MGE_FN void mge_box_muller(T u1, T u2, T& z0, T& z1) {
    T r = mge_sqrt((T)-2 * mge_log(u1)), th = (T)6.283185307179586 * u2;
    z0 = r * mge_cos(th);
    z1 = r * mge_sin(th);
}
/* float16 rounding of a value kept in float (for the scale factors numpy takes in float16). */
MGE_FN float mge_as_storage(const unsigned short*, double v) { return mge_h2f(mge_d2h(v)); }
MGE_FN float mge_as_storage(const float*, double v) { return (float)v; }
MGE_FN double mge_as_storage(const double*, double v) { return v; }
/* log of a Gamma(a, 1) sample (Marsaglia-Tsang; a < 1 boosted), draws sub0, sub0 + step, ...;
   NaN for a <= 0 or NaN a. */
MGE_FN double mge_log_gamma_sample(double a, unsigned long long seed, unsigned stream,
                                   long long g, unsigned sub0, unsigned step) {
    if (!(a > 0)) return mge_qnan<double>();
    double boost = 0, aa = a;
    if (a < 1) {  /* Gamma(a) = Gamma(a + 1) * U**(1/a), U from the draw after the 64 */
        aa = a + 1;
        boost = mge_log(mge_u01f_open0(mge_philox_at(seed, stream, g, sub0 + 64 * step).x)) / a;
    }
    double d = aa - 1.0 / 3.0, c = 1.0 / mge_sqrt(9.0 * d);
    for (unsigned k = 0; k < 64; ++k) {
        mge_u4 w = mge_philox_at(seed, stream, g, sub0 + k * step);
        double z0, z1;
        mge_box_muller<double>(mge_u01d_open0(w.x, w.y), (double)mge_u01f(w.z), z0, z1);
        double v = 1 + c * z0;
        if (v <= 0) continue;
        v = v * v * v;
        double u = (double)mge_u01f_open0(w.w);
        if (mge_log(u) < 0.5 * z0 * z0 + d - d * v + d * mge_log(v))
            return mge_log(d * v) + boost;
    }
    return mge_qnan<double>();  /* 64 rejections in a row: probability below 1e-80 */
}
#endif /* MGE_PHILOX */
""".replace("@M0@", f"0x{PHILOX_M[0]:08X}").replace("@M1@", f"0x{PHILOX_M[1]:08X}") \
   .replace("@W0@", f"0x{PHILOX_W[0]:08X}").replace("@W1@", f"0x{PHILOX_W[1]:08X}")

_TEMPLATES = r"""#ifndef MGE_RNG_TEMPLATES
#define MGE_RNG_TEMPLATES
/* UniformRNG: a thread per group of 4 (float64: 2) elements. */
MGE_FN void mge_uniform_group(unsigned short* out, long long i, long long n, mge_u4 w) {
    unsigned v[4] = {w.x, w.y, w.z, w.w};
    for (int k = 0; k < 4 && i + k < n; ++k) out[i + k] = mge_u01h(v[k]);
}
MGE_FN void mge_uniform_group(float* out, long long i, long long n, mge_u4 w) {
    unsigned v[4] = {w.x, w.y, w.z, w.w};
    for (int k = 0; k < 4 && i + k < n; ++k) out[i + k] = mge_u01f(v[k]);
}
MGE_FN void mge_uniform_group(double* out, long long i, long long n, mge_u4 w) {
    out[i] = mge_u01d(w.x, w.y);
    if (i + 1 < n) out[i + 1] = mge_u01d(w.z, w.w);
}
template <int G, class TS>
MGE_FN void mge_uniform(TS* out, long long n, unsigned long long seed, unsigned stream) {
    MGE_GRID_LOOP(g, (n + G - 1) / G) {
        mge_uniform_group(out, g * G, n, mge_philox_at(seed, stream, g, 0));
    }
}
/* GaussianRNG: z * std + mean in T (float below float64), stored. */
template <int G, class TS, class T>
MGE_FN void mge_gaussian(TS* out, long long n, unsigned long long seed, unsigned stream,
                         double mean, double std) {
    T m = (T)mean, s = (T)std;
    MGE_GRID_LOOP(g, (n + G - 1) / G) {
        mge_u4 w = mge_philox_at(seed, stream, g, 0);
        T z[4];
        if (G == 4) {
            mge_box_muller<T>((T)mge_u01f_open0(w.x), (T)mge_u01f(w.y), z[0], z[1]);
            mge_box_muller<T>((T)mge_u01f_open0(w.z), (T)mge_u01f(w.w), z[2], z[3]);
        } else {
            mge_box_muller<T>((T)mge_u01d_open0(w.x, w.y), (T)mge_u01d(w.z, w.w), z[0], z[1]);
        }
        for (int k = 0; k < G && g * G + k < n; ++k) mge_stf(out, g * G + k, z[k] * s + m);
    }
}
/* GammaRNG: element i from group i.  A parameter that is not positive (NaN included) sets its
   own flag -- *bad_a for shape, *bad_b for scale: the plan's two checks, so the device raises
   the CPU kernel's message for the parameter it checks first -- and the element gets NaN.  Every
   writer stores the same 1, so the race between threads is benign (no atomics). */
template <class TS>
MGE_FN void mge_gamma(const TS* shape, const TS* scale, TS* out, int* bad_a, int* bad_b,
                      long long n, unsigned long long seed, unsigned stream) {
    MGE_GRID_LOOP(i, n) {
        double a = (double)mge_ldf(shape, i), s = (double)mge_ldf(scale, i);
        if (!(a > 0)) *bad_a = 1;
        if (!(s > 0)) *bad_b = 1;
        if (!(a > 0) || !(s > 0)) { mge_stf(out, i, mge_qnan<double>()); continue; }
        mge_stf(out, i, mge_exp(mge_log_gamma_sample(a, seed, stream, i, 0, 1)) * s);
    }
}
/* BetaRNG: X / (X + Y) = 1 / (1 + exp(log Y - log X)), X from the even draws, Y the odd; the
   flags as GammaRNG's (*bad_a: alpha, *bad_b: beta). */
template <class TS>
MGE_FN void mge_beta(const TS* alpha, const TS* beta, TS* out, int* bad_a, int* bad_b,
                     long long n, unsigned long long seed, unsigned stream) {
    MGE_GRID_LOOP(i, n) {
        double a = (double)mge_ldf(alpha, i), b = (double)mge_ldf(beta, i);
        if (!(a > 0)) *bad_a = 1;
        if (!(b > 0)) *bad_b = 1;
        if (!(a > 0) || !(b > 0)) { mge_stf(out, i, mge_qnan<double>()); continue; }
        double lx = mge_log_gamma_sample(a, seed, stream, i, 0, 2);
        double ly = mge_log_gamma_sample(b, seed, stream, i, 1, 2);
        mge_stf(out, i, 1.0 / (1.0 + mge_exp(ly - lx)));
    }
}
/* Dropout: mask = u >= p (u the float32 uniform of element i), y = (x * mask) * scale. */
template <class TS>
MGE_FN void mge_dropout(const TS* x, TS* y, bool* mask, long long n, unsigned long long seed,
                        unsigned stream, float p, double scale) {
    auto sc = mge_as_storage(x, scale);
    typedef decltype(sc) T;
    MGE_GRID_LOOP(g, (n + 3) / 4) {
        mge_u4 w = mge_philox_at(seed, stream, g, 0);
        unsigned v[4] = {w.x, w.y, w.z, w.w};
        for (int k = 0; k < 4 && g * 4 + k < n; ++k) {
            long long i = g * 4 + k;
            bool keep = mge_u01f(v[k]) >= p;
            mask[i] = keep;
            mge_stf(y, i, ((T)mge_ldf(x, i) * (T)(keep ? 1 : 0)) * sc);
        }
    }
}
/* DropoutBackward: (dy * mask) * scale. */
template <class TS>
MGE_FN void mge_dropout_backward(const TS* dy, const bool* mask, TS* dx, long long n,
                                 double scale) {
    auto sc = mge_as_storage(dy, scale);
    typedef decltype(sc) T;
    MGE_GRID_LOOP(i, n) {
        mge_stf(dx, i, ((T)mge_ldf(dy, i) * (T)(mask[i] ? 1 : 0)) * sc);
    }
}
/* PoissonRNG: Knuth's product of uniforms below 10 (32-bit uniforms in (0, 1), four per draw
   sub = 0, 1, ...), Hormann's PTRS (1993) from 10 on (attempt k: U and V, 53 bits each, from
   draw sub = k) -- numpy's two methods and threshold.  A negative or NaN lam sets *bad, one above
   POISSON_LAM_MAX (numpy's limit, infinity included) *big; the element is NaN then. */
MGE_FN double mge_poisson_sample(double lam, unsigned long long seed, unsigned stream,
                                 long long g) {
    if (lam == 0) return 0;
    if (lam < 10) {
        double limit = mge_exp(-lam), prod = 1;
        long long k = 0;
        for (unsigned sub = 0; sub < 4096; ++sub) {
            mge_u4 w = mge_philox_at(seed, stream, g, sub);
            unsigned v[4] = {w.x, w.y, w.z, w.w};
            for (int j = 0; j < 4; ++j) {
                prod *= ((double)v[j] + 0.5) * 2.3283064365386963e-10;
                if (prod <= limit) return (double)k;
                ++k;
            }
        }
        return (double)k;
    }
    double slam = mge_sqrt(lam), loglam = mge_log(lam);
    double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
    for (unsigned sub = 0; sub < (1u << 20); ++sub) {
        mge_u4 w = mge_philox_at(seed, stream, g, sub);
        double U = mge_u01d(w.x, w.y) - 0.5, V = mge_u01d(w.z, w.w);
        double us = 0.5 - mge_fabs(U);
        double k = mge_floor((2 * a / us + b) * U + lam + 0.43);
        if (us >= 0.07 && V <= vr) return k;
        if (k < 0 || (us < 0.013 && V > us)) continue;
        if (mge_log(V) + mge_log(invalpha) - mge_log(a / (us * us) + b) <=
            -lam + k * loglam - lgamma(k + 1))
            return k;
    }
    return mge_qnan<double>();
}
template <class TS>
MGE_FN void mge_poisson(const TS* lam, TS* out, int* bad, int* big, long long n,
                        unsigned long long seed, unsigned stream, double lam_max) {
    MGE_GRID_LOOP(i, n) {
        double l = (double)mge_ldf(lam, i);
        if (!(l >= 0)) { *bad = 1; mge_stf(out, i, mge_qnan<double>()); continue; }
        if (!(l <= lam_max)) { *big = 1; mge_stf(out, i, mge_qnan<double>()); continue; }
        mge_stf(out, i, mge_poisson_sample(l, seed, stream, i));
    }
}
/* PermutationRNG / ShuffleRNG: 64-bit Philox keys (words x, y of element i's draw 0) sorted
   with their indices (a total order: ties go by index) by a bitonic network over the length
   padded to a power of two m (padding: the largest key, indices >= n, so it sorts last). */
MGE_FN bool mge_key_gt(unsigned long long ka, long long ia, unsigned long long kb, long long ib) {
    return ka > kb || (ka == kb && ia > ib);
}
MGE_FN void mge_perm_keys(unsigned long long* keys, long long* idx, long long n, long long m,
                          unsigned long long seed, unsigned stream) {
    MGE_GRID_LOOP(i, m) {
        unsigned long long key = ~0ull;
        if (i < n) {
            mge_u4 w = mge_philox_at(seed, stream, i, 0);
            key = ((unsigned long long)w.x << 32) | w.y;
        }
        keys[i] = key;
        idx[i] = i;
    }
}
/* one global compare-exchange step (k, j) of the network: thread t < m / 2 takes the pair
   (i, i + j), ascending where bit k of i is clear */
MGE_FN void mge_bitonic_step(unsigned long long* keys, long long* idx, long long m, long long k,
                             long long j) {
    MGE_GRID_LOOP(t, m / 2) {
        long long i = (t / j) * 2 * j + t % j, l = i + j;
        bool asc = (i & k) == 0;
        if (mge_key_gt(keys[i], idx[i], keys[l], idx[l]) == asc) {
            unsigned long long tk = keys[i]; keys[i] = keys[l]; keys[l] = tk;
            long long ti = idx[i]; idx[i] = idx[l]; idx[l] = ti;
        }
    }
}
/* the steps with j < T of a tile of T = 2 * blockDim.x elements, in shared memory: every k from
   2 to T (k0 == 0: the tiles' first sort) or the steps j = T/2 ... 1 of one k0 > T */
MGE_BLOCK_FN void mge_bitonic_tile(unsigned long long* keys, long long* idx, long long m,
                                   long long k0) {
    MGE_SHARED unsigned long long sk[1024];
    MGE_SHARED long long si[1024];
    MGE_FOR_BLOCKS {
        const long long T = 2 * (long long)blockDim.x;
        for (long long base = (long long)blockIdx.x * T; base < m; base += T * gridDim.x) {
            MGE_THREADS { MGE_THREAD_IDS
                sk[tid] = keys[base + tid]; si[tid] = idx[base + tid];
                sk[tid + T / 2] = keys[base + tid + T / 2];
                si[tid + T / 2] = idx[base + tid + T / 2];
            }
            MGE_SYNC
            for (long long k = k0 ? k0 : 2; k <= (k0 ? k0 : T); k *= 2) {
                for (long long j = (k0 ? T : k) / 2; j > 0; j /= 2) {
                    MGE_THREADS { MGE_THREAD_IDS
                        long long i = ((long long)tid / j) * 2 * j + tid % j, l = i + j;
                        bool asc = ((base + i) & k) == 0;
                        if (mge_key_gt(sk[i], si[i], sk[l], si[l]) == asc) {
                            unsigned long long tk = sk[i]; sk[i] = sk[l]; sk[l] = tk;
                            long long ti = si[i]; si[i] = si[l]; si[l] = ti;
                        }
                    }
                    MGE_SYNC
                }
            }
            MGE_THREADS { MGE_THREAD_IDS
                keys[base + tid] = sk[tid]; idx[base + tid] = si[tid];
                keys[base + tid + T / 2] = sk[tid + T / 2];
                idx[base + tid + T / 2] = si[tid + T / 2];
            }
            MGE_SYNC
        }
    }
}
/* rows of x gathered by the sorted indices: out row r = x row idx[r] (W-byte words, R a row) */
template <class W>
MGE_FN void mge_gather_rows(const W* x, W* out, const long long* idx, long long n, long long R) {
    MGE_GRID_LOOP(e, n * R) {
        long long r = e / R;
        out[e] = x[idx[r] * R + (e - r * R)];
    }
}
#endif /* MGE_RNG_TEMPLATES */
"""

_PARTS = _PRELUDE_PARTS + (("MGE_PHILOX", _PHILOX), ("MGE_RNG_TEMPLATES", _TEMPLATES))


def _entry(name, params, body):
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n    {body}\n}}\n"
    return KernelSource(name, _PARTS + ((name, text),), tuple(params), False, 64, 0)


def _float_dtype(what, dtype):
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"CUDA {what} kernel: not a dtype ({e}) (dtype: {dtype})") from None
    if d not in FLOAT_DTYPES:
        raise TypeError(f"CUDA {what} kernel: unsupported dtype {d} (these kernels take float16, "
                        f"float32 and float64)")
    return d


def group_size(dtype):
    """Elements per Philox call (group) of ``UniformRNG``/``GaussianRNG`` of ``dtype``."""
    return 2 if np.dtype(dtype) == _F64 else 4


def philox_kernel():
    """``mge_philox4x32_10_kat(ctr, key, out, n)``: Philox4x32-10 of ``n`` counters (4 words
    each) under ``n`` keys (2 words each) into ``out`` (4 words each) -- the known-answer test's
    entry, a grid-stride loop."""
    return _kat_kernel()


@functools.lru_cache(maxsize=None)
def _kat_kernel():
    return _entry(
        "mge_philox4x32_10_kat",
        ["const unsigned* ctr", "const unsigned* key", "unsigned* out", "long long n"],
        "MGE_GRID_LOOP(i, n) {\n"
        "        mge_u4 c = {ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]};\n"
        "        mge_u4 r = mge_philox4x32_10(c, key[2 * i], key[2 * i + 1]);\n"
        "        out[4 * i] = r.x; out[4 * i + 1] = r.y; out[4 * i + 2] = r.z;"
        " out[4 * i + 3] = r.w;\n    }")


def uniform_kernel(dtype):
    """The ``UniformRNG`` kernel of ``dtype``: ``(out, n, seed, stream)``."""
    return _uniform_kernel(_float_dtype("UniformRNG", dtype))


@functools.lru_cache(maxsize=None)
def _uniform_kernel(d):
    return _entry(f"mge_rng_uniform_{_CODE[d]}",
                  [f"{_STORAGE[d]}* out", "long long n", "unsigned long long seed",
                   "unsigned stream"],
                  f"mge_uniform<{group_size(d)}, {_STORAGE[d]}>(out, n, seed, stream);")


def gaussian_kernel(dtype):
    """The ``GaussianRNG`` kernel of ``dtype``: ``(out, n, seed, stream, mean, std)``."""
    return _gaussian_kernel(_float_dtype("GaussianRNG", dtype))


@functools.lru_cache(maxsize=None)
def _gaussian_kernel(d):
    t = "double" if d == _F64 else "float"
    return _entry(f"mge_rng_gaussian_{_CODE[d]}",
                  [f"{_STORAGE[d]}* out", "long long n", "unsigned long long seed",
                   "unsigned stream", "double mean", "double std"],
                  f"mge_gaussian<{group_size(d)}, {_STORAGE[d]}, {t}>"
                  f"(out, n, seed, stream, mean, std);")


def gamma_kernel(dtype):
    """The ``GammaRNG`` kernel of ``dtype``: ``(shape, scale, out, bad_shape, bad_scale,
    n, seed, stream)``."""
    return _two_param_kernel("gamma", _float_dtype("GammaRNG", dtype))


def beta_kernel(dtype):
    """The ``BetaRNG`` kernel of ``dtype``: ``(alpha, beta, out, bad_alpha, bad_beta, n,
    seed, stream)``."""
    return _two_param_kernel("beta", _float_dtype("BetaRNG", dtype))


@functools.lru_cache(maxsize=None)
def _two_param_kernel(which, d):
    s = _STORAGE[d]
    return _entry(f"mge_rng_{which}_{_CODE[d]}",
                  [f"const {s}* a", f"const {s}* b", f"{s}* out", "int* bad_a", "int* bad_b",
                   "long long n",
                   "unsigned long long seed", "unsigned stream"],
                  f"mge_{which}<{s}>(a, b, out, bad_a, bad_b, n, seed, stream);")


def dropout_kernel(dtype):
    """The ``Dropout`` kernel of ``dtype``: ``(x, y, mask, n, seed, stream, p, scale)``."""
    return _dropout_kernel(_float_dtype("Dropout", dtype))


@functools.lru_cache(maxsize=None)
def _dropout_kernel(d):
    s = _STORAGE[d]
    return _entry(f"mge_dropout_{_CODE[d]}",
                  [f"const {s}* x", f"{s}* y", "bool* mask", "long long n",
                   "unsigned long long seed", "unsigned stream", "float p", "double scale"],
                  f"mge_dropout<{s}>(x, y, mask, n, seed, stream, p, scale);")


def dropout_backward_kernel(dtype):
    """The ``DropoutBackward`` kernel of ``dtype``: ``(dy, mask, dx, n, scale)``."""
    return _dropout_backward_kernel(_float_dtype("DropoutBackward", dtype))


@functools.lru_cache(maxsize=None)
def _dropout_backward_kernel(d):
    s = _STORAGE[d]
    return _entry(f"mge_dropout_backward_{_CODE[d]}",
                  [f"const {s}* dy", "const bool* mask", f"{s}* dx", "long long n",
                   "double scale"],
                  f"mge_dropout_backward<{s}>(dy, mask, dx, n, scale);")


# -- plans ----------------------------------------------------------------------------------------

def _key(op, stream):
    seed = int(op.seed)
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"CUDA {op.name} kernel: seed must fit 64 unsigned bits, got {seed}")
    if not 0 <= int(stream) <= _MASK32:
        raise ValueError(f"CUDA {op.name} kernel: stream must fit 32 unsigned bits, got {stream}")
    return np.uint64(seed), np.uint32(stream)


def _plan(kernel, items, args, grid, block, workspace=0, checks=()):
    """One grid-stride ``Launch`` over ``items`` groups (none when there are none)."""
    if items == 0:
        return Plan((), workspace, tuple(checks), notes=("empty output: nothing to draw",))
    block = (block or NTHREADS,)
    grid = grid_for(items, block[0]) if grid is None else (grid,)
    return Plan((Launch(kernel, grid, block, tuple(args)),), workspace, tuple(checks))


def _positive_check(flag, op, name):
    """The ``Check`` of the flag ``flag``: the CPU kernel's error for parameter ``name``."""
    message = f"{op.name}: {name} must be positive"

    def error(value):
        return ValueError(message)
    return Check(flag, error)


def uniform_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``UniformRNG`` ``op`` (no ``ins``; ``outs``: ``op.shape`` of ``op.dtype``).
    ``grid``/``block`` override the launch shape (the values do not change)."""
    (desc,) = _rule(op, ins, outs)
    d = _float_dtype(op.name, desc.dtype)
    n = outs[0].size
    seed, st = _key(op, stream)
    return _plan(uniform_kernel(d), -(-n // group_size(d)),
                 (Buf("out0"), np.int64(n), seed, st), grid, block)


def gaussian_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``GaussianRNG`` ``op`` (no ``ins``)."""
    (desc,) = _rule(op, ins, outs)
    d = _float_dtype(op.name, desc.dtype)
    n = outs[0].size
    seed, st = _key(op, stream)
    return _plan(gaussian_kernel(d), -(-n // group_size(d)),
                 (Buf("out0"), np.int64(n), seed, st, np.float64(op.mean),
                  np.float64(op.std)), grid, block)


def _two_param_plan(op, ins, outs, kernel_fn, names, stream, grid, block):
    (desc,) = _rule(op, ins, outs)
    kernel = kernel_fn(desc.dtype)
    n = outs[0].size
    seed, st = _key(op, stream)
    ws = Workspace()
    flags = ws.add(4), ws.add(4)
    checks = tuple(_positive_check(f, op, name) for f, name in zip(flags, names))
    return _plan(kernel, n, (Buf("in0"), Buf("in1"), Buf("out0"), *flags, np.int64(n), seed, st),
                 grid, block, ws.size if n else 0, checks if n else ())


def gamma_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``GammaRNG`` on ``ins`` ``(shape, scale)``; its ``checks`` raise the CPU
    kernel's ``ValueError`` for a non-positive shape (first) or scale."""
    return _two_param_plan(op, ins, outs, gamma_kernel, ("shape", "scale"), stream, grid, block)


def beta_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``BetaRNG`` on ``ins`` ``(alpha, beta)``; its ``checks`` raise the CPU
    kernel's ``ValueError`` for a non-positive alpha (first) or beta."""
    return _two_param_plan(op, ins, outs, beta_kernel, ("alpha", "beta"), stream, grid, block)


def dropout_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``Dropout`` on ``ins`` ``(x,)``: ``outs`` ``(y, mask)``, a thread per
    group of 4 elements."""
    y, _ = _rule(op, ins, outs)
    d = _float_dtype(op.name, y.dtype)
    n = outs[0].size
    seed, st = _key(op, stream)
    p = op.drop_prob
    return _plan(dropout_kernel(d), -(-n // 4),
                 (Buf("in0"), Buf("out0"), Buf("out1"), np.int64(n), seed, st, np.float32(p),
                  np.float64(1 / (1 - p))), grid, block)


def dropout_backward_plan(op, ins, outs, *, grid=None, block=None):
    """The ``Plan`` of ``DropoutBackward`` on ``ins`` ``(dy, mask)``: ``outs`` ``(dx,)``."""
    (dx,) = _rule(op, ins, outs)
    d = _float_dtype(op.name, dx.dtype)
    n = outs[0].size
    return _plan(dropout_backward_kernel(d), n,
                 (Buf("in0"), Buf("in1"), Buf("out0"), np.int64(n),
                  np.float64(1 / (1 - op.drop_prob))), grid, block)


# -- PoissonRNG, PermutationRNG, ShuffleRNG -------------------------------------------------------

#: numpy's largest Poisson rate (``POISSON_LAM_MAX``): a larger ``lam`` raises its ValueError.
POISSON_LAM_MAX = float(np.iinfo(np.int64).max - np.sqrt(np.iinfo(np.int64).max) * 10)
#: Elements of a shared-memory tile of the permutation's bitonic sort (two per thread).
SORT_TILE = 1024

_INT_CODES = {np.dtype(d): (f"{np.dtype(d).kind}{8 * np.dtype(d).itemsize}", c) for d, c in (
    ("int8", "signed char"), ("uint8", "unsigned char"), ("int16", "short"),
    ("uint16", "unsigned short"), ("int32", "int"), ("uint32", "unsigned"),
    ("int64", "long long"), ("uint64", "unsigned long long"))}
_WORDS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned", 8: "unsigned long long"}


def poisson_kernel(dtype):
    """The ``PoissonRNG`` kernel of ``dtype``: ``(lam, out, bad, big, n, seed, stream,
    lam_max)``."""
    return _poisson_kernel(_float_dtype("PoissonRNG", dtype))


@functools.lru_cache(maxsize=None)
def _poisson_kernel(d):
    s = _STORAGE[d]
    return _entry(f"mge_rng_poisson_{_CODE[d]}",
                  [f"const {s}* lam", f"{s}* out", "int* bad", "int* big", "long long n",
                   "unsigned long long seed", "unsigned stream", "double lam_max"],
                  f"mge_poisson<{s}>(lam, out, bad, big, n, seed, stream, lam_max);")


def sort_kernels():
    """The permutation's kernels ``(keys, step, tile)``: ``keys(keys, idx, n, m, seed,
    stream)`` (m the padded power of two), the global compare-exchange ``step(keys, idx, m, k,
    j)`` and the shared-memory ``tile(keys, idx, m, k0)`` (blocks of up to 512 threads)."""
    return _sort_kernels()


@functools.lru_cache(maxsize=None)
def _sort_kernels():
    arrays = ["unsigned long long* keys", "long long* idx"]
    return (_entry("mge_perm_keys_k", arrays + ["long long n", "long long m",
                                                "unsigned long long seed", "unsigned stream"],
                   "mge_perm_keys(keys, idx, n, m, seed, stream);"),
            _entry("mge_perm_step_k", arrays + ["long long m", "long long k", "long long j"],
                   "mge_bitonic_step(keys, idx, m, k, j);"),
            _entry("mge_perm_tile_k", arrays + ["long long m", "long long k0"],
                   "mge_bitonic_tile(keys, idx, m, k0);"))


def perm_out_kernel(dtype):
    """The kernel writing the sorted indices as ``dtype`` (an integer or float dtype: numpy's
    ``astype`` of the int64 permutation): ``(idx, out, n)``."""
    d = np.dtype(dtype)
    if d not in _INT_CODES and d not in _CODE:
        raise TypeError(f"CUDA PermutationRNG kernel: unsupported dtype {d} (these kernels take "
                        f"integer, float16, float32 and float64 outputs)")
    return _perm_out_kernel(d)


@functools.lru_cache(maxsize=None)
def _perm_out_kernel(d):
    if d in _INT_CODES:
        code, ctype = _INT_CODES[d]
        store = f"out[i] = ({ctype})idx[i];"
    else:
        code, ctype = _CODE[d], _STORAGE[d]
        store = "mge_stf(out, i, (double)idx[i]);"
    return _entry(f"mge_perm_out_{code}", ["const long long* idx", f"{ctype}* out",
                                           "long long n"],
                  f"MGE_GRID_LOOP(i, n) {{ {store} }}")


def gather_rows_kernel(word):
    """The kernel gathering rows of ``word``-byte words (1, 2, 4 or 8): ``(x, out, idx, n,
    R)``, out row r = x row idx[r], ``R`` words a row."""
    return _gather_rows_kernel(int(word))


@functools.lru_cache(maxsize=None)
def _gather_rows_kernel(w):
    t = _WORDS[w]
    return _entry(f"mge_gather_rows_w{w}", [f"const {t}* x", f"{t}* out", "const long long* idx",
                                            "long long n", "long long R"],
                  f"mge_gather_rows<{t}>(x, out, idx, n, R);")


def poisson_plan(op, ins, outs, *, stream=0, grid=None, block=None):
    """The ``Plan`` of ``PoissonRNG`` on ``ins`` ``(lam,)``; its ``checks`` raise the CPU
    kernel's ``ValueError`` for a negative (or NaN) lam and numpy's for one too large."""
    (desc,) = _rule(op, ins, outs)
    kernel = poisson_kernel(desc.dtype)
    n = outs[0].size
    seed, st = _key(op, stream)
    ws = Workspace()
    bad, big = ws.add(4), ws.add(4)
    message = f"{op.name}: lam must be non-negative"
    checks = (Check(bad, lambda value: ValueError(message)),
              Check(big, lambda value: ValueError("lam value too large")))
    return _plan(kernel, n, (Buf("in0"), Buf("out0"), bad, big, np.int64(n), seed, st,
                             np.float64(POISSON_LAM_MAX)),
                 grid, block, ws.size if n else 0, checks if n else ())


def _sort_steps(n, seed, st, ws):
    """The launches sorting ``n`` Philox keys with their indices; the ``Buf`` of the indices."""
    m = 1 << max(0, (n - 1).bit_length())
    keys, idx = ws.add(8 * m), ws.add(8 * m)
    keys_k, step_k, tile_k = sort_kernels()
    steps = [Launch(keys_k, grid_for(m, NTHREADS), (NTHREADS,),
                    (keys, idx, np.int64(n), np.int64(m), seed, st))]
    if m >= 2:
        tile = min(SORT_TILE, m)
        tgrid = (max(1, min(65535, m // tile)),)
        tblock = (tile // 2,)
        steps.append(Launch(tile_k, tgrid, tblock, (keys, idx, np.int64(m), np.int64(0))))
        k = 2 * tile
        while k <= m:
            j = k // 2
            while j >= tile:
                steps.append(Launch(step_k, grid_for(m // 2, NTHREADS), (NTHREADS,),
                                    (keys, idx, np.int64(m), np.int64(k), np.int64(j))))
                j //= 2
            steps.append(Launch(tile_k, tgrid, tblock, (keys, idx, np.int64(m), np.int64(k))))
            k *= 2
    return steps, idx


def permutation_plan(op, ins, outs, *, stream=0):
    """The ``Plan`` of ``PermutationRNG``: ``op.n`` random 64-bit keys from Philox (element
    ``i``'s draw 0 under the op's seed), sorted with their indices by a bitonic network (tiles of
    ``SORT_TILE`` in shared memory, global steps between), the indices written as ``op.dtype``.
    The permutation depends on the seed (and ``stream``) only."""
    (desc,) = _rule(op, ins, outs)
    out_k = perm_out_kernel(desc.dtype)
    n = int(op.n)
    seed, st = _key(op, stream)
    if n == 0:
        return Plan((), notes=("empty permutation",))
    ws = Workspace()
    steps, idx = _sort_steps(n, seed, st, ws)
    steps.append(Launch(out_k, grid_for(n, NTHREADS), (NTHREADS,),
                        (idx, Buf("out0"), np.int64(n))))
    return Plan(tuple(steps), ws.size, notes=(f"{len(steps) - 2} sort launches",))


def shuffle_plan(op, ins, outs, *, stream=0):
    """The ``Plan`` of ``ShuffleRNG`` on ``ins`` ``(x,)``: the permutation of ``x.shape[0]``
    (``permutation_plan``'s, so the same seed gives the same order), ``out0`` = x's rows in that
    order (moved as words of the largest size dividing the row's bytes), ``out1`` its int32
    indices."""
    _rule(op, ins, outs)
    x = ins[0]
    n = x.shape[0]
    seed, st = _key(op, stream)
    if n == 0:
        return Plan((), notes=("nothing to shuffle",))
    row_bytes = (x.size // n) * x.dtype.itemsize
    ws = Workspace()
    steps, idx = _sort_steps(n, seed, st, ws)
    steps.append(Launch(perm_out_kernel(np.int32), grid_for(n, NTHREADS), (NTHREADS,),
                        (idx, Buf("out1"), np.int64(n))))
    if row_bytes:
        w = next(w for w in (8, 4, 2, 1) if row_bytes % w == 0)
        r = row_bytes // w
        steps.append(Launch(gather_rows_kernel(w), grid_for(n * r, NTHREADS), (NTHREADS,),
                            (Buf("in0"), Buf("out0"), idx, np.int64(n), np.int64(r))))
    return Plan(tuple(steps), ws.size)


#: The plan of each op this module has kernels for (the CUDA device's table):
#: ``PLANS[type(op)](op, ins, outs)``.
PLANS = {UniformRNG: uniform_plan, GaussianRNG: gaussian_plan, GammaRNG: gamma_plan,
         BetaRNG: beta_plan, Dropout: dropout_plan, DropoutBackward: dropout_backward_plan,
         PoissonRNG: poisson_plan, PermutationRNG: permutation_plan, ShuffleRNG: shuffle_plan}

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()
