"""mge.data.dataset: the base classes, ArrayDataset, ConcatDataset, and the Collator."""
import collections

import numpy as np
import pytest

from mge.data import Collator
from mge.data.dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset


def test_abstract_classes():
    with pytest.raises(TypeError):
        Dataset()
    with pytest.raises(TypeError):
        StreamDataset()

    class S(StreamDataset):
        def __init__(self):
            pass

        def __iter__(self):
            return iter([1])

    with pytest.raises(AssertionError, match="index"):
        S()[0]
    with pytest.raises(AssertionError, match="length"):
        len(S())


def test_array_dataset():
    data = np.random.randint(0, 255, (10, 3, 8, 8))
    label = np.arange(10)
    ds = ArrayDataset(data, label)
    assert len(ds) == 10
    x, y = ds[3]
    np.testing.assert_array_equal(x, data[3])
    assert y == 3
    with pytest.raises(ValueError, match="inconsistent"):
        ArrayDataset(data, np.arange(3))
    with pytest.raises(ValueError, match="at least one"):
        ArrayDataset()


def test_concat_dataset():
    a = ArrayDataset(np.zeros((3, 2)), np.arange(3))
    b = ArrayDataset(np.ones((4, 5)), np.arange(10, 14))
    ds = ConcatDataset([a, b])
    assert len(ds) == 7 and ds.cumulative_sizes == [3, 7]
    assert ds[2][1] == 2 and ds[3][1] == 10 and ds[6][1] == 13 and ds[-1][1] == 13
    assert ds[4][0].shape == (5,)
    with pytest.raises(ValueError, match="absolute value"):
        ds[-8]
    with pytest.raises(IndexError):
        ds[7]
    with pytest.raises(AssertionError):
        ConcatDataset([])


Point = collections.namedtuple("Point", "x y")


def test_collator_nested():
    c = Collator()
    samples = [
        {"img": np.full((2, 2), i, np.uint8), "meta": (i, float(i) / 2, "s%d" % i),
         "pt": Point(np.int64(i), [np.float32(i), i])}
        for i in range(3)
    ]
    batch = c.apply(samples)
    assert batch["img"].shape == (3, 2, 2) and batch["img"].dtype == np.uint8
    assert batch["img"].flags["C_CONTIGUOUS"]
    ints, floats, strs = batch["meta"]
    assert ints.tolist() == [0, 1, 2] and floats.dtype == np.float64
    assert strs == ["s0", "s1", "s2"]
    assert isinstance(batch["pt"], Point)
    assert batch["pt"].x.tolist() == [0, 1, 2]
    assert isinstance(batch["pt"].y, list) and batch["pt"].y[0].dtype == np.float32


def test_collator_numbers_and_errors():
    c = Collator()
    assert c.apply([1, 2, 3]).tolist() == [1, 2, 3]
    assert c.apply([True, False]).dtype == np.bool_
    assert c.apply([b"a", b"b"]) == [b"a", b"b"]
    with pytest.raises(TypeError, match="Collator"):
        c.apply([np.array(["a"]), np.array(["b"])])
    with pytest.raises(TypeError, match="object"):
        c.apply([object(), object()])
    with pytest.raises(ValueError, match="different lengths"):
        c.apply([(1, 2), (1,)])
    with pytest.raises(ValueError, match="empty"):
        c.apply([])
