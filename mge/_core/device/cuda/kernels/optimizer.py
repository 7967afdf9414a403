"""CUDA C for the optimizers' fused update ops (``SGDUpdate``, ``AdamUpdate``, ``AdagradUpdate``,
``AdadeltaUpdate``, ``RMSpropUpdate``) and their launch plans (``launch.py``'s one format).

One update is one elementwise kernel over the parameter (a grid-stride loop, ``MGE_LOOP`` of
``elemwise.py``: on the host a serial loop), then, for the optimizers with a step counter, a
one-thread kernel that writes ``step + 1``.  Each thread computes the step-dependent factors
(``1 / (1 - beta ** t)``, Adagrad's decayed rate) once, in double, from the counter, as the CPU
kernel computes them in Python.

**Plans.**  ``PLANS[type(op)](op, ins, outs)`` (``launch.Layout``s; ``ins`` in the op's order,
``(param, grad, *states)`` with the step counter among the states where the op has one, ``outs``
the same without ``grad``) gives a ``launch.Plan`` of that ``Launch`` (``launch.grid_for(n,
NTHREADS)`` blocks of ``NTHREADS`` threads, none for an empty parameter) and the step's ``Launch``
(one block of one thread), no workspace, no checks.  A plan first runs the op's own shape/dtype
rule on ``ins`` (its errors name the op, shapes and dtypes; ``outs`` must be what it gives) and
refuses dtypes the kernels lack and a wrong number of states for the op's settings
(``TypeError``, naming the op and the dtypes).  ``STRIDED`` is empty: the kernels read element
``i`` of dense arrays (parameters and their states are dense device buffers in practice; a
strided gradient is made dense by the device first).

**In place.**  Output ``j`` may be the very buffer of the input it replaces: output 0 (the new
parameter) of input 0, output ``j >= 1`` (a new state, the step counter included) of input
``j + 1`` -- ``INPLACE[type(op)]`` lists those ``(out index, in index)`` pairs for the most
outputs the op has (SGD's momentum buffer, RMSprop's ``momentum_buffer`` and ``grad_avg`` exist
only with those settings: pairs beyond the op's outputs do not apply).  That is safe because
each element of each array is read and then written by one thread only, and the counter, which
every thread reads, is written by the second kernel, after the first in stream order.

**Same bits as the CPU kernel.**  Each kernel is written from the CPU kernel's numpy
statements through a small expression builder (``_Builder``) that follows numpy's dtype rules
step by step: the result of an operation has the operands' promoted dtype, a Python float is a
*weak* scalar converted to the array's dtype (NEP 50), an in-place ``+=`` casts back to the
left side's dtype, ``astype`` casts.  float16 values are carried in float and rounded to
float16 after every operation, as numpy's float16 loops do (+, -, *, /, sqrt computed in float
and rounded once are correctly rounded float16 results: float has more than 2 * 11 + 2 bits).
With no fused multiply-adds (``NVRTC_OPTIONS``) and IEEE division and square root (NVRTC's
defaults), float32 and float64 results are the CPU's bit for bit, float16 ones too; the only
exception is ``beta ** t`` (see ``DIFFERENCES``).  The kernels are specialised on the op's
branches (``weight_decay != 0``, ``momentum != 0``, ``nesterov``, ``decoupled``, ``centered``):
the CPU kernel skips those operations rather than computing with zeros.

**Shared statements.**  ``update_text`` gives one element's statements (loads, operations,
stores) of an op's update; these kernels wrap them in a loop over one parameter, and the
multi-tensor kernels of ``multi_update.py`` (``MultiUpdate``: a traced program's updates of many
parameters in one launch) in a loop over many, so both compute exactly the same operations.

Dtypes: parameter, gradient and states each float16, float32 or float64 (mge keeps the states
in float32 for float16 parameters), the step counter any of them.
"""
import functools

import numpy as np

from ....ops.optimizer import (
    AdadeltaUpdate, AdagradUpdate, AdamUpdate, RMSpropUpdate, SGDUpdate,
)
from .elemwise import KernelSource
from .launch import Buf, Launch, Plan, grid_for
from .norm import _PRELUDE_PARTS, FLOAT_DTYPES, _rule

__all__ = ["NVRTC_OPTIONS", "NTHREADS", "DIFFERENCES", "update_kernels", "update_plan",
           "update_text", "UpdateText", "step_increment", "OPTIMIZER_OPS", "PLANS", "STRIDED",
           "INPLACE"]

#: NVRTC flags: no contraction into fused multiply-adds (the CPU's roundings).
NVRTC_OPTIONS = ("--fmad=false",)
#: Threads per block of the update kernels.
NTHREADS = 256

DIFFERENCES = """\
* Adam's bias corrections 1 / (1 - beta ** t) are computed in double with CUDA's pow (at most 2
  ulp of double from the correctly rounded value; Python's pow is glibc's, correctly rounded in
  practice): the factor can differ in its last double bit, which changes the float32 result
  only when that factor lies within an ulp of double of a float32 rounding boundary.
  Everything else gives the CPU kernel's bits (the host build, which uses glibc's pow, checks
  that exactly).
"""

_F16, _F32, _F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
_CODE = {_F16: "f16", _F32: "f32", _F64: "f64"}
_STORAGE = {_F16: "unsigned short", _F32: "float", _F64: "double"}

#: The update ops these kernels implement.
OPTIMIZER_OPS = (SGDUpdate, AdamUpdate, AdagradUpdate, AdadeltaUpdate, RMSpropUpdate)

_OPT_PRELUDE = r"""#ifndef MGE_OPT_PRELUDE
#define MGE_OPT_PRELUDE
/* float16 rounding of a value carried in float or double */
MGE_FN float mge_r16(float v) { return mge_h2f(mge_f2h(v)); }
MGE_FN float mge_r16(double v) { return mge_h2f(mge_d2h(v)); }
#endif
"""
_PARTS = _PRELUDE_PARTS + (("MGE_OPT_PRELUDE", _OPT_PRELUDE),)


# -- the expression builder: numpy's dtype rules, one statement per operation ---------------------

class _V:
    """A value: C expression ``c`` of numpy dtype ``dtype`` (None: a weak Python float, a C
    double expression)."""

    def __init__(self, c, dtype):
        self.c, self.dtype = c, dtype


def _ct(d):
    return "double" if d == _F64 else "float"


class _Builder:
    """Emits the statements of one element's update, each a local of the operation's dtype."""

    def __init__(self):
        self.lines = []
        self._n = 0

    def _local(self, expr, dtype):
        name = f"v{self._n}"
        self._n += 1
        self.lines.append(f"{_ct(dtype)} {name} = {expr};")
        return _V(name, dtype)

    def load(self, ptr, dtype):
        """Element ``i`` of the array ``ptr``."""
        return self._local(f"({_ct(dtype)})mge_ldf({ptr}, i)", dtype)

    @staticmethod
    def scalar(c):
        """A Python float (a C double expression): weak."""
        return _V(f"({c})", None)

    def to(self, v, d):
        """C for ``v`` converted to dtype ``d`` (rounded to float16 where ``d`` is)."""
        if v.dtype == d:
            return v.c
        if d == _F16:
            return f"mge_r16({v.c})"
        return f"({_ct(d)})({v.c})"

    def cast(self, v, d):
        """``v.astype(d)``."""
        return v if v.dtype == d else self._local(self.to(v, d), d)

    def op(self, sym, a, b):
        """``a sym b`` in numpy's result dtype."""
        if a.dtype is None and b.dtype is None:
            return _V(f"({a.c} {sym} {b.c})", None)
        d = b.dtype if a.dtype is None else a.dtype if b.dtype is None else \
            np.result_type(a.dtype, b.dtype)
        expr = f"{self.to(a, d)} {sym} {self.to(b, d)}"
        return self._local(f"mge_r16({expr})" if d == _F16 else expr, d)

    def iop(self, sym, a, b):
        """``a sym= b``: the result cast back to ``a``'s dtype."""
        return self.cast(self.op(sym, a, b), a.dtype)

    def sqrt(self, a):
        expr = f"mge_sqrt({a.c})"
        return self._local(f"mge_r16({expr})" if a.dtype == _F16 else expr, a.dtype)

    def square(self, a):
        return self.op("*", a, a)


# -- the updates, statement by statement as device/cpu/kernels/optimizer.py -----------------------

def _sgd(b, flags, param, grad, states):
    wd, momentum, nesterov = flags
    if wd:
        grad = b.op("+", grad, b.op("*", param, b.scalar("weight_decay")))
    outs = []
    if momentum:
        v = b.op("*", states[0], b.scalar("momentum"))
        v = b.iop("+", v, grad)
        grad = b.op("+", grad, b.op("*", v, b.scalar("momentum"))) if nesterov else v
        outs = [b.cast(v, states[0].dtype)]
    # handoff.add_scaled: param + (grad * -lr) in the parameter's dtype
    p = param.dtype
    new = b.op("+", param, b.op("*", b.cast(grad, p), b.cast(b.scalar("-lr"), p)))
    return [new] + outs


def _adam(b, flags, param, grad, states):
    wd, decoupled = flags
    exp_avg, exp_avg_sq = states
    if wd and not decoupled:
        grad = b.op("+", grad, b.op("*", param, b.scalar("weight_decay")))
    m = b.op("*", exp_avg, b.scalar("beta0"))
    m = b.iop("+", m, b.op("*", grad, b.scalar("1.0 - beta0")))
    v = b.op("*", exp_avg_sq, b.scalar("beta1"))
    v = b.iop("+", v, b.op("*", b.square(grad), b.scalar("1.0 - beta1")))
    denom = b.sqrt(b.op("*", v, b.scalar("1.0 / (1.0 - mge_pow(beta1, t))")))
    denom = b.iop("+", denom, b.scalar("eps"))
    delta = b.op("*", m, b.scalar("1.0 / (1.0 - mge_pow(beta0, t))"))
    delta = b.iop("/", delta, denom)
    if wd and decoupled:
        delta = b.iop("+", delta, b.op("*", param, b.scalar("weight_decay")))
    new = b.cast(b.op("-", param, b.op("*", delta, b.scalar("lr"))), param.dtype)
    return [new, m, v]


def _adagrad(b, flags, param, grad, states):
    (wd,) = flags
    if wd:
        grad = b.op("+", grad, b.op("*", param, b.scalar("weight_decay")))
    sq = b.op("+", states[0], b.square(grad))
    delta = b.op("/", grad, b.sqrt(b.op("+", sq, b.scalar("eps"))))
    clr = b.scalar("lr / (1.0 + (t - 1.0) * lr_decay)")
    new = b.cast(b.op("-", param, b.op("*", delta, clr)), param.dtype)
    return [new, sq]


def _adadelta(b, flags, param, grad, states):
    (wd,) = flags
    square_avg, acc_delta = states
    if wd:
        grad = b.op("+", grad, b.op("*", param, b.scalar("weight_decay")))
    sq = b.op("*", square_avg, b.scalar("rho"))
    sq = b.iop("+", sq, b.op("*", b.square(grad), b.scalar("1.0 - rho")))
    delta = b.op("*", b.op("/", b.sqrt(b.op("+", acc_delta, b.scalar("eps"))),
                           b.sqrt(b.op("+", sq, b.scalar("eps")))), grad)
    new = b.cast(b.op("-", param, b.op("*", delta, b.scalar("lr"))), param.dtype)
    acc = b.op("*", acc_delta, b.scalar("rho"))
    acc = b.iop("+", acc, b.op("*", b.square(delta), b.scalar("1.0 - rho")))
    return [new, sq, acc]


def _rmsprop(b, flags, param, grad, states):
    wd, centered, momentum = flags
    square_avg, rest = states[0], states[1:]
    if wd:
        grad = b.op("+", grad, b.op("*", param, b.scalar("weight_decay")))
    sq = b.op("*", square_avg, b.scalar("alpha"))
    sq = b.iop("+", sq, b.op("*", b.square(grad), b.scalar("1.0 - alpha")))
    outs = []
    if centered:
        g_avg = b.op("*", rest[-1], b.scalar("alpha"))
        g_avg = b.iop("+", g_avg, b.op("*", grad, b.scalar("1.0 - alpha")))
        avg = b.sqrt(b.op("-", sq, b.square(g_avg)))
    else:
        avg = b.sqrt(sq)
    avg = b.iop("+", avg, b.scalar("eps"))
    if momentum:
        buf = b.op("*", rest[0], b.scalar("momentum"))
        buf = b.iop("+", buf, b.op("/", grad, avg))
        new = b.cast(b.op("-", param, b.op("*", buf, b.scalar("lr"))), param.dtype)
        outs.append(buf)
    else:
        new = b.cast(b.op("-", param, b.op("*", b.op("/", grad, avg), b.scalar("lr"))),
                     param.dtype)
    if centered:
        outs.append(g_avg)
    return [new, sq] + outs


# op class -> (name, flags of the op, number of array states given the flags, has a step
# counter, scalar fields, the builder function)
_UPDATES = {
    SGDUpdate: ("sgd", lambda op: (op.weight_decay != 0.0, op.momentum != 0.0,
                                   bool(op.nesterov) and op.momentum != 0.0),
                lambda f: 1 if f[1] else 0, False, ("lr", "momentum", "weight_decay"), _sgd),
    AdamUpdate: ("adam", lambda op: (op.weight_decay != 0.0, bool(op.decoupled)),
                 lambda f: 2, True, ("lr", "beta0", "beta1", "eps", "weight_decay"), _adam),
    AdagradUpdate: ("adagrad", lambda op: (op.weight_decay != 0.0,), lambda f: 1, True,
                    ("lr", "lr_decay", "eps", "weight_decay"), _adagrad),
    AdadeltaUpdate: ("adadelta", lambda op: (op.weight_decay != 0.0,), lambda f: 2, True,
                     ("lr", "rho", "eps", "weight_decay"), _adadelta),
    RMSpropUpdate: ("rmsprop", lambda op: (op.weight_decay != 0.0, bool(op.centered),
                                           op.momentum != 0.0),
                    lambda f: 1 + int(f[1]) + int(f[2]), True,
                    ("lr", "alpha", "eps", "weight_decay", "momentum"), _rmsprop),
}


def _op_class(op):
    cls = type(op)
    if cls not in _UPDATES:
        raise TypeError(f"CUDA optimizer kernel: {cls.__name__} is no update op (these kernels: "
                        f"{', '.join(c.__name__ for c in OPTIMIZER_OPS)})")
    return cls


def _check_dtypes(op, dtypes):
    try:
        dts = tuple(np.dtype(d) for d in dtypes)
    except TypeError as e:
        raise TypeError(f"CUDA {op.name} kernel: not a dtype ({e}) (dtypes: {dtypes})") from None
    bad = [d for d in dts if d not in FLOAT_DTYPES]
    if bad:
        raise TypeError(f"CUDA {op.name} kernel: unsupported dtype {bad[0]} (these kernels take "
                        f"float16, float32 and float64; dtypes: "
                        f"{', '.join(str(d) for d in dts)})")
    return dts


def update_kernels(op, dtypes):
    """The kernels of update op ``op`` on inputs of ``dtypes`` (``(param, grad, *states)`` in the
    op's order, the step counter included): a dict with ``update`` and, for the optimizers with
    a step counter, ``step``.  A ``TypeError`` names the op and the dtypes it refuses (wrong
    count included)."""
    cls = _op_class(op)
    name, flags_of, nstates, has_step, _, _ = _UPDATES[cls]
    flags = flags_of(op)
    dts = _check_dtypes(op, dtypes)
    want = 2 + nstates(flags) + int(has_step)
    if len(dts) != want:
        raise TypeError(f"CUDA {op.name} kernel: {want} inputs expected for these settings, got "
                        f"{len(dts)} (dtypes: {', '.join(str(d) for d in dts)})")
    return _update_kernels(cls, flags, dts)


def _state_positions(cls, flags, n):
    """Input positions of the array states and of the step counter (None: none)."""
    if cls is SGDUpdate:
        return list(range(2, n)), None
    if cls is RMSpropUpdate:  # (param, grad, square_avg, step, [buf], [g_avg])
        return [2] + list(range(4, n)), 3
    return list(range(2, n - 1)), n - 1


class UpdateText:
    """The C of one element's update of an update op (``update_text``), shared by the
    single-parameter kernels here and the multi-tensor ones (``multi_update.py``) so that both
    compute the very same statements.

    ``lines`` are the statements for element ``i``: loads of ``in<k>[i]`` for ``k`` in
    ``arrays`` (``param``, ``grad``, the array states), the operations, and the stores to
    ``out<j>[i]`` (``out0`` the new parameter, ``out<j>`` the new state of input ``states[j -
    1]``).  ``step`` is the step counter's input position (None: the op has none) and
    ``t_expr`` the C of ``t`` (``float(step + 1)``, the value the statements read as ``t``)
    from a pointer ``step`` to it.  ``in_dtypes``/``out_dtypes`` are the arrays' dtypes,
    ``storage`` maps a dtype to its C storage type, ``scalars`` names the op's ``double``
    parameters, and ``tag`` is ``<name>_<flags>_<dtype codes>`` for kernel names."""

    __slots__ = ("lines", "arrays", "states", "step", "t_expr", "in_dtypes", "out_dtypes",
                 "scalars", "tag")

    storage = _STORAGE

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def update_text(op, dtypes):
    """The ``UpdateText`` of update op ``op`` on inputs of ``dtypes`` (checked as
    ``update_kernels`` checks them)."""
    cls = _op_class(op)
    _, flags_of, nstates, has_step, _, _ = _UPDATES[cls]
    flags = flags_of(op)
    dts = _check_dtypes(op, dtypes)
    want = 2 + nstates(flags) + int(has_step)
    if len(dts) != want:
        raise TypeError(f"CUDA {op.name} kernel: {want} inputs expected for these settings, got "
                        f"{len(dts)} (dtypes: {', '.join(str(d) for d in dts)})")
    return _update_text(cls, flags, dts)


@functools.lru_cache(maxsize=None)
def _update_text(cls, flags, dts):
    name, _, _, has_step, scalars, fn = _UPDATES[cls]
    states, step = _state_positions(cls, flags, len(dts))
    arrays = [0, 1] + states  # inputs read per element
    b = _Builder()
    vals = {k: b.load(f"in{k}", dts[k]) for k in arrays}
    outs = fn(b, flags, vals[0], vals[1], [vals[k] for k in states])
    out_dts = [dts[0]] + [dts[k] for k in states]
    stores = [f"mge_stf(out{j}, i, {v.c});" for j, v in enumerate(outs)]
    t_expr = None
    if has_step:  # t = float(step + 1) as the CPU kernel takes it
        z = dts[step]
        t = "mge_ldf(step, 0) + 1.0f" if z != _F64 else "mge_ldf(step, 0) + 1.0"
        t_expr = f"(double)({'mge_r16(' + t + ')' if z == _F16 else t})"
    tag = "".join(str(int(f)) for f in flags)
    sig = "_".join(_CODE[d] for d in dts)
    return UpdateText(lines=tuple(b.lines + stores), arrays=tuple(arrays), states=tuple(states),
                      step=step, t_expr=t_expr, in_dtypes=dts, out_dtypes=tuple(out_dts),
                      scalars=scalars, tag=f"{name}_{tag}_{sig}")


@functools.lru_cache(maxsize=None)
def _update_kernels(cls, flags, dts):
    u = _update_text(cls, flags, dts)
    has_step = u.step is not None
    params = [f"{_STORAGE[d]}* out{j}" for j, d in enumerate(u.out_dtypes)]
    params += [f"const {_STORAGE[dts[k]]}* in{k}" for k in u.arrays]
    if has_step:
        params.append(f"const {_STORAGE[dts[u.step]]}* step")
    params += ["long long n"] + [f"double {s}" for s in u.scalars]
    head = f"    double t = {u.t_expr};\n" if has_step else ""  # once per thread
    unused = "".join(f"    (void){s};\n" for s in u.scalars)  # not every variant uses each
    body = "\n        ".join(u.lines)
    kname = f"mge_opt_{u.tag}"
    text = (f"MGE_KERNEL {kname}({', '.join(params)})\n{{\n{unused}{head}"
            f"    MGE_LOOP(unsigned long long, i, n) {{\n        {body}\n    }}\n}}\n")
    out = {"update": KernelSource(kname, _PARTS + ((kname, text),), tuple(params), True, 64,
                                  len(u.arrays) + int(has_step))}
    if has_step:
        z = dts[u.step]
        sname = f"mge_opt_step_{_CODE[z]}"
        stext = (f"MGE_KERNEL {sname}({_STORAGE[z]}* step_out, const {_STORAGE[z]}* step)\n{{\n"
                 f"    mge_stf(step_out, 0, {step_increment(z, 'step')});\n}}\n")
        out["step"] = KernelSource(sname, _PARTS + ((sname, stext),),
                                   (f"{_STORAGE[z]}* step_out", f"const {_STORAGE[z]}* step"),
                                   True, 64, 1)
    return out


def step_increment(dtype, ptr):
    """C for ``step + 1`` of the counter of ``dtype`` at pointer ``ptr`` (stored with
    ``mge_stf``)."""
    return f"mge_ldf({ptr}, 0) + {'1.0' if np.dtype(dtype) == _F64 else '1.0f'}"


def update_plan(op, ins, outs, *, grid=None):
    """The ``Plan`` of update op ``op`` on ``ins`` (the op's order: ``param``, ``grad``, the
    states, the step counter where the op has one); ``outs`` in the op's order (``param``, then
    the states and the counter: the inputs without ``grad``).  An output may be its input's
    buffer (``INPLACE``).  ``grid`` overrides the update's grid (the values do not change)."""
    cls = _op_class(op)
    _rule(op, ins, outs)
    dtypes = [a.dtype for a in ins]
    ks = update_kernels(op, dtypes)
    _, flags_of, _, has_step, scalars, _ = _UPDATES[cls]
    states, step = _state_positions(cls, flags_of(op), len(dtypes))
    n = ins[0].size
    # an output is its input without the gradient: input k >= 2 is output k - 1
    args = [Buf("out0")] + [Buf(f"out{k - 1}") for k in states]
    args += [Buf(f"in{k}") for k in [0, 1] + states]
    if has_step:
        args.append(Buf(f"in{step}"))
    args += [np.int64(n)] + [np.float64(getattr(op, s)) for s in scalars]
    steps = []
    if n:
        steps.append(Launch(ks["update"], grid_for(n, NTHREADS) if grid is None else (grid,),
                            (NTHREADS,), tuple(args)))
    if has_step:  # after the update (stream order): every thread of it has read the counter
        steps.append(Launch(ks["step"], (1,), (1,), (Buf(f"out{step - 1}"), Buf(f"in{step}"))))
    return Plan(tuple(steps))


#: The plan of each update op (the CUDA device's table): ``PLANS[type(op)](op, ins, outs)``.
PLANS = {cls: update_plan for cls in OPTIMIZER_OPS}

#: The ops whose plans read ``ins[k].strides``: none (see the module docstring).
STRIDED = frozenset()

#: ``op class -> ((out index, in index), ...)``: the outputs that may be written into the
#: buffers of the inputs they replace (output 0 over input 0, output j over input j + 1); pairs
#: past the op's outputs (states its settings lack) do not apply.
INPLACE = {
    SGDUpdate: ((0, 0), (1, 2)),                          # param, [momentum_buffer]
    AdamUpdate: ((0, 0), (1, 2), (2, 3), (3, 4)),         # param, exp_avg, exp_avg_sq, step
    AdagradUpdate: ((0, 0), (1, 2), (2, 3)),              # param, square_avg, step
    AdadeltaUpdate: ((0, 0), (1, 2), (2, 3), (3, 4)),     # param, square_avg, acc_delta, step
    RMSpropUpdate: ((0, 0), (1, 2), (2, 3), (3, 4), (4, 5)),  # param, square_avg, step, [buf],
                                                              # [grad_avg]
}
