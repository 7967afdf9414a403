"""Elementwise ops: ``Elemwise(mode)`` and ``TypeCvt(dtype)``, and their shape/dtype rules.

The output dtype of a mode is described here without the kernels (``_PROBES``, ``_KEEPS``): a mode
that is a numpy ufunc takes the dtype that ufunc gives, found once per input dtypes by running it
on one-element arrays and cached; a custom mode names a ufunc whose type resolution is its own
(``sigmoid`` as ``exp``, the fused ``*_grad`` modes as ``multiply`` of their two inputs) or the
input whose dtype it keeps (``clip``, ``relu``).  ``tests/test_elemwise_dtypes.py`` checks every
mode against the CPU kernels (``device/cpu/kernels/elemwise.py``), so that the rule and the kernel
cannot disagree.  The backward rules are in ``autodiff/rules/elemwise.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, guard_complex, op_error

__all__ = ["Elemwise", "TypeCvt", "CreateComplex", "ComplexPart", "ELEMWISE_MODES",
           "ELEMWISE_ARITY", "broadcast_shapes", "elemwise_op"]

# Modes whose output dtype is that of a numpy ufunc applied to the inputs: the ufunc that computes
# the mode, or for a custom mode one that resolves dtypes as the mode's kernel does.
_PROBES = {
    # arithmetic
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "true_div": np.true_divide,
    "floor_div": np.floor_divide, "mod": np.fmod, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "neg": np.negative, "abs": np.abs, "square": np.square, "sign": np.sign,
    # exp / log family
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": np.sqrt, "logaddexp": np.logaddexp,
    # trig and hyperbolic
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "atan2": np.arctan2, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    # activations: computed in the float dtype exp gives (integers become floats)
    "sigmoid": np.exp, "hsigmoid": np.exp, "hswish": np.exp, "gelu": np.exp, "silu": np.exp,
    "softplus": np.exp, "logsigmoid": np.exp, "erf": np.exp,
    # comparison and logic
    "lt": np.less, "leq": np.less_equal, "gt": np.greater, "geq": np.greater_equal,
    "eq": np.equal, "neq": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    "xor": np.logical_xor, "not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf,
    # bitwise on integers
    "shl": np.left_shift, "shr": np.right_shift, "bit_and": np.bitwise_and,
    "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor, "bit_not": np.invert,
    # fused forms (what MegEngine's graph optimizer produces; handy for backward rules)
    "fuse_add_relu": np.add,
    # fused backward modes ``(x or y, dy) -> dx``: the product of their inputs' dtypes
    "abs_grad": np.multiply, "sigmoid_grad": np.multiply, "tanh_grad": np.multiply,
    "relu6_grad": np.multiply, "hsigmoid_grad": np.multiply, "hswish_grad": np.multiply,
    "softplus_grad": np.multiply, "gelu_grad": np.multiply, "silu_grad": np.multiply,
    "asinh_grad": np.multiply, "acosh_grad": np.multiply, "atanh_grad": np.multiply,
}
# Modes that keep the dtype of one input: mode -> (number of inputs, that input).  Rounding keeps
# integers as they are (MegEngine keeps the dtype where numpy would give floats); the selects
# (``switch_gt0(x, dy)``, ``cond_leq_mov(a, b, c)``) keep the dtype of the value they pass.
_KEEPS = {
    "ceil": (1, 0), "floor": (1, 0), "round": (1, 0), "clip": (3, 0), "relu": (1, 0),
    "relu6": (1, 0), "switch_gt0": (2, 1), "cond_leq_mov": (3, 2), "cond_lt_mov": (3, 2),
}
ELEMWISE_MODES = frozenset(_PROBES) | frozenset(_KEEPS)
#: mode -> the number of inputs it takes
ELEMWISE_ARITY = {**{m: f.nin for m, f in _PROBES.items()}, **{m: n for m, (n, _) in _KEEPS.items()}}

# Modes that accept bool inputs (MegEngine rejects arithmetic on bool: "unsupport mode ADD for bool").
_BOOL_OK = frozenset(["and", "or", "xor", "not", "eq", "neq", "lt", "leq", "gt", "geq", "max", "min",
                      "isnan", "isinf"])
# Modes that compute in float (the dtype_promote plugin turns integer inputs into float32 first).
_FLOAT_ONLY = frozenset(["exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin",
                         "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                         "sigmoid", "hsigmoid", "hswish", "gelu", "silu", "softplus", "logsigmoid",
                         "erf", "logaddexp", "true_div", "pow", "abs_grad", "sigmoid_grad",
                         "tanh_grad", "relu6_grad", "hsigmoid_grad", "hswish_grad",
                         "softplus_grad", "gelu_grad", "silu_grad", "asinh_grad", "acosh_grad",
                         "atanh_grad"])
_INT_ONLY = frozenset(["shl", "shr", "bit_and", "bit_or", "bit_xor", "bit_not"])
# Modes that take complex64 inputs (numpy computes them exactly in complex64).
_COMPLEX_OK = frozenset(["add", "sub", "mul", "neg", "eq", "neq"])
_complex64 = np.dtype("complex64")


class Elemwise(OpDef):
    """An elementwise op; ``mode`` is one of ``ELEMWISE_MODES`` (MegEngine's names, lower case)."""

    _fields = ("mode",)
    long_running = False
    complex_ok = True

    def __init__(self, mode):
        mode = mode.lower() if isinstance(mode, str) else mode
        if mode not in ELEMWISE_MODES:
            raise ValueError(f"Elemwise: unknown mode {mode!r}")
        super().__init__(mode)


#: ``elemwise_op(mode)``: the shared ``Elemwise(mode)`` (ops are immutable, so one instance per
#: mode serves everyone and keeps the per-op caches keyed by op small).
elemwise_op = Elemwise.get


class TypeCvt(OpDef):
    """Convert to ``dtype`` (a numpy dtype)."""

    _fields = ("dtype",)
    long_running = False
    complex_ok = True


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
    if "c" in kinds and mode not in _COMPLEX_OK:
        raise op_error(TypeError, op, f"mode {mode!r} does not take complex inputs (complex "
                       f"tensors support {', '.join(sorted(_COMPLEX_OK))})", descs)
    keeps = _KEEPS.get(mode)
    if keeps is not None:
        out = descs[keeps[1]][1]
    else:
        probes = [np.ones(1, d[1]) for d in descs]
        try:
            with np.errstate(all="ignore"):
                out = _PROBES[mode](*probes).dtype
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
    n = ELEMWISE_ARITY[op.mode]
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


@def_infer(TypeCvt)
def _infer_typecvt(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    if descs[0][1].kind == "c" and op.dtype.kind != "c":
        raise op_error(TypeError, op, f"cannot convert a complex tensor to {op.dtype}: take "
                       "F.real or F.imag of it", descs)
    return [TensorDesc(descs[0][0], op.dtype)]


class CreateComplex(OpDef):
    """``(real, imag) -> real + 1j * imag``: a complex64 tensor from two float tensors (numpy
    broadcasting), MegEngine's ``create_complex``."""

    long_running = False
    complex_ok = True  # it checks its inputs itself


class ComplexPart(OpDef):
    """The real (``part="real"``) or imaginary (``part="imag"``) part of a complex64 tensor, as
    float32 (MegEngine's ``get_real``/``get_imag``)."""

    _fields = ("part",)
    long_running = False
    complex_ok = True

    def __init__(self, part):
        if part not in ("real", "imag"):
            raise ValueError(f"ComplexPart: part must be 'real' or 'imag', got {part!r}")
        super().__init__(part)


@def_infer(CreateComplex)
def _infer_create_complex(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (real, imag), got {len(descs)}", descs)
    if any(d[1].kind != "f" for d in descs):
        raise op_error(TypeError, op, "the real and imaginary parts must be float tensors", descs)
    guard_complex()  # complex values exist from now on
    shape = descs[0][0] if descs[0][0] == descs[1][0] else broadcast_shapes(op, descs)
    return [TensorDesc(shape, _complex64)]


@def_infer(ComplexPart)
def _infer_complex_part(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    if descs[0][1].kind != "c":
        raise op_error(TypeError, op, f"takes a complex tensor, got {descs[0][1]}", descs)
    return [TensorDesc(descs[0][0], np.dtype("float32"))]
