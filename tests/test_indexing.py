"""``Tensor.__getitem__``/``__setitem__`` (``F.indexing``) against numpy."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge


from helpers import arr, check, raises_at_run  # noqa: E402


A = arr((4, 5, 6))

BASIC = [
    0, -1, 3, (1, 2), (1, 2, 3), (-1, -2, -3), slice(None), slice(1, 3), slice(None, None, 2),
    slice(None, None, -1), slice(3, 0, -2), slice(-2, None), slice(5, 10), slice(3, 1),
    (slice(None), 0), (Ellipsis, 1), (0, Ellipsis), (None,), (None, 1, None),
    (slice(None), None, slice(1, 4)), (Ellipsis, None), (), Ellipsis,
    (1, Ellipsis, slice(None, None, -2)),
    (slice(-100, 100),), (np.int64(2), np.int32(-1)),
]


@pytest.mark.parametrize("index", BASIC, ids=[repr(i) for i in BASIC])
def test_basic_getitem(index):
    check(mge.tensor(A)[index], A[index])


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "float16", "uint8"])
def test_getitem_dtypes(dtype):
    a = arr((3, 4), dtype)
    x = mge.tensor(a)
    check(x[1], a[1])
    check(x[:, ::-1], a[:, ::-1])
    check(x[[2, 0]], a[[2, 0]])


def test_scalar_and_empty():
    s = mge.tensor(3.5)
    check(s[()], np.float32(3.5))
    check(s[...], np.float32(3.5))
    check(s[None], np.array([3.5], np.float32))
    e = np.zeros((0, 3), np.float32)
    check(mge.tensor(e)[:, 1], e[:, 1])
    check(mge.tensor(e)[1:], e[1:])
    check(mge.tensor(A)[2:2], A[2:2])
    check(mge.tensor(A)[[]], A[np.array([], np.int64)])


def test_slice_bounds_from_tensors():
    x = mge.tensor(A)
    check(x[mge.tensor(1):mge.tensor(3)], A[1:3])
    check(x[mge.tensor(2)], A[2])


def test_out_of_range():
    x = mge.tensor(A)
    with pytest.raises(IndexError, match=r"Subtensor.*index 4 is out of bounds.*\(4, 5, 6\)"):
        x[4]
    with pytest.raises(IndexError, match=r"Subtensor.*\(4, 5, 6\)"):
        x[0, -6]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::0]
    with pytest.raises(TypeError, match="indexing"):
        x[1.5]
    with pytest.raises(TypeError, match="indexing"):
        x[mge.tensor([0.5])]
    raises_at_run(IndexError, r"IndexingMultiAxisVec.*index 7 is out of bounds.*\(4, 5, 6\)",
                  lambda: x[[0, 7]].numpy())


ADVANCED = [
    [0, 2, 2, 1],                                  # repeated indices
    [-1, 0],
    ([0, 1], [2, 3]),
    ([[0, 1], [2, 3]], slice(None), [1, 0]),       # separated arrays: advanced axes go first
    (slice(None), [1, 4], [0, 5]),
    (slice(1, 3), [[0], [2]], [1, 2, 3]),          # broadcasting of index arrays
    (Ellipsis, [0, 0, 1]),
    (None, [1, 2], slice(None, None, -1)),
    (1, [0, 2], slice(1, 3)),
    (np.array([True, False, True, True]),),
    (slice(None), np.array([True, False, False, True, True])),
    (np.array([[True, False, True, False, False]] * 4),),
    (np.array([0, 3]), 2),
]


@pytest.mark.parametrize("index", ADVANCED, ids=[repr(i) for i in ADVANCED])
def test_advanced_getitem(index):
    parts = index if isinstance(index, tuple) else (index,)
    ref = A[tuple(np.asarray(i) if isinstance(i, list) else i for i in parts)]
    check(mge.tensor(A)[index], ref)


def test_index_tensors():
    x = mge.tensor(A)
    i = np.array([[0, 3], [1, 1]], np.int32)
    check(x[mge.tensor(i)], A[i])
    check(x[:, mge.tensor(i), 0], A[:, i, 0])
    check(x[mge.tensor(2), mge.tensor([0, 1])], A[2, [0, 1]])


def test_bool_tensor_mask():
    x = mge.tensor(A)
    m = A > 0
    check(x[mge.tensor(m)], A[m])
    check(x[x > 0], A[m])
    m2 = A[:, :, 0] > 0
    check(x[mge.tensor(m2)], A[m2])
    check(x[1, mge.tensor(A[1, :, 0] > 0)], A[1, A[1, :, 0] > 0])
    none = np.zeros(4, bool)
    check(x[mge.tensor(none)], A[none])
    with pytest.raises(IndexError, match="IndexingMultiAxisVec.*boolean index did not match"):
        x[mge.tensor(np.ones(3, bool))]


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_slices(data):
    shape = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    a = arr(shape)
    index = []
    alen = data.draw(st.integers(0, 4))  # index arrays share one length so they broadcast
    for n in shape:
        kind = data.draw(st.sampled_from(["int", "slice", "arr"] if n else ["slice"]))
        if kind == "int":
            index.append(data.draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            index.append(slice(data.draw(st.one_of(st.none(), st.integers(-7, 7))),
                               data.draw(st.one_of(st.none(), st.integers(-7, 7))),
                               data.draw(st.sampled_from([None, 1, 2, -1, -3]))))
        else:
            index.append(np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=alen,
                                                     max_size=alen)), np.int32))
    index = tuple(index)
    check(mge.tensor(a)[index], a[index])
    b = a.copy()
    value = arr(np.shape(a[index]), "float32", 9)
    b[index] = value
    x = mge.tensor(a)
    x[index] = mge.tensor(value)
    check(x, b)


# -- setitem --------------------------------------------------------------------------------------
SET_CASES = [
    (0, 1.5),
    ((slice(None), 1), np.arange(6, dtype=np.float32)),          # broadcast over the first axis
    ((Ellipsis, slice(None, None, -2)), np.arange(3, dtype=np.float32)),
    ((slice(1, 3), None), np.ones((1, 5, 6), np.float32)),
    ([0, 0, 2], np.arange(3 * 5 * 6, dtype=np.float32).reshape(3, 5, 6)),  # repeated: last wins
    (([1, 2], [0, 4]), 7.0),
    ((slice(None), [0, 1], [2, 3]), np.arange(4, dtype=np.float32)[:, None]),
    (np.array([True, False, False, True]), -1.0),
    ((1, slice(0, 0)), 3.0),                                        # empty region
    ((0, 0), np.ones((1, 6), np.float32)),                           # extra leading 1-dims
]


@pytest.mark.parametrize("index,value", SET_CASES, ids=[repr(c[0]) for c in SET_CASES])
def test_setitem(index, value):
    ref = A.copy()
    ref[index] = value
    x = mge.tensor(A)
    x[index] = value
    check(x, ref)
    y = mge.tensor(A)
    y[index] = mge.tensor(value)
    check(y, ref)


def test_setitem_does_not_alias():
    x = mge.tensor(A)
    y = x[0]
    before = y.numpy().copy()
    x[0] = 0.0
    check(y, before)
    check(x[0], np.zeros((5, 6), np.float32))


def test_setitem_casts_value():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = mge.tensor(a)
    x[0] = mge.tensor([1.7, 2.2, 3.9])
    ref = a.copy()
    ref[0] = np.array([1.7, 2.2, 3.9], np.float32).astype(np.int32)
    check(x, ref)
    x[1, 1] = 5.0
    ref[1, 1] = 5
    check(x, ref)


def test_setitem_bool_tensor_mask_and_repeats():
    a = A.copy()
    x = mge.tensor(a)
    x[x < 0] = 0.0
    a[a < 0] = 0
    check(x, a)
    b = np.zeros(5, np.float32)
    y = mge.tensor(b)
    y[mge.tensor([1, 1, 3])] = mge.tensor([1.0, 2.0, 3.0])
    b[[1, 1, 3]] = [1.0, 2.0, 3.0]
    check(y, b)


def test_setitem_errors():
    x = mge.tensor(A)
    with pytest.raises(ValueError, match=r"SetSubtensor.*shape \(3,\).*\(5, 6\)"):
        x[0] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="IndexingSetMultiAxisVec.*cannot assign"):
        x[[0, 1]] = np.zeros((3, 5, 6), np.float32)
    with pytest.raises(IndexError, match="SetSubtensor.*out of bounds"):
        x[9] = 1.0
    check(x, A)  # failed assignments leave the tensor unchanged


def test_range_and_nested_list_index():
    check(mge.tensor(A)[range(1, 3)], A[np.arange(1, 3)])
    check(mge.tensor(A)[[[0, 1], [3, 3]]], A[np.array([[0, 1], [3, 3]])])


@pytest.mark.parametrize("index", [(True, slice(0, 1)), (False, slice(0, 1)), (True,), (False,),
                                   (slice(None), True), (0, True), (np.bool_(True), 1)],
                         ids=repr)
def test_scalar_bool_index_is_a_0d_mask(index):
    # numpy's (and MegEngine's) rule: True adds an axis of length 1, False one of length 0
    a = arr((3, 2))
    check(mge.tensor(a)[index], a[index])
    x = mge.tensor(a)
    x[index] = 7.0
    ref = a.copy()
    ref[index] = 7.0
    check(x, ref)


def test_scalar_bool_index_gradient():
    from mge.autodiff import GradManager
    x = mge.Parameter(arr((3, 2)))
    gm = GradManager().attach([x])
    with gm:
        gm.backward((x[True, 0:1] * 2).sum() + x[False, 1:].sum())
    check(x.grad, np.array([[2, 2], [0, 0], [0, 0]], np.float32))
