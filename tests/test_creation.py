"""Creation functions of ``mge.functional`` against numpy."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F
from helpers import check


def test_zeros_ones_defaults():
    check(F.zeros((2, 3)), np.zeros((2, 3), np.float32))
    check(F.ones(4), np.ones(4, np.float32))
    check(F.zeros(()), np.zeros((), np.float32))
    check(F.ones((0, 2)), np.ones((0, 2), np.float32))
    check(F.zeros([2, 1], dtype="int32"), np.zeros((2, 1), np.int32))
    check(F.ones((2,), dtype=np.bool_), np.ones(2, bool))
    check(F.zeros(mge.tensor([2, 3])), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("value,dtype", [(3, np.int32), (2.5, np.float32), (True, np.bool_)])
def test_full_infers_dtype(value, dtype):
    check(F.full((2, 2), value), np.full((2, 2), value, dtype))


def test_full_and_likes():
    check(F.full(3, 1, dtype="int8"), np.ones(3, np.int8))
    check(F.full((2,), 2, dtype="float32"), np.full(2, 2, np.float32))
    check(F.full((2,), mge.tensor(4.0)), np.full(2, 4, np.float32))
    x = mge.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    check(F.full_like(x, 2.5), np.full((2, 3), 2, np.int32))
    check(F.zeros_like(x), np.zeros((2, 3), np.int32))
    check(F.ones_like(mge.tensor([True, False])), np.ones(2, bool))
    check(F.ones_like(mge.tensor(1.5)), np.float32(1))
    with pytest.raises(ValueError, match="Fill.*negative"):
        F.zeros((2, -1))
    with pytest.raises(TypeError, match="full: value must be a number"):
        F.full((2,), "a")
    with pytest.raises(TypeError, match="zeros"):
        F.zeros((2.5,))


def test_arange():
    check(F.arange(5), np.arange(5, dtype=np.float32))
    check(F.arange(1, 4, 0.5), np.arange(1, 4, 0.5, dtype=np.float32))
    check(F.arange(5, dtype="int32"), np.arange(5, dtype=np.int32))
    check(F.arange(5, 0, -1), np.arange(5, 0, -1).astype(np.float32))
    check(F.arange(0), np.zeros(0, np.float32))
    check(F.arange(3, 1), np.zeros(0, np.float32))
    check(F.arange(stop=3), np.arange(3, dtype=np.float32))
    check(F.arange(mge.tensor(3)), np.arange(3, dtype=np.float32))
    assert F.arange(0, 1, 0.1).shape == (10,)
    check(F.arange(-3, 10, 4, dtype="int32"), np.arange(-3, 10, 4, dtype=np.int32))
    with pytest.raises(ValueError, match="arange: step"):
        F.arange(0, 3, 0)


@settings(max_examples=25, deadline=None)
@given(st.floats(-50, 50), st.floats(-50, 50), st.sampled_from([0.25, 0.5, 1.0, 3.0, -0.5, -2.0]))
def test_arange_matches_float64(start, stop, step):
    n = max(0, int(np.ceil((stop - start) / step)))
    ref = (start + np.arange(n, dtype=np.float64) * step).astype(np.float32)
    check(F.arange(start, stop, step), ref)


def test_linspace():
    check(F.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float64).astype(np.float32))
    check(F.linspace(0, 10, 4, dtype="int32"), np.array([0, 3, 6, 10], np.int32))
    check(F.linspace(3, -1, 1), np.array([3], np.float32))
    check(F.linspace(0, 1, 0), np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="linspace: num"):
        F.linspace(0, 1, -1)


def test_eye():
    check(F.eye(3), np.eye(3, dtype=np.float32))
    check(F.eye(2, 3), np.eye(2, 3, dtype=np.float32))
    check(F.eye((3, 2)), np.eye(3, 2, dtype=np.float32))
    check(F.eye(2, dtype="int32"), np.eye(2, dtype=np.int32))
    check(F.eye(0), np.zeros((0, 0), np.float32))
    with pytest.raises(ValueError, match="eye"):
        F.eye(-1)


def test_device_argument():
    x = F.zeros((2,), device="cpu0")
    assert x.device == mge._core.device.as_device("cpu0")
    assert F.arange(3, device="cpu0").device == x.device
    with pytest.raises(ValueError, match="invalid device name"):
        F.ones(2, device="tpu0")


def test_eye_takes_a_shape_as_megengine_does():
    """``eye`` takes ``N``, ``(N, M)``, ``N, M``, a 1-entry shape (square) or an integer tensor
    shape, as MegEngine's does."""
    for args, ref in [(([3],), np.eye(3)), (([2, 4],), np.eye(2, 4)), ((2, 4), np.eye(2, 4)),
                      ((mge.tensor([3]),), np.eye(3)), ((mge.tensor([2, 3]),), np.eye(2, 3)),
                      ((mge.tensor([[1.0, 2.0]]).shape,), np.eye(1, 2))]:
        got = F.eye(*args, dtype="float32")
        np.testing.assert_array_equal(got.numpy(), ref.astype("float32"))
    assert F.eye([2], dtype=bool).dtype == np.bool_
    with pytest.raises(ValueError, match="1 or 2 entries"):
        F.eye([1, 2, 3])
