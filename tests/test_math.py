"""Reductions, orderings and math functions (mge.functional.math) against numpy."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mge.functional as F
from helpers import as_tensor as t, check_close as check
from mge.core import apply
from mge._core.ops import CumSum, Reduce, TopK

MEGENGINE_MATH_ALL = [
    "argmax", "argmin", "argsort", "dot", "isinf", "isnan", "matinv", "matmul", "max", "mean",
    "min", "norm", "normalize", "prod", "sign", "sort", "std", "sum", "svd", "topk", "var",
]


def test_exports():
    assert set(MEGENGINE_MATH_ALL) <= set(F.math.__all__)
    for name in MEGENGINE_MATH_ALL + ["cumsum", "logsumexp"]:
        assert callable(getattr(F, name)), name
        assert "MegEngine signature" in getattr(F.math, name).__doc__


# -- sum / prod / min / max / mean --------------------------------------------------------------

REDUCERS = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max, "mean": np.mean}


@st.composite
def _reduce_case(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    nd = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-nd, nd - 1))
    else:
        axes = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        axis = tuple(a - nd if draw(st.booleans()) else a for a in axes)
    keepdims = draw(st.booleans())
    return shape, axis, keepdims


@settings(max_examples=25, deadline=None)
@given(case=_reduce_case(), name=st.sampled_from(sorted(REDUCERS)),
       dtype=st.sampled_from(["float32", "int32", "float64"]))
def test_reductions_match_numpy(case, name, dtype):
    shape, axis, keepdims = case
    rng = np.random.RandomState(0)
    x = (rng.uniform(0.5, 1.5, size=shape) * (3 if dtype == "int32" else 1)).astype(dtype)
    ref = REDUCERS[name](x.astype(np.float64), axis=axis, keepdims=keepdims)
    out_dtype = "float32" if name == "mean" and dtype == "int32" else dtype
    if name in ("sum", "prod") and dtype == "int32":
        ref = REDUCERS[name](x, axis=axis, keepdims=keepdims).astype(np.int32)  # wraps like int32
    rtol = 1e-4 if name == "prod" else 1e-5
    check(getattr(F, name)(t(x, dtype), axis=axis, keepdims=keepdims), ref, out_dtype, rtol=rtol)


def test_reduction_dtypes():
    b = t(np.array([[True, False, True]]))
    check(F.sum(b), 2, "int32")
    check(F.prod(b), 0, "int32")
    check(F.max(b), True, "bool")
    check(F.mean(b), 2 / 3, "float32")
    check(F.mean(t([1, 2], "int32")), 1.5, "float32")
    check(F.mean(t([1, 2, 4], "float16")), 7 / 3, "float32")
    check(F.sum(t([1, 2, 4], "float16")), 7, "float16")
    check(F.sum(t([100, 100], "int8")), -56, "int8")  # wraps around, as MegEngine
    check(F.sum(t([200, 100], "uint8")), 44, "uint8")
    check(F.max(t([200, 100], "uint8")), 200, "uint8")
    check(F.mean(t([1.0, 2.0], "float64")), 1.5, "float64")


def test_reduction_axes_forms():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    check(F.sum(t(x), axis=[0, 2]), x.sum(axis=(0, 2)), "float32")
    check(F.sum(t(x), axis=(2, 0), keepdims=True), x.sum(axis=(0, 2), keepdims=True), "float32")
    check(F.min(t(x), axis=-1, keepdims=True), x.min(axis=-1, keepdims=True), "float32")
    check(F.max(t(x), axis=np.int64(1)), x.max(axis=1), "float32")
    check(F.prod(t(x), axis=np.array([0, 1])), x.prod(axis=(0, 1)), "float32", rtol=1e-4)
    check(F.sum(t(x), axis=None, keepdims=True), x.sum(keepdims=True), "float32")


def test_tensor_methods():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check(t(x).sum(), 15, "float32")
    check(t(x).mean(1), x.mean(1), "float32")
    check(t(x).max(0, True), x.max(0, keepdims=True), "float32")
    check(t(x).min(axis=1), x.min(1), "float32")
    check(t(x).prod(axis=0), x.prod(0), "float32")


def test_reduction_scalar_and_empty():
    s = t(np.float32(3.0))
    check(F.sum(s), 3.0, "float32")
    check(F.sum(s, axis=0), 3.0, "float32")
    check(F.mean(t(3)), 3.0, "float32")
    e = t(np.zeros((0, 3), np.float32))
    check(F.sum(e), 0.0, "float32")
    check(F.sum(e, axis=0), np.zeros(3), "float32")
    check(F.prod(e, axis=0), np.ones(3), "float32")
    check(F.mean(e), np.nan, "float32")
    check(F.max(e, axis=1), np.zeros(0), "float32")


def test_reduction_errors():
    x = t(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"Reduce.sum: axis 2 is out of range.*\(2, 3\)"):
        F.sum(x, axis=2)
    with pytest.raises(ValueError, match="Reduce.sum: axis -3 is out of range"):
        F.sum(x, axis=-3)
    with pytest.raises(ValueError, match=r"Reduce.mean: axis \(0, 0\) is out of range or repeated"):
        F.mean(x, axis=(0, 0))
    with pytest.raises(TypeError, match="Reduce: axis must be an int"):
        F.sum(x, axis=1.0)
    with pytest.raises(ValueError, match=r"Reduce.max: cannot take the min/max over an empty axis.*\(0, 3\)"):
        F.max(t(np.zeros((0, 3), np.float32)))
    with pytest.raises(ValueError, match="Reduce: unknown mode 'median'"):
        Reduce("median")


def test_reduce_op_sum_sqr():
    x = np.array([[1, 2], [3, 4]], np.float32)
    (out,) = apply(Reduce("sum_sqr", 1), t(x))
    check(out, (x ** 2).sum(1), "float32")


# -- var / std / norm / normalize / logsumexp ---------------------------------------------------

@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 1), False), (-1, False)])
def test_var_std(axis, keepdims):
    x = np.random.randn(3, 5).astype(np.float32) * 3 + 1
    x64 = x.astype(np.float64)
    check(F.var(t(x), axis, keepdims), x64.var(axis=axis, keepdims=keepdims), "float32")
    check(F.std(t(x), axis=axis, keepdims=keepdims), x64.std(axis=axis, keepdims=keepdims), "float32")


def test_var_dtypes():
    check(F.var(t([[1, 2, 3], [4, 5, 6]], "int32")), np.var(np.arange(1, 7)), "float32")
    check(F.std(t([1, 2, 3], "float16")), np.std([1, 2, 3]), "float32", rtol=1e-3)


@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, math.inf, -math.inf, 0])
def test_norm(ord):
    x = np.random.randn(3, 4).astype(np.float32)
    x[0, 0] = 0
    x64 = x.astype(np.float64)
    o = 2 if ord is None else ord
    for axis, keepdims in [(0, False), (1, True), (-1, False)]:
        ref = np.linalg.norm(x64, ord=o, axis=axis, keepdims=keepdims)
        dtype = "int32" if o == 0 else "float32"
        check(F.norm(t(x), ord=ord, axis=axis, keepdims=keepdims), ref, dtype, rtol=1e-5)
    v = x[1]
    check(F.norm(t(v), ord), np.linalg.norm(v.astype(np.float64), ord=o), "int32" if o == 0 else "float32")


def test_norm_integers_and_errors():
    check(F.norm(t([3, 4])), 5.0, "float32")
    check(F.norm(t([1, -3, 2]), ord=math.inf), 3, "int32")
    with pytest.raises(TypeError, match=r"norm: axis is required unless input is a vector.*\(2, 2\)"):
        F.norm(t(np.ones((2, 2), np.float32)))
    with pytest.raises(TypeError, match="norm: ord must be a number"):
        F.norm(t([1.0, 2.0]), ord="fro")


def test_normalize():
    x = np.random.randn(3, 4).astype(np.float32)
    x64 = x.astype(np.float64)
    check(F.normalize(t(x), axis=1), x64 / np.linalg.norm(x64, axis=1, keepdims=True), "float32")
    check(F.normalize(t(x), ord=1, axis=0), x64 / np.abs(x64).sum(0, keepdims=True), "float32")
    v = np.array([3.0, 4.0], np.float32)
    check(F.normalize(t(v)), v / 5, "float32")
    check(F.normalize(t(np.zeros(3, np.float32))), np.zeros(3), "float32")  # eps guards 0/0


@pytest.mark.parametrize("axis,keepdims", [(1, False), (0, True), ((0, 1), False), (-1, True)])
def test_logsumexp(axis, keepdims):
    x = np.random.randn(3, 4).astype(np.float32) * 50 + 200  # exp would overflow unshifted
    x64 = x.astype(np.float64)
    m = x64.max(axis=axis, keepdims=True)
    ref = np.log(np.exp(x64 - m).sum(axis=axis, keepdims=True)) + m
    if not keepdims:
        ref = np.squeeze(ref, axis=axis)
    check(F.logsumexp(t(x), axis, keepdims), ref, "float32", rtol=1e-6)


def test_logsumexp_int():
    check(F.logsumexp(t([3, 1, 2, 1, 5]), 0), np.log(np.exp([3., 1, 2, 1, 5]).sum()), "float32")


# -- argmax / argmin ----------------------------------------------------------------------------

@pytest.mark.parametrize("fn,ref_fn", [(F.argmax, np.argmax), (F.argmin, np.argmin)])
def test_argmax_argmin(fn, ref_fn):
    x = np.random.randn(3, 4, 5).astype(np.float32)
    check(fn(t(x)), ref_fn(x), "int32")
    for axis in (0, 1, 2, -1):
        check(fn(t(x), axis), ref_fn(x, axis=axis), "int32")
        check(fn(t(x), axis, keepdims=True), ref_fn(x, axis=axis, keepdims=True), "int32")
    # several axes act as one flattened axis
    moved = np.moveaxis(x, 0, -1).reshape(4, -1)
    check(fn(t(x), (0, 2)), ref_fn(np.transpose(x, (1, 0, 2)).reshape(4, -1), axis=1), "int32")
    check(fn(t(x), (0, 1, 2)), ref_fn(x), "int32")
    check(fn(t(x), [2, 0], keepdims=True), ref_fn(np.transpose(x, (1, 0, 2)).reshape(4, -1), axis=1)
          .reshape(1, 4, 1), "int32")
    assert moved.shape == (4, 15)


def test_argmax_dtypes_scalar_and_errors():
    check(F.argmax(t([[1, 5, 3]], "int32")), 1, "int32")
    check(F.argmax(t([False, True])), 1, "int32")
    check(F.argmin(t(np.float32(2.0))), 0, "int32")
    check(F.argmax(t(np.zeros((0, 3), np.float32)), axis=1), np.zeros(0), "int32")
    with pytest.raises(ValueError, match=r"Argmax: cannot take the arg-extremum over an empty axis"):
        F.argmax(t(np.zeros((0, 3), np.float32)))
    with pytest.raises(ValueError, match="Argmin: axis 3 is out of range"):
        F.argmin(t(np.zeros((2, 3), np.float32)), 3)


# -- sort / argsort / topk ----------------------------------------------------------------------

def test_sort_and_argsort():
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, 5.0, -1.0, 7.0]], np.float32)
    v, i = F.sort(t(x))
    check(v, np.sort(x, axis=-1), "float32")
    check(i, [[1, 3, 2, 0], [2, 0, 1, 3]], "int32")  # ties in index order
    v, i = F.sort(t(x), descending=True)
    check(v, -np.sort(-x, axis=-1), "float32")
    check(i, [[0, 2, 3, 1], [3, 1, 0, 2]], "int32")  # the reverse of the ascending order
    iv = np.array([3, 1, 2, 1, 5], np.int32)
    check(F.argsort(t(iv)), np.argsort(iv, kind="stable"), "int32")
    check(F.argsort(t(iv), True), [4, 0, 2, 3, 1], "int32")
    v, i = F.sort(t(iv))
    check(v, np.sort(iv), "int32")


@settings(max_examples=20, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6),
       dtype=st.sampled_from(["float32", "int32", "float16"]), descending=st.booleans())
def test_sort_any_rank(shape, dtype, descending):
    x = np.random.RandomState(2).randint(-3, 4, size=shape).astype(dtype)
    v, i = F.sort(t(x, dtype), descending)
    asc = np.argsort(x, axis=-1, kind="stable")
    ref_i = asc[..., ::-1] if descending else asc
    check(i, ref_i, "int32")
    check(v, np.take_along_axis(x, ref_i, -1), dtype)


def test_sort_errors():
    with pytest.raises(ValueError, match="Argsort: needs an input with at least 1 dimension"):
        F.sort(t(np.float32(1.0)))


def test_topk():
    x = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, 5.0, -1.0, 7.0]], np.float32)
    v, i = F.topk(t(x), 2)
    check(v, [[3, 2], [7, 5]], "float32")
    check(i, [[0, 2], [3, 1]], "int32")
    v, i = F.topk(t(x), 2, descending=False)
    check(v, [[1, 1], [-1, 0]], "float32")
    check(i, [[1, 3], [2, 0]], "int32")
    v, i = F.topk(t(x), 2, kth_only=True)
    check(v, [2, 5], "float32")
    check(i, [2, 1], "int32")
    v, i = F.topk(t(x), 2, descending=False, kth_only=True)
    check(v, [1, 0], "float32")
    check(i, [1, 0], "int32")  # the first index holding the k-th value
    v, i = F.topk(t(x), 3, no_sort=True)
    assert v.shape == (2, 3)
    np.testing.assert_array_equal(np.sort(v.numpy(), -1), [[1, 2, 3], [0, 5, 7]])
    np.testing.assert_array_equal(np.take_along_axis(x, i.numpy(), -1), v.numpy())
    v, i = F.topk(t(x), 9)  # k is clipped to the axis length, as MegEngine
    check(v, -np.sort(-x, axis=-1), "float32")
    v, i = F.topk(t(x), 4, kth_only=True)
    check(v, [1, -1], "float32")


def test_topk_1d_and_int():
    iv = np.array([3, 1, 2, 1, 5], np.int32)
    v, i = F.topk(t(iv), 3)
    check(v, [5, 3, 2], "int32")
    check(i, [4, 0, 2], "int32")
    v, i = F.topk(t(iv), 2, kth_only=True)
    check(v, 3, "int32")
    check(i, 0, "int32")
    v, i = F.topk(t(iv), t(np.int32(1)))
    check(v, [5], "int32")


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 45), descending=st.booleans(), no_sort=st.booleans())
def test_topk_matches_sort(n, k, descending, no_sort):
    x = np.random.RandomState(n).permutation(n * 2)[:n].astype(np.float32).reshape(1, n)
    v, i = F.topk(t(x), k, descending=descending, no_sort=no_sort)
    ref = np.sort(x, -1)[:, ::-1] if descending else np.sort(x, -1)
    ref = ref[:, :min(k, n)]
    got = v.numpy()
    if no_sort:
        got = np.sort(got, -1)[:, ::-1] if descending else np.sort(got, -1)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.take_along_axis(x, i.numpy(), -1), v.numpy())


def test_topk_errors():
    with pytest.raises(ValueError, match="TopK: k must be a positive int, got 0"):
        F.topk(t([1.0, 2.0]), 0)
    with pytest.raises(TypeError, match="topk: k must be an int"):
        F.topk(t([1.0, 2.0]), 1.5)
    with pytest.raises(ValueError, match="TopK: needs an input with at least 1 dimension"):
        F.topk(t(np.float32(1.0)), 1)


# -- cumsum -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "float16"])
def test_cumsum(dtype):
    x = np.random.RandomState(3).randint(-5, 6, size=(3, 4, 2)).astype(dtype)
    for axis in (0, 1, 2, -1, -3):
        check(F.cumsum(t(x, dtype), axis), np.cumsum(x, axis=axis, dtype=dtype), dtype)


def test_cumsum_bool_empty_and_errors():
    check(F.cumsum(t([True, True, False]), 0), [1, 2, 2], "int32")
    out = F.cumsum(t(np.zeros((0, 3), np.float32)), 1)
    assert out.shape == (0, 3)
    with pytest.raises(ValueError, match=r"CumSum: axis 2 is out of range.*\(2, 3\)"):
        F.cumsum(t(np.zeros((2, 3), np.float32)), 2)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_op_modes(exclusive, reverse):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    (out,) = apply(CumSum(1, exclusive, reverse), t(x))
    y = x[:, ::-1] if reverse else x
    ref = np.cumsum(y, 1)
    if exclusive:
        ref = ref - y
    if reverse:
        ref = ref[:, ::-1]
    check(out, ref, "float32")


def test_topk_op_direct():
    (v, i) = apply(TopK(2), t(np.array([[4.0, 1.0, 3.0]], np.float32)))
    check(v, [[1, 3]], "float32")
    check(i, [[1, 2]], "int32")


# -- elementwise predicates ---------------------------------------------------------------------

def test_sign_isnan_isinf():
    x = np.array([-2.5, 0.0, 3.0, np.nan, np.inf, -np.inf], np.float32)
    check(F.sign(t(x)), np.sign(x), "float32")
    check(F.sign(t([-3, 0, 4])), [-1, 0, 1], "int32")
    out = F.isnan(t(x))
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out.numpy(), np.isnan(x))
    np.testing.assert_array_equal(F.isinf(t(x)).numpy(), np.isinf(x))
    np.testing.assert_array_equal(F.isnan(t([1, 2])).numpy(), [False, False])
    np.testing.assert_array_equal(F.isinf(t([1, 2])).numpy(), [False, False])
    with pytest.raises(TypeError, match="Elemwise.sign.*bool"):
        F.sign(t([True]))


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 0.1, np.float16)
    out = F.sum(t(x, "float16"))
    assert out.dtype == np.float16
    np.testing.assert_allclose(float(out.numpy()), float(x.astype(np.float64).sum()), rtol=1e-3)


def test_reduce_repeated_axis_is_an_assertion_error_too():
    """MegEngine asserts on a repeated or out-of-range axis; mge's ValueError is one too."""
    x = t(np.arange(6, dtype="float32").reshape(2, 3))
    for axis in [(-1, 1), (0, 2)]:
        with pytest.raises(AssertionError, match="out of range or repeated"):
            F.sum(x, axis=axis)
        with pytest.raises(ValueError):
            F.sum(x, axis=axis)
    np.testing.assert_allclose(F.sum(x, axis=(-2, 1)).numpy(), 15.0)


def test_check_non_finite_scales_in_place_and_flags():
    rng = np.random.default_rng(0)
    data = [rng.random((3, 4)).astype("float32") for _ in range(2)]
    xs = [t(d) for d in data]
    flag = F.math._check_non_finite(xs, 0.7)
    assert flag.dtype == np.int32 and int(flag.item()) == 0
    for x, d in zip(xs, data):
        np.testing.assert_allclose(x.numpy(), d * np.float32(0.7), rtol=1e-6)
    for bad in (np.inf, np.nan):
        d = data[1].copy()
        d[0, 0] = bad
        assert int(F.math._check_non_finite([t(data[0]), t(d)], 0.7).item()) == 1


def test_assert_equal_returns_expect_or_raises_runtime_error():
    import mge

    x = F.ones((2, 3))
    out = F.utils._assert_equal(x, F.zeros((2, 3)) + 1.00001)
    np.testing.assert_array_equal(out.numpy(), np.ones((2, 3), "float32"))
    big = t(np.full((2, 3), 1000.0, "float32"))  # relative error 1e-5 on large values
    F.utils._assert_equal(big, big * 1.00001)
    with pytest.raises(RuntimeError, match="AssertEqual: the values differ"):
        F.utils._assert_equal(x, F.zeros((2, 3)) + 1.1)
    with pytest.raises(ValueError, match="same shape"):
        F.utils._assert_equal(x, F.ones((2, 1)))
    mge._full_sync()
