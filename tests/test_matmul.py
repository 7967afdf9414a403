"""Matrix products and linear algebra (F.matmul, F.dot, F.matinv, F.svd) against numpy."""
import functools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mge.functional as F
from helpers import as_tensor as t, check_close
from mge.core import apply
from mge._core.ops import BatchedMatrixMul, Dot, MatrixMul


check = functools.partial(check_close, atol=1e-5, equal_nan=False)


def rand(*shape):
    return np.random.randn(*shape).astype(np.float32)


def f64(x):
    return x.astype(np.float64)


def _raises_at_use(exc, match, fn):
    # An error found by a kernel may surface at once or, asynchronously, at the next sync point
    # (then as AsyncError with the original error as its cause).
    with pytest.raises(Exception) as info:
        fn()
    err = info.value
    while not isinstance(err, exc) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, exc), repr(info.value)
    assert re.search(match, str(err)), str(err)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_2d_transposes(ta, tb):
    a, b = rand(3, 4), rand(4, 5)
    aa = a.T.copy() if ta else a
    bb = b.T.copy() if tb else b
    out = F.matmul(t(aa), t(bb), transpose_a=ta, transpose_b=tb)
    check(out, f64(a) @ f64(b), "float32")
    (op_out,) = apply(MatrixMul(ta, tb), t(aa), t(bb))
    check(op_out, f64(a) @ f64(b), "float32")


def test_matmul_vectors():
    a, v, w = rand(2, 3), rand(3), rand(2)
    check(F.matmul(t(a), t(v)), f64(a) @ f64(v), "float32")
    check(F.matmul(t(w), t(a)), f64(w) @ f64(a), "float32")
    check(F.matmul(t(v), t(v)), f64(v) @ f64(v), "float32")
    # the transpose flags apply to the matrix operand only
    check(F.matmul(t(v), t(a), transpose_b=True), f64(v) @ f64(a).T, "float32")
    check(F.matmul(t(a), t(w), transpose_a=True), f64(a).T @ f64(w), "float32")
    b3, c = rand(2, 3, 4), rand(4)
    check(F.matmul(t(b3), t(c)), np.matmul(f64(b3), f64(c)), "float32")
    u = rand(3)
    check(F.matmul(t(u), t(b3)), np.matmul(f64(u), f64(b3)), "float32")


_BATCH_CASES = [
    ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((5, 1, 3, 4), (2, 4, 6)),
    ((1, 3, 4), (7, 4, 2)), ((2, 1, 2, 3), (1, 4, 3, 1)),
]


@pytest.mark.parametrize("sa,sb", _BATCH_CASES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_batched_broadcast(sa, sb, ta, tb):
    a, b = rand(*sa), rand(*sb)
    aa = np.swapaxes(a, -1, -2).copy() if ta else a
    bb = np.swapaxes(b, -1, -2).copy() if tb else b
    out = F.matmul(t(aa), t(bb), ta, tb)
    check(out, np.matmul(f64(a), f64(b)), "float32")


@settings(max_examples=25, deadline=None)
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=2), m=st.integers(0, 4),
       k=st.integers(0, 4), n=st.integers(0, 4), drop_a=st.booleans(), drop_b=st.booleans(),
       dtype=st.sampled_from(["float32", "float64", "int32"]))
def test_matmul_hypothesis(batch, m, k, n, drop_a, drop_b, dtype):
    rng = np.random.RandomState(0)
    ba = tuple(1 if drop_a else b for b in batch)
    bb = tuple(batch) if not drop_b else ()
    a = (rng.randn(*ba, m, k) * 3).astype(dtype)
    b = (rng.randn(*bb, k, n) * 3).astype(dtype)
    out = F.matmul(t(a, dtype), t(b, dtype))
    check(out, np.matmul(a.astype(np.float64), b.astype(np.float64)), dtype)


def test_matmul_dtypes():
    a16 = np.random.rand(4, 8).astype(np.float16)
    b16 = np.random.rand(8, 3).astype(np.float16)
    ref = f64(a16) @ f64(b16)
    check(F.matmul(t(a16), t(b16)), ref, "float16", rtol=1e-2, atol=1e-2)
    check(F.matmul(t(a16), t(b16), compute_mode="float32"), ref, "float16", rtol=1e-2, atol=1e-2)
    ia = np.arange(6, dtype=np.int32).reshape(2, 3)
    check(F.matmul(t(ia), t(ia), transpose_b=True), ia @ ia.T, "int32")
    # mixed int/float computes in float32
    check(F.matmul(t(ia), t(np.ones((3, 2), np.float32))), f64(ia) @ np.ones((3, 2)), "float32")


def test_matmul_operator_and_numpy_inputs():
    a, b = rand(2, 3), rand(3, 4)
    check(t(a) @ t(b), f64(a) @ f64(b), "float32")
    check(F.matmul(a, t(b)), f64(a) @ f64(b), "float32")


def test_matmul_empty():
    check(F.matmul(t(np.ones((0, 3), np.float32)), t(np.ones((3, 2), np.float32))), np.zeros((0, 2)), "float32")
    check(F.matmul(t(np.ones((2, 0), np.float32)), t(np.ones((0, 2), np.float32))), np.zeros((2, 2)), "float32")


def test_matmul_errors():
    with pytest.raises(ValueError, match=r"MatrixMul: inner dimensions do not match \(3 != 2.*\(2, 3\), \(2, 3\)"):
        F.matmul(t(rand(2, 3)), t(rand(2, 3)))
    with pytest.raises(ValueError, match=r"BatchedMatrixMul: inner dimensions do not match"):
        F.matmul(t(rand(2, 3)), t(rand(4)), transpose_a=True)
    with pytest.raises(ValueError, match=r"BatchedMatrixMul: batch dimensions \(2,\) and \(3,\) cannot be broadcast"):
        F.matmul(t(rand(2, 3, 4)), t(rand(3, 4, 5)))
    with pytest.raises(ValueError, match="matmul: operands must have at least 1 dimension"):
        F.matmul(t(rand(2, 3)), t(np.float32(2)))
    with pytest.raises(ValueError, match="MatrixMul: expects two 2-D inputs"):
        apply(MatrixMul(), t(rand(2, 3, 4)), t(rand(4, 2)))
    with pytest.raises(TypeError, match="MatrixMul: bool inputs are not supported"):
        F.matmul(t(np.ones((2, 2), bool)), t(np.ones((2, 2), bool)))
    with pytest.raises(ValueError, match="MatrixMul: compute_mode must be one of"):
        F.matmul(t(rand(2, 2)), t(rand(2, 2)), compute_mode="fast")


def test_batched_op_direct():
    a, b = rand(2, 3, 4), rand(2, 5, 4)
    (out,) = apply(BatchedMatrixMul(False, True), t(a), t(b))
    check(out, np.matmul(f64(a), np.swapaxes(f64(b), -1, -2)), "float32")


# -- dot ----------------------------------------------------------------------------------------

def test_dot():
    v, w = rand(5), rand(5)
    check(F.dot(t(v), t(w)), f64(v) @ f64(w), "float32")
    check(F.dot(t([1, 2, 3]), t([4, 5, 6])), 32, "int32")
    check(F.dot(t(np.float32(2)), t(np.float32(3))), 6, "float32")
    check(F.dot(t(np.zeros(0, np.float32)), t(np.zeros(0, np.float32))), 0, "float32")
    (out,) = apply(Dot(), t(v), t(w))
    check(out, f64(v) @ f64(w), "float32")
    with pytest.raises(ValueError, match=r"Dot: vector lengths differ \(3 != 2\)"):
        F.dot(t(rand(3)), t(rand(2)))
    with pytest.raises(ValueError, match=r"Dot: expects 1-D \(or 0-d\) inputs.*\(2, 2\)"):
        F.dot(t(rand(2, 2)), t(rand(2, 2)))


# -- matinv / svd -------------------------------------------------------------------------------

def test_matinv():
    a = rand(3, 3) + 3 * np.eye(3, dtype=np.float32)
    check(F.matinv(t(a)), np.linalg.inv(f64(a)), "float32", rtol=1e-4)
    b = rand(2, 4, 4) + 4 * np.eye(4, dtype=np.float32)
    check(F.matinv(t(b)), np.linalg.inv(f64(b)), "float32", rtol=1e-4)
    check(F.matinv(t([[2, 1], [1, 3]])), [[0.6, -0.2], [-0.2, 0.4]], "float32")
    check(F.matinv(t(a, "float64")), np.linalg.inv(f64(a)), "float64", rtol=1e-10)


def test_matinv_errors():
    with pytest.raises(ValueError, match=r"MatInv: expects square matrices.*\(2, 3\)"):
        F.matinv(t(rand(2, 3)))
    with pytest.raises(ValueError, match="MatInv: expects matrices"):
        F.matinv(t(rand(3)))
    _raises_at_use(ValueError, "MatInv: matrix is singular",
                   lambda: F.matinv(t([[1.0, 2.0], [2.0, 4.0]])).numpy())


@pytest.mark.parametrize("shape", [(2, 3), (4, 3), (2, 3, 4), (3, 3)])
def test_svd(shape):
    a = rand(*shape)
    u, s, vh = F.svd(t(a))
    k = min(shape[-2:])
    assert u.shape == shape[:-2] + (shape[-2], k)
    assert s.shape == shape[:-2] + (k,)
    assert vh.shape == shape[:-2] + (k, shape[-1])
    assert u.dtype == s.dtype == vh.dtype == np.float32
    rec = np.matmul(u.numpy() * s.numpy()[..., None, :], vh.numpy())
    np.testing.assert_allclose(rec, a, rtol=1e-4, atol=1e-4)
    check(s, np.linalg.svd(f64(a), compute_uv=False), "float32", rtol=1e-4)


def test_svd_options():
    a = rand(2, 3)
    u, s, vh = F.svd(t(a), full_matrices=True)
    assert u.shape == (2, 2) and vh.shape == (3, 3)
    s_only = F.svd(t(a), compute_uv=False)
    check(s_only, np.linalg.svd(f64(a), compute_uv=False), "float32", rtol=1e-4)
    u, s, vh = F.svd(t([[1, 0], [0, 2]]))
    check(s, [2, 1], "float32")
