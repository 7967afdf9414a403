"""Backward rules of ``MatrixMul``, ``BatchedMatrixMul``, ``Dot``, ``MatInv`` and ``SVD``.

Checked against central differences in float64 (``gradcheck.check_vjp``).  ``CASES`` lists
``(op, arrays)`` for a later second-order test; ``SECOND_ORDER_SKIP`` names (``op.name``) the ops
whose rule is not itself differentiable (none: every rule is built from ops with rules).
"""
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mge
from gradcheck import case_id, check_dropped_output, check_vjp
from helpers import randn
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import SVD, BatchedMatrixMul, Dot, MatInv, MatrixMul
from mge.core import apply

_m = functools.partial(randn, rng=np.random.default_rng(3))  # successive arrays differ


def _well_conditioned(*shape):
    n = shape[-1]
    return _m(*shape) * 0.3 + np.eye(n) * 2


def _cases():
    cases = []
    for ta in (False, True):
        for tb in (False, True):
            a = _m(3, 2) if ta else _m(2, 3)
            b = _m(4, 3) if tb else _m(3, 4)
            cases.append((MatrixMul(ta, tb), [a, b]))
            # batched: broadcast batch dimensions, and a 2-D operand against a 3-D one
            a = _m(2, 1, 3, 2) if ta else _m(2, 1, 2, 3)
            b = _m(3, 4, 3) if tb else _m(3, 3, 4)
            cases.append((BatchedMatrixMul(ta, tb), [a, b]))
            cases.append((BatchedMatrixMul(ta, tb), [_m(2, 3) if not ta else _m(3, 2),
                                                     _m(2, 3, 4) if not tb else _m(2, 4, 3)]))
    # a batch against one matrix (the folded path of the rule), and with the batch transposed
    cases.append((BatchedMatrixMul(False, False), [_m(2, 3, 2, 3), _m(3, 4)]))
    cases.append((BatchedMatrixMul(False, True), [_m(2, 2, 3), _m(4, 3)]))
    cases.append((BatchedMatrixMul(True, False), [_m(2, 3, 2), _m(3, 4)]))
    # vectors: a row on the left, a column on the right (transpose flags ignored for them)
    cases.append((BatchedMatrixMul(False, False), [_m(3), _m(2, 3, 4)]))
    cases.append((BatchedMatrixMul(False, True), [_m(2, 3, 4), _m(4)]))
    cases.append((BatchedMatrixMul(True, False), [_m(3), _m(3, 2)]))
    cases.append((BatchedMatrixMul(False, False), [_m(3), _m(3)]))
    cases.append((BatchedMatrixMul(False, False), [_m(1, 3, 2), _m(4, 2, 1)]))
    cases.append((Dot(), [_m(4), _m(4)]))
    cases.append((Dot(), [np.array(1.5), _m(1)]))
    cases.append((Dot(), [np.array(1.5), np.array(-0.5)]))
    cases.append((MatInv(), [_well_conditioned(3, 3)]))
    cases.append((MatInv(), [_well_conditioned(2, 2, 2)]))
    cases.append((SVD(), [_m(4, 3)]))
    cases.append((SVD(), [_m(3, 4)]))
    cases.append((SVD(), [_m(3, 3)]))
    cases.append((SVD(), [_m(2, 3, 2)]))
    cases.append((SVD(False, False), [_m(4, 3)]))
    cases.append((SVD(False, False), [_m(2, 2, 3)]))
    cases.append((SVD(True, True), [_m(3, 3)]))
    return cases


CASES = _cases()
SECOND_ORDER_SKIP = set()


def _case_id(case):
    return case_id(case, repr)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_matches_central_differences(case):
    op, arrays = case
    check_vjp(op, *arrays, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_recomputes_a_dropped_output(case):
    op, arrays = case
    check_dropped_output(op, *arrays)


@settings(max_examples=15, deadline=None)
@given(batch_a=st.lists(st.integers(1, 2), max_size=2),
       batch_b=st.lists(st.integers(1, 2), max_size=2),
       m=st.integers(1, 3), k=st.integers(1, 3), n=st.integers(1, 3),
       ta=st.booleans(), tb=st.booleans(), vec_a=st.booleans(), vec_b=st.booleans())
def test_batched_any_shapes(batch_a, batch_b, m, k, n, ta, tb, vec_a, vec_b):
    # batch sizes of 1 or 2 always broadcast against each other
    a = _m(k) if vec_a else _m(*batch_a, *((k, m) if ta else (m, k)))
    b = _m(k) if vec_b else _m(*batch_b, *((n, k) if tb else (k, n)))
    check_vjp(BatchedMatrixMul(ta, tb), a, b, rtol=1e-5, atol=1e-7)


# -- dtypes, needs, modes --------------------------------------------------------------------------

def _rule(op, *arrays, needs=None, dtype="float32"):
    inputs = [mge.tensor(a, dtype=dtype) for a in arrays]
    outs = apply(op, *inputs)
    grads = [mge.tensor(np.ones(y.shape), dtype=y.dtype) for y in outs]
    return BACKWARD[type(op)](op, inputs, list(outs), grads, needs or [True] * len(inputs))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_gradients_have_the_input_dtype(dtype):
    ga, gb = _rule(MatrixMul(False, False, "float32"), _m(2, 3), _m(3, 4), dtype=dtype)
    assert ga.dtype == gb.dtype == np.dtype(dtype)
    assert ga.shape == (2, 3) and gb.shape == (3, 4)
    ga, gb = _rule(BatchedMatrixMul(), _m(2, 2, 3), _m(3, 4), dtype=dtype)
    assert ga.dtype == gb.dtype == np.dtype(dtype)
    assert ga.shape == (2, 2, 3) and gb.shape == (3, 4)


def test_needs_false_skips_the_product():
    ga, gb = _rule(MatrixMul(), _m(2, 3), _m(3, 4), needs=[True, False])
    assert gb is None and ga.shape == (2, 3)
    ga, gb = _rule(BatchedMatrixMul(), _m(3), _m(3, 4), needs=[False, True])
    assert ga is None and gb.shape == (3, 4)
    assert _rule(Dot(), _m(3), _m(3), needs=[False, False]) == [None, None]


def test_matmul_gradient_values():
    a, b = _m(2, 3), _m(3, 4)
    ga, gb = _rule(MatrixMul(), a, b, dtype="float64")
    g = np.ones((2, 4))
    np.testing.assert_allclose(ga.numpy(), g @ b.T)
    np.testing.assert_allclose(gb.numpy(), a.T @ g)


def test_integer_inputs_get_no_gradient():
    x = mge.tensor([[1, 2], [3, 4]], dtype="int32")
    y = apply(MatInv(), x)[0]
    assert y.dtype == np.float32
    assert BACKWARD[MatInv](MatInv(), [x], [y], [mge.tensor(np.ones((2, 2)), dtype="float32")],
                            [True]) == [None]


def test_matinv_value():
    # MegEngine: F.matinv(diag(1, 2, 3)).sum() -> grad -outer(1/d, 1/d)
    d = np.array([1.0, 2.0, 3.0])
    (g,) = _rule(MatInv(), np.diag(d), dtype="float64")
    np.testing.assert_allclose(g.numpy(), -np.outer(1 / d, 1 / d))


def test_svd_of_singular_values_only():
    # MegEngine: F.svd(diag(1, 2, 3))[1].sum() -> identity
    x = mge.tensor(np.diag([1.0, 2.0, 3.0]), dtype="float64")
    op = SVD()
    u, s, vh = apply(op, x)
    (g,) = BACKWARD[SVD](op, [x], [u, s, vh], [None, mge.tensor(np.ones(3)), None], [True])
    np.testing.assert_allclose(g.numpy(), np.eye(3), atol=1e-12)


def test_svd_full_matrices_of_a_non_square_input():
    x = _m(4, 3)
    # S alone is fine: it equals the reduced decomposition's
    op = SVD(True, True)
    t = mge.tensor(x, dtype="float64")
    outs = apply(op, t)
    gs = mge.tensor(_m(3))
    (g,) = BACKWARD[SVD](op, [t], list(outs), [None, gs, None], [True])
    (ref,) = BACKWARD[SVD](SVD(False, False), [t], list(apply(SVD(False, False), t)), [gs], [True])
    np.testing.assert_allclose(g.numpy(), ref.numpy(), atol=1e-12)
    # the extra singular vectors are not functions of the input
    gu = mge.tensor(np.ones((4, 4)))
    with pytest.raises(NotImplementedError, match="SVD: gradient of U or Vh with full_matrices"):
        BACKWARD[SVD](op, [t], list(outs), [gu, None, None], [True])
