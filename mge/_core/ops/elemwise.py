"""Elementwise ops: ``Elemwise(mode)`` and ``TypeCvt(dtype)``.

Every mode's CPU kernel is one line in ``_CPU``.  The output dtype of a mode for given input dtypes
is found once by running the kernel on one-element arrays and cached, so the shape/dtype rule and
the kernel can never disagree.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, def_kernel, op_error

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
    "switch_gt0": lambda x, dy: np.where(x > 0, dy, 0).astype(dy.dtype, copy=False),
    "cond_leq_mov": lambda a, b, c: np.where(a <= b, c, 0).astype(c.dtype, copy=False),
}
ELEMWISE_MODES = frozenset(_CPU)
_ARITY = {m: f.nin if isinstance(f, np.ufunc) else f.__code__.co_argcount for m, f in _CPU.items()}

# Modes that accept bool inputs (MegEngine rejects arithmetic on bool: "unsupport mode ADD for bool").
_BOOL_OK = frozenset(["and", "or", "xor", "not", "eq", "neq", "lt", "leq", "gt", "geq", "max", "min",
                      "isnan", "isinf"])
_FLOAT_ONLY = frozenset(["exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
                         "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                         "sigmoid", "hsigmoid", "hswish", "gelu", "silu", "softplus", "logsigmoid",
                         "erf", "logaddexp", "true_div", "pow"])
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
