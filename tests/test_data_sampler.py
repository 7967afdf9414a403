"""mge.data.sampler: order, sharding and seeding against MegEngine 1.13's recorded batches
(tests/data/megengine_data_transforms.npz), and the samplers' argument checks."""
import os
import sys

import numpy as np
import pytest

import mge.data.sampler as S
from mge.data.dataset import ArrayDataset

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "data"))
from megengine_data_cases import SAMPLER_CASES, SAMPLER_DATASET_LEN  # noqa: E402

REFS = np.load(os.path.join(HERE, "data", "megengine_data_transforms.npz"))


def _rows(a):
    return [[int(v) for v in row if v != -1] for row in a]


@pytest.mark.parametrize("case", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_matches_megengine(case):
    name, make, epochs = case
    sampler = make(S, ArrayDataset(np.arange(SAMPLER_DATASET_LEN)))
    for e in range(epochs):
        assert list(sampler) == _rows(REFS["sampler/%s/epoch%d" % (name, e)])
    assert len(sampler) == int(REFS["sampler/%s/len" % name])


def test_sequential_order_and_batches():
    ds = ArrayDataset(np.arange(10))
    assert list(S.SequentialSampler(ds, batch_size=4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(S.SequentialSampler(ds, batch_size=4, drop_last=True)) == [[0, 1, 2, 3],
                                                                          [4, 5, 6, 7]]
    assert list(S.SequentialSampler(ds, batch_size=2, indices=[9, 3, 1])) == [[9, 3], [1]]
    assert len(S.SequentialSampler(ds, batch_size=4)) == 3
    assert len(S.SequentialSampler(ds, batch_size=4, drop_last=True)) == 2


def test_sharding_covers_every_index_once_per_rank_set():
    ds = ArrayDataset(np.arange(10))
    shards = [sum(S.SequentialSampler(ds, batch_size=1, world_size=3, rank=r), [])
              for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]  # padded with the head
    # random shards of one epoch: the same permutation on every rank (seed 0 when distributed)
    rand = [sum(S.RandomSampler(ds, batch_size=2, world_size=2, rank=r), []) for r in range(2)]
    assert sorted(rand[0] + rand[1]) == list(range(10))


def test_random_sampler_seeds():
    ds = ArrayDataset(np.arange(20))
    a = list(S.RandomSampler(ds, seed=1))
    assert a == list(S.RandomSampler(ds, seed=1))
    assert a != list(S.RandomSampler(ds, seed=2))
    sampler = S.RandomSampler(ds, batch_size=20, seed=1)
    e1, e2 = list(sampler), list(sampler)
    assert e1 != e2 and sorted(e1[0]) == sorted(e2[0]) == list(range(20))
    assert e1[0] == np.random.RandomState(1).permutation(20).tolist()


def test_replacement_weights_and_length():
    ds = ArrayDataset(np.arange(4))
    sampler = S.ReplacementSampler(ds, batch_size=50, num_samples=1000, weights=[0, 1, 0, 3],
                                   seed=0)
    drawn = np.concatenate([np.array(b) for b in sampler])
    assert len(drawn) == 1000 and set(drawn.tolist()) <= {1, 3}
    assert 0.65 < (drawn == 3).mean() < 0.85


def test_stream_sampler():
    it = iter(S.StreamSampler(batch_size=3))
    assert [next(it) for _ in range(2)] == [[0, 1, 2], [3, 4, 5]]


def test_infinite():
    ds = ArrayDataset(np.arange(5))
    base = S.SequentialSampler(ds, batch_size=2)
    inf = S.Infinite(base)
    assert inf.batch_size == 2 and inf.drop_last is False
    assert [next(inf) for _ in range(5)] == [[0, 1], [2, 3], [4], [0, 1], [2, 3]]
    assert len(inf) == np.iinfo(np.int64).max
    with pytest.raises(NotImplementedError):
        inf.sample()
    with pytest.raises(ValueError, match="sampler"):
        S.Infinite([1, 2])


def test_abstract_and_argument_errors():
    ds = ArrayDataset(np.arange(5))
    with pytest.raises(TypeError):
        S.Sampler()
    with pytest.raises(NotImplementedError, match="sample"):
        list(S.MapSampler(ds))
    with pytest.raises(ValueError, match="batch_size=0"):
        S.SequentialSampler(ds, batch_size=0)
    with pytest.raises(ValueError, match="batch_size=True"):
        S.SequentialSampler(ds, batch_size=True)
    with pytest.raises(ValueError, match="drop_last"):
        S.SequentialSampler(ds, drop_last=1)
    with pytest.raises(ValueError, match="num_samples"):
        S.ReplacementSampler(ds, num_samples=-1)
    with pytest.raises(ValueError, match="greater than batch_size"):
        S.SequentialSampler(ds, batch_size=6)
    with pytest.raises(ValueError, match="indices"):
        S.RandomSampler(ds, indices=5)
    with pytest.raises(ValueError, match="weights"):
        S.ReplacementSampler(ds, weights=[1, 2])
    with pytest.raises(ValueError, match="rank"):
        S.SequentialSampler(ds, world_size=2, rank=2)
    with pytest.raises(ValueError, match="world_size"):
        S.SequentialSampler(ds, world_size=0, rank=0)
