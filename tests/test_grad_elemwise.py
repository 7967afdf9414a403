"""Backward rules of ``Elemwise``, ``TypeCvt``, ``Identity``, ``Copy`` and ``Detach``.

Every rule is checked against central differences in float64 (``gradcheck.check_vjp``), at inputs
away from the points where a mode is not differentiable.  ``CASES`` lists ``(op, arrays)`` for a
later second-order test; ``SECOND_ORDER_SKIP`` names (``op.name``) the ops whose rule is not
itself differentiable (none here: every rule is built from modes that have rules).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mge
from gradcheck import case_id, check_dropped_output, check_vjp, rule_vjp
from mge._core.device import as_device
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import AssertEqual, Copy, Detach, Identity, TypeCvt
from mge._core.autodiff.rules.elemwise import GRAD_MODES
from mge._core.ops.elemwise import ELEMWISE_ARITY, ELEMWISE_MODES, elemwise_op
from mge.core import apply

_rng = np.random.default_rng(42)


def _x(lo, hi, shape=(2, 3), avoid=()):
    """Uniform values in (lo, hi), each at least 0.1 away from the points in ``avoid``."""
    x = _rng.uniform(lo, hi, shape)
    for k in avoid:
        near = np.abs(x - k) < 0.1
        x[near] = k + np.where(x[near] >= k, 0.15, -0.15)
    return x


# mode -> (lo, hi, points to avoid) of its single input
UNARY = {
    "neg": (-3, 3, ()), "abs": (-3, 3, (0,)), "square": (-3, 3, ()), "exp": (-2, 2, ()),
    "expm1": (-2, 2, ()), "log": (0.2, 3, ()), "log1p": (-0.5, 3, ()), "sqrt": (0.2, 4, ()),
    "rsqrt": (0.2, 4, ()), "sin": (-3, 3, ()), "cos": (-3, 3, ()), "tan": (-1.2, 1.2, ()),
    "asin": (-0.9, 0.9, ()), "acos": (-0.9, 0.9, ()), "atan": (-3, 3, ()), "sinh": (-2, 2, ()),
    "cosh": (-2, 2, ()), "tanh": (-2, 2, ()), "asinh": (-3, 3, ()), "acosh": (1.2, 3, ()),
    "atanh": (-0.9, 0.9, ()), "relu": (-3, 3, (0,)), "relu6": (-2, 8, (0, 6)),
    "sigmoid": (-4, 4, ()), "hsigmoid": (-5, 5, (-3, 3)), "hswish": (-5, 5, (-3, 3)),
    "gelu": (-3, 3, ()), "silu": (-3, 3, ()), "softplus": (-3, 3, ()),
    "logsigmoid": (-3, 3, ()), "erf": (-2, 2, ()),
}


def _mod_inputs(shape=(2, 3)):
    # a / b at least 0.2 away from an integer: fmod is smooth there.
    b = _rng.uniform(1, 2, shape)
    a = (_rng.integers(-3, 3, shape) + _rng.uniform(0.2, 0.8, shape)) * b
    return [a, b]


def _apart(shape=(2, 3)):
    # Two arrays that never tie (max/min choose one side everywhere).
    a = _x(-3, 3, shape)
    return [a, a + _rng.choice([-1, 1], shape) * _rng.uniform(0.2, 1, shape)]


BINARY = {
    "add": lambda: [_x(-3, 3), _x(-3, 3)],
    "sub": lambda: [_x(-3, 3), _x(-3, 3)],
    "mul": lambda: [_x(-3, 3), _x(-3, 3)],
    "true_div": lambda: [_x(-3, 3), _x(-2, 2, avoid=(0,))],
    "pow": lambda: [_x(0.5, 2), _x(-2, 2)],
    "mod": _mod_inputs,
    "max": _apart,
    "min": _apart,
    "atan2": lambda: [_x(-2, 2, avoid=(0,)), _x(-2, 2, avoid=(0,))],
    "logaddexp": lambda: [_x(-2, 2), _x(-2, 2)],
    "fuse_add_relu": lambda: [_x(-3, 3), _x(-3, 3)],  # sum checked below to avoid 0
}

# the fused backward modes: (x or y, dy)
FUSED = {
    "switch_gt0": lambda: [_x(-3, 3, avoid=(0,)), _x(-2, 2)],
    "abs_grad": lambda: [_x(-3, 3, avoid=(0,)), _x(-2, 2)],
    "sigmoid_grad": lambda: [_x(0.1, 0.9), _x(-2, 2)],
    "tanh_grad": lambda: [_x(-0.9, 0.9), _x(-2, 2)],
    "relu6_grad": lambda: [_x(-2, 8, avoid=(0, 6)), _x(-2, 2)],
    "hsigmoid_grad": lambda: [_x(-5, 5, avoid=(-3, 3)), _x(-2, 2)],
    "hswish_grad": lambda: [_x(-5, 5, avoid=(-3, 3)), _x(-2, 2)],
    "softplus_grad": lambda: [_x(-3, 3), _x(-2, 2)],
    "gelu_grad": lambda: [_x(-3, 3), _x(-2, 2)],
    "silu_grad": lambda: [_x(-3, 3), _x(-2, 2)],
    "asinh_grad": lambda: [_x(-3, 3), _x(-2, 2)],
    "acosh_grad": lambda: [_x(1.2, 3), _x(-2, 2)],
    "atanh_grad": lambda: [_x(-0.9, 0.9), _x(-2, 2)],
    "cond_leq_mov": lambda: _apart() + [_x(-2, 2)],
    "cond_lt_mov": lambda: _apart() + [_x(-2, 2)],
}


def _fuse_add_relu_inputs():
    a, b = _x(-3, 3), _x(-3, 3)
    s = a + b
    b = np.where(np.abs(s) < 0.1, b + 0.3, b)
    return [a, b]


BINARY["fuse_add_relu"] = _fuse_add_relu_inputs


def _clip_inputs():
    # x clipped to [lo, hi] with lo < hi; x never within 0.1 of a bound; some x outside.
    x = _x(-3, 3, (2, 4), avoid=(-1, 1))
    return [x, np.array(-1.0), np.array(1.0)]


def _cases():
    cases = []
    for mode, (lo, hi, avoid) in sorted(UNARY.items()):
        cases.append((elemwise_op(mode), [_x(lo, hi, avoid=avoid)]))
    for mode, make in sorted(BINARY.items()):
        cases.append((elemwise_op(mode), make()))
    for mode, make in sorted(FUSED.items()):
        cases.append((elemwise_op(mode), make()))
    cases.append((elemwise_op("clip"), _clip_inputs()))
    # broadcasting: a row against a column, a 0-d operand
    cases.append((elemwise_op("mul"), [_x(-2, 2, (3, 1)), _x(-2, 2, (4,))]))
    cases.append((elemwise_op("true_div"), [_x(-2, 2, (2, 1, 3)), _x(0.5, 2, (4, 1))]))
    cases.append((elemwise_op("sub"), [_x(-2, 2, ()), _x(-2, 2, (2, 2))]))
    cases.append((elemwise_op("sigmoid"), [_x(-2, 2, ())]))
    cases.append((TypeCvt(np.dtype("float64")), [_x(-2, 2)]))
    cases.append((Identity(), [_x(-2, 2)]))
    cases.append((Copy(as_device("cpu1")), [_x(-2, 2)]))
    # F.utils._assert_equal's op: the gradient of expect passes, actual and err get none
    cases.append((AssertEqual(1e9, False), [_x(-2, 2), _x(-2, 2), np.array(0.0)]))
    return cases


CASES = _cases()
SECOND_ORDER_SKIP = set()

# Modes with no gradient: comparisons, logic, bit operations, rounding, integer division.
NOT_DIFFERENTIABLE = {
    "lt", "leq", "gt", "geq", "eq", "neq", "and", "or", "xor", "not", "isnan", "isinf", "shl",
    "shr", "bit_and", "bit_or", "bit_xor", "bit_not", "sign", "ceil", "floor", "round", "floor_div",
}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rule_matches_central_differences(case):
    op, arrays = case
    check_vjp(op, *arrays, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rule_recomputes_a_dropped_output(case):
    op, arrays = case
    check_dropped_output(op, *arrays)


def test_every_mode_has_a_rule_or_is_listed_as_not_differentiable():
    assert GRAD_MODES | NOT_DIFFERENTIABLE == ELEMWISE_MODES
    assert not GRAD_MODES & NOT_DIFFERENTIABLE
    covered = {op.mode for op, _ in CASES if getattr(op, "mode", None)}
    assert GRAD_MODES <= covered


@pytest.mark.parametrize("mode", sorted(NOT_DIFFERENTIABLE - {"shl", "shr", "bit_and", "bit_or",
                                                                "bit_xor", "bit_not", "not"}))
def test_non_differentiable_modes_give_none(mode):
    op = elemwise_op(mode)
    n = ELEMWISE_ARITY[mode]
    inputs = [mge.tensor(_x(-2, 2)) for _ in range(n)]
    y = apply(op, *inputs)[0]
    g = mge.tensor(np.ones(y.shape, "float32"))
    assert BACKWARD[type(op)](op, inputs, [y], [g], [True] * n) == [None] * n


# -- broadcasting ---------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       mode=st.sampled_from(["add", "sub", "mul", "true_div", "max", "atan2"]))
def test_binary_gradients_sum_over_broadcast_axes(shapes, mode):
    sa, sb = shapes.input_shapes
    rng = np.random.default_rng(len(sa) * 7 + len(sb))
    # |a| < 1 < 1.5 < |b|: the sides never tie (max) and nothing divides by 0 (true_div, atan2)
    a = rng.uniform(0.5, 1, sa) * rng.choice([-1, 1], sa)
    b = rng.uniform(1.5, 2, sb) * rng.choice([-1, 1], sb)
    check_vjp(elemwise_op(mode), a, b, rtol=1e-5, atol=1e-7)


def test_clip_bounds_as_arrays_get_their_gradients():
    x = np.array([[-2.5, -0.5, 0.5, 2.5], [0.2, -1.7, 1.6, 0.0]])
    lo = np.array([-1.0, -1.2, -0.9, -1.1])
    hi = np.array([[1.0], [1.3]])
    check_vjp(elemwise_op("clip"), x, lo, hi)


# -- MegEngine's values at the edges --------------------------------------------------------------

def _grad(mode, *xs, dy=None):
    inputs = [mge.tensor(np.asarray(x, "float32")) for x in xs]
    op = elemwise_op(mode)
    y = apply(op, *inputs)[0]
    g = mge.tensor(np.ones(y.shape, "float32") if dy is None else np.asarray(dy, "float32"))
    out = BACKWARD[type(op)](op, inputs, [y], [g], [True] * len(inputs))
    return [None if r is None else r.numpy() for r in out]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf / nan on purpose
def test_edges_follow_megengine():
    # values from MegEngine 1.13's GradManager
    np.testing.assert_allclose(_grad("abs", [1.0, 0.0, -3.0])[0], [1, -1, -1])
    np.testing.assert_allclose(_grad("relu", [1.0, 0.0, -3.0])[0], [1, 0, 0])
    np.testing.assert_allclose(_grad("relu6", [0.0, 1.0, 6.0, 7.0])[0], [0, 1, 0, 0])
    np.testing.assert_allclose(_grad("hswish", [-3.0, -2.0, 3.0, 7.0])[0],
                               [-0.5, -1 / 6, 1.5, 1], rtol=1e-6)
    np.testing.assert_allclose(_grad("hsigmoid", [-3.0, -2.0, 3.0, 7.0])[0], [0, 1 / 6, 0, 0],
                               rtol=1e-6)
    np.testing.assert_allclose(_grad("sqrt", [1.0, 0.0, 4.0])[0], [0.5, np.inf, 0.25])
    lo, hi = np.float32(0), np.float32(2)
    np.testing.assert_allclose(_grad("clip", [0.0, 1.0, 2.0, 3.0], lo, hi)[0], [1, 1, 1, 0])


def test_max_min_ties_go_to_the_first_input():
    # MegEngine: F.maximum(x, y) with x == y gives x the gradient, y none
    gx, gy = _grad("max", [1.0, 0.0, 4.0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gx, [1, 0, 1])
    np.testing.assert_array_equal(gy, [0, 1, 0])
    gx, gy = _grad("min", [1.0, 0.0, 4.0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gx, [1, 1, 0])
    np.testing.assert_array_equal(gy, [0, 0, 1])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf / nan on purpose
def test_pow_at_zero_base():
    # MegEngine: d(x**2)/dx at 0 is 0 (b * a**(b-1)), not nan
    ga, gb = _grad("pow", [0.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(ga, [0, 4, 6])
    assert np.isnan(gb[0]) and np.allclose(gb[1:], [4 * math.log(2), 9 * math.log(3)], rtol=1e-6)


# -- fused backward kernels against numpy ---------------------------------------------------------

def _sig(x):
    return 1 / (1 + np.exp(-x))


def _erf(x):
    return np.vectorize(math.erf)(x)


FUSED_REF = {
    "abs_grad": lambda x, dy: np.where(x > 0, dy, -dy),
    "sigmoid_grad": lambda y, dy: y * (1 - y) * dy,
    "tanh_grad": lambda y, dy: (1 - y * y) * dy,
    "relu6_grad": lambda x, dy: np.where((x > 0) & (x < 6), dy, 0),
    "hsigmoid_grad": lambda x, dy: np.where((x > -3) & (x < 3), dy / 6, 0),
    "hswish_grad": lambda x, dy: np.where(x < -3, 0, np.where(x > 3, dy, (2 * x + 3) / 6 * dy)),
    "softplus_grad": lambda x, dy: _sig(x) * dy,
    "gelu_grad": lambda x, dy: (0.5 * (1 + _erf(x / math.sqrt(2)))
                                + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)) * dy,
    "silu_grad": lambda x, dy: _sig(x) * (1 + x * (1 - _sig(x))) * dy,
    "asinh_grad": lambda x, dy: dy / np.sqrt(x * x + 1),
    "acosh_grad": lambda x, dy: dy / np.sqrt(x * x - 1),
    "atanh_grad": lambda x, dy: dy / (1 - x * x),
    "switch_gt0": lambda x, dy: np.where(x > 0, dy, 0),
}
_EDGE_INPUTS = {
    "relu6_grad": [0.0, 6.0, 3.0, -1.0, 7.0], "hsigmoid_grad": [-3.0, 3.0, 0.5, -4.0, 4.0],
    "hswish_grad": [-3.0, 3.0, 0.5, -4.0, 4.0], "abs_grad": [0.0, 1.0, -1.0, 2.0, -2.0],
    "switch_gt0": [0.0, 1.0, -1.0, 2.0, -2.0], "acosh_grad": [1.5, 2.0, 3.0, 1.1, 4.0],
    "atanh_grad": [-0.5, 0.0, 0.5, 0.9, -0.9], "sigmoid_grad": [0.1, 0.5, 0.9, 0.3, 0.7],
    "tanh_grad": [-0.5, 0.0, 0.5, 0.9, -0.9],
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", sorted(FUSED_REF))
def test_fused_grad_kernels_match_numpy(mode, dtype):
    x = np.array(_EDGE_INPUTS.get(mode, [-2.5, -0.5, 0.0, 0.7, 3.1]), dtype)
    dy = np.array([1.5, -2.0, 0.5, 3.0, -1.0], dtype)
    out = apply(elemwise_op(mode), mge.tensor(x, dtype=dtype), mge.tensor(dy, dtype=dtype))[0]
    assert out.dtype == np.dtype(dtype)
    ref = FUSED_REF[mode](x.astype(np.float64), dy.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-6 if dtype == "float32" else 1e-12)


def test_fused_grad_modes_promote_integers_to_float32():
    out = apply(elemwise_op("sigmoid_grad"), mge.tensor([0, 1], dtype="int32"),
                mge.tensor([1, 1], dtype="int32"))[0]
    assert out.dtype == np.float32


def test_cond_lt_mov():
    a = mge.tensor([1.0, 2.0, 3.0])
    b = mge.tensor([2.0, 2.0, 2.0])
    c = mge.tensor([5.0, 6.0, 7.0])
    np.testing.assert_array_equal(apply(elemwise_op("cond_lt_mov"), a, b, c)[0].numpy(), [5, 0, 0])


# -- dtypes and needs -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("mode", ["mul", "true_div", "max", "add"])
def test_gradients_have_the_input_dtype(mode, dtype):
    a = _x(0.5, 2, (2, 3)).astype(dtype)
    b = _x(0.5, 2, (3,)).astype(dtype) + 3
    op = elemwise_op(mode)
    inputs = [mge.tensor(a, dtype=dtype), mge.tensor(b, dtype=dtype)]
    y = apply(op, *inputs)[0]
    g = mge.tensor(np.ones((2, 3)), dtype=dtype)
    grads = BACKWARD[type(op)](op, inputs, [y], [g], [True, True])
    assert [g.dtype for g in grads] == [np.dtype(dtype)] * 2
    assert [g.shape for g in grads] == [(2, 3), (3,)]
    # and the values are the float64 ones, rounded
    ref = rule_vjp(op, [a.astype("float64"), b.astype("float64")], [np.ones((2, 3))], wrt=[0, 1])
    tol = 2e-3 if dtype == "float16" else 1e-6
    for got, want in zip(grads, (ref[0], ref[1])):
        np.testing.assert_allclose(got.numpy().astype("float64"), want, rtol=tol, atol=tol)


def test_needs_false_skips_the_input():
    op = elemwise_op("mul")
    inputs = [mge.tensor(_x(-1, 1)), mge.tensor(_x(-1, 1))]
    y = apply(op, *inputs)[0]
    g = mge.tensor(np.ones((2, 3), "float32"))
    a, b = BACKWARD[type(op)](op, inputs, [y], [g], [False, True])
    assert a is None and b.shape == (2, 3)
    assert BACKWARD[type(op)](op, inputs, [y], [None], [True, True]) == [None, None]


def test_integer_inputs_get_integer_gradients_only_when_asked():
    # (asked only for an attached integer tensor: MegEngine's integer gradients)
    op = elemwise_op("mul")
    inputs = [mge.tensor([1, 2], dtype="int32"), mge.tensor([3.0, 4.0])]
    y = apply(op, *inputs)[0]
    ga, gb = BACKWARD[type(op)](op, inputs, [y], [mge.tensor([1.0, 1.0])], [False, True])
    assert ga is None
    np.testing.assert_array_equal(gb.numpy(), [1, 2])
    assert gb.dtype == np.float32
    ga, _ = BACKWARD[type(op)](op, inputs, [y], [mge.tensor([1.0, 1.0])], [True, True])
    assert ga.dtype == np.int32
    np.testing.assert_array_equal(ga.numpy(), [3, 4])
    mask = [mge.tensor([True, False]), mge.tensor([True, True])]
    y = apply(elemwise_op("and"), *mask)[0]
    assert BACKWARD[type(op)](elemwise_op("and"), mask, [y], [y], [True, True]) == [None, None]


# -- TypeCvt, Identity, Copy, Detach --------------------------------------------------------------

def _misc_grad(op, x, g, need=True):
    y = apply(op, x)[0]
    return BACKWARD[type(op)](op, [x], [y], [g], [need])[0]


def test_typecvt_casts_the_gradient_back():
    x = mge.tensor([1.5, -2.0], dtype="float32")
    g = _misc_grad(TypeCvt(np.dtype("float16")), x, mge.tensor([0.5, 2.0], dtype="float16"))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g.numpy(), [0.5, 2.0])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"),
                                     ("bool", "float32"), ("float32", "bool")])
def test_typecvt_to_or_from_non_float_has_no_gradient(src, dst):
    x = mge.tensor(np.array([1, 0]), dtype=src)
    g = mge.tensor(np.array([1, 1]), dtype=dst if dst != "bool" else "float32")
    assert _misc_grad(TypeCvt(np.dtype(dst)), x, g) is None


def test_identity_passes_and_detach_stops():
    x = mge.tensor([1.0, 2.0])
    g = mge.tensor([3.0, 4.0])
    assert _misc_grad(Identity(), x, g) is g
    assert _misc_grad(Detach(), x, g) is None
    assert _misc_grad(Identity(), x, g, need=False) is None


def test_copy_sends_the_gradient_back_to_the_input_device():
    x = mge.tensor([1.0, 2.0], device="cpu0")
    op = Copy(as_device("cpu1"))
    y = apply(op, x)[0]
    assert y.device == as_device("cpu1")
    g = apply(Copy(as_device("cpu1")), mge.tensor([3.0, 4.0], device="cpu0"))[0]
    gx = BACKWARD[Copy](op, [x], [y], [g], [True])[0]
    assert gx.device == x.device
    np.testing.assert_array_equal(gx.numpy(), [3, 4])


def test_switch_gt0_keeps_zero_where_the_gradient_is_not_finite():
    # The fast kernel multiplies by the mask; inf * 0 would be nan, so non-finite dy takes the
    # exact x > 0 ? dy : 0 path.
    x = np.array([1.0, -1.0, 0.0, 2.0], "float32")
    dy = np.array([np.inf, np.inf, np.nan, 3.0], "float32")
    from mge._core.ops import elemwise_op
    out = mge.core.apply(elemwise_op("switch_gt0"), mge.tensor(x), mge.tensor(dy))[0].numpy()
    np.testing.assert_array_equal(out, np.where(x > 0, dy, 0).astype("float32"))
