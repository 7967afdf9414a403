"""Elementwise functions (mge.functional.elemwise) against numpy."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mge.functional as F
from helpers import as_tensor as t, check_close as check

MEGENGINE_ELEMWISE_ALL = [
    "abs", "add", "acos", "asin", "atan", "atan2", "asinh", "acosh", "atanh", "ceil", "clip",
    "cos", "cosh", "div", "equal", "exp", "expm1", "floor", "floor_div", "greater",
    "greater_equal", "left_shift", "less", "less_equal", "log", "log1p", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logaddexp", "maximum", "minimum", "mod", "mul",
    "neg", "not_equal", "pow", "right_shift", "round", "sin", "sinh", "sqrt", "square", "sub",
    "tan", "tanh",
]


def test_exports_match_megengine():
    assert sorted(F.elemwise.__all__) == sorted(MEGENGINE_ELEMWISE_ALL)
    for name in MEGENGINE_ELEMWISE_ALL:
        f = getattr(F, name)
        assert f is getattr(F.elemwise, name)
        assert f.__doc__ and "MegEngine signature" in f.__doc__


# -- unary float functions ------------------------------------------------------------------------

# name -> (numpy reference, input range)
UNARY = {
    "exp": (np.exp, (-5, 5)), "expm1": (np.expm1, (-1, 1)), "log": (np.log, (0.1, 10)),
    "log1p": (np.log1p, (-0.5, 5)), "sqrt": (np.sqrt, (0, 10)), "sin": (np.sin, (-4, 4)),
    "cos": (np.cos, (-4, 4)), "tan": (np.tan, (-1.2, 1.2)), "asin": (np.arcsin, (-0.99, 0.99)),
    "acos": (np.arccos, (-0.99, 0.99)), "atan": (np.arctan, (-5, 5)), "sinh": (np.sinh, (-3, 3)),
    "cosh": (np.cosh, (-3, 3)), "tanh": (np.tanh, (-3, 3)), "asinh": (np.arcsinh, (-5, 5)),
    "acosh": (np.arccosh, (1.01, 5)), "atanh": (np.arctanh, (-0.95, 0.95)),
    "abs": (np.abs, (-5, 5)), "neg": (np.negative, (-5, 5)), "square": (np.square, (-5, 5)),
    "ceil": (np.ceil, (-5, 5)), "floor": (np.floor, (-5, 5)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(name):
    ref_fn, (lo, hi) = UNARY[name]
    x = np.random.uniform(lo, hi, size=(3, 4)).astype(np.float32)
    check(getattr(F, name)(t(x)), ref_fn(x.astype(np.float64)), "float32")


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "tanh", "asinh", "log1p"])
def test_unary_float_only_gives_float32_for_int(name):
    ref_fn, (lo, hi) = UNARY[name]
    x = np.arange(1, 5, dtype=np.int32)
    check(getattr(F, name)(t(x)), ref_fn(x.astype(np.float64)), "float32")


@pytest.mark.parametrize("name", ["abs", "neg", "square", "floor", "ceil", "round"])
def test_unary_keeps_integer_dtype(name):
    x = np.array([-7, 0, 3, 5], np.int32)
    ref = {"abs": np.abs, "neg": np.negative, "square": np.square}.get(name, lambda v: v)(x)
    out = getattr(F, name)(t(x))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), ref)


def test_unary_float16_and_float64():
    x = np.linspace(-2, 2, 7)
    check(F.exp(t(x, "float16")), np.exp(x.astype(np.float16).astype(np.float64)), "float16", rtol=2e-3)
    check(F.sin(t(x, "float64")), np.sin(x), "float64", rtol=1e-12)


def test_unary_scalar_empty_and_python_number():
    check(F.exp(t(np.float32(1.5))), np.exp(1.5), "float32")
    out = F.sqrt(t(np.zeros((0, 3), np.float32)))
    assert out.shape == (0, 3) and out.dtype == np.float32
    check(F.exp(1.0), np.exp(1.0), "float32")
    check(F.abs(-3), 3, "int32")


def test_round_halves_away_from_zero():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32)
    check(F.round(t(x)), [-3, -2, -1, 1, 2, 3, 0, -1], "float32")


def test_logaddexp_and_atan2():
    a = np.random.randn(4, 1).astype(np.float32) * 30
    b = np.random.randn(1, 5).astype(np.float32) * 30
    check(F.logaddexp(t(a), t(b)), np.logaddexp(a.astype(np.float64), b.astype(np.float64)), "float32")
    check(F.atan2(t(a), t(b)), np.arctan2(a.astype(np.float64), b), "float32")
    check(F.logaddexp(t([1, 2]), t([3, 4])), np.logaddexp([1., 2.], [3., 4.]), "float32")
    check(F.atan2(t([1, -1]), t([-1, -1])), np.arctan2([1, -1], [-1, -1]), "float32")


# -- binary arithmetic ----------------------------------------------------------------------------

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
          "minimum": np.minimum}


@settings(max_examples=25, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       name=st.sampled_from(sorted(BINARY)),
       dtype=st.sampled_from(["float32", "int32", "float16"]))
def test_binary_broadcasting(shapes, name, dtype):
    (sa, sb), result = shapes
    rng = np.random.RandomState(1)
    a = (rng.standard_normal(size=sa) * 10).astype(dtype)
    b = (rng.standard_normal(size=sb) * 10).astype(dtype)
    ref = BINARY[name](a.astype(np.float64), b.astype(np.float64))
    if dtype == "float16":
        ref = ref.astype(np.float16)
    out = getattr(F, name)(t(a), t(b))
    assert out.shape == tuple(result)
    check(out, ref, dtype, rtol=1e-3 if dtype == "float16" else 1e-6)


def test_div_gives_float32_for_int():
    a = np.array([-7, 2, 5], np.int32)
    b = np.array([2, -3, 4], np.int32)
    check(F.div(t(a), t(b)), a / b, "float32")
    with np.errstate(divide="ignore"):
        check(F.div(t([1.0, -1.0]), 0.0), [np.inf, -np.inf], "float32")


def test_floor_div_and_mod():
    a = np.array([-7, 2, 5, -8], np.int32)
    b = np.array([2, -3, 4, -3], np.int32)
    check(F.floor_div(t(a), t(b)), a // b, "int32")
    check(F.mod(t(a), t(b)), a % b, "int32")  # sign of the divisor for integers
    x = np.array([-2.5, 0.5, 1.5, 2.5], np.float32)
    check(F.mod(t(x), 1.0), np.fmod(x, 1.0), "float32")  # sign of the dividend for floats
    check(F.mod(t(x), -1.0), np.fmod(x, -1.0), "float32")
    check(F.floor_div(t(x), 2.0), np.floor_divide(x, 2.0), "float32")


def test_pow():
    i = np.array([-2, 2, 5], np.int32)
    check(F.pow(t(i), 2), i.astype(np.float64) ** 2, "float32")  # float32 as MegEngine
    check(F.pow(t(i), t([2, -3, 0])), [4, 0.125, 1], "float32")
    check(F.pow(2, t(i)), 2.0 ** i, "float32")
    x = np.array([0.5, 1.5, 4.0], np.float32)
    check(F.pow(t(x), 0.5), np.sqrt(x.astype(np.float64)), "float32")
    check(F.pow(t(x, "float16"), 2), (x ** 2).astype(np.float16), "float16", rtol=1e-3)
    check(t(i) ** 2, i.astype(np.float64) ** 2, "float32")


def test_mixed_dtypes_and_python_numbers():
    i = t(np.array([1, 2, 3], np.int32))
    f = t(np.array([0.5, 0.5, 0.5], np.float32))
    check(F.add(i, f), [1.5, 2.5, 3.5], "float32")
    check(F.mul(2.0, i), [2, 4, 6], "float32")
    check(F.sub(i, 1), [0, 1, 2], "int32")
    check(F.add(1, 2), 3, "int32")
    check(F.maximum(i, 2.5), [2.5, 2.5, 3], "float32")
    check(F.minimum(i, 2), [1, 2, 2], "int32")
    u = t(np.array([1, 2, 3], np.uint8))
    check(F.sub(u, 1), [0, 1, 2], "uint8")


def test_binary_errors():
    with pytest.raises(ValueError, match=r"Elemwise.add: shapes cannot be broadcast.*\(2, 3\), \(4,\)"):
        F.add(t(np.zeros((2, 3), np.float32)), t(np.zeros(4, np.float32)))
    with pytest.raises(TypeError, match="Elemwise.add.*bool"):
        F.add(t([True, False]), t([True, True]))
    with pytest.raises(TypeError, match="Elemwise.neg.*bool"):
        F.neg(t([True]))


def test_empty_and_scalar_binary():
    e = t(np.zeros((0, 2), np.float32))
    out = F.add(e, t(np.ones((1, 2), np.float32)))
    assert out.shape == (0, 2)
    check(F.mul(t(np.float32(2)), t(np.float32(3))), 6, "float32")
    check(F.mul(t(np.float32(2)), t(np.ones((2, 2), np.float32))), np.full((2, 2), 2.0), "float32")


# -- clip -----------------------------------------------------------------------------------------

def test_clip():
    x = np.array([-2.5, 0.5, 1.5], np.float32)
    check(F.clip(t(x), 0, 1), np.clip(x, 0, 1), "float32")
    check(F.clip(t(x), 0), np.maximum(x, 0), "float32")
    check(F.clip(t(x), upper=1), np.minimum(x, 1), "float32")
    check(F.clip(t(x), lower=None, upper=1.0), np.minimum(x, 1), "float32")
    # lower > upper: below lower -> lower, else upper (MegEngine's rule)
    check(F.clip(t(x), 1, 0), [1, 1, 0], "float32")
    i = np.array([-7, 2, 5], np.int32)
    check(F.clip(t(i), 0, 3), [0, 2, 3], "int32")
    check(F.clip(t(i), 0.5, 3), [0.5, 2, 3], "float32")
    lo = t(np.array([[0.0], [1.0]], np.float32))
    check(F.clip(t(x), lo, 1.2), np.clip(x, [[0.0], [1.0]], 1.2), "float32")
    with pytest.raises(ValueError, match="clip: at least one of 'lower' or 'upper'"):
        F.clip(t(x))


# -- comparison and logic -------------------------------------------------------------------------

CMP = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
       "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}


@pytest.mark.parametrize("name", sorted(CMP))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_comparisons(name, dtype):
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype)
    b = np.array([2, 2, 2], dtype)
    out = getattr(F, name)(t(a), t(b))
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out.numpy(), CMP[name](a, b))
    np.testing.assert_array_equal(getattr(F, name)(t(a), 2.5).numpy(), CMP[name](a, 2.5))


def test_comparison_of_bools_and_scalars():
    b = t([True, False])
    np.testing.assert_array_equal(F.equal(b, t([True, True])).numpy(), [True, False])
    out = F.less(1, 2)
    assert out.dtype == np.bool_ and out.shape == () and bool(out.numpy())


def test_logical():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    np.testing.assert_array_equal(F.logical_and(t(a), t(b)).numpy(), a & b)
    np.testing.assert_array_equal(F.logical_or(t(a), t(b)).numpy(), a | b)
    np.testing.assert_array_equal(F.logical_xor(t(a), t(b)).numpy(), a ^ b)
    np.testing.assert_array_equal(F.logical_not(t(a)).numpy(), ~a)
    np.testing.assert_array_equal(F.logical_or(t(a), True).numpy(), [True] * 4)
    assert F.logical_not(t(a)).dtype == np.bool_
    with pytest.raises(TypeError, match="logical_and: expects bool inputs, got int32"):
        F.logical_and(t([1, 2]), t([1, 0]))
    with pytest.raises(TypeError, match="logical_not: expects bool inputs, got float32"):
        F.logical_not(t([1.0]))


def test_shifts():
    i = np.array([-7, 2, 5], np.int32)
    check(F.left_shift(t(i), 1), i << 1, "int32")
    check(F.right_shift(t(i), 1), i >> 1, "int32")
    u = np.array([1, 2, 3], np.uint8)
    check(F.left_shift(t(u), t(np.array([1, 2, 3], np.uint8))), u << np.array([1, 2, 3], np.uint8), "uint8")
    with pytest.raises(TypeError, match="Elemwise.shl.*integer"):
        F.left_shift(t([1.0]), t([1.0]))
