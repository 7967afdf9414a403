"""Backward rules of ``Reduce``, ``CumSum``, ``TopK``, ``Argsort``, ``Argmax``/``Argmin``.

Checked against central differences in float64 (``gradcheck.check_vjp``); max/min inputs have no
ties there, and ties are checked against MegEngine's values separately.  ``CASES`` lists
``(op, arrays)`` for a later second-order test; ``SECOND_ORDER_SKIP`` names (``op.name``) the ops
whose rule is not itself differentiable (none: every rule is built from ops with rules, and second
derivatives through them were checked with nested GradManagers).  ``FIRST_ORDER_CASES`` are
points where a rule is right but its own derivative is not (``prod`` at zeros).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mge
from gradcheck import case_id, check_dropped_output, check_vjp, rule_vjp
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import Argmax, Argmin, Argsort, CumSum, Reduce, TopK
from mge.core import apply

_rng = np.random.default_rng(7)


def _distinct(shape):
    """Values without ties (a shuffled grid), so that max/min/sort pick a single element."""
    n = int(np.prod(shape))
    return (_rng.permutation(n) * 0.37 - n * 0.15 + 0.05).reshape(shape)


def _nonzero(shape):
    return _rng.uniform(0.5, 1.5, shape) * _rng.choice([-1, 1], shape)


_AXES = [None, 0, -1, (0, 2), (), (-3, -1)]


def _cases():
    cases = []
    for mode in ("sum", "mean", "sum_sqr", "max", "min", "prod"):
        for axis in _AXES:
            for keepdims in (False, True):
                x = _nonzero((2, 3, 2)) if mode == "prod" else _distinct((2, 3, 2))
                cases.append((Reduce(mode, axis, keepdims), [x]))
        cases.append((Reduce(mode, 0), [np.array(_nonzero(()))]))       # 0-d input, axis 0
        cases.append((Reduce(mode, None), [np.array(_nonzero(()))]))    # 0-d input, all axes
        cases.append((Reduce(mode, 1), [_distinct((3, 1))]))            # a size-1 axis
    for axis in (0, 1, -1):
        for exclusive in (False, True):
            for reverse in (False, True):
                cases.append((CumSum(axis, exclusive, reverse), [_distinct((3, 4))]))
    cases.append((CumSum(0, False, False), [np.array(1.5)]))
    cases.append((CumSum(0, True, True), [np.array(1.5)]))
    for k, descending, kth_only, no_sort in [(2, False, False, False), (3, True, False, False),
                                             (2, False, True, False), (3, True, True, False),
                                             (2, True, False, True), (9, False, False, False)]:
        cases.append((TopK(k, descending, kth_only, no_sort), [_distinct((3, 5))]))
    cases.append((TopK(2), [_distinct((4,))]))
    for descending in (False, True):
        cases.append((Argsort(descending), [_distinct((3, 4))]))
        cases.append((Argsort(descending), [_distinct((2, 2, 3))]))
    return cases


CASES = _cases()
SECOND_ORDER_SKIP = set()
# prod with zeros (one zero in a group, two zeros in a group): the first-order rule is exact there
# but masks the zeros' neighbours, so its own derivative is not; these are not in CASES.
FIRST_ORDER_CASES = [
    (Reduce("prod", 1), [np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.0, 2.0, -3.0]])]),
    (Reduce("prod", None, True), [np.array([[0.0, -2.0], [0.5, 3.0]])]),
]


def _case_id(case):
    return case_id(case, repr)


@pytest.mark.parametrize("case", CASES + FIRST_ORDER_CASES, ids=_case_id)
def test_rule_matches_central_differences(case):
    op, arrays = case
    check_vjp(op, *arrays, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_recomputes_a_dropped_output(case):
    op, arrays = case
    check_dropped_output(op, *arrays)


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
       mode=st.sampled_from(["sum", "mean", "sum_sqr", "max", "min", "prod"]),
       keepdims=st.booleans(), data=st.data())
def test_reduce_any_axes(shape, mode, keepdims, data):
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), unique_by=lambda a: a % ndim,
                              max_size=ndim).map(tuple))
    axis = data.draw(st.sampled_from([axes, None] + ([axes[0]] if axes else [])))
    x = _nonzero(shape) if mode == "prod" else _distinct(shape)
    check_vjp(Reduce(mode, axis, keepdims), x, rtol=1e-5, atol=1e-7)


# -- values MegEngine gives ------------------------------------------------------------------------

def _grad(op, x, g=None, out_index=0):
    x = mge.tensor(np.asarray(x, "float32"))
    outs = apply(op, x)
    grads = [None] * len(outs)
    grads[out_index] = mge.tensor(np.ones(outs[out_index].shape, "float32") if g is None else g)
    r = BACKWARD[type(op)](op, [x], list(outs), grads, [True])[0]
    return None if r is None else r.numpy()


def test_max_min_ties_give_every_tied_element_the_gradient():
    # MegEngine 1.13: F.max([1, 3, 3, 2]) -> grad [0, 1, 1, 0]
    np.testing.assert_array_equal(_grad(Reduce("max"), [1.0, 3.0, 3.0, 2.0]), [0, 1, 1, 0])
    x = [[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 1.0]]
    np.testing.assert_array_equal(_grad(Reduce("max", 1), x), [[0, 1, 1, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(_grad(Reduce("min", 1), x), [[1, 0, 0, 0], [0, 0, 0, 1]])


def test_prod_with_zeros_is_exact_where_megengine_gives_nan():
    # MegEngine answers [[0, nan, 3], [nan, nan, 4]]: it divides the product by the element.
    x = [[1.0, 0.0, 4.0], [0.0, 0.0, 3.0]]
    np.testing.assert_array_equal(_grad(Reduce("prod", 0), x), [[0, 0, 3], [1, 0, 4]])
    np.testing.assert_array_equal(_grad(Reduce("prod", 1), x), [[0, 4, 0], [0, 0, 0]])


def test_cumsum_of_a_scalar_has_its_shape():
    # MegEngine returns a (1,) gradient for a 0-d input; mge gives the input's shape.
    g = _grad(CumSum(0), 2.0, g=np.ones((1,), "float32"))
    assert g.shape == () and g == 1


def test_topk_and_sort_scatter_the_gradient():
    np.testing.assert_array_equal(_grad(TopK(2, True), [1.0, 0.0, 4.0]), [1, 0, 1])
    np.testing.assert_array_equal(_grad(TopK(2, True, True), [1.0, 0.0, 4.0]), [1, 0, 0])
    # MegEngine: F.sort([3, 1, 2]) with output gradient [3, 4, 5] -> [5, 3, 4]
    np.testing.assert_array_equal(
        _grad(Argsort(), [3.0, 1.0, 2.0], g=np.array([3.0, 4.0, 5.0], "float32")), [5, 3, 4])


def test_indices_have_no_gradient():
    x = mge.tensor(_distinct((3, 4)).astype("float32"))
    for op in (Argmax(1), Argmin(None)):
        y = apply(op, x)[0]
        assert BACKWARD[type(op)](op, [x], [y], [mge.tensor(np.ones(y.shape, "float32"))],
                                  [True]) == [None]
    v, i = apply(TopK(2), x)
    assert BACKWARD[TopK](TopK(2), [x], [v, i], [None, None], [True]) == [None]


# -- dtypes and needs ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["sum", "mean", "max", "sum_sqr", "prod"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_gradient_has_the_input_dtype(mode, dtype):
    # the mean of float16 is float32: its gradient comes back as float16
    x = mge.tensor(_nonzero((2, 3)).astype(dtype))
    op = Reduce(mode, 1)
    y = apply(op, x)[0]
    g = BACKWARD[Reduce](op, [x], [y], [mge.tensor(np.ones(y.shape, y.dtype))], [True])[0]
    assert g.dtype == np.dtype(dtype) and g.shape == (2, 3)


def test_integer_input_or_no_need_gives_none():
    x = mge.tensor([[1, 2], [3, 4]], dtype="int32")
    op = Reduce("sum", 0)
    y = apply(op, x)[0]
    assert BACKWARD[Reduce](op, [x], [y], [mge.tensor([1, 1], dtype="int32")], [True]) == [None]
    xf = mge.tensor([[1.0, 2.0]])
    yf = apply(op, xf)[0]
    assert BACKWARD[Reduce](op, [xf], [yf], [mge.tensor([1.0, 1.0])], [False]) == [None]
    assert BACKWARD[Reduce](op, [xf], [yf], [None], [True]) == [None]


def test_mean_gradient_value():
    got = rule_vjp(Reduce("mean", (0, 2)), [np.ones((2, 3, 4))], [np.arange(3.0)], wrt=[0])[0]
    np.testing.assert_allclose(got, np.broadcast_to(np.arange(3.0)[None, :, None] / 8, (2, 3, 4)))
