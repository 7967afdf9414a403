"""CUDA C for ``Elemwise`` and ``TypeCvt``, generated per mode and dtype signature.

The CUDA device compiles these sources with NVRTC (``cuda/nvrtc.py``) when a kernel is first
needed; nothing here needs a GPU or NVRTC, only text is made.

A kernel is three layers of one translation unit:

* a **prelude** (``_PRELUDE``): types, conversions, the math overloads and the helpers the modes
  share (numpy's floor division, MegEngine's stable sigmoid...).  It compiles both as CUDA
  (NVRTC) and as host C++ (g++): under g++ ``MGE_FN`` is ``static inline``, a kernel is a plain
  ``extern "C"`` function and its grid-stride loop a serial loop.  The tests build the very same
  sources with g++ and call them through ctypes on numpy arrays, so the semantics and the index
  arithmetic are checked against the CPU kernels on machines without a GPU;
* a **scalar function** per (mode, compute types): ``mge_sf_<mode>_<args>_to_<ret>``, the one
  place a mode's arithmetic is written, mirroring ``device/cpu/kernels/elemwise.py``;
* the **kernel**: ``contiguous=True`` -- every array dense and of the output's shape, a flat
  grid-stride loop over a 64-bit ``n``; ``contiguous=False`` -- any shape up to ``MAX_NDIM``
  dims with a stride per array and dim (in elements; 0 broadcasts, negative steps backwards),
  the output's too, passed as one struct ``mge_layout<K, I>`` (``pack_layout``), with the index
  type ``I`` 32 or 64 bits wide (``index_bits``: 64-bit division is slow on a GPU, so the
  launcher takes 32 bits whenever every offset fits, ``index_bits_for``).

Dtypes: bool, int8, uint8, int16, uint16, int32, int64, float16, float32 and float64
(``SUPPORTED_DTYPES``); the output dtype and which dtypes a mode takes are the op's own rule
(``ops/elemwise.py``).  Mixed inputs compute as numpy (and the CPU kernels) do: each input is
converted to the type the mode computes in (the promoted dtype, or the output's), and the result
to the output dtype.  float16 is stored as its bits (``unsigned short``) and computed in float: a
PTX ``cvt`` converts, so no ``cuda_fp16.h`` is needed (NVRTC 12 has none built in, and the
nvrtc/nvcc wheels carry none).  Where the results can differ from the CPU device's is written in
``DIFFERENCES``.

Each piece of text carries an include guard, so the sources of many kernels concatenate into one
program (``program``) that NVRTC compiles at once.
"""
import functools
import math
from dataclasses import dataclass

import numpy as np

from ....ops.base import INFER, TensorDesc
from ....ops.elemwise import ELEMWISE_ARITY, ELEMWISE_MODES, Elemwise, elemwise_op

__all__ = ["KernelSource", "elemwise_kernel", "typecvt_kernel", "program", "elemwise_out_dtype",
           "pack_layout", "simplify_layout", "index_bits_for", "layout_dtype", "SUPPORTED_DTYPES",
           "MAX_NDIM", "NVRTC_OPTIONS", "DIFFERENCES"]

#: The most dims the general kernel takes (after ``simplify_layout`` merged what it can).
MAX_NDIM = 8

#: NVRTC flags for these kernels.  No fused multiply-add: elementwise kernels are bound by memory,
#: so contraction buys no time, and without it a formula rounds as the CPU device's does.
NVRTC_OPTIONS = ("--fmad=false",)

#: Where a CUDA kernel's results may differ from the CPU device's (the tests check the rest).
DIFFERENCES = """\
* float16 computes in float and rounds once, at the store; numpy computes float16 formulas in
  float16 steps (each rounded), so multi-step modes differ in the last bits, and round() of
  0.49975586 (the float16 just below 0.5) gives 0 here, 1 on the CPU (0.49975586 + 0.5 rounds up
  to 1 in float16).
* Transcendental functions are CUDA's (a few ulp) rather than numpy's SIMD or libm ones.
* pow of integers to a negative power: numpy raises; here it is 1 / a**|b| truncated (1 for a=1,
  +-1 for a=-1, else 0).
* float -> integer conversion of NaN or of values out of the target's range (numpy: undefined in
  C; x86 gives the most negative value): CUDA's cvt saturates (NaN gives 0).  Values that fit
  int64 convert to 8- and 16-bit integers modulo 2**bits, as numpy does on x86.
* Mixed-dtype fused ``*_grad`` modes compute in the output's type (the CPU kernels take numpy's
  intermediate dtypes step by step), and softplus_grad, silu_grad, asinh_grad and acosh_grad of
  8-bit integers in float where numpy takes float16.
"""

# -- dtypes ---------------------------------------------------------------------------------------

_B, _F16, _F32, _F64 = (np.dtype(d) for d in ("bool", "float16", "float32", "float64"))
# dtype -> (code in names, C type in memory, C type computed in)
_TYPES = {
    _B: ("b8", "bool", "bool"),
    np.dtype("int8"): ("i8", "signed char", "signed char"),
    np.dtype("uint8"): ("u8", "unsigned char", "unsigned char"),
    np.dtype("int16"): ("i16", "short", "short"),
    np.dtype("uint16"): ("u16", "unsigned short", "unsigned short"),
    np.dtype("int32"): ("i32", "int", "int"),
    np.dtype("int64"): ("i64", "long long", "long long"),
    _F16: ("f16", "unsigned short", "float"),  # the bits; computed in float
    _F32: ("f32", "float", "float"),
    _F64: ("f64", "double", "double"),
}
#: The dtypes the CUDA kernels take and give.
SUPPORTED_DTYPES = tuple(_TYPES)


def _code(d):
    return _TYPES[d][0]


def _storage(d):
    return _TYPES[d][1]


def _compute(d):
    """The dtype a value of ``d`` is computed in: float16 computes as float32."""
    return _F32 if d == _F16 else d


def _ctype(d):
    return _TYPES[d][2]


def _kind(d):
    return "f" if d.kind == "f" else "b" if d.kind == "b" else "i"


# -- the prelude ----------------------------------------------------------------------------------

# C math functions the modes use, by arity: each gets a float and a double overload mge_<name>,
# so a body written once with its compute type T calls the function of that precision (no
# reliance on the C++ overloads of either compiler's math headers).
_MATH = {1: ["exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
             "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "fabs", "floor", "ceil"],
         2: ["atan2", "fmod", "pow", "copysign"]}


def _math_overloads():
    lines = []
    for name in _MATH[1]:
        lines.append(f"MGE_FN float mge_{name}(float x) {{ return {name}f(x); }}")
        lines.append(f"MGE_FN double mge_{name}(double x) {{ return {name}(x); }}")
    for name in _MATH[2]:
        lines.append(f"MGE_FN float mge_{name}(float x, float y) {{ return {name}f(x, y); }}")
        lines.append(f"MGE_FN double mge_{name}(double x, double y) {{ return {name}(x, y); }}")
    return "\n".join(lines)


_PRELUDE = r"""#ifndef MGE_ELEMWISE_PRELUDE
#define MGE_ELEMWISE_PRELUDE
/* mge elementwise kernels: one text for NVRTC and for host C++ (the tests' g++ build). */
#if defined(__CUDACC__)
#define MGE_FN __device__ __forceinline__
#define MGE_KERNEL extern "C" __global__ void
/* a grid-stride loop with an unsigned counter U (i < n <= the signed maximum, so i + the
   grid's size cannot wrap): any grid covers any n */
#define MGE_LOOP(U, i, n) \
    for (U i = (U)blockIdx.x * (U)blockDim.x + (U)threadIdx.x; i < (U)(n); \
         i += (U)blockDim.x * (U)gridDim.x)
#define MGE_UNROLL _Pragma("unroll")
/* float16 as bits: PTX converts (what cuda_fp16.h does), so no header is needed */
MGE_FN float mge_h2f(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
MGE_FN unsigned short mge_f2h(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
MGE_FN unsigned short mge_d2h(double d) {
    unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h;
}
#else
#include <math.h>
#define MGE_FN static inline
#define MGE_KERNEL extern "C" void
#define MGE_LOOP(U, i, n) for (U i = 0; i < (U)(n); ++i)
#define MGE_UNROLL
#if defined(__FLT16_MAX__) /* g++ 12 and later on x86-64 and aarch64 */
MGE_FN unsigned short mge_bits(_Float16 v) {
    unsigned short h; __builtin_memcpy(&h, &v, 2); return h;
}
MGE_FN float mge_h2f(unsigned short h) { _Float16 v; __builtin_memcpy(&v, &h, 2); return (float)v; }
MGE_FN unsigned short mge_f2h(float f) { return mge_bits((_Float16)f); }
MGE_FN unsigned short mge_d2h(double d) { return mge_bits((_Float16)d); }
#endif
#endif
#define MGE_MAX_NDIM @MAX_NDIM@

/* Integer arithmetic wraps, as numpy's: computed in an unsigned type (signed overflow is
   undefined in C++), converted back modulo 2**bits. */
template <class T> struct mge_wide { typedef unsigned int type; };
template <> struct mge_wide<long long> { typedef unsigned long long type; };
template <> struct mge_wide<float> { typedef float type; };
template <> struct mge_wide<double> { typedef double type; };
#define MGE_WIDE typename mge_wide<T>::type
template <class T> MGE_FN T mge_add(T a, T b) { return (T)((MGE_WIDE)a + (MGE_WIDE)b); }
template <class T> MGE_FN T mge_sub(T a, T b) { return (T)((MGE_WIDE)a - (MGE_WIDE)b); }
template <class T> MGE_FN T mge_mul(T a, T b) { return (T)((MGE_WIDE)a * (MGE_WIDE)b); }
template <class T> MGE_FN T mge_neg(T a) { return (T)(-(MGE_WIDE)a); }

@MATH@

/* float -> integer as numpy's astype on x86: 8- and 16-bit targets through int64 (modulo) */
template <class T, class F> MGE_FN T mge_f2i(F v) { return sizeof(T) < 4 ? (T)(long long)v : (T)v; }

/* numpy's sign: 0 for +-0, NaN for NaN */
template <class T> MGE_FN T mge_sign(T x) {
    return x > 0 ? (T)1 : (x < 0 ? (T)-1 : (x == 0 ? (T)0 : x));
}
/* np.clip(x, 0, 6), NaN stays NaN */
template <class T> MGE_FN T mge_clip06(T x) { return x < 0 ? (T)0 : (x > 6 ? (T)6 : x); }
/* MegEngine's stable sigmoid: exp(-|x|) never overflows */
template <class T> MGE_FN T mge_sigmoid(T x) {
    T e = mge_exp(-mge_fabs(x));
    return x >= 0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e);
}
/* The CPU kernels' sigmoid of an integer x (in the float type E): exp(-|x|) with numpy's
   wrapping abs and negation, of unsigned types too (-x of a uint16 is 65536 - x) */
template <class T, class E> MGE_FN E mge_int_sigmoid(T x) {
    E e = mge_exp((E)mge_neg<T>(x < 0 ? mge_neg<T>(x) : x));
    return x >= 0 ? (E)1 / ((E)1 + e) : e / ((E)1 + e);
}
/* The CPU device's erf: Abramowitz-Stegun 7.1.26 below float64 (its float32 erf), the C
   library's for float64. */
MGE_FN float mge_erf(float x) {
    float s = mge_sign(x), a = mge_fabs(x);
    float t = 1.0f / (1.0f + (float)0.3275911 * a);
    float y = 1.0f - (((((float)1.061405429 * t - (float)1.453152027) * t + (float)1.421413741) * t
                       - (float)0.284496736) * t + (float)0.254829592) * t * mge_exp(-a * a);
    return s * y;
}
MGE_FN double mge_erf(double x) { return erf(x); }
/* numpy's logaddexp */
template <class T> MGE_FN T mge_logaddexp(T x, T y) {
    if (x == y) return x + (T)0.6931471805599453;  /* infinities of one sign */
    T d = x - y;
    if (d > 0) return x + mge_log1p(mge_exp(-d));
    if (d <= 0) return y + mge_log1p(mge_exp(d));
    return d;  /* NaN */
}
/* numpy's floor_divide of floats (npy_floor_divide / npy_divmod) */
template <class T> MGE_FN T mge_floor_divide(T a, T b) {
    if (b == 0) return a / b;
    T mod = mge_fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= (T)1;
    if (div == 0) return mge_copysign((T)0, a / b);
    T fl = mge_floor(div);
    return div - fl > (T)0.5 ? fl + (T)1 : fl;
}
/* numpy's remainder of floats (Python's %: the sign of the divisor) */
template <class T> MGE_FN T mge_pyremainder(T a, T b) {
    T mod = mge_fmod(a, b);
    if (b == 0) return mod;
    if (mod == 0) return mge_copysign((T)0, b);
    return ((b < 0) != (mod < 0)) ? mod + b : mod;
}
/* numpy's integer floor_divide and remainder: x // 0 == x % 0 == 0, MIN // -1 == MIN */
template <class T> MGE_FN T mge_floor_divide_int(T a, T b) {
    if (b == 0) return (T)0;
    if (b == -1) return mge_neg<T>(a);
    T q = (T)(a / b);
    return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;
}
template <class T> MGE_FN T mge_remainder_int(T a, T b) {
    if (b == 0 || b == -1) return (T)0;
    T r = (T)(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
}
/* numpy's integer power (square and multiply, wrapping); a negative exponent, which numpy
   refuses, gives 1 / a**|b| truncated */
template <class T> MGE_FN T mge_ipow(T a, T b) {
    if (b < 0) return a == 1 ? (T)1 : (a == -1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0);
    if (b == 0 || a == 1) return (T)1;
    T out = (b & 1) ? a : (T)1;
    for (b = (T)(b >> 1); b > 0; b = (T)(b >> 1)) {
        a = mge_mul<T>(a, a);
        if (b & 1) out = mge_mul<T>(out, a);
    }
    return out;
}
/* numpy's shifts: a shift by the width or more (or by a negative count) gives 0, or -1 for a
   negative number shifted right */
template <class T> MGE_FN T mge_shl(T a, T b) {
    return (unsigned long long)b < sizeof(T) * 8 ? (T)((MGE_WIDE)a << b) : (T)0;
}
template <class T> MGE_FN T mge_shr(T a, T b) {
    return (unsigned long long)b < sizeof(T) * 8 ? (T)(a >> b) : (a < 0 ? (T)-1 : (T)0);
}

/* The general kernels' layout: the shape and, per array (the output first), a stride in
   elements per dim; dims 0..ndim-1, the last the fastest. */
template <int K, class I> struct mge_layout {
    I shape[MGE_MAX_NDIM];
    I strides[K][MGE_MAX_NDIM];
    int ndim;
};
/* The offset of element i (row-major over shape) in each array. */
template <int K, class I> MGE_FN void mge_offsets(const mge_layout<K, I>& L, I i, I (&off)[K]) {
    MGE_UNROLL
    for (int k = 0; k < K; ++k) off[k] = 0;
    MGE_UNROLL
    for (int d = MGE_MAX_NDIM - 1; d > 0; --d) {
        if (d < L.ndim) {
            I q = i / L.shape[d], c = i - q * L.shape[d];
            i = q;
            MGE_UNROLL
            for (int k = 0; k < K; ++k) off[k] += c * L.strides[k][d];
        }
    }
    if (L.ndim > 0) {  /* what is left of i is the outermost coordinate */
        MGE_UNROLL
        for (int k = 0; k < K; ++k) off[k] += i * L.strides[k][0];
    }
}
#endif /* MGE_ELEMWISE_PRELUDE */
""".replace("@MAX_NDIM@", str(MAX_NDIM)).replace("@MATH@", _math_overloads())

# -- the modes ------------------------------------------------------------------------------------

_SQRT2 = repr(math.sqrt(2.0))
_INV_SQRT_2PI = repr(1 / math.sqrt(2 * math.pi))

# mode -> (argument names, {kind: body}).  In a body T is the type the first argument is
# computed in, T0, T1, T2 those of each argument, R the result's, and E (integer *_grad modes) the
# float type numpy takes where their CPU kernels leave the integers.  Kinds: "f" float, "i"
# integer (signed or not), "b" bool, "*" any kind without its own body.  Each body is the
# formula of the CPU kernel (device/cpu/kernels/elemwise.py), in its order of operations.
_BODIES = {
    # arithmetic
    "add": ("a b", {"*": "return mge_add<T>(a, b);"}),
    "sub": ("a b", {"*": "return mge_sub<T>(a, b);"}),
    "mul": ("a b", {"*": "return mge_mul<T>(a, b);"}),
    "true_div": ("a b", {"f": "return a / b;"}),
    "floor_div": ("a b", {"f": "return mge_floor_divide<T>(a, b);",
                          "i": "return mge_floor_divide_int<T>(a, b);"}),
    # MOD is C's fmod when the dividend is a float, numpy's remainder (the divisor's sign)
    # otherwise -- also in float when only the divisor is one ("pyremainder", chosen in _plan)
    "mod": ("a b", {"f": "return mge_fmod(a, b);",
                    "pyremainder": "return mge_pyremainder<T>(a, b);",
                    "i": "return mge_remainder_int<T>(a, b);"}),
    "pow": ("a b", {"f": "return mge_pow(a, b);", "i": "return mge_ipow<T>(a, b);"}),
    # numpy's maximum/minimum: a NaN on either side wins
    "max": ("a b", {"*": "return (a >= b || a != a) ? a : b;"}),
    "min": ("a b", {"*": "return (a <= b || a != a) ? a : b;"}),
    "neg": ("a", {"f": "return -a;", "i": "return mge_neg<T>(a);"}),
    "abs": ("a", {"f": "return mge_fabs(a);", "i": "return a < 0 ? mge_neg<T>(a) : a;"}),
    "square": ("a", {"*": "return mge_mul<T>(a, a);"}),
    "sign": ("x", {"*": "return mge_sign<T>(x);"}),
    # exp / log family and trigonometry (float only; integers arrive converted)
    **{m: ("x", {"f": f"return mge_{c}(x);"}) for m, c in [
        ("exp", "exp"), ("expm1", "expm1"), ("log", "log"), ("log1p", "log1p"), ("sqrt", "sqrt"),
        ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("asin", "asin"), ("acos", "acos"),
        ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("tanh", "tanh"),
        ("asinh", "asinh"), ("acosh", "acosh"), ("atanh", "atanh"), ("erf", "erf")]},
    "rsqrt": ("x", {"f": "return (T)1 / mge_sqrt(x);"}),  # the CPU's 1 / sqrt(x), not rsqrtf
    "logaddexp": ("a b", {"f": "return mge_logaddexp<T>(a, b);"}),
    "atan2": ("a b", {"f": "return mge_atan2(a, b);"}),
    # rounding keeps integers as they are; round takes halves away from zero, as the CPU's
    # sign(x) * floor(|x| + 0.5) (which also rounds 0.49999997f up: 0.49999997f + 0.5f is 1)
    "ceil": ("x", {"f": "return mge_ceil(x);", "*": "return x;"}),
    "floor": ("x", {"f": "return mge_floor(x);", "*": "return x;"}),
    "round": ("x", {"f": "return mge_sign<T>(x) * mge_floor(mge_fabs(x) + (T)0.5);",
                    "*": "return x;"}),
    # MegEngine's CLIP: lo wins when lo > hi
    "clip": ("x lo hi", {"*": "return x < lo ? lo : (x > hi ? hi : x);"}),
    # activations
    "relu": ("x", {"*": "return x < 0 ? (T)0 : x;"}),  # NaN stays NaN (np.maximum)
    "relu6": ("x", {"*": "return mge_clip06<T>(x);"}),
    "sigmoid": ("x", {"f": "return mge_sigmoid<T>(x);"}),
    "hsigmoid": ("x", {"f": "return mge_clip06<T>(x + (T)3) / (T)6;"}),
    "hswish": ("x", {"f": "return x * mge_clip06<T>(x + (T)3) / (T)6;"}),
    "gelu": ("x", {"f": f"return x * ((T)1 + mge_erf(x / (T){_SQRT2})) * (T)0.5;"}),
    "silu": ("x", {"f": "return x * mge_sigmoid<T>(x);"}),
    "softplus": ("x", {"f": "return mge_logaddexp<T>(x, (T)0);"}),
    "logsigmoid": ("x", {"f": "return -mge_logaddexp<T>(-x, (T)0);"}),
    # comparison and logic (R is bool)
    "lt": ("a b", {"*": "return a < b;"}),
    "leq": ("a b", {"*": "return a <= b;"}),
    "gt": ("a b", {"*": "return a > b;"}),
    "geq": ("a b", {"*": "return a >= b;"}),
    "eq": ("a b", {"*": "return a == b;"}),
    "neq": ("a b", {"*": "return a != b;"}),
    "and": ("a b", {"*": "return a != 0 && b != 0;"}),
    "or": ("a b", {"*": "return a != 0 || b != 0;"}),
    "xor": ("a b", {"*": "return (a != 0) != (b != 0);"}),
    "not": ("a", {"*": "return a == 0;"}),
    "isnan": ("x", {"f": "return __builtin_isnan(x);", "*": "return false;"}),
    "isinf": ("x", {"f": "return __builtin_isinf(x);", "*": "return false;"}),
    # bitwise on integers
    "shl": ("a b", {"i": "return mge_shl<T>(a, b);"}),
    "shr": ("a b", {"i": "return mge_shr<T>(a, b);"}),
    "bit_and": ("a b", {"i": "return (T)(a & b);"}),
    "bit_or": ("a b", {"i": "return (T)(a | b);"}),
    "bit_xor": ("a b", {"i": "return (T)(a ^ b);"}),
    "bit_not": ("a", {"i": "return (T)~a;"}),
    # fused forms
    "fuse_add_relu": ("a b", {"*": "T s = mge_add<T>(a, b);\n    return s < 0 ? (T)0 : s;"}),
    "switch_gt0": ("x dy", {"*": "return x > 0 ? dy : (R)0;"}),  # x in its type, dy in R
    "cond_leq_mov": ("a b c", {"*": "return a <= b ? c : (R)0;"}),
    "cond_lt_mov": ("a b c", {"*": "return a < b ? c : (R)0;"}),
    # fused backward modes: (x or y, dy) -> dx.  Integers follow the CPU kernels' numpy steps:
    # products wrap in T, a true division or an exp leaves for a float, and the result is
    # converted back to T (mge_f2i, numpy's astype).
    "abs_grad": ("x dy", {"f": "return x > 0 ? dy : -dy;",
                          "i": "return x > 0 ? dy : mge_neg<T>(dy);"}),
    "sigmoid_grad": ("y dy", {"f": "return y * ((T)1 - y) * dy;",
                              "i": "return mge_mul<T>(mge_mul<T>(y, mge_sub<T>(1, y)), dy);"}),
    "tanh_grad": ("y dy", {"f": "return ((T)1 - y * y) * dy;",
                           "i": "return mge_mul<T>(mge_sub<T>(1, mge_mul<T>(y, y)), dy);"}),
    "relu6_grad": ("x dy", {"*": "return (x > 0 && x < 6) ? dy : (T)0;"}),
    "hsigmoid_grad": ("x dy", {
        "f": "return (x > -3 && x < 3) ? dy / (T)6 : (T)0;",
        "i": "return (x > -3 && x < 3) ? mge_f2i<T>((double)dy / 6.0) : (T)0;"}),
    "hswish_grad": ("x dy", {
        "f": "return x < -3 ? (T)0 : (x > 3 ? dy : ((T)2 * x + (T)3) / (T)6 * dy);",
        "i": "return x < -3 ? (T)0 : (x > 3 ? dy : mge_f2i<T>("
             "(double)mge_add<T>(mge_mul<T>(2, x), 3) / 6.0 * (double)dy));"}),
    "softplus_grad": ("x dy", {
        "f": "return mge_sigmoid<T>(x) * dy;",
        "i": "return mge_mul<T>(mge_f2i<T>(mge_int_sigmoid<T, E>(x)), dy);"}),
    "gelu_grad": ("x dy", {
        "f": f"T cdf = ((T)1 + mge_erf(x / (T){_SQRT2})) * (T)0.5;\n"
             f"    return (cdf + x * mge_exp(x * x * (T)-0.5) * (T){_INV_SQRT_2PI}) * dy;",
        "i": f"double cdf = (1.0 + mge_erf((double)x / {_SQRT2})) * 0.5;\n"
             f"    return mge_f2i<T>((cdf + (double)x * mge_exp((double)mge_mul<T>(x, x) * -0.5)"
             f" * {_INV_SQRT_2PI}) * (double)dy);"}),
    "silu_grad": ("x dy", {
        "f": "T s = mge_sigmoid<T>(x);\n    return s * ((T)1 + x * ((T)1 - s)) * dy;",
        "i": "T s = mge_f2i<T>(mge_int_sigmoid<T, E>(x));\n"
             "    T f = mge_add<T>(1, mge_mul<T>(x, mge_sub<T>(1, s)));\n"
             "    return mge_mul<T>(mge_mul<T>(s, f), dy);"}),
    "asinh_grad": ("x dy", {
        "f": "return dy / mge_sqrt(x * x + (T)1);",
        "i": "return mge_f2i<T>((E)dy / mge_sqrt((E)mge_add<T>(mge_mul<T>(x, x), 1)));"}),
    "acosh_grad": ("x dy", {
        "f": "return dy / mge_sqrt(x * x - (T)1);",
        "i": "return mge_f2i<T>((E)dy / mge_sqrt((E)mge_sub<T>(mge_mul<T>(x, x), 1)));"}),
    "atanh_grad": ("x dy", {
        "f": "return dy / ((T)1 - x * x);",
        "i": "return mge_f2i<T>((double)dy / (double)mge_sub<T>(1, mge_mul<T>(x, x)));"}),
}
assert set(_BODIES) == set(ELEMWISE_MODES), set(_BODIES) ^ set(ELEMWISE_MODES)

# -- conversions ----------------------------------------------------------------------------------


def _to_compute(expr, src, dst):
    """C for the value ``expr`` computed as ``src`` converted to how ``dst`` computes."""
    src, dst = _compute(src), _compute(dst)
    if src == dst:
        return expr
    if dst == _B:
        return f"(({expr}) != 0)"
    if src.kind == "f" and dst.kind in "iu":
        return f"mge_f2i<{_ctype(dst)}>({expr})"
    return f"({_ctype(dst)})({expr})"


def _load(expr, src, dst):
    """C for the element ``expr`` stored as ``src``, converted to how ``dst`` computes."""
    if src == _F16:
        expr = f"mge_h2f({expr})"
    return _to_compute(expr, src, dst)


def _store(expr, src, dst):
    """C for the value ``expr`` computed as ``src``, converted to ``dst``'s storage."""
    if dst != _F16:
        return _to_compute(expr, src, dst)
    if _compute(src) == _F64:
        return f"mge_d2h({expr})"  # one rounding: float64 -> float -> half could round twice
    return f"mge_f2h({_to_compute(expr, src, _F32)})"


# -- planning a kernel ----------------------------------------------------------------------------


def _error(exc, what, message, dtypes):
    names = ", ".join(str(d) for d in dtypes)
    return exc(f"CUDA {what}: {message} (dtypes: {names})")


def _dtypes(what, dtypes):
    try:
        out = tuple(np.dtype(d) for d in dtypes)
    except TypeError as e:
        raise _error(TypeError, what, f"not a dtype ({e})", dtypes) from None
    bad = [d for d in out if d not in _TYPES]
    if bad:
        raise _error(TypeError, what, f"unsupported dtype {bad[0]} (the CUDA kernels take "
                     f"{', '.join(str(d) for d in SUPPORTED_DTYPES)})", out)
    return out


def _mode(mode, dtypes):
    name = mode.lower() if isinstance(mode, str) else mode
    if name not in ELEMWISE_MODES:
        raise _error(ValueError, "Elemwise kernel", f"unknown mode {mode!r}", dtypes)
    return name


def elemwise_out_dtype(mode, in_dtypes):
    """The output dtype of ``Elemwise(mode)`` on inputs of ``in_dtypes`` by the op's own rule; a
    ``TypeError`` (naming the op, the mode and the dtypes) where the rule or these kernels refuse
    them, a ``ValueError`` for an unknown mode."""
    mode = _mode(mode, in_dtypes)
    return _out_dtype(mode, _dtypes(f"Elemwise({mode!r}) kernel", in_dtypes))


@functools.lru_cache(maxsize=None)
def _out_dtype(mode, ins):
    what = f"Elemwise({mode!r}) kernel"
    if len(ins) != ELEMWISE_ARITY[mode]:
        raise _error(TypeError, what, f"takes {ELEMWISE_ARITY[mode]} input(s), got {len(ins)}", ins)
    try:
        (desc,) = INFER[Elemwise](elemwise_op(mode), [TensorDesc((1,), d) for d in ins])
    except TypeError as e:
        raise _error(TypeError, what, f"the op refuses these inputs ({e})", ins) from None
    return _dtypes(what, [desc.dtype])[0]


@dataclass(frozen=True)
class _Plan:
    args: tuple  # the dtype each input is converted to
    ret: np.dtype  # the dtype the scalar function returns
    body_kind: str


def _plan(mode, ins, out):
    """How ``mode`` computes on inputs ``ins`` into ``out``: as numpy does (see the module)."""
    n = len(ins)
    if mode == "switch_gt0":  # x > 0 in x's type; dy passes as the output
        args, ret = (ins[0], out), out
    elif mode in ("cond_leq_mov", "cond_lt_mov"):  # a <= b in their common type; c passes
        common = np.result_type(ins[0], ins[1])
        args, ret = (common, common, out), out
    elif mode == "clip":  # np.where of comparisons in the common type, then astype(x.dtype)
        common = np.result_type(*ins)
        args, ret = (common,) * 3, common
    elif out == _B:  # comparisons and logic compare in the inputs' common type
        args, ret = (np.result_type(*ins),) * n, _B
    else:  # numpy's loop computes in the output's type
        args, ret = (out,) * n, out
    args, ret = tuple(_compute(a) for a in args), _compute(ret)
    kind = _kind(args[0])
    if mode == "mod" and kind == "f" and ins[0].kind != "f":
        kind = "pyremainder"  # np.remainder of an integer dividend and a float divisor
    if mode.endswith("_grad"):
        kind = _kind(out)
    return _Plan(args, ret, kind)


def _scalar_function(mode, plan):
    """(name, guarded C text) of the scalar function of ``mode`` under ``plan``."""
    names, bodies = _BODIES[mode]
    kind = plan.body_kind
    body = bodies.get(kind) or bodies.get("*")
    if body is None:  # the op's rule gave a type the mode has no formula for: a bug here
        raise NotImplementedError(f"CUDA Elemwise({mode!r}) kernel: no formula for {kind} types")
    names = names.split()
    codes = "_".join(_code(a) for a in plan.args)
    tag = "_pyrem" if kind == "pyremainder" else ""
    name = f"mge_sf_{mode}{tag}_{codes}_to_{_code(plan.ret)}"
    params = ", ".join(f"{_ctype(a)} {p}" for a, p in zip(plan.args, names))
    # E: where an integer *_grad mode's CPU kernel leaves for floats (exp/sqrt of int8/16 give
    # float16/float32 in numpy, of int32/64 float64); computed as float below float64
    e = "double" if plan.args[0].kind in "iu" and plan.args[0].itemsize >= 4 else "float"
    if plan.args[0].kind == "f":
        e = _ctype(plan.args[0])
    typedefs = [f"typedef {_ctype(a)} T{k};" for k, a in enumerate(plan.args)]
    typedefs += [f"typedef {_ctype(plan.args[0])} T;", f"typedef {_ctype(plan.ret)} R;",
                 f"typedef {e} E;"]
    text = (f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n"
            f"MGE_FN {_ctype(plan.ret)} {name}({params})\n{{\n"
            f"    {' '.join(typedefs)}\n    {body}\n}}\n#endif\n")
    return name, text


# -- kernels --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSource:
    """One generated kernel.

    ``name`` is its ``extern "C"`` entry point; ``source`` a whole translation unit for NVRTC
    (with ``NVRTC_OPTIONS``), ``parts`` the same as (guard, text) pieces that ``program`` joins
    without repeats.  ``params`` are its parameters as C declarations, in order: the output and
    input pointers, then ``long long n`` (contiguous) or ``I n, mge_layout<K, I> layout``
    (general; ``I`` is ``int`` or ``long long`` by ``index_bits``, ``K`` is ``nin + 1``, and
    ``pack_layout`` makes the struct).  Each parameter then falls on its own alignment, so they
    pack without padding.  float16 data is passed as its bits, bool as one byte 0 or 1."""

    name: str
    parts: tuple
    params: tuple
    contiguous: bool
    index_bits: int
    nin: int

    @property
    def source(self):
        """The kernel's translation unit (prelude and helpers included)."""
        return "".join(text for _, text in self.parts)


def program(kernels):
    """One translation unit holding every kernel of ``kernels`` (shared pieces once): NVRTC
    compiles many kernels faster together than apart."""
    seen, texts = set(), []
    for k in kernels:
        for guard, text in k.parts:
            if guard not in seen:
                seen.add(guard)
                texts.append(text)
    return "".join(texts)


def _kernel(name, fn_parts, ins, out, contiguous, index_bits, element):
    """The kernel ``name`` applying ``element(loads) -> stored value expression`` over arrays of
    dtypes ``ins`` into ``out``."""
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA kernel {name}: index_bits must be 32 or 64, got {index_bits!r}")
    ptrs = [f"{_storage(out)}* out"] + [f"const {_storage(d)}* in{k}" for k, d in enumerate(ins)]
    if contiguous:
        params = ptrs + ["long long n"]
        loads = [_load(f"in{k}[i]", d, d) for k, d in enumerate(ins)]
        loop = (f"    MGE_LOOP(unsigned long long, i, n) {{\n"
                f"        out[i] = {element(loads)};\n    }}\n")
        name += "_c"
    else:
        idx = "int" if index_bits == 32 else "long long"
        k = len(ins) + 1
        params = ptrs + [f"{idx} n", f"mge_layout<{k}, {idx}> layout"]
        loads = [_load(f"in{j}[off[{j + 1}]]", d, d) for j, d in enumerate(ins)]
        loop = (f"    MGE_LOOP(unsigned {idx}, i, n) {{\n"
                f"        {idx} off[{k}];\n"
                f"        mge_offsets<{k}, {idx}>(layout, ({idx})i, off);\n"
                f"        out[off[0]] = {element(loads)};\n    }}\n")
        name += f"_s{index_bits}"
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n{loop}}}\n"
    parts = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), *fn_parts, (name, text))
    return KernelSource(name, parts, tuple(params), bool(contiguous), index_bits, len(ins))


def elemwise_kernel(mode, in_dtypes, out_dtype=None, contiguous=True, index_bits=64):
    """The CUDA kernel of ``Elemwise(mode)`` on inputs of ``in_dtypes``.

    ``out_dtype`` defaults to (and must be) the op's declared output dtype.  ``contiguous``: the
    flat kernel for dense arrays of one shape, else the general one (broadcasting, any strides)
    with ``index_bits``-wide indices.  A ``ValueError`` for an unknown mode, a ``TypeError`` for
    dtypes the op or these kernels do not take; both name the mode and the dtypes."""
    mode = _mode(mode, in_dtypes)
    ins = _dtypes(f"Elemwise({mode!r}) kernel", in_dtypes)
    out = _out_dtype(mode, ins)
    if out_dtype is not None and np.dtype(out_dtype) != out:
        raise _error(TypeError, f"Elemwise({mode!r}) kernel",
                     f"gives {out}, not {np.dtype(out_dtype)}", ins)
    return _elemwise_kernel(mode, ins, out, bool(contiguous), index_bits)


@functools.lru_cache(maxsize=None)  # the device asks at every launch; the text is made once
def _elemwise_kernel(mode, ins, out, contiguous, index_bits):
    plan = _plan(mode, ins, out)
    fn, fn_text = _scalar_function(mode, plan)

    def element(loads):
        args = [_to_compute(v, d, a) for v, d, a in zip(loads, ins, plan.args)]
        return _store(f"{fn}({', '.join(args)})", plan.ret, out)

    codes = "_".join(_code(d) for d in ins)
    name = f"mge_ew_{mode}_{codes}_to_{_code(out)}"
    return _kernel(name, ((fn, fn_text),), ins, out, contiguous, index_bits, element)


# Dtypes the kernels only move (no arithmetic): their conversion to themselves -- the device's
# relayout, a Fill -- is a copy of their words, as the integer of their size.
_MOVED_AS = {np.dtype("complex64"): np.dtype("int64")}


def _moved_as(src_dtype, dst_dtype):
    """The integer dtype a conversion of a moved-only dtype to itself copies as; else ``None``."""
    try:
        src, dst = np.dtype(src_dtype), np.dtype(dst_dtype)
    except TypeError:
        return None  # (``_dtypes`` names it)
    return _MOVED_AS.get(src) if src == dst else None


def typecvt_kernel(src_dtype, dst_dtype, contiguous=True, index_bits=64):
    """The CUDA kernel of ``TypeCvt``: numpy's ``astype`` from ``src_dtype`` to ``dst_dtype``
    (see ``DIFFERENCES`` for values out of an integer's range); complex64 to itself is the copy
    of its 8-byte words (the int64 kernel).  A ``TypeError`` names unsupported dtypes."""
    moved = _moved_as(src_dtype, dst_dtype)
    if moved is not None:
        src_dtype = dst_dtype = moved
    src, dst = _dtypes("TypeCvt kernel", [src_dtype, dst_dtype])
    return _typecvt_kernel(src, dst, bool(contiguous), index_bits)


@functools.lru_cache(maxsize=None)
def _typecvt_kernel(src, dst, contiguous, index_bits):
    def element(loads):
        return _store(loads[0], src, dst)

    name = f"mge_typecvt_{_code(src)}_to_{_code(dst)}"
    return _kernel(name, (), (src,), dst, contiguous, index_bits, element)


# -- layouts for the general kernels --------------------------------------------------------------


def simplify_layout(shape, strides):
    """``(shape, strides)`` with the same elements in the same order in fewer dims: size-1 dims
    dropped, and neighbouring dims merged where every array steps through them as through one
    (each index then costs fewer divisions, and views of more than ``MAX_NDIM`` dims fit).
    ``strides``: one tuple per array (output first), in elements."""
    strides = [tuple(s) for s in strides]
    dims = []  # (size, [stride of each array])
    for d, size in enumerate(shape):
        if size == 1:
            continue
        st = [s[d] for s in strides]
        if dims and all(outer == inner * size for outer, inner in zip(dims[-1][1], st)):
            dims[-1] = (dims[-1][0] * size, st)
        else:
            dims.append((size, st))
    new_shape = tuple(size for size, _ in dims)
    return new_shape, [tuple(st[k] for _, st in dims) for k in range(len(strides))]


def index_bits_for(shape, strides):
    """32 when the element count and every array's offsets fit a signed 32-bit index, else 64."""
    limit = 2 ** 31 - 1
    if math.prod(shape) > limit:
        return 64
    for st in strides:
        reach = sum((n - 1) * abs(s) for n, s in zip(shape, st) if n > 0)
        if reach > limit:
            return 64
    return 32


def layout_dtype(narrays, index_bits=64):
    """The numpy dtype with the bytes of ``mge_layout<narrays, I>`` (C's alignment)."""
    idx = np.int32 if index_bits == 32 else np.int64
    return np.dtype([("shape", idx, (MAX_NDIM,)), ("strides", idx, (narrays, MAX_NDIM)),
                     ("ndim", np.int32)], align=True)


def pack_layout(shape, strides, index_bits=64):
    """The general kernels' ``layout`` argument for arrays of ``shape`` and ``strides`` (one
    tuple per array, the output first, in elements), as a ``numpy.void`` (pycuda passes it by
    value; ``bytes(...)`` gives its bytes).  Simplify first (``simplify_layout``); a
    ``ValueError`` if more than ``MAX_NDIM`` dims remain or a stride list is the wrong length."""
    if len(shape) > MAX_NDIM:
        raise ValueError(f"CUDA elemwise layout: {len(shape)} dims, at most {MAX_NDIM} "
                         f"(shape {tuple(shape)}; simplify_layout merges what it can)")
    for st in strides:
        if len(st) != len(shape):
            raise ValueError(f"CUDA elemwise layout: strides {tuple(st)} for shape {tuple(shape)}")
    packed = np.zeros((), layout_dtype(len(strides), index_bits))
    packed["ndim"] = len(shape)
    packed["shape"][:len(shape)] = shape
    for k, st in enumerate(strides):
        packed["strides"][k, :len(shape)] = st
    return packed[()]
