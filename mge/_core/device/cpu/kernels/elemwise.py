"""CPU kernels of ``Elemwise``, ``TypeCvt`` and the complex ops (``CreateComplex``, ``ComplexPart``).

Every mode's kernel is one line in ``_CPU``; ``Elemwise``'s kernel looks the mode up there.  Each
kernel returns the dtype the op's rule declares (``ops/elemwise.py`` describes it; the two are
checked against each other by ``tests/test_elemwise_dtypes.py``).  A mode computed by a numpy
ufunc with one output also runs in place, into the buffer of an input nobody else sees.
"""
import math

import numpy as np

from .... import _accel
from ....ops.elemwise import ComplexPart, CreateComplex, Elemwise, TypeCvt
from ....ops.program import ElemwiseChain
from ..table import def_inplace, def_kernel

_C_LOOPS = _accel.load("mge._core.device.cpu.handoff").CPU  # C loops without numpy's temporaries


def _floating(fn):
    # An activation of integers is computed in the float dtype exp gives them (the op's rule):
    # the smallest float that holds every value of the integer type.
    def f(x):
        if x.dtype.kind != "f":
            x = x.astype(np.promote_types(x.dtype, np.float16))
        return fn(x)
    f.__name__ = fn.__name__
    return f


def _product_dtype(fn):
    # A fused ``*_grad`` mode answers in the dtype of ``x * dy`` (the op's rule).
    def f(x, dy):
        r = fn(x, dy)
        dtype = np.promote_types(x.dtype, dy.dtype)
        return r if r.dtype == dtype else r.astype(dtype)
    f.__name__ = fn.__name__
    return f


def _sigmoid(x):
    # exp of -|x| never overflows; both branches are exact in their half.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _gelu(x):
    erf = _erf(x / math.sqrt(2.0))
    return (x * (1 + erf) * 0.5).astype(x.dtype, copy=False)


def _erf(x):
    # numpy has no erf; Abramowitz-Stegun 7.1.26 is 1.5e-7 accurate, enough for float32 gelu.
    # float64 inputs use the series/continued fraction of math.erf through vectorize.
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
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

def _abs_grad(x, dy):
    # MegEngine's ABS_GRAD: x > 0 ? dy : -dy (so 0 counts as negative).
    return np.where(x > 0, dy, -dy)


def _switch_gt0(x, dy):
    # x > 0 ? dy : 0 (relu's backward): one pass in C where it can (handoff.py).  Otherwise a
    # multiply by the mask, several times faster than np.where; it differs only where dy is
    # inf/nan and x <= 0 (inf * 0 is nan), so those take the exact path.
    out = _C_LOOPS.relu_grad(x, dy)
    if out is not None:
        return out
    if np.isfinite(dy).all():
        return np.multiply(dy, x > 0)
    return np.where(x > 0, dy, 0).astype(dy.dtype, copy=False)


def _sigmoid_grad(y, dy):  # y = sigmoid(x)
    return y * (1 - y) * dy


def _tanh_grad(y, dy):  # y = tanh(x)
    return (1 - y * y) * dy


def _relu6_grad(x, dy):
    return np.where((x > 0) & (x < 6), dy, 0)


def _hsigmoid_grad(x, dy):
    return np.where((x > -3) & (x < 3), dy / 6, 0)


def _hswish_grad(x, dy):
    return np.where(x < -3, 0, np.where(x > 3, dy, (2 * x + 3) / 6 * dy))


def _softplus_grad(x, dy):
    return _sigmoid(x) * dy


def _gelu_grad(x, dy):
    cdf = (1 + _erf(x / math.sqrt(2.0))) * 0.5
    return (cdf + x * np.exp(x * x * -0.5) * (1 / math.sqrt(2 * math.pi))) * dy


def _silu_grad(x, dy):
    s = _sigmoid(x)
    return s * (1 + x * (1 - s)) * dy


def _asinh_grad(x, dy):
    return dy / np.sqrt(x * x + 1)


def _acosh_grad(x, dy):
    return dy / np.sqrt(x * x - 1)


def _atanh_grad(x, dy):
    return dy / (1 - x * x)


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
    "sigmoid": _floating(_sigmoid), "hsigmoid": _floating(lambda x: np.clip(x + 3, 0, 6) / 6),
    "hswish": _floating(lambda x: x * np.clip(x + 3, 0, 6) / 6), "gelu": _floating(_gelu),
    "silu": _floating(lambda x: x * _sigmoid(x)), "softplus": _floating(_softplus),
    "logsigmoid": _floating(lambda x: -_softplus(-x)), "erf": _floating(_erf),
    # comparison and logic
    "lt": np.less, "leq": np.less_equal, "gt": np.greater, "geq": np.greater_equal,
    "eq": np.equal, "neq": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    "xor": np.logical_xor, "not": np.logical_not, "isnan": np.isnan, "isinf": np.isinf,
    # bitwise on integers
    "shl": np.left_shift, "shr": np.right_shift, "bit_and": np.bitwise_and,
    "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor, "bit_not": np.invert,
    # fused forms
    "fuse_add_relu": lambda a, b: np.maximum(a + b, 0),
    "switch_gt0": _switch_gt0,
    "cond_leq_mov": lambda a, b, c: np.where(a <= b, c, 0).astype(c.dtype, copy=False),
    "cond_lt_mov": lambda a, b, c: np.where(a < b, c, 0).astype(c.dtype, copy=False),
    # fused backward modes: the first input is the forward input x (or output y), the second dy
    "abs_grad": _product_dtype(_abs_grad), "sigmoid_grad": _product_dtype(_sigmoid_grad),
    "tanh_grad": _product_dtype(_tanh_grad), "relu6_grad": _product_dtype(_relu6_grad),
    "hsigmoid_grad": _product_dtype(_hsigmoid_grad), "hswish_grad": _product_dtype(_hswish_grad),
    "softplus_grad": _product_dtype(_softplus_grad), "gelu_grad": _product_dtype(_gelu_grad),
    "silu_grad": _product_dtype(_silu_grad), "asinh_grad": _product_dtype(_asinh_grad),
    "acosh_grad": _product_dtype(_acosh_grad), "atanh_grad": _product_dtype(_atanh_grad),
}
# mode -> its ufunc, for the modes that can write into an input's buffer (``out=``)
_IN_PLACE = {m: f for m, f in _CPU.items() if isinstance(f, np.ufunc) and f.nout == 1}


@def_kernel(Elemwise)
def _cpu_elemwise(op, *arrays):
    return (_CPU[op.mode](*arrays),)


@def_inplace(Elemwise)
def _cpu_elemwise_inplace(op, arrays, k):
    fn = _IN_PLACE.get(op.mode)
    if fn is None:
        return None  # a custom mode makes its own temporaries: the ordinary kernel runs
    return (fn(*arrays, out=arrays[k]),)


@def_kernel(ElemwiseChain)
def _cpu_elemwise_chain(op, *arrays):
    # a program's chain of elementwise ops (ops/program.py), step by step with the ops' own
    # kernels: what a device without chain kernels of its own (one that runs the CPU's kernels,
    # as the tests' opaque device) computes for it
    regs = list(arrays)
    for mode, ins in op.steps:
        value = np.asarray(_CPU[mode](*[regs[r] for r in ins]))
        dtype = op.dtypes[len(regs)]
        regs.append(value if value.dtype == dtype else value.astype(dtype))
    return tuple(np.broadcast_to(regs[r], op.shape) if regs[r].shape != tuple(op.shape)
                 else regs[r] for r in op.outs)


@def_kernel(TypeCvt)
def _cpu_typecvt(op, x):
    return (x.astype(op.dtype),)


@def_kernel(CreateComplex)
def _cpu_create_complex(op, real, imag):
    shape = np.broadcast_shapes(real.shape, imag.shape)
    out = np.empty(shape, np.complex64)
    out.real = real
    out.imag = imag
    return (out,)


@def_kernel(ComplexPart)
def _cpu_complex_part(op, x):
    part = x.real if op.part == "real" else x.imag
    return (np.array(part, dtype=np.float32, order="C"),)
