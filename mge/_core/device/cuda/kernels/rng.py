"""CUDA C for the random number ops (``UniformRNG``, ``GaussianRNG``, ``GammaRNG``, ``BetaRNG``)
and ``Dropout``/``DropoutBackward``, with their launch plans (``launch.py``'s one format).

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

Not done: ``PoissonRNG``, ``PermutationRNG`` (random keys + sort), ``ShuffleRNG``; the CUDA
device has no kernel for them yet (``NOT_DONE``).  Values differ from the CPU device's: see
``DIFFERENCES``.
"""
import functools

import numpy as np

from ....ops.nn import Dropout, DropoutBackward
from ....ops.rng import BetaRNG, GammaRNG, GaussianRNG, UniformRNG
from .elemwise import KernelSource
from .launch import Buf, Check, Launch, Plan, Workspace, grid_for
from .norm import _PRELUDE_PARTS, FLOAT_DTYPES, _rule

__all__ = ["PHILOX_M", "PHILOX_W", "NTHREADS", "NOT_DONE", "DIFFERENCES", "philox_kernel",
           "uniform_kernel", "gaussian_kernel", "gamma_kernel", "beta_kernel", "dropout_kernel",
           "dropout_backward_kernel", "uniform_plan", "gaussian_plan", "gamma_plan", "beta_plan",
           "dropout_plan", "dropout_backward_plan", "group_size", "PLANS", "STRIDED"]

#: Philox4x32's multipliers and Weyl key increments (Random123's PHILOX_M4x32_*, PHILOX_W32_*).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
#: Threads per block of the grid-stride kernels.
NTHREADS = 256
#: The RNG ops the CUDA device has no kernel for yet.
NOT_DONE = ("PoissonRNG", "PermutationRNG", "ShuffleRNG")

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


#: The plan of each op this module has kernels for (the CUDA device's table):
#: ``PLANS[type(op)](op, ins, outs)``.
PLANS = {UniformRNG: uniform_plan, GaussianRNG: gaussian_plan, GammaRNG: gamma_plan,
         BetaRNG: beta_plan, Dropout: dropout_plan, DropoutBackward: dropout_backward_plan}

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()
