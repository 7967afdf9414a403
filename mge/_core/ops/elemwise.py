"""Elementwise ops: ``Elemwise(mode)`` and ``TypeCvt(dtype)``.

Every mode's CPU kernel is one line in ``_CPU``.  The output dtype of a mode for given input dtypes
is found once by running the kernel on one-element arrays and cached, so the shape/dtype rule and
the kernel can never disagree.

Backward rules are one table, ``_GRADS``: mode -> one function per input, each taking the inputs,
the output and the output's gradient.  Modes that are not differentiable (comparisons, logic,
integer and rounding modes) have no entry and give no gradient.  As in MegEngine, a rule uses a
fused ``*_grad`` mode where one exists (``switch_gt0`` for relu, ``sigmoid_grad``...) so that a
gradient costs one op; every fused mode has its own rule, so gradients of gradients work.
"""
import math

import numpy as np

from .._accel import load
from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .gradutil import cached_op, ew, fit, output, run

__all__ = ["Elemwise", "TypeCvt", "ELEMWISE_MODES", "broadcast_shapes", "elemwise_op"]


class Elemwise(OpDef):
    """An elementwise op; ``mode`` is one of ``ELEMWISE_MODES`` (MegEngine's names, lower case)."""

    _fields = ("mode",)

    def __init__(self, mode):
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in _CPU:
            raise ValueError(f"Elemwise: unknown mode {mode!r}")
        super().__init__(mode)
        self.__dict__["fn"] = _CPU[mode]  # the CPU kernel, found once


_instances = {}


def elemwise_op(mode):
    """The shared ``Elemwise(mode)``: ops are immutable, so one instance per mode serves everyone
    (and keeps the per-op caches keyed by op small)."""
    op = _instances.get(mode)
    if op is None:
        op = _instances[mode] = Elemwise(mode)
    return op


class TypeCvt(OpDef):
    """Convert to ``dtype`` (a numpy dtype)."""

    _fields = ("dtype",)


def _sigmoid(x):
    # exp of -|x| never overflows; both branches are exact in their half.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _gelu(x):
    from math import sqrt
    erf = _erf(x / sqrt(2.0))
    return (x * (1 + erf) * 0.5).astype(x.dtype, copy=False)


def _erf(x):
    # numpy has no erf; Abramowitz-Stegun 7.1.26 is 1.5e-7 accurate, enough for float32 gelu.
    # float64 inputs use the series/continued fraction of math.erf through vectorize.
    if x.dtype == np.float64:
        from math import erf
        return np.vectorize(erf, otypes=[np.float64])(x)
    s = np.sign(x)
    a = np.abs(x)
    t = 1 / (1 + 0.3275911 * a)
    y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
             + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(x.dtype, copy=False)


def _keep_int(fn):
    # ceil/floor of integers are the integers themselves (MegEngine keeps the dtype; numpy floats).
    def f(x):
        return fn(x) if x.dtype.kind == "f" else x.copy()
    f.__name__ = fn.__name__
    return f


def _clip(x, lo, hi):
    # MegEngine's CLIP: x < lo gives lo, else x > hi gives hi (lo wins when lo > hi).
    return np.where(x < lo, lo, np.where(x > hi, hi, x)).astype(x.dtype, copy=False)


def _round(x):
    # MegEngine rounds halves away from zero (C's round), numpy to even.
    if x.dtype.kind != "f":
        return x.copy()
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(x.dtype, copy=False)


def _fmod(a, b):
    # MegEngine's MOD is C's fmod for floats (sign of the dividend) and % for integers.
    return np.fmod(a, b) if a.dtype.kind == "f" else np.remainder(a, b)


def _softplus(x):
    return np.logaddexp(x, 0).astype(x.dtype, copy=False)


# -- fused backward modes (MegEngine's ``*_GRAD`` modes): ``(x or y, dy) -> dx`` in one pass -------

def _like(r, dy):
    return r.astype(dy.dtype, copy=False)


def _abs_grad(x, dy):
    # MegEngine's ABS_GRAD: x > 0 ? dy : -dy (so 0 counts as negative).
    return _like(np.where(x > 0, dy, -dy), dy)


def _switch_gt0(x, dy):
    # x > 0 ? dy : 0 (relu's backward): one pass in C where it can (handoff.py).  Otherwise a
    # multiply by the mask, several times faster than np.where; it differs only where dy is
    # inf/nan and x <= 0 (inf * 0 is nan), so those take the exact path.
    out = _C_LOOPS.relu_grad(x, dy)
    if out is not None:
        return out
    if np.isfinite(dy).all():
        return np.multiply(dy, x > 0).astype(dy.dtype, copy=False)
    return np.where(x > 0, dy, 0).astype(dy.dtype, copy=False)


def _sigmoid_grad(y, dy):  # y = sigmoid(x)
    return y * (1 - y) * dy


def _tanh_grad(y, dy):  # y = tanh(x)
    return (1 - y * y) * dy


def _relu6_grad(x, dy):
    return _like(np.where((x > 0) & (x < 6), dy, 0), dy)


def _hsigmoid_grad(x, dy):
    return _like(np.where((x > -3) & (x < 3), dy / 6, 0), dy)


def _hswish_grad(x, dy):
    return _like(np.where(x < -3, 0, np.where(x > 3, dy, (2 * x + 3) / 6 * dy)), dy)


def _softplus_grad(x, dy):
    return _sigmoid(x) * dy


def _gelu_grad(x, dy):
    from math import pi, sqrt
    cdf = (1 + _erf(x / sqrt(2.0))) * 0.5
    return (cdf + x * np.exp(x * x * -0.5) * (1 / sqrt(2 * pi))) * dy


def _silu_grad(x, dy):
    s = _sigmoid(x)
    return s * (1 + x * (1 - s)) * dy


def _asinh_grad(x, dy):
    return dy / np.sqrt(x * x + 1)


def _acosh_grad(x, dy):
    return dy / np.sqrt(x * x - 1)


def _atanh_grad(x, dy):
    return dy / (1 - x * x)


_C_LOOPS = load("mge._core.device.cpu.handoff").CPU  # C loops without numpy's temporaries
_CPU = {
    # arithmetic
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "true_div": np.true_divide,
    "floor_div": np.floor_divide, "mod": _fmod, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "neg": np.negative, "abs": np.abs, "square": np.square,
    "sign": np.sign,
    # exp / log family
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "logaddexp": np.logaddexp,
    # trig and hyperbolic
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "atan2": np.arctan2, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    # rounding
    "ceil": _keep_int(np.ceil), "floor": _keep_int(np.floor), "round": _round,
    "clip": _clip,
    # activations
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6),
    "sigmoid": _sigmoid, "hsigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "hswish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "gelu": _gelu,
    "silu": lambda x: x * _sigmoid(x), "softplus": _softplus,
    "logsigmoid": lambda x: -_softplus(-x), "erf": _erf,
    # comparison and logic
    "lt": np.less, "leq": np.less_equal, "gt": np.greater, "geq": np.greater_equal,
    "eq": np.equal, "neq": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    "xor": np.logical_xor, "not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf,
    # bitwise on integers
    "shl": np.left_shift, "shr": np.right_shift, "bit_and": np.bitwise_and,
    "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor, "bit_not": np.invert,
    # fused forms (what MegEngine's graph optimizer produces; handy for backward rules)
    "fuse_add_relu": lambda a, b: np.maximum(a + b, 0),
    "switch_gt0": _switch_gt0,
    "cond_leq_mov": lambda a, b, c: np.where(a <= b, c, 0).astype(c.dtype, copy=False),
    "cond_lt_mov": lambda a, b, c: np.where(a < b, c, 0).astype(c.dtype, copy=False),
    # fused backward modes: the first input is the forward input x (or output y), the second dy
    "abs_grad": _abs_grad, "sigmoid_grad": _sigmoid_grad, "tanh_grad": _tanh_grad,
    "relu6_grad": _relu6_grad, "hsigmoid_grad": _hsigmoid_grad, "hswish_grad": _hswish_grad,
    "softplus_grad": _softplus_grad, "gelu_grad": _gelu_grad, "silu_grad": _silu_grad,
    "asinh_grad": _asinh_grad, "acosh_grad": _acosh_grad, "atanh_grad": _atanh_grad,
}
ELEMWISE_MODES = frozenset(_CPU)
_ARITY = {m: f.nin if isinstance(f, np.ufunc) else f.__code__.co_argcount for m, f in _CPU.items()}

# Modes that accept bool inputs (MegEngine rejects arithmetic on bool: "unsupport mode ADD for bool").
_BOOL_OK = frozenset(["and", "or", "xor", "not", "eq", "neq", "lt", "leq", "gt", "geq", "max", "min",
                      "isnan", "isinf"])
_FLOAT_ONLY = frozenset(["exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
                         "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                         "sigmoid", "hsigmoid", "hswish", "gelu", "silu", "softplus", "logsigmoid",
                         "erf", "logaddexp", "true_div", "pow", "abs_grad", "sigmoid_grad",
                         "tanh_grad", "relu6_grad", "hsigmoid_grad", "hswish_grad",
                         "softplus_grad", "gelu_grad", "silu_grad", "asinh_grad", "acosh_grad",
                         "atanh_grad"])
_INT_ONLY = frozenset(["shl", "shr", "bit_and", "bit_or", "bit_xor", "bit_not"])

_dtype_cache = {}
_shape_cache = {}


def broadcast_shapes(op, descs):
    """Numpy broadcasting of the input shapes; a ``ValueError`` naming the op otherwise."""
    shapes = tuple(d[0] for d in descs)
    try:
        return _shape_cache[shapes]
    except KeyError:
        pass
    if None in shapes:
        return None
    try:
        out = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise op_error(ValueError, op, "shapes cannot be broadcast together", descs) from None
    if len(_shape_cache) > 4096:
        _shape_cache.clear()
    _shape_cache[shapes] = out
    return out


def _out_dtype(op, descs):
    key = (op.mode,) + tuple(d[1] for d in descs)
    try:
        return _dtype_cache[key]
    except KeyError:
        pass
    mode = op.mode
    kinds = {d[1].kind for d in descs}
    if "b" in kinds and mode not in _BOOL_OK:
        raise op_error(TypeError, op, f"mode {mode!r} does not support bool inputs", descs)
    if mode in _INT_ONLY and not kinds <= {"i", "u"}:
        raise op_error(TypeError, op, f"mode {mode!r} needs integer inputs", descs)
    probes = [np.ones(1, d[1]) for d in descs]
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(_CPU[mode](*probes)).dtype
    except TypeError as e:
        raise op_error(TypeError, op, f"unsupported dtypes ({e})", descs) from None
    _dtype_cache[key] = out
    return out


_infer_cache = {}


@def_infer(Elemwise)
def _infer_elemwise(op, descs):
    # Hot path: one dict lookup for inputs seen before.
    key = (op.mode, *descs)
    try:
        return _infer_cache[key]
    except KeyError:
        pass
    n = _ARITY[op.mode]
    if len(descs) != n:
        raise op_error(TypeError, op, f"expects {n} input(s), got {len(descs)}", descs)
    shape = descs[0][0]
    for d in descs:
        if d[0] != shape:
            shape = broadcast_shapes(op, descs)
            break
    out = (TensorDesc(shape, _out_dtype(op, descs)),)
    if len(_infer_cache) > 8192:
        _infer_cache.clear()
    _infer_cache[key] = out
    return out


@def_kernel(Elemwise)
def _cpu_elemwise(op, *arrays):
    return (op.fn(*arrays),)


@def_infer(TypeCvt)
def _infer_typecvt(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    return [TensorDesc(descs[0][0], op.dtype)]


@def_kernel(TypeCvt)
def _cpu_typecvt(op, x):
    return (x.astype(op.dtype),)


# -- backward rules ------------------------------------------------------------------------------
# mode -> (one rule per input); a rule takes (*inputs, y, g) -- the forward inputs, the output and
# its gradient -- and returns the gradient for its input before broadcasting is summed away.
# Rules use the output y where it is cheaper (exp, sqrt, tanh...), as MegEngine does.
_C_ERF = 2 / math.sqrt(math.pi)          # d erf(x) / dx = 2/sqrt(pi) exp(-x^2)
_C_GAUSS = 1 / math.sqrt(2 * math.pi)    # the standard normal density at 0


def _clip_x(x, lo, hi, y, g):
    # The gradient passes where lo <= x <= hi (MegEngine: the bounds themselves included).
    return ew("cond_leq_mov", lo, x, ew("cond_leq_mov", x, hi, g))


def _clip_hi(x, lo, hi, y, g):
    # hi is the result where x > hi and not x < lo (lo wins when lo > hi).
    return ew("cond_lt_mov", hi, x, ew("cond_leq_mov", lo, x, g))


def _pow_base(a, b, y, g):
    return ew("mul", g, ew("mul", b, ew("pow", a, ew("sub", b, 1.0))))


def _asin(x, y, g):
    return ew("mul", g, ew("rsqrt", ew("sub", 1.0, ew("square", x))))


def _silu_grad_x(x, dy, y, g):
    # d/dx [s (1 + x (1 - s))] = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
    s = ew("sigmoid", x)
    return ew("sigmoid_grad", s, ew("mul", ew("mul", dy, g),
                                    ew("add", ew("mul", x, ew("sub", 1.0, ew("add", s, s))), 2.0)))


def _gelu_grad_x(x, dy, y, g):
    # d/dx [Phi(x) + x phi(x)] = phi(x) (2 - x^2)
    x2 = ew("square", x)
    pdf = ew("mul", ew("exp", ew("mul", x2, -0.5)), _C_GAUSS)
    return ew("mul", ew("mul", dy, g), ew("mul", pdf, ew("sub", 2.0, x2)))


def _asinh_grad_x(x, dy, y, g, sign=1.0):
    # d/dx [dy (x^2 +- 1)^(-1/2)] = -x dy (x^2 +- 1)^(-3/2)
    r = ew("rsqrt", ew("add", ew("square", x), sign))
    return ew("mul", ew("mul", ew("neg", x), ew("mul", dy, g)), ew("mul", r, ew("square", r)))


def _mod_divisor(a, b, y, g):
    # fmod(a, b) = a - trunc(a / b) b, and trunc(a / b) = (a - y) / b (rounded: it is an integer)
    return ew("mul", g, ew("neg", ew("round", ew("true_div", ew("sub", a, y), b))))


def _atan2(a, b, y, g, which):
    # atan2(a, b) = atan(a / b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
    num = ew("mul", g, b) if which == 0 else ew("mul", g, ew("neg", a))
    return ew("true_div", num, ew("add", ew("square", a), ew("square", b)))


def _max_a(a, b, y, g):
    return ew("cond_leq_mov", b, a, g)   # ties go to the first input, as in MegEngine


def _min_a(a, b, y, g):
    return ew("cond_leq_mov", a, b, g)


def _x_g(mode):
    """The rule ``(x, ..., y, g) -> mode(x, g)``, for the first input ``x``.

    It serves an activation whose derivative is a fused mode (``relu6`` -> ``relu6_grad(x, g)``),
    and the ``dy`` input of a fused mode ``*_grad(x, dy)``: such a mode multiplies ``dy``
    elementwise by a function of ``x``, so its transpose with respect to ``dy`` is the mode itself.
    """
    def rule(x, *rest):
        return ew(mode, x, rest[-1])
    return rule


_GRADS = {
    # arithmetic
    "add": (lambda a, b, y, g: g, lambda a, b, y, g: g),
    "sub": (lambda a, b, y, g: g, lambda a, b, y, g: ew("neg", g)),
    "mul": (lambda a, b, y, g: ew("mul", g, b), lambda a, b, y, g: ew("mul", g, a)),
    "true_div": (lambda a, b, y, g: ew("true_div", g, b),
                 lambda a, b, y, g: ew("neg", ew("true_div", ew("mul", g, y), b))),
    "pow": (_pow_base, lambda a, b, y, g: ew("mul", g, ew("mul", y, ew("log", a)))),
    "mod": (lambda a, b, y, g: g, _mod_divisor),
    "max": (_max_a, lambda a, b, y, g: ew("cond_lt_mov", a, b, g)),
    "min": (_min_a, lambda a, b, y, g: ew("cond_lt_mov", b, a, g)),
    "neg": (lambda x, y, g: ew("neg", g),),
    "abs": (_x_g("abs_grad"),),
    "square": (lambda x, y, g: ew("mul", ew("add", x, x), g),),
    "clip": (_clip_x, lambda x, lo, hi, y, g: ew("cond_lt_mov", x, lo, g), _clip_hi),
    # exp / log family
    "exp": (lambda x, y, g: ew("mul", g, y),),
    "expm1": (lambda x, y, g: ew("mul", g, ew("add", y, 1.0)),),
    "log": (lambda x, y, g: ew("true_div", g, x),),
    "log1p": (lambda x, y, g: ew("true_div", g, ew("add", x, 1.0)),),
    "sqrt": (lambda x, y, g: ew("true_div", g, ew("add", y, y)),),
    "rsqrt": (lambda x, y, g: ew("true_div", ew("mul", g, y), ew("mul", x, -2.0)),),
    "logaddexp": (lambda a, b, y, g: ew("mul", g, ew("exp", ew("sub", a, y))),
                  lambda a, b, y, g: ew("mul", g, ew("exp", ew("sub", b, y)))),
    # trig and hyperbolic
    "sin": (lambda x, y, g: ew("mul", g, ew("cos", x)),),
    "cos": (lambda x, y, g: ew("neg", ew("mul", g, ew("sin", x))),),
    "tan": (lambda x, y, g: ew("mul", g, ew("add", ew("square", y), 1.0)),),
    "asin": (_asin,),
    "acos": (lambda x, y, g: ew("neg", _asin(x, y, g)),),
    "atan": (lambda x, y, g: ew("true_div", g, ew("add", ew("square", x), 1.0)),),
    "atan2": (lambda a, b, y, g: _atan2(a, b, y, g, 0), lambda a, b, y, g: _atan2(a, b, y, g, 1)),
    "sinh": (lambda x, y, g: ew("mul", g, ew("cosh", x)),),
    "cosh": (lambda x, y, g: ew("mul", g, ew("sinh", x)),),
    "tanh": (lambda x, y, g: ew("tanh_grad", y, g),),
    "asinh": (_x_g("asinh_grad"),),
    "acosh": (_x_g("acosh_grad"),),
    "atanh": (_x_g("atanh_grad"),),
    # activations
    "relu": (_x_g("switch_gt0"),),
    "relu6": (_x_g("relu6_grad"),),
    "sigmoid": (lambda x, y, g: ew("sigmoid_grad", y, g),),
    "hsigmoid": (_x_g("hsigmoid_grad"),),
    "hswish": (_x_g("hswish_grad"),),
    "gelu": (_x_g("gelu_grad"),),
    "silu": (_x_g("silu_grad"),),
    "softplus": (_x_g("softplus_grad"),),
    "logsigmoid": (lambda x, y, g: ew("softplus_grad", ew("neg", x), g),),
    "erf": (lambda x, y, g: ew("mul", ew("mul", g, _C_ERF),
                               ew("exp", ew("neg", ew("square", x)))),),
    # fused forms
    "fuse_add_relu": (lambda a, b, y, g: ew("switch_gt0", y, g),
                      lambda a, b, y, g: ew("switch_gt0", y, g)),
    "switch_gt0": (None, _x_g("switch_gt0")),
    "cond_leq_mov": (None, None, lambda a, b, c, y, g: ew("cond_leq_mov", a, b, g)),
    "cond_lt_mov": (None, None, lambda a, b, c, y, g: ew("cond_lt_mov", a, b, g)),
    # fused backward modes: their own gradients, for second-order derivatives
    "abs_grad": (None, _x_g("abs_grad")),
    "sigmoid_grad": (lambda s, dy, y, g: ew("mul", ew("mul", dy, g),
                                            ew("sub", 1.0, ew("add", s, s))),
                     _x_g("sigmoid_grad")),
    "tanh_grad": (lambda t, dy, y, g: ew("mul", ew("mul", dy, g), ew("mul", t, -2.0)),
                  _x_g("tanh_grad")),
    "relu6_grad": (None, _x_g("relu6_grad")),
    "hsigmoid_grad": (None, _x_g("hsigmoid_grad")),
    "hswish_grad": (lambda x, dy, y, g: ew("hsigmoid_grad", x, ew("mul", ew("add", dy, dy), g)),
                    _x_g("hswish_grad")),
    "softplus_grad": (lambda x, dy, y, g: ew("sigmoid_grad", ew("sigmoid", x), ew("mul", dy, g)),
                      _x_g("softplus_grad")),
    "gelu_grad": (_gelu_grad_x, _x_g("gelu_grad")),
    "silu_grad": (_silu_grad_x, _x_g("silu_grad")),
    "asinh_grad": (_asinh_grad_x, _x_g("asinh_grad")),
    "acosh_grad": (lambda x, dy, y, g: _asinh_grad_x(x, dy, y, g, -1.0), _x_g("acosh_grad")),
    "atanh_grad": (lambda x, dy, y, g: ew("mul", ew("mul", ew("add", x, x), ew("mul", dy, g)),
                                          ew("square", ew("atanh_grad", x, 1.0))),
                   _x_g("atanh_grad")),
}
GRAD_MODES = frozenset(_GRADS)
# mode -> the inputs whose rule reads the output y (recomputed if the caller dropped it)
_READS_Y = {"true_div": (1,), "pow": (1,), "mod": (1,), "exp": (0,), "expm1": (0,), "sqrt": (0,),
            "rsqrt": (0,), "logaddexp": (0, 1), "tan": (0,), "tanh": (0,), "sigmoid": (0,),
            "fuse_add_relu": (0, 1)}


@def_backward(Elemwise, keeps_outputs=lambda op: op.mode in _READS_Y)
def _elemwise_backward(op, inputs, outputs, grads, needs):
    g = grads[0]
    rules = _GRADS.get(op.mode)
    if g is None or rules is None:
        return [None] * len(inputs)
    y = outputs[0]
    if y is None and any(needs[i] for i in _READS_Y.get(op.mode, ())):
        y = output(op, inputs, outputs)
    out = []
    for i, x in enumerate(inputs):
        rule = rules[i]
        if rule is None or not needs[i] or x.dtype.kind != "f":
            out.append(None)
        else:
            out.append(fit(rule(*inputs, y, g), x))
    return out


@def_backward(TypeCvt)
def _typecvt_backward(op, inputs, outputs, grads, needs):
    # A cast between float types passes the gradient back in the input's dtype; to or from an
    # integer or bool type there is no gradient.
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f" or op.dtype.kind != "f":
        return [None]
    if g.dtype == x.dtype:
        return [g]
    return [run(cached_op(TypeCvt, x.dtype), g)]
