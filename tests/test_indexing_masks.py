"""Boolean masks in indices: mixed with integer arrays (numpy's rule: a mask stands for its
``nonzero()`` arrays, which broadcast with the others), masks of the wrong shape refused with
numpy's IndexError, and ``indexing_one_hot`` refusing indices outside ``[0, n)``."""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError

from gradcheck import check_grads

X = np.arange(24, dtype="float32").reshape(2, 3, 4)

MIXED = [
    (np.array([0, 1]), np.array([False, True, True])),
    (np.array([False, True]), np.array([0, 2])),
    (np.array([1]), slice(None), np.array([True, False, True, False])),
    (Ellipsis, np.array([True, False, True, True])),
    (np.array([[True, False, True], [False, True, False]]), np.array([0, 3, 1])),
    (np.array([[True, False, True], [False, True, False]]), np.array([2])),
    (slice(None), np.array([True, False, True]), np.array([[0], [3]])),
    (None, np.array([0, 1]), np.array([True, False, True])),
    (np.array([True, True]), np.array([True, False, True]), np.array([0, 1])),
    (np.zeros(2, bool), np.array([1])),
    (1, np.array([True, False, True]), np.array([3, 0])),
]


def _as_tensors(index):
    return tuple(mge.tensor(a) if isinstance(a, np.ndarray) else a for a in index)


def _as_host(index):
    return index


def _as_lists(index):
    return tuple(a.tolist() if isinstance(a, np.ndarray) else a for a in index)


CONVERT = [_as_tensors, _as_host, _as_lists]


@pytest.fixture(params=[0, 2], ids=["level0", "level2"])
def level(request):
    saved = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = saved


def _value(shape):
    n = shape[-1] if shape else 1
    return -1.0 - np.arange(n, dtype="float32")


@pytest.mark.parametrize("conv", CONVERT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("index", MIXED, ids=[str(i) for i in range(len(MIXED))])
def test_mixed_mask_and_int_get(index, conv, level):
    ref = X[index]
    got = mge.tensor(X)[conv(index)]
    np.testing.assert_array_equal(got.numpy(), ref)
    assert got.shape == ref.shape


@pytest.mark.parametrize("conv", CONVERT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("index", MIXED, ids=[str(i) for i in range(len(MIXED))])
def test_mixed_mask_and_int_set(index, conv, level):
    ref = X.copy()
    v = _value(X[index].shape)
    ref[index] = v
    t = mge.tensor(X)
    t[conv(index)] = v
    np.testing.assert_array_equal(t.numpy(), ref)
    t = mge.tensor(X)
    t[conv(index)] = mge.tensor(v)
    np.testing.assert_array_equal(t.numpy(), ref)


def test_issue_example():
    t = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    np.testing.assert_array_equal(t[mge.tensor([0, 1]), mge.tensor([False, True, True])].numpy(),
                                  [1.0, 5.0])
    t[mge.tensor([0, 1]), mge.tensor([False, True, True])] = mge.tensor([-1.0, -2.0])
    np.testing.assert_array_equal(t.numpy(), [[0, -1, 2], [3, 4, -2]])


def _raises_index_error(fn, match):
    """``fn()`` raises an IndexError matching ``match``: itself at level 0; at level 2 itself (an
    op run at once on the caller's thread) or as the cause of an AsyncError (run by the worker)."""
    with pytest.raises((IndexError, AsyncError)) as e:
        fn()
    if mge.config.async_level == 0:
        assert not isinstance(e.value, AsyncError), repr(e.value)
    err = e.value if isinstance(e.value, IndexError) else e.value.__cause__
    assert isinstance(err, IndexError) and match in str(err), repr(e.value)
    mge._full_sync()


def test_mixed_counts_that_do_not_broadcast_raise(level):
    # The mask's count is known only from its values: numpy's IndexError, from the kernel.
    t = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    idx, mask = mge.tensor([0, 1, 1]), mge.tensor([True, True, False])
    _raises_index_error(lambda: t[idx, mask].numpy(), "shape mismatch")

    def store():
        t[idx, mask] = 1.0
        t.numpy()
    _raises_index_error(store, "shape mismatch")


@pytest.mark.parametrize("index", [MIXED[0], MIXED[2], MIXED[4], MIXED[6], MIXED[8]],
                         ids=["0", "2", "4", "6", "8"])
def test_mixed_gradients(index):
    tidx = _as_tensors(index)
    check_grads(lambda x: x[tidx], X.astype("float64"))
    v = np.linspace(1, 2, X[index].size).reshape(X[index].shape)

    def set_fn(x, v):
        y = x * 1.0
        y[tidx] = v
        return y
    check_grads(set_fn, X.astype("float64"), v)


BAD = [
    (np.array([True, False, True]),),
    (slice(None), np.array([True, False])),
    (Ellipsis, np.array([True] * 3)),
    (np.array([0, 1]), np.array([True, False])),
    (np.ones((2, 2), bool),),
    (None, np.array([True, False, True])),
    (0, slice(None), np.array([True, False, True, False, True])),
]


@pytest.mark.parametrize("conv", CONVERT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("index", BAD, ids=[str(i) for i in range(len(BAD))])
def test_wrong_mask_shape_is_refused_at_the_call(index, conv, level):
    with pytest.raises(IndexError) as ref:
        X[index]
    t = mge.tensor(X)
    with pytest.raises(IndexError, match="boolean index did not match") as e:
        t[conv(index)]
    assert str(ref.value) in str(e.value)
    with pytest.raises(IndexError, match="boolean index did not match") as e:
        t[conv(index)] = 1.0
    assert str(ref.value) in str(e.value)
    np.testing.assert_array_equal(t.numpy(), X)


def test_issue_wrong_length_example():
    t = mge.tensor(np.arange(6, dtype="float32").reshape(3, 2))
    msg = ("boolean index did not match indexed array along axis 0; size of axis is 3 but size "
           "of corresponding boolean axis is 2")
    for mask in (np.array([True, False]), [True, False], mge.tensor([True, False])):
        with pytest.raises(IndexError, match=msg):
            t[mask]
        with pytest.raises(IndexError, match=msg):
            t[mask] = 0.0
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(3, 2))


def test_host_mask_on_a_tensor_of_unknown_shape(level):
    # x's shape depends on values: the numpy mask stays a bool tensor, checked by the kernel.
    x = mge.tensor(X)[mge.tensor(np.array([True, False]))]   # shape known only after running
    np.testing.assert_array_equal(x[:, np.array([True, False, True])].numpy(),
                                  X[:1][:, [True, False, True]])
    x = mge.tensor(X)[mge.tensor(np.array([True, False]))]
    _raises_index_error(lambda: x[:, np.array([True, False])].numpy(),
                        "boolean index did not match")


# -- indexing_one_hot ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, 3, -4])
def test_indexing_one_hot_out_of_range_level0(bad):
    saved = mge.config.async_level
    mge.config.async_level = 0
    try:
        x = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
        with pytest.raises(IndexError, match=r"IndexingOneHot: index out of range \[0, 3\)"):
            F.nn.indexing_one_hot(x, mge.tensor([0, bad])).numpy()
    finally:
        mge.config.async_level = saved


@pytest.mark.parametrize("bad", [-1, 5])
def test_indexing_one_hot_out_of_range_level2(bad):
    saved = mge.config.async_level
    mge.config.async_level = 2
    try:
        x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))   # worker-sized
        y = F.nn.indexing_one_hot(x, mge.tensor([0, 1, bad, 2]))
        with pytest.raises(AsyncError) as e:
            y.numpy()
        assert isinstance(e.value.__cause__, IndexError)
        assert "index out of range [0, 5)" in str(e.value.__cause__)
        mge._full_sync()
    finally:
        mge.config.async_level = saved


def test_indexing_one_hot_in_range_still_works():
    x = np.arange(20, dtype="float32").reshape(4, 5)
    idx = np.array([0, 4, 2, 1], "int32")
    np.testing.assert_array_equal(F.nn.indexing_one_hot(mge.tensor(x), mge.tensor(idx)).numpy(),
                                  x[np.arange(4), idx])
