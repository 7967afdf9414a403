"""Backward rules of ``Elemwise`` and ``TypeCvt``.

One table, ``_GRADS``: mode -> one function per input, each taking the inputs, the output and the
output's gradient.  Modes that are not differentiable (comparisons, logic, integer and rounding
modes) have no entry and give no gradient.  As in MegEngine, a rule uses a fused ``*_grad`` mode
where one exists (``switch_gt0`` for relu, ``sigmoid_grad``...) so that a gradient costs one op;
every fused mode has its own rule, so gradients of gradients work.
"""
import math

from ...ops.elemwise import Elemwise, TypeCvt
from ..gradutil import cast, ew, fit, output
from ..registry import READS_INPUTS, def_backward

__all__ = ["GRAD_MODES"]

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
    "relu": (lambda x, y, g: ew("switch_gt0", y, g),),   # y > 0 exactly where x > 0
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
            "fuse_add_relu": (0, 1), "relu": (0,)}
# modes whose rule reads no input values (only shapes and dtypes): a recording keeps no inputs
_NO_INPUT_VALUES = frozenset({"add", "sub", "neg", "relu"})


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
        if rule is None or not needs[i] or x.dtype.kind not in "fiu":
            out.append(None)
        else:
            out.append(fit(rule(*inputs, y, g), x))
    return out


READS_INPUTS[Elemwise] = lambda op: () if op.mode in _NO_INPUT_VALUES else None


@def_backward(TypeCvt)
def _typecvt_backward(op, inputs, outputs, grads, needs):
    # A cast between float types passes the gradient back in the input's dtype; to or from an
    # integer or bool type there is no gradient.
    x, g = inputs[0], grads[0]
    if g is None or not needs[0] or x.dtype.kind != "f" or op.dtype.kind != "f":
        return [None]
    return [cast(g, x.dtype)]
