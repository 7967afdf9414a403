"""CUDA C for ``Softmax``, ``LogSoftmax``, ``SoftmaxCrossEntropy`` and
``SoftmaxCrossEntropyBackward``, generated per dtype signature, with their launch plans.

Every kernel is a tile kernel of ``reduce.py`` (read its docstring: the ``(outer, n, inner)``
view, the ``(TX, TY)`` blocks, the phases between barriers and how the host build runs them).
Per output column ``q`` (``TX`` columns a block, ``TY`` threads along the class axis) a kernel
makes three passes over the column, each thread over its strided share of ``n``:

1. the column's max (NaN-propagating, as numpy's), combined by ``mge_block_tree`` into shared
   memory;
2. the sum of ``exp(x - max)`` (numerically stable: no term exceeds 1), combined the same way;
   its log for the log-softmax and the losses;
3. the outputs: ``exp(z) / sum``, ``z - log(sum)``, the loss ``log(sum) - z[label]`` (one thread
   per column), or the gradient ``(exp(z - log(sum)) - [j == label]) * dy``, with ``z = x - max``.

The input is read three times and the output written once: for a column that fits no register
file this is the usual price of a stable softmax without a workspace.  float16 computes in float
and float64 in double, as the CPU kernels (``device/cpu/kernels/nn.py``) do.

``SoftmaxCrossEntropy`` with ``reduction="sum"``/``"mean"`` writes each sample's loss (in the
accumulation type) to the workspace and reduces it with ``reduce.py``'s ``total_kernel`` (its
"final" ``Reduce`` kernel, into the logits' dtype: a tree, no atomics, the same bits at every
run).

**Plans** (``launch.py``'s format).  ``PLANS`` maps ``Softmax``, ``LogSoftmax``,
``SoftmaxCrossEntropy`` and ``SoftmaxCrossEntropyBackward`` to ``plan(op, ins, outs)``; the
``*_launch`` functions build them (``"in0"`` the logits, ``"in1"`` the labels, ``"in2"`` dy,
``"out0"``).  Each is one tile launch (grid and block as ``reduce.py``'s tiles, dynamic shared
memory for ``TX * TY`` accumulators plus a column's max and sum), and for a reduced loss a
second, one block, summing the per-sample losses the first left in the workspace.  ``STRIDED``
is empty: the kernels address dense ``(outer, n, inner)`` views, the labels and dy dense arrays,
so the device makes strided inputs dense first.  A softmax over a tuple of axes that are not
adjacent raises ``NotImplementedError`` (``reduce.reduce_view``; no transposing copy step).

**The check.**  A label out of range sets an int status word in the workspace (and gives NaN in
that sample's loss; the gradient then has no one-hot term for it): the plan's ``Check`` on it
raises the CPU kernel's ``IndexError`` with its exact message, the labels' range read back from
the device (``label_error``).  What a plan sees from shapes and dtypes (a label or dy of the
wrong shape, an axis out of range, an unknown reduction, a dtype) it raises itself, naming the
op, the shapes and the dtypes.
"""
import functools
import math

import numpy as np

from ....ops.nn import LogSoftmax, Softmax, SoftmaxCrossEntropy, SoftmaxCrossEntropyBackward
from .elemwise import SUPPORTED_DTYPES, KernelSource, _code, _load, _storage, program
from .launch import Buf, Check, Plan, Workspace
from .reduce import _BLOCK_PARTS, _tile_launch, check_layouts, reduce_view, total_kernel

__all__ = ["PLANS", "STRIDED", "softmax_kernel", "cross_entropy_kernel",
           "cross_entropy_backward_kernel", "softmax_launch", "cross_entropy_launch",
           "cross_entropy_backward_launch", "label_error", "FLOAT_DTYPES", "LABEL_DTYPES",
           "REDUCTIONS", "DIFFERENCES", "NVRTC_OPTIONS", "program"]

#: NVRTC flags (no contraction: a formula rounds as written, as the CPU's).
NVRTC_OPTIONS = ("--fmad=false",)

#: The dtypes of logits (and of ``dy``).
FLOAT_DTYPES = tuple(np.dtype(d) for d in ("float16", "float32", "float64"))
#: The dtypes of labels (the op takes integer labels).
LABEL_DTYPES = tuple(d for d in SUPPORTED_DTYPES if d.kind in "iu")
#: The cross entropy's reductions.
REDUCTIONS = ("none", "mean", "sum")

#: Where a CUDA kernel's results may differ from the CPU device's (the tests check the rest).
DIFFERENCES = """\
* The max is exact, but the sum of exp(x - max) combines in a tree (the CPU: numpy's pairwise sum,
  or a double sum in its C loop for (batch, classes) float32/float64 logits), and exp and log are
  CUDA's (a few ulp): softmax and log-softmax agree to a few ulp of the accumulation type; float16
  rounds once at the store, as on the CPU.
* The reduced cross entropy sums the samples' losses in the accumulation type by a tree (the
  CPU's C loop sums them in double).
* The gradient is exp(z - log(sum)) in the accumulation type, as the CPU's numpy path; its C loop
  takes exp(z) * (dy / sum) in double: a few ulp apart.
* A label out of range is found by the kernel and reported after the steps (the plan's Check,
  with the CPU kernel's IndexError and message); the outputs are then not defined.
"""

_F16, _F32, _F64 = FLOAT_DTYPES

_SOFTMAX_PRELUDE = r"""#ifndef MGE_SOFTMAX_PRELUDE
#define MGE_SOFTMAX_PRELUDE
/* the tree's combinations: numpy's max (a NaN wins) and a sum */
template <class A> struct mge_max_nan_op {
    MGE_MEMBER A comb(A a, A b) { return mge_isnan(a) ? a : (mge_isnan(b) ? b : (b > a ? b : a)); }
};
template <class A> struct mge_sum_op { MGE_MEMBER A comb(A a, A b) { return a + b; } };

/* KIND: 0 softmax, 1 log-softmax, 2 cross entropy per sample, 3 its gradient (see softmax.py).
   Column q of m = outer * inner: max, sum of exp(x - max) (its log for KIND > 0), outputs. */
template <class Op, int KIND> MGE_BLOCK_FN void mge_softmax_tile(
        typename Op::out_t* out, const typename Op::in_t* in, const typename Op::label_t* label,
        const typename Op::dy_t* dy, long long outer, long long n, long long inner,
        long long dy_step, long long mean_count, int* status) {
    typedef typename Op::acc_t A;
    const unsigned TX = blockDim.x, TY = blockDim.y;
    MGE_SHARED_ARRAY(A, sh, TX * TY + 2 * TX)
    A* const rmax = sh + TX * TY;  /* the column's max */
    A* const rsum = rmax + TX;     /* its sum of exp(x - max), or that sum's log */
    const long long m = outer * inner, tiles = (m + TX - 1) / TX;
    MGE_FOR_BLOCKS {
    (void)blockIdx.y;
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        A acc = -Op::inf();
        if (q < m) {
            const long long o = q / inner, i = q - o * inner;
            const typename Op::in_t* p = in + o * n * inner + i;
            for (long long j = ty; j < n; j += TY)
                acc = mge_max_nan_op<A>::comb(acc, Op::load(p[j * inner]));
        }
        sh[tid] = acc;
        }
        MGE_SYNC
        mge_block_tree<mge_max_nan_op<A> >(sh);
        MGE_THREADS { MGE_THREAD_IDS
        if (ty == 0) rmax[tx] = sh[tx];
        }
        MGE_SYNC
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        A acc = (A)0;
        if (q < m) {
            const long long o = q / inner, i = q - o * inner;
            const typename Op::in_t* p = in + o * n * inner + i;
            for (long long j = ty; j < n; j += TY)
                acc += mge_exp(Op::load(p[j * inner]) - rmax[tx]);
        }
        sh[tid] = acc;
        }
        MGE_SYNC
        mge_block_tree<mge_sum_op<A> >(sh);
        MGE_THREADS { MGE_THREAD_IDS
        if (ty == 0) rsum[tx] = KIND == 0 ? sh[tx] : mge_log(sh[tx]);
        }
        MGE_SYNC
        MGE_THREADS { MGE_THREAD_IDS
        const long long q = tile * TX + tx;
        if (q < m) {
            const long long o = q / inner, i = q - o * inner;
            const typename Op::in_t* p = in + o * n * inner + i;
            if (KIND == 2) {
                if (ty == 0) {
                    const long long l = (long long)label[q];
                    if (l < 0 || l >= n) {
                        *status = 1;
                        out[q] = Op::store(Op::nan());
                    } else {
                        out[q] = Op::store(rsum[tx] - (Op::load(p[l * inner]) - rmax[tx]));
                    }
                }
            } else {
                typename Op::out_t* r = out + o * n * inner + i;
                long long l = -1;
                A g = (A)1;
                if (KIND == 3) {
                    l = (long long)label[q];
                    if (l < 0 || l >= n) {
                        *status = 1;
                        l = -1;
                    }
                    g = Op::grad(dy[q * dy_step], mean_count);
                }
                for (long long j = ty; j < n; j += TY) {
                    const A z = Op::load(p[j * inner]) - rmax[tx];
                    A y;
                    if (KIND == 0) {
                        y = mge_exp(z) / rsum[tx];
                    } else if (KIND == 1) {
                        y = z - rsum[tx];
                    } else {
                        y = mge_exp(z - rsum[tx]);
                        if (j == l) y -= (A)1;
                        y *= g;
                    }
                    r[j * inner] = Op::store(y);
                }
            }
        }
        }
        MGE_SYNC  /* the next tile writes sh again */
    }
    }
}
#endif /* MGE_SOFTMAX_PRELUDE */
"""

_KINDS = {"softmax": 0, "log_softmax": 1, "cross_entropy": 2, "cross_entropy_backward": 3}
_OPS = {"softmax": "Softmax", "log_softmax": "LogSoftmax",
        "cross_entropy": "SoftmaxCrossEntropy",
        "cross_entropy_backward": "SoftmaxCrossEntropyBackward"}


def _acc(d):
    return "double" if d == _F64 else "float"


def _check(what, d, allowed, role):
    try:
        d = np.dtype(d)
    except TypeError as e:
        raise TypeError(f"CUDA {what} kernel: {role} dtype {d!r} is not a dtype ({e})") from None
    if d not in allowed:
        raise TypeError(f"CUDA {what} kernel: unsupported {role} dtype {d} (takes "
                        f"{', '.join(str(t) for t in allowed)})")
    return d


def _store(expr, acc, out):
    if out == _F16:
        return f"mge_f2h({expr})"
    return f"({_storage(out)})({expr})"


def _op_struct(name, x, out_storage, out_is_acc, label=None, dy=None):
    acc = _acc(x)
    inf, nan = ("MGE_INF_D", "MGE_NAN_D") if acc == "double" else ("MGE_INF_F", "MGE_NAN_F")
    label_t = _storage(label) if label is not None else "int"
    dy_t = _storage(dy) if dy is not None else "float"
    store = "a" if out_is_acc else _store("a", acc, x)
    lines = [f"struct {name} {{",
             f"    typedef {_storage(x)} in_t; typedef {acc} acc_t; typedef {out_storage} out_t;",
             f"    typedef {label_t} label_t; typedef {dy_t} dy_t;",
             f"    MGE_MEMBER acc_t inf() {{ return {inf}; }}",
             f"    MGE_MEMBER acc_t nan() {{ return {nan}; }}",
             f"    MGE_MEMBER acc_t load(in_t x) {{ return {_load('x', x, x)}; }}",
             f"    MGE_MEMBER out_t store(acc_t a) {{ return {store}; }}"]
    if dy is not None:
        # a reduced loss's dy divided by the samples in dy's own dtype (numpy's dy / count), then
        # taken to the accumulation type
        g = _load("d", dy, dy)
        dc = "double" if dy == _F64 else "float"
        rounded = "mge_h2f(mge_f2h(v))" if dy == _F16 else "v"
        lines.append(f"    MGE_MEMBER acc_t grad(dy_t d, long long count) {{ {dc} v = {g}; "
                     f"if (count) {{ v = v / ({dc})count; v = {rounded}; }} "
                     f"return (acc_t)v; }}")
    else:  # (the kernels without a dy never call it; the template names it in every kind)
        lines.append("    MGE_MEMBER acc_t grad(dy_t d, long long count) { return (acc_t)1; }")
    lines.append("};")
    return f"#ifndef MGE_DEF_{name}\n#define MGE_DEF_{name}\n" + "\n".join(lines) + "\n#endif\n"


def _parts(op, op_text, name, text):
    return _BLOCK_PARTS + (
            ("MGE_SOFTMAX_PRELUDE", _SOFTMAX_PRELUDE), (op, op_text), (name, text))


def softmax_kernel(dtype, log=False):
    """The CUDA tile kernel of ``Softmax`` (``LogSoftmax`` when ``log``) of a float16/32/64
    input.  Parameters: ``out, in, long long outer, long long n, long long inner``; launch it as
    ``softmax_launch`` says.  A ``TypeError`` names an unsupported dtype."""
    kind = "log_softmax" if log else "softmax"
    return _softmax_kernel(_check(_OPS[kind], dtype, FLOAT_DTYPES, "input"), kind)


@functools.lru_cache(maxsize=None)
def _softmax_kernel(x, kind):
    name = f"mge_{kind}_{_code(x)}"
    op = f"mge_smop_{_code(x)}"
    params = (f"{_storage(x)}* out", f"const {_storage(x)}* in", "long long outer", "long long n",
              "long long inner")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    mge_softmax_tile<{op}, {_KINDS[kind]}>(out, in, (const {op}::label_t*)0, "
            f"(const {op}::dy_t*)0, outer, n, inner, 0, 0, (int*)0);\n}}\n")
    op_text = _op_struct(op, x, _storage(x), False)
    return KernelSource(name, _parts(op, op_text, name, text), params, True, 64, 1)


def cross_entropy_kernel(dtype, label_dtype, per_sample_acc=False):
    """The CUDA kernel of ``SoftmaxCrossEntropy``'s per-sample losses of ``dtype`` logits against
    ``label_dtype`` labels: into the output (of the logits' dtype), or with ``per_sample_acc`` in
    the accumulation type (float, double for float64) for a reduced loss's workspace.
    Parameters: ``out, in, const L* label, long long outer, long long n, long long inner, int*
    status``.  A ``TypeError`` names unsupported dtypes."""
    what = _OPS["cross_entropy"]
    x = _check(what, dtype, FLOAT_DTYPES, "logits")
    label = _check(what, label_dtype, LABEL_DTYPES, "label")
    return _cross_entropy_kernel(x, label, bool(per_sample_acc))


@functools.lru_cache(maxsize=None)
def _cross_entropy_kernel(x, label, per_sample_acc):
    tag = "_acc" if per_sample_acc else ""
    name = f"mge_sce_{_code(x)}_label_{_code(label)}{tag}"
    op = f"mge_sceop_{_code(x)}_label_{_code(label)}{tag}"
    out_t = _acc(x) if per_sample_acc else _storage(x)
    params = (f"{out_t}* out", f"const {_storage(x)}* in", f"const {_storage(label)}* label",
              "long long outer", "long long n", "long long inner", "int* status")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    mge_softmax_tile<{op}, 2>(out, in, label, (const {op}::dy_t*)0, outer, n, "
            f"inner, 0, 0, status);\n}}\n")
    op_text = _op_struct(op, x, out_t, per_sample_acc, label=label)
    return KernelSource(name, _parts(op, op_text, name, text), params, True, 64, 2)


def cross_entropy_backward_kernel(dtype, label_dtype, dy_dtype=None):
    """The CUDA kernel of ``SoftmaxCrossEntropyBackward``: ``dtype`` logits, ``label_dtype``
    labels, ``dy_dtype`` gradients (default: the logits' dtype).  Parameters: ``out, in, const
    L* label, const D* dy, long long outer, long long n, long long inner, long long dy_step,
    long long mean_count, int* status`` (``dy_step`` 1 for a per-sample ``dy``, 0 for a reduced
    loss's scalar; ``mean_count`` the samples for a mean, else 0).  A ``TypeError`` names
    unsupported dtypes."""
    what = _OPS["cross_entropy_backward"]
    x = _check(what, dtype, FLOAT_DTYPES, "logits")
    label = _check(what, label_dtype, LABEL_DTYPES, "label")
    dy = x if dy_dtype is None else _check(what, dy_dtype, FLOAT_DTYPES, "dy")
    return _cross_entropy_backward_kernel(x, label, dy)


@functools.lru_cache(maxsize=None)
def _cross_entropy_backward_kernel(x, label, dy):
    name = f"mge_sce_bwd_{_code(x)}_label_{_code(label)}_dy_{_code(dy)}"
    op = f"mge_scebop_{_code(x)}_label_{_code(label)}_dy_{_code(dy)}"
    params = (f"{_storage(x)}* out", f"const {_storage(x)}* in", f"const {_storage(label)}* label",
              f"const {_storage(dy)}* dy", "long long outer", "long long n", "long long inner",
              "long long dy_step", "long long mean_count", "int* status")
    text = (f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    mge_softmax_tile<{op}, 3>(out, in, label, dy, outer, n, inner, dy_step, "
            f"mean_count, status);\n}}\n")
    op_text = _op_struct(op, x, _storage(x), False, label=label, dy=dy)
    return KernelSource(name, _parts(op, op_text, name, text), params, True, 64, 3)


# -- launch plans ---------------------------------------------------------------------------------

def _acc_size(x):
    return 8 if x == _F64 else 4


def _reduction(what, reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"CUDA {what}: reduction must be one of {REDUCTIONS}, got "
                         f"{reduction!r}")
    return reduction


def _class_axis(what, shape, axis):
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not shape or \
            not -len(shape) <= axis < len(shape):
        raise ValueError(f"CUDA {what}: axis {axis!r} is out of range for logits of shape "
                         f"{tuple(shape)}")
    return int(axis) % len(shape)


def label_error(what, shape, axis, label_dtype, label=Buf("in1")):
    """The ``Check.error(value, read)`` of a label out of range: the CPU kernel's ``IndexError``
    (``device/cpu/kernels/nn.py``), its message naming the op ``what``, the class count, the
    logits' ``shape`` and the labels' range, read back from ``label`` (dense, ``label_dtype``)."""
    shape = tuple(int(s) for s in shape)
    n, count = shape[axis], math.prod(shape[:axis] + shape[axis + 1:])

    def error(value, read):
        labels = read(label, label_dtype, count)
        return IndexError(f"{what}: label out of range [0, {n}) along axis {axis} (logits shape "
                          f"{shape}, label range [{labels.min()}, {labels.max()}])")
    return error


def _status(ws, what, shape, axis, label_dtype, label):
    flag = ws.add(4)  # the kernels' int status word
    return flag, Check(flag, label_error(what, shape, axis, np.dtype(label_dtype), label))


def softmax_launch(dtype, shape, axis, log=False, src=Buf("in0"), dst=Buf("out0")):
    """The ``launch.Plan`` of ``Softmax(axis)`` (``LogSoftmax`` when ``log``) of a C-contiguous
    array of ``shape`` at ``src`` into ``dst``: one tile kernel; ``axis`` an int or a tuple of
    adjacent axes (others: ``NotImplementedError``, see ``reduce.reduce_view``)."""
    kernel = softmax_kernel(dtype, log)
    what = _OPS["log_softmax" if log else "softmax"]
    outer, n, inner = reduce_view(shape, axis, what)
    m = outer * inner
    note = f"(outer, n, inner) = {(outer, n, inner)}"
    if m == 0 or n == 0:
        return Plan((), notes=(note, "no outputs"))
    size = _acc_size(np.dtype(dtype))
    launch = _tile_launch(kernel, m, n, inner, 1, (dst, src, outer, n, inner), size, 2 * size)
    return Plan((launch,), notes=(note,))


def cross_entropy_launch(dtype, label_dtype, shape, axis, reduction="none", src=Buf("in0"),
                         label=Buf("in1"), dst=Buf("out0")):
    """The ``launch.Plan`` of ``SoftmaxCrossEntropy(axis, reduction)`` of C-contiguous logits of
    ``shape`` at ``src`` and dense labels of ``label_dtype`` at ``label`` (the logits' shape
    without ``axis``): the per-sample kernel into ``dst``, or into the workspace then
    ``total_kernel`` of the reduction over it.  A label out of range sets the status word of the
    plan's ``Check``, whose error is the CPU kernel's ``IndexError``."""
    what = _OPS["cross_entropy"]
    reduction = _reduction(what, reduction)
    x = _check(what, dtype, FLOAT_DTYPES, "logits")
    axis = _class_axis(what, shape, axis)
    outer, n, inner = reduce_view(shape, axis, what)
    m = outer * inner
    size = _acc_size(x)
    note = f"(outer, n, inner) = {(outer, n, inner)}"
    ws = Workspace()
    if reduction == "none":
        if m == 0:
            return Plan((), notes=(note, "no samples"))
        flag, check = _status(ws, what, shape, axis, label_dtype, label)
        launch = _tile_launch(cross_entropy_kernel(x, label_dtype), m, n, inner, 1,
                              (dst, src, label, outer, n, inner, flag), size, 2 * size)
        return Plan((launch,), ws.size, (check,), notes=(note,))
    steps, checks, losses = [], (), None
    if m:
        flag, check = _status(ws, what, shape, axis, label_dtype, label)
        checks, losses = (check,), ws.add(m * size)  # the per-sample losses, accumulation type
        steps.append(_tile_launch(cross_entropy_kernel(x, label_dtype, per_sample_acc=True),
                                  m, n, inner, 1, (losses, src, label, outer, n, inner, flag),
                                  size, 2 * size))
    # (no sample: the total of nothing, NaN for a mean, as the CPU kernel's)
    steps.append(_tile_launch(total_kernel(reduction, x), 1, m, 1, 1,
                              (dst, losses, 1, m, 1, m, m), size))
    return Plan(tuple(steps), ws.size, checks, notes=(note, f"the {reduction} of {m} losses"))


def cross_entropy_backward_launch(dtype, label_dtype, shape, axis, reduction="none",
                                  dy_dtype=None, src=Buf("in0"), label=Buf("in1"),
                                  dy=Buf("in2"), dst=Buf("out0")):
    """The ``launch.Plan`` of ``SoftmaxCrossEntropyBackward(axis, reduction)``: one tile kernel
    over C-contiguous logits of ``shape`` at ``src``, dense labels (``label_dtype``) at
    ``label``, and ``dy`` (a per-sample array, or a reduced loss's scalar).  A label out of range
    sets the status word of the plan's ``Check`` (the CPU kernel's ``IndexError``)."""
    what = _OPS["cross_entropy_backward"]
    reduction = _reduction(what, reduction)
    kernel = cross_entropy_backward_kernel(dtype, label_dtype, dy_dtype)
    axis = _class_axis(what, shape, axis)
    outer, n, inner = reduce_view(shape, axis, what)
    m = outer * inner
    note = f"(outer, n, inner) = {(outer, n, inner)}"
    if m == 0:  # (n == 0 still launches: every label is out of range, which the check reports)
        return Plan((), notes=(note, "no samples"))
    ws = Workspace()
    flag, check = _status(ws, what, shape, axis, label_dtype, label)
    step = 1 if reduction == "none" else 0
    count = m if reduction == "mean" else 0
    size = _acc_size(np.dtype(dtype))
    launch = _tile_launch(kernel, m, n, inner, 1,
                          (dst, src, label, dy, outer, n, inner, step, count, flag),
                          size, 2 * size)
    return Plan((launch,), ws.size, (check,), notes=(note,))


# -- PLANS: op -> plan ----------------------------------------------------------------------------

def _describe(layouts):
    return (f"input shapes: {', '.join(str(x.shape) for x in layouts)}; dtypes: "
            f"{', '.join(str(x.dtype) for x in layouts)}")


def _want(op, ins, outs, shape, dtype):
    o = outs[0]
    if o.shape != tuple(shape) or o.dtype != dtype:
        raise ValueError(f"CUDA {op.name}: the output is {o.shape} {o.dtype}, the op gives "
                         f"{tuple(shape)} {dtype} ({_describe(ins)})")


def _plan_softmax(log):
    def plan(op, ins, outs):
        check_layouts(op, ins, outs, 1, 1)
        (x,) = ins
        _want(op, ins, outs, x.shape, x.dtype)
        return softmax_launch(x.dtype, x.shape, op.axis, log)
    plan.__doc__ = f"The plan of ``{'LogSoftmax' if log else 'Softmax'}`` (``PLANS``)."
    return plan


def _sample_shape(op, ins):
    # the labels' shape: the logits' without the class axis (checked, naming shapes and dtypes)
    x, label = ins[0], ins[1]
    axis = _class_axis(op.name, x.shape, op.axis)
    want = x.shape[:axis] + x.shape[axis + 1:]
    if label.shape != want:
        raise ValueError(f"CUDA {op.name}: label must have shape {want} (the logits' shape "
                         f"without axis {axis}), got {label.shape} ({_describe(ins)})")
    return want


def _plan_cross_entropy(op, ins, outs):
    check_layouts(op, ins, outs, 2, 1)
    x, label = ins
    samples = _sample_shape(op, ins)
    _want(op, ins, outs, samples if op.reduction == "none" else (), x.dtype)
    return cross_entropy_launch(x.dtype, label.dtype, x.shape, op.axis, op.reduction)


def _plan_cross_entropy_backward(op, ins, outs):
    check_layouts(op, ins, outs, 3, 1)
    x, label, dy = ins
    samples = _sample_shape(op, ins)
    reduction = _reduction(op.name, op.reduction)
    want = samples if reduction == "none" else ()
    if dy.shape != want:
        raise ValueError(f"CUDA {op.name}: dy must have shape {want} (reduction "
                         f"{reduction!r}), got {dy.shape} ({_describe(ins)})")
    _want(op, ins, outs, x.shape, x.dtype)
    return cross_entropy_backward_launch(x.dtype, label.dtype, x.shape, op.axis, reduction,
                                         dy.dtype)


#: ``op class -> plan(op, ins, outs)`` (``launch.Layout`` lists) -> ``launch.Plan``.
PLANS = {Softmax: _plan_softmax(False), LogSoftmax: _plan_softmax(True),
         SoftmaxCrossEntropy: _plan_cross_entropy,
         SoftmaxCrossEntropyBackward: _plan_cross_entropy_backward}

#: The op classes whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()
