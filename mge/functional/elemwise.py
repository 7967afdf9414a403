"""Elementwise functions (``megengine.functional.elemwise``).

Every function is one ``Elemwise(mode)`` op applied to its inputs.  Inputs may be tensors, Python
numbers or numpy arrays; they broadcast as in numpy.  Mixed dtypes compute in their common dtype,
and functions that only make sense on floats (``div``, ``pow``, ``exp``, ``sqrt``, trigonometry...)
give float32 for integer inputs, as in MegEngine.
"""
from .._core.ops.elemwise import elemwise_op
from ..core import apply
from ..core.ops.builtin import Elemwise  # noqa: F401  (MegEngine exports the op class here)

__all__ = [
    "abs", "add", "acos", "asin", "atan", "atan2", "asinh", "acosh", "atanh", "ceil", "clip",
    "cos", "cosh", "div", "equal", "exp", "expm1", "floor", "floor_div", "greater",
    "greater_equal", "left_shift", "less", "less_equal", "log", "log1p", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logaddexp", "maximum", "minimum", "mod", "mul",
    "neg", "not_equal", "pow", "right_shift", "round", "sin", "sinh", "sqrt", "square", "sub",
    "tan", "tanh",
]

_op = elemwise_op


def _e(mode, *args):
    return apply(_op(mode), *args)[0]


# -- arithmetic ------------------------------------------------------------------------------------

def add(x, y):
    """Elementwise ``x + y``.

    MegEngine signature: ``add(x, y)``.  Bool inputs are rejected (use :func:`logical_or`).

    Example::

        >>> F.add(mge.tensor([1, 2]), 1).numpy()
        array([2, 3], dtype=int32)
    """
    return _e("add", x, y)


def sub(x, y):
    """Elementwise ``x - y``.  MegEngine signature: ``sub(x, y)``."""
    return _e("sub", x, y)


def mul(x, y):
    """Elementwise ``x * y``.  MegEngine signature: ``mul(x, y)``."""
    return _e("mul", x, y)


def div(x, y):
    """Elementwise true division ``x / y``; integer inputs give float32.

    MegEngine signature: ``div(x, y)``.
    """
    return _e("true_div", x, y)


def floor_div(x, y):
    """Elementwise floor division ``x // y`` (rounds towards minus infinity).

    MegEngine signature: ``floor_div(x, y)``.
    """
    return _e("floor_div", x, y)


def mod(x, y):
    """Elementwise remainder.

    MegEngine signature: ``mod(x, y)``.  For integers the result has the sign of ``y`` (Python's
    ``%``); for floats it has the sign of ``x`` (C's ``fmod``), as in MegEngine.
    """
    return _e("mod", x, y)


def pow(x, y):
    """Elementwise power ``x ** y``; integer inputs give float32.

    MegEngine signature: ``pow(x, y)``.
    """
    return _e("pow", x, y)


def neg(x):
    """Elementwise negation ``-x``.  MegEngine signature: ``neg(x)``."""
    return _e("neg", x)


def abs(x):
    """Elementwise absolute value.  MegEngine signature: ``abs(x)``."""
    return _e("abs", x)


def square(x):
    """Elementwise ``x * x`` (keeps integer dtypes).  MegEngine signature: ``square(x)``."""
    return _e("square", x)


def maximum(x, y):
    """Elementwise maximum of ``x`` and ``y``.  MegEngine signature: ``maximum(x, y)``."""
    return _e("max", x, y)


def minimum(x, y):
    """Elementwise minimum of ``x`` and ``y``.  MegEngine signature: ``minimum(x, y)``."""
    return _e("min", x, y)


def clip(x, lower=None, upper=None):
    """Clamp every element of ``x`` into ``[lower, upper]``.

    MegEngine signature: ``clip(x, lower=None, upper=None)``.  With only ``lower`` this is
    ``maximum(x, lower)``, with only ``upper`` ``minimum(x, upper)``.  When ``lower > upper``,
    elements below ``lower`` become ``lower`` and all others ``upper`` (MegEngine's rule).

    Raises:
        ValueError: if both ``lower`` and ``upper`` are None.
    """
    if lower is None and upper is None:
        raise ValueError("clip: at least one of 'lower' or 'upper' must not be None")
    if upper is None:
        return _e("max", x, lower)
    if lower is None:
        return _e("min", x, upper)
    return _e("clip", x, lower, upper)


# -- exponentials and logarithms ---------------------------------------------------------------------

def exp(x):
    """Elementwise :math:`e^x`.  MegEngine signature: ``exp(x)``."""
    return _e("exp", x)


def expm1(x):
    """Elementwise :math:`e^x - 1`, accurate for small ``x``.  MegEngine signature: ``expm1(x)``."""
    return _e("expm1", x)


def log(x):
    """Elementwise natural logarithm.  MegEngine signature: ``log(x)``."""
    return _e("log", x)


def log1p(x):
    """Elementwise :math:`\\log(1 + x)`, accurate for small ``x``.  MegEngine signature: ``log1p(x)``."""
    return _e("log1p", x)


def sqrt(x):
    """Elementwise square root.  MegEngine signature: ``sqrt(x)``."""
    return _e("sqrt", x)


def logaddexp(x, y):
    """Elementwise :math:`\\log(e^x + e^y)`, computed without overflow.

    MegEngine signature: ``logaddexp(x, y)``.
    """
    return _e("logaddexp", x, y)


# -- rounding -------------------------------------------------------------------------------------

def round(x):
    """Elementwise rounding to the nearest integer, halves away from zero (C's ``round``).

    MegEngine signature: ``round(x)``.  Integer inputs are returned unchanged.
    """
    return _e("round", x)


def ceil(x):
    """Elementwise ceiling.  MegEngine signature: ``ceil(x)``.  Integer dtypes are kept."""
    return _e("ceil", x)


def floor(x):
    """Elementwise floor.  MegEngine signature: ``floor(x)``.  Integer dtypes are kept."""
    return _e("floor", x)


# -- trigonometric and hyperbolic -----------------------------------------------------------------

def sin(x):
    """Elementwise sine.  MegEngine signature: ``sin(x)``."""
    return _e("sin", x)


def cos(x):
    """Elementwise cosine.  MegEngine signature: ``cos(x)``."""
    return _e("cos", x)


def tan(x):
    """Elementwise tangent.  MegEngine signature: ``tan(x)``."""
    return _e("tan", x)


def asin(x):
    """Elementwise inverse sine.  MegEngine signature: ``asin(x)``."""
    return _e("asin", x)


def acos(x):
    """Elementwise inverse cosine.  MegEngine signature: ``acos(x)``."""
    return _e("acos", x)


def atan(x):
    """Elementwise inverse tangent.  MegEngine signature: ``atan(x)``."""
    return _e("atan", x)


def atan2(y, x):
    """Elementwise angle of the point ``(x, y)``, in :math:`[-\\pi, \\pi]`.

    MegEngine signature: ``atan2(y, x)``.
    """
    return _e("atan2", y, x)


def sinh(x):
    """Elementwise hyperbolic sine.  MegEngine signature: ``sinh(x)``."""
    return _e("sinh", x)


def cosh(x):
    """Elementwise hyperbolic cosine.  MegEngine signature: ``cosh(x)``."""
    return _e("cosh", x)


def tanh(x):
    """Elementwise hyperbolic tangent.  MegEngine signature: ``tanh(x)``."""
    return _e("tanh", x)


def asinh(x):
    """Elementwise inverse hyperbolic sine.  MegEngine signature: ``asinh(x)``."""
    return _e("asinh", x)


def acosh(x):
    """Elementwise inverse hyperbolic cosine.  MegEngine signature: ``acosh(x)``."""
    return _e("acosh", x)


def atanh(x):
    """Elementwise inverse hyperbolic tangent.  MegEngine signature: ``atanh(x)``."""
    return _e("atanh", x)


# -- bit shifts -----------------------------------------------------------------------------------

def left_shift(x, y):
    """Elementwise ``x << y`` on integers.  MegEngine signature: ``left_shift(x, y)``."""
    return _e("shl", x, y)


def right_shift(x, y):
    """Elementwise ``x >> y`` on integers (arithmetic shift).  MegEngine signature: ``right_shift(x, y)``."""
    return _e("shr", x, y)


# -- logic ----------------------------------------------------------------------------------------

def _check_bool(name, *args):
    for a in args:
        dtype = getattr(a, "dtype", None)
        if dtype is not None and getattr(dtype, "kind", "b") != "b":
            raise TypeError(f"{name}: expects bool inputs, got {dtype}")


def logical_and(x, y):
    """Elementwise logical AND of bool tensors.  MegEngine signature: ``logical_and(x, y)``."""
    _check_bool("logical_and", x, y)
    return _e("and", x, y)


def logical_or(x, y):
    """Elementwise logical OR of bool tensors.  MegEngine signature: ``logical_or(x, y)``."""
    _check_bool("logical_or", x, y)
    return _e("or", x, y)


def logical_xor(x, y):
    """Elementwise logical XOR of bool tensors.  MegEngine signature: ``logical_xor(x, y)``."""
    _check_bool("logical_xor", x, y)
    return _e("xor", x, y)


def logical_not(x):
    """Elementwise logical NOT of a bool tensor.  MegEngine signature: ``logical_not(x)``."""
    _check_bool("logical_not", x)
    return _e("not", x)


# -- comparison -----------------------------------------------------------------------------------

def equal(x, y):
    """Elementwise ``x == y`` (a bool tensor).  MegEngine signature: ``equal(x, y)``."""
    return _e("eq", x, y)


def not_equal(x, y):
    """Elementwise ``x != y`` (a bool tensor).  MegEngine signature: ``not_equal(x, y)``."""
    return _e("neq", x, y)


def less(x, y):
    """Elementwise ``x < y`` (a bool tensor).  MegEngine signature: ``less(x, y)``."""
    return _e("lt", x, y)


def less_equal(x, y):
    """Elementwise ``x <= y`` (a bool tensor).  MegEngine signature: ``less_equal(x, y)``."""
    return _e("leq", x, y)


def greater(x, y):
    """Elementwise ``x > y`` (a bool tensor).  MegEngine signature: ``greater(x, y)``."""
    return _e("gt", x, y)


def greater_equal(x, y):
    """Elementwise ``x >= y`` (a bool tensor).  MegEngine signature: ``greater_equal(x, y)``."""
    return _e("geq", x, y)


# MegEngine defines its quantized elementwise helpers here; mge keeps them with the other
# quantized functions and answers the old import path.
from .quantized import _elemwise_multi_type, _elwise  # noqa: E402,F401
