"""CUDA C for the remaining small ops -- ``OneHot``, ``Dot``, ``CheckNonFinite``, ``AssertEqual``
and ``MatInv`` -- with their launch plans (``launch.py``'s one format).

Like the other families this only makes text and plans: NVRTC compiles the text for the GPU, and
the same text builds as host C++ under g++ for the tests (``block.py``'s phases emulate blocks,
threads and barriers there).

* **OneHot** -- a grid-stride loop over the ``(..., num_classes)`` int32 output: element ``i`` is
  ``label[i / C] == i % C``.  A label outside ``[0, C)`` sets a workspace word (the element gets
  0); the plan's ``Check`` then reads the labels back and raises the CPU kernel's ``IndexError``
  with their range.
* **Dot** -- two passes: ``mge_dot_partial`` (up to ``DOT_BLOCKS`` blocks of ``NTHREADS``
  threads, each thread a grid-stride sum of products, a shared-memory tree per block, one
  partial per block in the workspace), then ``mge_dot_final`` (one block adds the partials in a
  tree and stores the 0-d result).  The result dtype is the op's rule's (narrow integers in
  int32); integers wrap as numpy's do (unsigned arithmetic), float16 and float32 accumulate in
  float, float64 in double.  An empty dot is a ``Memset`` of 0.
* **CheckNonFinite** -- a ``Memset`` zeroes the int32 flag (the last output), then one launch per
  input writes ``x * scale`` (the scale rounded to the input's dtype first, the product rounded
  once -- what numpy's ``a * python_float`` does) and stores 1 in the flag when it meets a NaN or
  an infinity (every writer stores the same 1: no atomics).
* **AssertEqual** -- ``expect`` copied into the output (``relayout.copy_launch``), and one thread
  reads the scalar ``err`` (0 when empty, as the CPU kernel), writes it as a double into the
  workspace and sets the check's word when ``not err <= maxerr`` (NaN fails).  The ``Check``
  reads the double back for the CPU kernel's ``AssertEqualError`` message; with ``verbose`` the
  plan first reads it back (a ``Readback``), prints ``AssertEqual: err=...`` as the CPU kernel
  does, and its continuation raises through the same check.
* **MatInv** -- one block per matrix (a block loop over the batch), Gauss-Jordan elimination with
  partial pivoting on the matrix in dynamic shared memory (``n * n`` of the computing type:
  float for float16, float32 and integer inputs, as the CPU computes them in float32; double for
  float64), inverted in place: at step ``k`` one thread picks the pivot (LAPACK's ``i?amax``
  rule: the first of the largest magnitudes), the block swaps the rows, scales the pivot row and
  eliminates column ``k`` from every other row; the row swaps are undone as column swaps in
  reverse order at the end.  A zero pivot -- exactly where LAPACK's LU finds the matrix singular
  -- sets the check's word, and the device raises the CPU kernel's ``ValueError("MatInv: matrix
  is singular (input shape S): Singular matrix")``.  ``n`` up to ``MAX_MATINV`` (64: 32 KiB of
  doubles); beyond, the plan raises ``NotImplementedError`` naming the op and ``n``.

``SVD`` (one-sided Jacobi, a block per matrix) is ``linalg.py``'s: the family of linear algebra
that is no product.

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` first runs the op's own shape/dtype rule on
``ins`` (its errors name the op, shapes and dtypes; ``outs`` must be what it gives) and refuses a
dtype the kernels lack with a ``TypeError`` naming the op and the dtypes.  ``STRIDED`` is empty:
every kernel reads dense inputs (the device copies views first).  Where results differ from the
CPU device: ``DIFFERENCES``.
"""
import functools
import math

import numpy as np

from ....ops.matmul import Dot, MatInv
from ....ops.misc import AssertEqual, AssertEqualError
from ....ops.nn import OneHot
from .....amp.check_non_finite import CheckNonFinite
from .elemwise import KernelSource
from .launch import Buf, Check, Launch, Memset, Plan, Readback, Workspace, grid_for
from .norm import _PRELUDE_PARTS, _rule
from .relayout import copy_launch

__all__ = ["NTHREADS", "DOT_BLOCKS", "MAX_MATINV", "NVRTC_OPTIONS", "NOT_DONE", "DIFFERENCES", "one_hot_kernel",
           "dot_kernels", "check_non_finite_kernel", "assert_equal_kernel", "matinv_kernel",
           "one_hot_plan", "dot_plan", "check_non_finite_plan", "assert_equal_plan",
           "matinv_plan", "PLANS", "STRIDED"]

#: Threads per block of the grid-stride and reducing kernels.
NTHREADS = 256
#: The most blocks of Dot's first pass.
DOT_BLOCKS = 256
#: The largest matrix ``MatInv``'s kernel inverts (``n x n`` in shared memory).
MAX_MATINV = 64
#: NVRTC flags (elemwise.py's: no contraction into fused multiply-adds).
NVRTC_OPTIONS = ("--fmad=false",)
#: The ops of this group the CUDA device has no kernel for (SVD's is in ``linalg.py``).
NOT_DONE = ()

DIFFERENCES = """\
* Dot sums in a tree of threads and blocks (float16/float32 in float, float64 in double); numpy
  (BLAS) sums in its own order: equal within the rounding of the sum, not bit for bit.  Integer
  dots are exact (modulo 2**bits, as numpy's).
* MatInv is Gauss-Jordan with partial pivoting, LAPACK's getrf + getri is an LU factorisation:
  the same pivots, other rounding (a few ulp times the condition number).  A matrix is singular
  where the pivot is exactly 0, as LAPACK decides; a nearly singular matrix whose rounding gives
  a zero pivot in one method and not the other is judged differently.  n is at most 64.
"""

_B = np.dtype("bool")
_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
_I32 = np.dtype("int32")
# dtype -> (code, storage C type)
_TYPES = {
    _B: ("b8", "bool"),
    np.dtype("int8"): ("i8", "signed char"),
    np.dtype("uint8"): ("u8", "unsigned char"),
    np.dtype("int16"): ("i16", "short"),
    np.dtype("uint16"): ("u16", "unsigned short"),
    np.dtype("int32"): ("i32", "int"),
    np.dtype("uint32"): ("u32", "unsigned"),
    np.dtype("int64"): ("i64", "long long"),
    np.dtype("uint64"): ("u64", "unsigned long long"),
    _F16: ("f16", "unsigned short"),
    _F32: ("f32", "float"),
    _F64: ("f64", "double"),
}
_INTS = tuple(d for d in _TYPES if d.kind in "iu")
_FLOATS = (_F16, _F32, _F64)

_TEMPLATES = r"""#ifndef MGE_MISC_TEMPLATES
#define MGE_MISC_TEMPLATES
/* element i of p as T; H: p holds float16 bits (uint16 has the same storage type) */
template <bool H> struct mge_misc_ld {
    template <class T, class S> MGE_MEMBER T at(const S* p, long long i) { return (T)p[i]; }
};
template <> struct mge_misc_ld<true> {
    template <class T> MGE_MEMBER T at(const unsigned short* p, long long i) {
        return (T)mge_h2f(p[i]);
    }
};
/* OneHot: out[i] = label[i / C] == i % C; a label out of range sets *bad, the element is 0 */
template <class L>
MGE_FN void mge_one_hot(const L* x, int* out, int* bad, long long n, long long C) {
    MGE_GRID_LOOP(i, n) {
        long long r = i / C, c = i - r * C;
        long long v = (long long)x[r];
        bool ok = v >= 0 && v < C;  /* (a uint64 label above the int64 range is negative) */
        if (!ok) *bad = 1;
        out[i] = ok && v == c ? 1 : 0;
    }
}
/* Dot: the block tree of NT threads over s[] */
template <class A, int NT>
MGE_BLOCK_FN void mge_dot_tree(A* s) {
    for (int w = NT / 2; w > 0; w /= 2) {
        MGE_THREADS { MGE_THREAD_IDS
            if (tid < (unsigned)w) s[tid] = s[tid] + s[tid + w];
        }
        MGE_SYNC
    }
}
#endif /* MGE_MISC_TEMPLATES */
"""

_MATINV = r"""#ifndef MGE_MATINV
#define MGE_MATINV
/* MatInv: Gauss-Jordan with partial pivoting, in place in shared memory, one block per matrix;
   T the computing type.  A zero pivot sets *singular (the outputs of that matrix are NaN). */
template <class T, bool H, class S, class O>
MGE_BLOCK_FN void mge_matinv(const S* x, O* y, int* singular, long long batch, int n) {
    MGE_SHARED int sh_perm[64];
    MGE_SHARED int sh_p, sh_sing;
    MGE_SHARED T sh_piv;
    MGE_SHARED T sh_col[64];
    MGE_SHARED_ARRAY(T, a, n * n)
    const int nn = n * n;
    MGE_BLOCK_LOOP(b, batch) {
        MGE_THREADS { MGE_THREAD_IDS
            for (int e = (int)tid; e < nn; e += (int)blockDim.x) a[e] =
                mge_misc_ld<H>::template at<T>(x, b * nn + e);
            if (tid == 0) sh_sing = 0;
        }
        MGE_SYNC
        for (int k = 0; k < n; ++k) {
            MGE_THREADS { MGE_THREAD_IDS
                if (tid == 0 && !sh_sing) {
                    int p = k;
                    T best = mge_fabs(a[k * n + k]);
                    for (int i = k + 1; i < n; ++i) {
                        T v = mge_fabs(a[i * n + k]);
                        if (v > best) { best = v; p = i; }
                    }
                    sh_p = p;
                    sh_perm[k] = p;
                    sh_piv = a[p * n + k];
                    if (sh_piv == (T)0) sh_sing = 1;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                if (!sh_sing && sh_p != k) {
                    for (int j = (int)tid; j < n; j += (int)blockDim.x) {
                        T t = a[k * n + j]; a[k * n + j] = a[sh_p * n + j]; a[sh_p * n + j] = t;
                    }
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                if (!sh_sing) {
                    for (int j = (int)tid; j < n; j += (int)blockDim.x)
                        a[k * n + j] = (j == k ? (T)1 : a[k * n + j]) / sh_piv;
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                if (!sh_sing) {
                    for (int i = (int)tid; i < n; i += (int)blockDim.x) sh_col[i] = a[i * n + k];
                }
            }
            MGE_SYNC
            MGE_THREADS { MGE_THREAD_IDS
                if (!sh_sing) {
                    for (int e = (int)tid; e < nn; e += (int)blockDim.x) {
                        int i = e / n, j = e - (e / n) * n;
                        if (i != k) a[e] = (j == k ? (T)0 : a[e]) - sh_col[i] * a[k * n + j];
                    }
                }
            }
            MGE_SYNC
        }
        for (int k = n - 1; k >= 0; --k) {  /* the row swaps, undone as column swaps */
            MGE_THREADS { MGE_THREAD_IDS
                int p = sh_perm[k];
                if (!sh_sing && p != k) {
                    for (int i = (int)tid; i < n; i += (int)blockDim.x) {
                        T t = a[i * n + k]; a[i * n + k] = a[i * n + p]; a[i * n + p] = t;
                    }
                }
            }
            MGE_SYNC
        }
        MGE_THREADS { MGE_THREAD_IDS
            for (int e = (int)tid; e < nn; e += (int)blockDim.x)
                mge_stf(y, b * nn + e, sh_sing ? mge_qnan<T>() : a[e]);
            if (tid == 0 && sh_sing) *singular = 1;
        }
        MGE_SYNC
    }
}
#endif /* MGE_MATINV */
"""

_PARTS = _PRELUDE_PARTS + (("MGE_MISC_TEMPLATES", _TEMPLATES),)


def _entry(name, params, body, parts=_PARTS):
    text = f"MGE_KERNEL {name}({', '.join(params)})\n{{\n{body}\n}}\n"
    return KernelSource(name, parts + ((name, text),), tuple(params), False, 64, 0)


def _code(d):
    return _TYPES[d][0]


def _storage(d):
    return _TYPES[d][1]


def _dtype(what, dtype, allowed):
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"CUDA {what} kernel: not a dtype ({e}) (dtype: {dtype})") from None
    if d not in allowed:
        names = ", ".join(str(a) for a in allowed)
        raise TypeError(f"CUDA {what} kernel: unsupported dtype {d} (these kernels take {names})")
    return d


def _fail(exc, op, message, ins):
    shapes = ", ".join(f"{tuple(a.shape)} {np.dtype(a.dtype)}" for a in ins) or "none"
    return exc(f"CUDA {op.name}: {message} (inputs: {shapes})")


def _load(d, ptr, idx, ctype):
    """C expression: element ``idx`` of ``ptr`` (dtype ``d``) as ``ctype``."""
    if d == _F16:
        return f"({ctype})mge_h2f({ptr}[{idx}])"
    return f"({ctype}){ptr}[{idx}]"


# -- OneHot ---------------------------------------------------------------------------------------

def one_hot_kernel(label_dtype):
    """The ``OneHot`` kernel of integer labels ``label_dtype``: ``(x, out, bad, n, C)``."""
    return _one_hot_kernel(_dtype("OneHot", label_dtype, _INTS))


@functools.lru_cache(maxsize=None)
def _one_hot_kernel(d):
    return _entry(f"mge_one_hot_{_code(d)}",
                  [f"const {_storage(d)}* x", "int* out", "int* bad", "long long n",
                   "long long C"],
                  f"    mge_one_hot<{_storage(d)}>(x, out, bad, n, C);")


def one_hot_plan(op, ins, outs):
    """The ``Plan`` of ``OneHot`` on ``ins`` ``(labels,)``: the int32 one-hot ``out0`` and a
    ``Check`` raising the CPU kernel's ``IndexError`` (the labels' range read back)."""
    (desc,) = _rule(op, ins, outs)
    x = ins[0]
    kernel = one_hot_kernel(x.dtype)
    n, c = outs[0].size, int(op.num_classes)
    if n == 0:
        return Plan((), notes=("no labels: nothing to write",))
    ws = Workspace()
    flag = ws.add(4)

    def error(value, read):
        labels = read(Buf("in0"), x.dtype, x.size)
        return IndexError(f"{op.name}: labels must be in [0, {c}), got range "
                          f"[{labels.min()}, {labels.max()}]")
    launch = Launch(kernel, grid_for(n, NTHREADS), (NTHREADS,),
                    (Buf("in0"), Buf("out0"), flag, np.int64(n), np.int64(c)))
    return Plan((launch,), ws.size, (Check(flag, error),))


# -- Dot ------------------------------------------------------------------------------------------

def _dot_acc(out):
    """(accumulator C type, its itemsize) of a dot answering in ``out``."""
    if out in (_F16, _F32):
        return "float", 4
    if out == _F64:
        return "double", 8
    return ("unsigned long long", 8) if out.itemsize == 8 else ("unsigned", 4)


def dot_kernels(a_dtype, b_dtype, out_dtype):
    """``Dot``'s two kernels ``(partial, final)`` for inputs ``a_dtype``/``b_dtype`` answering in
    ``out_dtype``: ``partial(a, b, partials, n)`` (one per block) and ``final(partials, out,
    p)``."""
    dts = tuple(_dtype("Dot", d, _INTS + _FLOATS) for d in (a_dtype, b_dtype, out_dtype))
    return _dot_kernels(*dts)


@functools.lru_cache(maxsize=None)
def _dot_kernels(a, b, o):
    acc, _ = _dot_acc(o)
    if o.kind == "f":
        ca = _load(a, "a", "i", acc)
        cb = _load(b, "b", "i", acc)
    else:  # to the output's integer type first (numpy's astype), then the wide unsigned one
        ca = f"({acc})({_storage(o)})a[i]"
        cb = f"({acc})({_storage(o)})b[i]"
    store = "mge_f2h(s[0])" if o == _F16 else f"({_storage(o)})s[0]"
    partial = _entry(
        f"mge_dot_partial_{_code(a)}_{_code(b)}_{_code(o)}",
        [f"const {_storage(a)}* a", f"const {_storage(b)}* b", f"{acc}* partials",
         "long long n"],
        f"""    MGE_FOR_BLOCKS {{
        MGE_SHARED {acc} s[{NTHREADS}];
        MGE_THREADS {{ MGE_THREAD_IDS
            {acc} t = 0;
            for (long long i = (long long)blockIdx.x * blockDim.x + tid; i < n;
                 i += (long long)blockDim.x * gridDim.x)
                t = t + {ca} * {cb};
            s[tid] = t;
        }}
        MGE_SYNC
        mge_dot_tree<{acc}, {NTHREADS}>(s);
        MGE_THREADS {{ MGE_THREAD_IDS if (tid == 0) partials[blockIdx.x] = s[0]; }}
        MGE_SYNC
    }}""")
    final = _entry(
        f"mge_dot_final_{_code(o)}",
        [f"const {acc}* partials", f"{_storage(o)}* out", "long long p"],
        f"""    MGE_FOR_BLOCKS {{
        MGE_SHARED {acc} s[{NTHREADS}];
        MGE_THREADS {{ MGE_THREAD_IDS
            {acc} t = 0;
            for (long long i = tid; i < p; i += blockDim.x) t = t + partials[i];
            s[tid] = t;
        }}
        MGE_SYNC
        mge_dot_tree<{acc}, {NTHREADS}>(s);
        MGE_THREADS {{ MGE_THREAD_IDS if (tid == 0) out[0] = {store}; }}
        MGE_SYNC
    }}""")
    return partial, final


def dot_plan(op, ins, outs):
    """The ``Plan`` of ``Dot`` on ``ins`` ``(a, b)`` (vectors or 0-d): per-block partial sums in
    the workspace, then one block's total into the 0-d ``out0``."""
    (desc,) = _rule(op, ins, outs)
    a, b = ins
    partial, final = dot_kernels(a.dtype, b.dtype, desc.dtype)
    n = a.size
    if n == 0:
        return Plan((Memset(Buf("out0"), desc.dtype.itemsize, 0),), notes=("empty: 0",))
    blocks = max(1, min(DOT_BLOCKS, -(-n // (NTHREADS * 8))))
    _, isz = _dot_acc(desc.dtype)
    ws = Workspace()
    parts = ws.add(blocks * isz)
    return Plan((Launch(partial, (blocks,), (NTHREADS,),
                        (Buf("in0"), Buf("in1"), parts, np.int64(n))),
                 Launch(final, (1,), (NTHREADS,), (parts, Buf("out0"), np.int64(blocks)))),
                ws.size, notes=(f"{blocks} partial sums",))


# -- CheckNonFinite -------------------------------------------------------------------------------

def check_non_finite_kernel(dtype):
    """The ``CheckNonFinite`` kernel of one float input ``dtype``: ``(x, y, flag, n, scale)``,
    ``scale`` of the computing type (float for float16/float32, double for float64)."""
    return _cnf_kernel(_dtype("CheckNonFinite", dtype, _FLOATS))


@functools.lru_cache(maxsize=None)
def _cnf_kernel(d):
    s = _storage(d)
    t = "double" if d == _F64 else "float"
    top = {_F16: "65504.0f", _F32: "3.4028234663852886e38f", _F64: "1.7976931348623157e308"}[d]
    return _entry(
        f"mge_check_non_finite_{_code(d)}",
        [f"const {s}* x", f"{s}* y", "int* flag", "long long n", f"{t} scale"],
        f"""    MGE_GRID_LOOP(i, n) {{
        {t} v = ({t})mge_ldf(x, i);
        if (!(mge_fabs(v) <= {top})) *flag = 1;
        mge_stf(y, i, ({t})(v * scale));
    }}""")


def check_non_finite_plan(op, ins, outs):
    """The ``Plan`` of ``CheckNonFinite`` on its float inputs: ``out<k>`` = ``in<k> * scale``
    for each, the last output the int32 flag (zeroed, then set by a kernel meeting a NaN or an
    infinity)."""
    _rule(op, ins, outs)
    flag = Buf(f"out{len(ins)}")
    steps = [Memset(flag, 4, 0)]
    for k, x in enumerate(ins):
        kernel = check_non_finite_kernel(x.dtype)
        if x.size == 0:
            continue
        scale = (np.float64(op.scale) if x.dtype == _F64 else
                 np.float32(np.asarray(op.scale).astype(x.dtype)))
        steps.append(Launch(kernel, grid_for(x.size, NTHREADS), (NTHREADS,),
                            (Buf(f"in{k}"), Buf(f"out{k}"), flag, np.int64(x.size), scale)))
    return Plan(tuple(steps))


# -- AssertEqual ----------------------------------------------------------------------------------

def assert_equal_kernel(err_dtype):
    """The ``AssertEqual`` check kernel of an ``err_dtype`` scalar: ``(err, n, maxerr, flag,
    value)`` -- one thread writes ``err`` (0 when ``n`` is 0) as a double to ``value`` and sets
    ``flag`` when it is not ``<= maxerr``."""
    return _assert_kernel(_dtype("AssertEqual", err_dtype, tuple(_TYPES)))


@functools.lru_cache(maxsize=None)
def _assert_kernel(d):
    return _entry(
        f"mge_assert_equal_{_code(d)}",
        [f"const {_storage(d)}* err", "long long n", "double maxerr", "int* flag",
         "double* value"],
        f"""    MGE_GRID_LOOP(i, 1) {{
        double e = n ? {_load(d, "err", 0, "double")} : 0.0;
        *value = e;
        if (!(e <= maxerr)) *flag = 1;
    }}""")


def assert_equal_plan(op, ins, outs):
    """The ``Plan`` of ``AssertEqual`` on ``ins`` ``(expect, actual, err)``: ``expect`` copied to
    ``out0``; a ``Check`` raising the CPU kernel's ``AssertEqualError`` when ``err > maxerr``
    (or NaN); with ``verbose`` a ``Readback`` of ``err`` that prints it first, as the CPU
    kernel does."""
    _rule(op, ins, outs)
    expect, _, err = ins
    kernel = assert_equal_kernel(err.dtype)
    ws = Workspace()
    value = ws.add(8)
    flag = ws.add(4)
    maxerr = float(op.maxerr)

    def error(v, read):
        e = float(read(value, np.float64, 1)[0])
        return AssertEqualError(f"AssertEqual: the values differ: error {e} > maxerr {op.maxerr} "
                                f"(shape {tuple(expect.shape)}, dtype {expect.dtype})")
    check = Launch(kernel, (1,), (1,), (Buf("in2"), np.int64(err.size), np.float64(maxerr),
                                        flag, value))
    copy = copy_launch(expect.shape, expect.element_strides, outs[0].element_strides,
                       expect.dtype.itemsize)
    steps = ((copy,) if copy is not None else ()) + (check,)
    checked = Plan(steps, ws.size, (Check(flag, error),))
    if not op.verbose:
        return checked

    def then(e):
        print(f"AssertEqual: err={float(e)}")
        return Plan((check,), ws.size, (Check(flag, error),))
    ws0 = Workspace()
    value0 = ws0.add(8)
    flag0 = ws0.add(4)
    first = Launch(kernel, (1,), (1,), (Buf("in2"), np.int64(err.size), np.float64(maxerr),
                                        flag0, value0))
    return Plan(steps[:-1] + (first,), ws0.size, readback=Readback(value0, np.float64, then))


# -- MatInv ---------------------------------------------------------------------------------------

def _matinv_ctype(d):
    return "double" if d == _F64 else "float"


def matinv_kernel(in_dtype):
    """The ``MatInv`` kernel of ``in_dtype`` matrices: ``(x, y, singular, batch, n)``, a block per
    matrix with ``n * n`` computing-type elements of dynamic shared memory."""
    return _matinv_kernel(_dtype("MatInv", in_dtype, _INTS + _FLOATS))


@functools.lru_cache(maxsize=None)
def _matinv_kernel(d):
    out = d if d.kind == "f" else _F32
    t = _matinv_ctype(d)
    h = "true" if d == _F16 else "false"
    return _entry(
        f"mge_matinv_{_code(d)}",
        [f"const {_storage(d)}* x", f"{_storage(out)}* y", "int* singular", "long long batch",
         "int n"],
        f"    mge_matinv<{t}, {h}>(x, y, singular, batch, n);", _PARTS + (("MGE_MATINV", _MATINV),))


def matinv_plan(op, ins, outs):
    """The ``Plan`` of ``MatInv`` on ``ins`` ``(x,)`` (``(..., n, n)``): a block per matrix; a
    ``Check`` raising the CPU kernel's ``ValueError`` for a singular matrix; ``n`` above
    ``MAX_MATINV`` is a ``NotImplementedError``."""
    (desc,) = _rule(op, ins, outs)
    x = ins[0]
    kernel = matinv_kernel(x.dtype)
    n = x.shape[-1]
    batch = math.prod(x.shape[:-2])
    if n > MAX_MATINV:
        raise _fail(NotImplementedError, op, f"the CUDA kernel inverts matrices of n <= "
                    f"{MAX_MATINV} (one block per matrix, in shared memory), got n = {n}", ins)
    if n == 0 or batch == 0:
        return Plan((), notes=("no matrices: nothing to invert",))
    ws = Workspace()
    flag = ws.add(4)
    shape = tuple(x.shape)

    def error(value):
        return ValueError(f"MatInv: matrix is singular (input shape {shape}): Singular matrix")
    threads = min(NTHREADS, max(32, -(-n * n // 32) * 32))
    isz = 8 if _matinv_ctype(x.dtype) == "double" else 4
    launch = Launch(kernel, (max(1, min(65535, batch)),), (threads,),
                    (Buf("in0"), Buf("out0"), flag, np.int64(batch), np.int32(n)),
                    shared_bytes=n * n * isz)
    return Plan((launch,), ws.size, (Check(flag, error),))


#: The plan of each op this module has kernels for: ``PLANS[type(op)](op, ins, outs)``.
PLANS = {OneHot: one_hot_plan, Dot: dot_plan, CheckNonFinite: check_non_finite_plan,
         AssertEqual: assert_equal_plan, MatInv: matinv_plan}

#: The ops whose plans read ``ins[k].strides``: none (dense inputs).
STRIDED = frozenset()
