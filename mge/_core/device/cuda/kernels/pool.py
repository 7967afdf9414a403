"""CUDA kernels and launch plans for pooling: ``Pooling``, ``AdaptivePooling``,
``PoolingBackward`` and ``MaxPoolingGather`` (``ops/nn_pool.py``).

As in ``conv.py`` (whose ``mge_window`` struct and kernel helpers these share), each kernel is
CUDA C per mode and dtype signature (``KernelSource``), and each op has a pure Python plan in
``kernels/launch.py``'s one format: ``PLANS[op class](op, ins, outs)`` gives a ``launch.Plan``
of one ``Launch`` (kernel, grid, block, arguments; none for an empty output) that the CUDA
device runs and the tests run on the host build (``tests/cuda_plans.run_plan``).  Buffers: the
op's inputs ``"in0"``... in the op's order (``Pooling``/``AdaptivePooling``: x;
``PoolingBackward``: x, y, dy; ``MaxPoolingGather``: x, y, z) and its output ``"out0"``; no
workspace.

``STRIDED`` is empty: every input arrives dense.  The kernels index dense NCHW planes (one
``mge_window`` for every image and channel); a window reads each input element up to ``K``
times, so the device's one dense copy of a strided input costs less than strided reads would
save.

**Checks.**  None: nothing here depends on the data, so every error is the plan's own -- the
op's rule first (naming the op, shapes and dtypes), then a ``ValueError`` for more than 3
spatial dims, outputs that are not the rule's or a strided input, and the kernels'
``TypeError``/``ValueError`` for a dtype or mode they do not take.

Thread decomposition (NCHW, 1 to 3 spatial dims, every (image, channel) plane alike): a
grid-stride loop with one thread per element written, the innermost spatial index fastest, so
consecutive threads write consecutive addresses:

* ``Pooling`` / ``AdaptivePooling``: a thread per output element folds its window (the part
  inside the input: padding is skipped, which gives the CPU's results -- max pads with the
  lowest value and every max window holds an element, since padding < kernel; the averages pad
  with zeros).  ``AdaptivePooling`` is the ``Pooling`` of ``op.as_pooling`` (MegEngine's rule).
* ``PoolingBackward``: a thread per **input** element sums, over the windows that hold it (in
  the CPU kernel's order: kernel positions row-major), ``dy`` of each window whose first maximum
  (row-major window order; the CPU kernel's tie rule) it is -- found by scanning the window up
  to the first element equal to the window's ``y`` -- or ``dy / divisor`` for the averages.
  Deterministic: no atomics, each sum in a fixed order.
* ``MaxPoolingGather``: a thread per window reads ``z`` at the window's first maximum (0 when
  no element equals ``y``, as a NaN maximum).

No kernel uses shared memory or barriers, so the host build (``hostbuild.py``) runs each
grid-stride loop as one serial loop over all elements, which covers the same index set as any
grid (``launch.grid_for``: ``ceil(n / THREADS)`` blocks of ``launch.THREADS`` threads, capped).
Indices are 32 bits wide where every count fits, else 64 (a plan's ``index_bits=64`` asks for
the 64-bit variants always).

Dtypes: max pooling takes every dtype of ``SUPPORTED_DTYPES`` (bool, integers, floats); the
averages, the backward ops and the gather take float16, float32 and float64 (the op rules), and
compute float16 in float32 (rounded once).  Comparisons with ``y`` are in the wider of the two
dtypes (exact, as numpy's).  Where results may differ from the CPU device: ``DIFFERENCES``.
"""
import functools
import math

import numpy as np

from ....ops.base import INFER, TensorDesc, op_error
from ....ops.nn_pool import (
    POOLING_MODES, AdaptivePooling, MaxPoolingGather, Pooling, PoolingBackward,
)
from .conv import (
    MAX_SPATIAL_DIMS, _check_dense, _check_outs, _index, _traits, _wrapper, launch_index_bits,
    pack_window,
)
from .elemwise import SUPPORTED_DTYPES, _code, _compute, _storage
from .launch import THREADS, Buf, Launch, Plan, grid_for

__all__ = ["pooling_kernel", "pooling_backward_kernel", "max_pooling_gather_kernel",
           "pooling_plan", "adaptive_pooling_plan", "pooling_backward_plan",
           "max_pooling_gather_plan", "PLANS", "STRIDED", "FLOAT_DTYPES", "DIFFERENCES"]

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: The dtypes of the average modes, the backward ops and the gather.
FLOAT_DTYPES = (_F16, _F32, _F64)

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()

#: Where the CUDA pooling kernels' results may differ from the CPU device's.
DIFFERENCES = """\
* Average PoolingBackward of float16 and float32 divides dy by the window's divisor in float32
  and sums the shares in float32; the CPU kernel divides in float64 (numpy promotes float32 by
  an int64) and rounds each sum to float32: results differ in the last bits (the tests allow a
  float32 rounding per window of the sum of magnitudes, and one float16 ulp).  float64 is
  bit-identical, and so is everything else: the forward ops (max, both averages; float16 summed
  in float32, divided, rounded once), max PoolingBackward and MaxPoolingGather (the same sums in
  the same order).
* Max pooling of a window whose maximum is a zero of both signs: numpy's maximum leaves the sign
  to its SIMD loops; here the first of equal values stays (``a >= b ? a : b``).
* Max PoolingBackward and MaxPoolingGather: an infinite or NaN dy (z) reaches only its window's
  first maximum.  The CPU kernel multiplies dy by a 0/1 mask, so there it also makes NaN every
  other element of the window (inf * 0).
"""

_POOL = r"""#ifndef MGE_POOL
#define MGE_POOL
/* the first input coordinate of output position o along dim d, and the window's part inside
   the input: [lo, hi) */
#define MGE_WINDOW_RANGE(d, o) \
    int st##d = (o) * w.stride[d] - w.pad[d]; \
    int lo##d = st##d > 0 ? st##d : 0; \
    int hi##d = st##d + w.k[d] < w.in[d] ? st##d + w.k[d] : w.in[d];
/* output position p of a plane as (o0, o1, o2) */
#define MGE_SPLIT_OUT(p) \
    int o2 = (int)((p) % w.out[2]); \
    int o1 = (int)(((p) / w.out[2]) % w.out[1]); \
    int o0 = (int)((p) / w.out[2] / w.out[1]);

/* Max pooling: a thread per output element; numpy's maximum (a NaN wins). */
template <class T, class I>
MGE_FN void mge_pool_max(typename T::S* y, const typename T::S* x, I n, mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in);
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % P, plane = i / P;
        MGE_SPLIT_OUT(p)
        MGE_WINDOW_RANGE(0, o0) MGE_WINDOW_RANGE(1, o1) MGE_WINDOW_RANGE(2, o2)
        const typename T::S* src = x + plane * IN;
        typename T::C acc = T::load(src[((I)lo0 * w.in[1] + lo1) * w.in[2] + lo2]);
        for (int a = lo0; a < hi0; ++a)
            for (int b = lo1; b < hi1; ++b)
                for (int e = lo2; e < hi2; ++e) {
                    typename T::C v = T::load(src[((I)a * w.in[1] + b) * w.in[2] + e]);
                    acc = (acc >= v || acc != acc) ? acc : v;
                }
        y[i] = T::store(acc);
    }
}

/* Average pooling: a thread per output element; the sum in window order, then one division by
   the kernel's size (padding counted) or by the elements inside the input (EXCLUDE). */
template <class T, class I, bool EXCLUDE>
MGE_FN void mge_pool_avg(typename T::S* y, const typename T::S* x, I n, mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in);
    const int K = w.k[0] * w.k[1] * w.k[2];
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % P, plane = i / P;
        MGE_SPLIT_OUT(p)
        MGE_WINDOW_RANGE(0, o0) MGE_WINDOW_RANGE(1, o1) MGE_WINDOW_RANGE(2, o2)
        const typename T::S* src = x + plane * IN;
        typename T::C acc = 0;
        for (int a = lo0; a < hi0; ++a)
            for (int b = lo1; b < hi1; ++b)
                for (int e = lo2; e < hi2; ++e)
                    acc += T::load(src[((I)a * w.in[1] + b) * w.in[2] + e]);
        int div = EXCLUDE ? (hi0 - lo0) * (hi1 - lo1) * (hi2 - lo2) : K;
        y[i] = T::store(acc / (typename T::C)div);
    }
}

/* The plane offset of the first element of the window starting at (st0, st1, st2) equal to v
   (row-major window order), or -1. */
template <class TX, class CT, class I>
MGE_FN I mge_first_max(const typename TX::S* xp, CT v, int st0, int st1, int st2, mge_window w)
{
    for (int a = 0; a < w.k[0]; ++a) {
        int i0 = st0 + a;
        if (i0 < 0 || i0 >= w.in[0]) continue;
        for (int b = 0; b < w.k[1]; ++b) {
            int i1 = st1 + b;
            if (i1 < 0 || i1 >= w.in[1]) continue;
            for (int e = 0; e < w.k[2]; ++e) {
                int i2 = st2 + e;
                if (i2 < 0 || i2 >= w.in[2]) continue;
                I s = ((I)i0 * w.in[1] + i1) * w.in[2] + i2;
                if ((CT)TX::load(xp[s]) == v) return s;
            }
        }
    }
    return (I)-1;
}

/* Visit, in kernel-position order (row-major), the output positions whose window holds the input
   element (x0, x1, x2): the body (the macro's arguments) sees o (the plane offset of the
   output) and o0, o1, o2. */
#define MGE_FOR_WINDOWS_HOLDING(...) \
    for (int a = 0; a < w.k[0]; ++a) { \
        int t0 = x0 + w.pad[0] - a; \
        if (t0 < 0 || t0 % w.stride[0] != 0 || t0 / w.stride[0] >= w.out[0]) continue; \
        int o0 = t0 / w.stride[0]; \
        for (int b = 0; b < w.k[1]; ++b) { \
            int t1 = x1 + w.pad[1] - b; \
            if (t1 < 0 || t1 % w.stride[1] != 0 || t1 / w.stride[1] >= w.out[1]) continue; \
            int o1 = t1 / w.stride[1]; \
            for (int e = 0; e < w.k[2]; ++e) { \
                int t2 = x2 + w.pad[2] - e; \
                if (t2 < 0 || t2 % w.stride[2] != 0 || t2 / w.stride[2] >= w.out[2]) continue; \
                int o2 = t2 / w.stride[2]; \
                I o = ((I)o0 * w.out[1] + o1) * w.out[2] + o2; \
                __VA_ARGS__ \
            } \
        } \
    }
#define MGE_SPLIT_IN(s) \
    int x2 = (int)((s) % w.in[2]); \
    int x1 = (int)(((s) / w.in[2]) % w.in[1]); \
    int x0 = (int)((s) / w.in[2] / w.in[1]);

/* Max PoolingBackward: a thread per input element sums dy of the windows whose first maximum
   it is. */
template <class TX, class TY, class TD, class CT, class I>
MGE_FN void mge_pool_max_backward(typename TD::S* dx, const typename TX::S* x,
                                  const typename TY::S* y, const typename TD::S* dy, I n,
                                  mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in);
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I s = i % IN, plane = i / IN;
        MGE_SPLIT_IN(s)
        const typename TX::S* xp = x + plane * IN;
        const typename TY::S* yp = y + plane * P;
        const typename TD::S* dyp = dy + plane * P;
        CT xv = (CT)TX::load(xp[s]);
        typename TD::C acc = 0;
        MGE_FOR_WINDOWS_HOLDING(
            CT yv = (CT)TY::load(yp[o]);
            if (xv == yv && mge_first_max<TX, CT, I>(
                    xp, yv, o0 * w.stride[0] - w.pad[0], o1 * w.stride[1] - w.pad[1],
                    o2 * w.stride[2] - w.pad[2], w) == s)
                acc += TD::load(dyp[o]);
        )
        dx[i] = TD::store(acc);
    }
}

/* Average PoolingBackward: a thread per input element sums dy / divisor of the windows holding
   it. */
template <class TD, class I, bool EXCLUDE>
MGE_FN void mge_pool_avg_backward(typename TD::S* dx, const typename TD::S* dy, I n,
                                  mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in);
    const int K = w.k[0] * w.k[1] * w.k[2];
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I s = i % IN, plane = i / IN;
        MGE_SPLIT_IN(s)
        const typename TD::S* dyp = dy + plane * P;
        typename TD::C acc = 0;
        MGE_FOR_WINDOWS_HOLDING(
            int div = K;
            if (EXCLUDE) {
                MGE_WINDOW_RANGE(0, o0) MGE_WINDOW_RANGE(1, o1) MGE_WINDOW_RANGE(2, o2)
                div = (hi0 - lo0) * (hi1 - lo1) * (hi2 - lo2);
            }
            acc += TD::load(dyp[o]) / (typename TD::C)div;
        )
        dx[i] = TD::store(acc);
    }
}

/* MaxPoolingGather: a thread per window reads z at the window's first maximum. */
template <class TX, class TY, class TZ, class CT, class I>
MGE_FN void mge_pool_max_gather(typename TZ::S* out, const typename TX::S* x,
                                const typename TY::S* y, const typename TZ::S* z, I n,
                                mge_window w)
{
    const I P = mge_volume<I>(w.out), IN = mge_volume<I>(w.in);
    MGE_LOOP(MGE_UNSIGNED(I), u, n) {
        I i = (I)u;
        I p = i % P, plane = i / P;
        MGE_SPLIT_OUT(p)
        I at = mge_first_max<TX, CT, I>(x + plane * IN, (CT)TY::load(y[i]),
                                        o0 * w.stride[0] - w.pad[0], o1 * w.stride[1] - w.pad[1],
                                        o2 * w.stride[2] - w.pad[2], w);
        typename TZ::C acc = 0;  /* 0 + z: the CPU's sum, which turns -0 into +0 */
        if (at >= 0) acc += TZ::load(z[plane * IN + at]);
        out[i] = TZ::store(acc);
    }
}
#endif /* MGE_POOL */
"""

_POOL_PART = ("MGE_POOL", _POOL)


def _error(exc, what, message, dtypes=()):
    names = f" (dtypes: {', '.join(str(d) for d in dtypes)})" if dtypes else ""
    return exc(f"CUDA {what}: {message}{names}")


def _mode(what, mode):
    m = mode.lower() if isinstance(mode, str) else mode
    if m not in POOLING_MODES:
        raise _error(ValueError, what, f"unknown mode {mode!r} (modes: {', '.join(POOLING_MODES)})")
    return m


def _dtypes(what, dtypes, allowed):
    try:
        out = tuple(np.dtype(d) for d in dtypes)
    except TypeError as e:
        raise _error(TypeError, what, f"not a dtype ({e})", dtypes) from None
    for d in out:
        if d not in allowed:
            raise _error(TypeError, what, f"unsupported dtype {d} (takes "
                         f"{', '.join(str(a) for a in allowed)})", out)
    return out


def _idx(what, index_bits):
    if index_bits not in (32, 64):
        raise _error(ValueError, what, f"index_bits must be 32 or 64, got {index_bits!r}")
    return "int" if index_bits == 32 else "long long"


def _compare_type(x, y):
    """The C type x and y are compared in: their common compute type (exact widening)."""
    return _storage(_compute(np.result_type(x, y)))


def pooling_kernel(mode, dtype, index_bits=32):
    """The ``Pooling`` (and ``AdaptivePooling``) kernel of ``mode`` on ``dtype``: params
    ``(T* y, const T* x, I n, mge_window w)``, ``n`` the elements of ``y``.  A ``ValueError``
    for an unknown mode, a ``TypeError`` for a dtype the mode does not take (the averages: floats
    only)."""
    what = "Pooling kernel"
    mode = _mode(what, mode)
    allowed = SUPPORTED_DTYPES if mode == "max" else FLOAT_DTYPES
    (d,) = _dtypes(f"Pooling({mode!r}) kernel", [dtype], allowed)
    return _pooling_kernel(mode, d, index_bits)


@functools.lru_cache(maxsize=None)
def _pooling_kernel(mode, d, index_bits):
    idx, s = _idx("Pooling kernel", index_bits), _storage(d)
    tr, tr_text = _traits(d)
    params = [f"{s}* y", f"const {s}* x", f"{idx} n", "mge_window w"]
    if mode == "max":
        call = f"mge_pool_max<{tr}, {idx}>(y, x, n, w)"
    else:
        exclude = "true" if mode == "average_count_exclude_padding" else "false"
        call = f"mge_pool_avg<{tr}, {idx}, {exclude}>(y, x, n, w)"
    name = f"mge_pool_{mode}_{_code(d)}_s{index_bits}"
    return _wrapper(name, ((tr, tr_text), _POOL_PART), params, call, index_bits, 1)


def pooling_backward_kernel(mode, x_dtype, y_dtype, dy_dtype, index_bits=32):
    """The ``PoolingBackward`` kernel of ``mode``: params ``(D* dx, const X* x, const Y* y,
    const D* dy, I n, mge_window w)``, ``n`` the elements of ``dx`` (of ``dy``'s dtype, as
    the op's rule); the averages read neither ``x`` nor ``y`` (``const void*``)."""
    what = "PoolingBackward kernel"
    mode = _mode(what, mode)
    dts = _dtypes(f"PoolingBackward({mode!r}) kernel", [x_dtype, y_dtype, dy_dtype],
                  FLOAT_DTYPES)
    return _pooling_backward_kernel(mode, *dts, index_bits)


@functools.lru_cache(maxsize=None)
def _pooling_backward_kernel(mode, xd, yd, dd, index_bits):
    idx = _idx("PoolingBackward kernel", index_bits)
    td, td_text = _traits(dd)
    if mode == "max":
        (tx, tx_text), (ty, ty_text) = _traits(xd), _traits(yd)
        params = [f"{_storage(dd)}* dx", f"const {_storage(xd)}* x", f"const {_storage(yd)}* y",
                  f"const {_storage(dd)}* dy", f"{idx} n", "mge_window w"]
        call = (f"mge_pool_max_backward<{tx}, {ty}, {td}, {_compare_type(xd, yd)}, {idx}>"
                f"(dx, x, y, dy, n, w)")
        parts = ((tx, tx_text), (ty, ty_text), (td, td_text), _POOL_PART)
        name = f"mge_poolbwd_max_{_code(xd)}_{_code(yd)}_{_code(dd)}_s{index_bits}"
    else:
        params = [f"{_storage(dd)}* dx", "const void* x", "const void* y",
                  f"const {_storage(dd)}* dy", f"{idx} n", "mge_window w"]
        exclude = "true" if mode == "average_count_exclude_padding" else "false"
        call = f"mge_pool_avg_backward<{td}, {idx}, {exclude}>(dx, dy, n, w)"
        parts = ((td, td_text), _POOL_PART)
        name = f"mge_poolbwd_{mode}_{_code(dd)}_s{index_bits}"
    return _wrapper(name, parts, params, call, index_bits, 3)


def max_pooling_gather_kernel(x_dtype, y_dtype, z_dtype, index_bits=32):
    """The ``MaxPoolingGather`` kernel: params ``(Z* out, const X* x, const Y* y, const Z* z,
    I n, mge_window w)``, ``n`` the elements of ``out`` (the pooled shape, ``z``'s dtype)."""
    dts = _dtypes("MaxPoolingGather kernel", [x_dtype, y_dtype, z_dtype], FLOAT_DTYPES)
    return _max_pooling_gather_kernel(*dts, index_bits)


@functools.lru_cache(maxsize=None)
def _max_pooling_gather_kernel(xd, yd, zd, index_bits):
    idx = _idx("MaxPoolingGather kernel", index_bits)
    (tx, tx_text), (ty, ty_text), (tz, tz_text) = _traits(xd), _traits(yd), _traits(zd)
    params = [f"{_storage(zd)}* out", f"const {_storage(xd)}* x", f"const {_storage(yd)}* y",
              f"const {_storage(zd)}* z", f"{idx} n", "mge_window w"]
    call = (f"mge_pool_max_gather<{tx}, {ty}, {tz}, {_compare_type(xd, yd)}, {idx}>"
            f"(out, x, y, z, n, w)")
    name = f"mge_pool_gather_{_code(xd)}_{_code(yd)}_{_code(zd)}_s{index_bits}"
    return _wrapper(name, ((tx, tx_text), (ty, ty_text), (tz, tz_text), _POOL_PART), params,
                    call, index_bits, 3)


# -- plans ----------------------------------------------------------------------------------------


def _checked(op, ins, outs, names, index_bits):
    """The inputs' ``TensorDesc``s after the op's rule (its errors first) and the kernels'
    limits; ``outs`` must be the rule's."""
    if len(ins) != len(names):
        raise op_error(TypeError, op, f"CUDA plan: expects {len(names)} inputs {names}, got "
                       f"{len(ins)}")
    if index_bits not in (32, 64):
        raise op_error(ValueError, op, f"CUDA plan: index_bits must be 32 or 64, got "
                       f"{index_bits!r}")
    descs = [TensorDesc(tuple(i.shape), np.dtype(i.dtype)) for i in ins]
    want = INFER[type(op)](op, descs)  # the op's own errors first
    _check_outs(op, descs, outs, want)
    _check_dense(op, descs, ins)
    nd = len(descs[0].shape) - 2
    if not 1 <= nd <= MAX_SPATIAL_DIMS:
        raise op_error(ValueError, op, f"CUDA plan: the CUDA kernels take 1 to "
                       f"{MAX_SPATIAL_DIMS} spatial dims, got {nd}", descs)
    return descs


def _window(pool_op, xs, out_shape):
    return pack_window(xs[2:], out_shape[2:], pool_op.kernel, pool_op.stride, pool_op.padding)


def _plan(kernel_fn, n, extents, window, least):
    """The plan of one grid-stride launch over ``n`` elements writing ``"out0"`` from the
    inputs ``"in0"``... (none when ``n`` is 0)."""
    if not n:
        return Plan((), notes=("empty output: nothing to launch",))
    bits = max(least, launch_index_bits(n, *extents))
    kernel = kernel_fn(bits)
    pointers = [Buf("out0")] + [Buf(f"in{k}") for k in range(kernel.nin)]
    return Plan((Launch(kernel, grid_for(n), (THREADS, 1, 1),
                        (*pointers, _index(bits, n), window)),))


def _forward(pool_op, descs, outs, least):
    (xs, dt), = descs
    out = outs[0]
    return _plan(lambda bits: pooling_kernel(pool_op.mode, dt, bits), out.size,
                 (math.prod(xs),), _window(pool_op, xs, out.shape), least)


def pooling_plan(op, ins, outs, index_bits=32):
    """The plan of ``Pooling`` ``op`` on ``ins`` = ``[x]`` giving ``outs`` = ``[y]``
    (``launch.Layout``s): one launch, a thread per output element.  The op's rule raises first
    (naming the op, shapes and dtypes), then a ``ValueError`` for more than 3 spatial dims."""
    descs = _checked(op, ins, outs, ("x",), index_bits)
    return _forward(op, descs, outs, index_bits)


def adaptive_pooling_plan(op, ins, outs, index_bits=32):
    """The plan of ``AdaptivePooling`` ``op`` on ``ins`` = ``[x]``: the ``Pooling`` plan of
    ``op.as_pooling`` (MegEngine's rule for the window)."""
    descs = _checked(op, ins, outs, ("x",), index_bits)
    return _forward(op.as_pooling(descs[0].shape), descs, outs, index_bits)


def pooling_backward_plan(op, ins, outs, index_bits=32):
    """The plan of ``PoolingBackward`` ``op`` on ``ins`` = ``[x, y, dy]`` giving ``[dx]``: one
    launch, a thread per element of ``dx``."""
    descs = _checked(op, ins, outs, ("x", "y", "dy"), index_bits)
    (xs, xd), (ys, yd), (gs, gd) = descs
    return _plan(lambda bits: pooling_backward_kernel(op.mode, xd, yd, gd, bits), ins[0].size,
                 (ins[1].size,), _window(op, xs, ys), index_bits)


def max_pooling_gather_plan(op, ins, outs, index_bits=32):
    """The plan of ``MaxPoolingGather`` ``op`` on ``ins`` = ``[x, y, z]`` giving ``[out]``: one
    launch, a thread per window."""
    descs = _checked(op, ins, outs, ("x", "y", "z"), index_bits)
    (xs, xd), (ys, yd), (zs, zd) = descs
    return _plan(lambda bits: max_pooling_gather_kernel(xd, yd, zd, bits), outs[0].size,
                 (ins[0].size,), _window(op, xs, outs[0].shape), index_bits)


#: op class -> ``plan(op, ins, outs, index_bits=32)`` -> ``launch.Plan``.
PLANS = {Pooling: pooling_plan, AdaptivePooling: adaptive_pooling_plan,
         PoolingBackward: pooling_backward_plan, MaxPoolingGather: max_pooling_gather_plan}
