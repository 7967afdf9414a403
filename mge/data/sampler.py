"""Samplers: which sample indices go into each batch (MegEngine's ``megengine.data.sampler``).

A map sampler draws the indices of one epoch (``sample()``), shards them over ranks (``scatter()``:
padded by repeating the head so every rank gets ``ceil(N / world_size)``, then every
``world_size``-th index from ``rank``) and cuts them into batches (``batch()``).
"""
import collections.abc
import math
from abc import ABC, abstractmethod
from itertools import count
from typing import Any, Generator, Iterator, List, Union

import numpy as np

from ._dist import world_size_and_rank

__all__ = ["Sampler", "MapSampler", "StreamSampler", "SequentialSampler", "RandomSampler",
           "ReplacementSampler", "Infinite"]


def _positive_int(value, name, allow_none=False):
    if value is None and allow_none:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value!r}")


class Sampler(ABC):
    r"""Abstract base class of all samplers."""

    @abstractmethod
    def __init__(self):
        pass


class MapSampler(Sampler):
    r"""Sampler for map-style datasets: yields lists of indices, one per batch.

    Args:
        dataset: dataset to sample from (only its ``len`` is used).
        batch_size: indices per batch.
        drop_last: ``True`` drops the last batch when it would be smaller than ``batch_size``.
        num_samples: number of samples of one epoch over all ranks (default ``len(dataset)``);
            each rank gets ``ceil(num_samples / world_size)``.
        world_size: number of ranks (default: the distributed world size, else 1).
        rank: this rank, ``0 <= rank < world_size`` (default: the distributed rank, else 0).
        seed: seed of the sampler's ``np.random.RandomState``; ``None`` seeds from the OS, except
            with ``world_size > 1``, where it is 0 so that every rank draws the same permutation.
    """

    def __init__(self, dataset, batch_size=1, drop_last=False, num_samples=None, world_size=None,
                 rank=None, seed=None):
        _positive_int(batch_size, "batch_size")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        _positive_int(num_samples, "num_samples", allow_none=True)
        self.batch_size = int(batch_size)
        self.dataset = dataset
        self.drop_last = drop_last

        if world_size is None or rank is None:
            dist_world, dist_rank = world_size_and_rank()
            world_size = dist_world if world_size is None else world_size
            rank = dist_rank if rank is None else rank
        _positive_int(world_size, "world_size")
        if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or not 0 <= rank < world_size:
            raise ValueError(f"rank should be an integer in [0, world_size={world_size}), "
                             f"but got rank={rank!r}")
        self.world_size = int(world_size)
        self.rank = int(rank)

        if num_samples is None:
            num_samples = len(self.dataset)
        self.num_samples = int(math.ceil(num_samples / self.world_size))
        if self.num_samples < self.batch_size:
            raise ValueError("num_samples should be greater than batch_size, but got "
                             f"num_samples={self.num_samples} and batch_size={self.batch_size}")

        # the same permutation on every rank
        if seed is None and self.world_size > 1:
            seed = 0
        self.rng = np.random.RandomState(seed)

    def __iter__(self) -> Union[Generator, Iterator]:
        return self.batch()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return int(math.ceil(self.num_samples / self.batch_size))

    def sample(self):
        r"""The indices of one epoch, over all ranks (subclasses implement it)."""
        raise NotImplementedError(f"{type(self).__name__}.sample: a MapSampler subclass must "
                                  "implement sample()")

    def scatter(self, indices) -> List:
        r"""This rank's share of ``indices``: padded with its head to ``num_samples * world_size``,
        then every ``world_size``-th index starting at ``rank``. Override for another assignment."""
        total_size = self.num_samples * self.world_size
        indices = list(indices)
        while len(indices) < total_size:  # pad by repeating the head (once unless N is tiny)
            indices += indices[: total_size - len(indices)]
        indices = indices[:total_size]
        indices = indices[self.rank: total_size: self.world_size]
        assert len(indices) == self.num_samples
        return indices

    def batch(self) -> Iterator[List[Any]]:
        r"""A generator of this rank's batches of indices."""
        indices = list(self.sample())
        # world_size may be given without a distributed group: shard whenever it is above 1
        if self.world_size > 1:
            indices = self.scatter(indices)
        batch = []
        for idx in indices:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch


class StreamSampler(Sampler):
    r"""Sampler for stream datasets: yields lists of ``batch_size`` running numbers without end.

    It does not shard: with several ranks, let each rank's :meth:`StreamDataset.__iter__` return
    different data (for example by ``rank``).

    Args:
        batch_size: samples per batch.
    """

    def __init__(self, batch_size=1):
        _positive_int(batch_size, "batch_size")
        self.batch_size = int(batch_size)

    def __iter__(self):
        return self.batch()

    def batch(self):
        r"""A generator of batches of running numbers."""
        batch = []
        for idx in self.sample():
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []

    def sample(self):
        r"""The running numbers 0, 1, 2, ..."""
        return count(start=0)


def _check_indices(indices):
    if indices is not None and not isinstance(indices, collections.abc.Sequence):
        raise ValueError(f"indices should be None or a sequence, but got indices={indices!r}")


class SequentialSampler(MapSampler):
    r"""Samples ``0 .. len(dataset) - 1`` (or ``indices``) in order.

    Args:
        dataset: dataset to sample from.
        batch_size: indices per batch.
        drop_last: ``True`` drops the last incomplete batch.
        indices: a sequence of indices to use instead of ``range(len(dataset))``.
        world_size: number of ranks.
        rank: this rank.
    """

    def __init__(self, dataset, batch_size=1, drop_last=False, indices=None, world_size=None,
                 rank=None):
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank)
        _check_indices(indices)
        self.indices = indices

    def sample(self) -> Iterator[Any]:
        r"""The indices in order."""
        if self.indices is None:
            return iter(range(len(self.dataset)))
        return self.indices


class RandomSampler(MapSampler):
    r"""Samples a random permutation of ``range(len(dataset))`` (or of ``indices``) each epoch,
    without replacement, from the sampler's own ``np.random.RandomState(seed)``.

    Args:
        dataset: dataset to sample from.
        batch_size: indices per batch.
        drop_last: ``True`` drops the last incomplete batch.
        indices: a sequence of indices to permute instead of ``range(len(dataset))``.
        world_size: number of ranks.
        rank: this rank.
        seed: seed of the permutations.
    """

    def __init__(self, dataset, batch_size=1, drop_last=False, indices=None, world_size=None,
                 rank=None, seed=None):
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank, seed)
        _check_indices(indices)
        self.indices = indices

    def sample(self) -> List:
        r"""A fresh permutation."""
        if self.indices is None:
            return self.rng.permutation(len(self.dataset)).tolist()
        return self.rng.permutation(self.indices).tolist()


class ReplacementSampler(MapSampler):
    r"""Samples ``num_samples`` indices at random with replacement, optionally weighted.

    Args:
        dataset: dataset to sample from.
        batch_size: indices per batch.
        drop_last: ``True`` drops the last incomplete batch.
        num_samples: samples of one epoch over all ranks (default ``len(dataset)``).
        weights: one non-negative weight per sample (normalised here), or ``None`` for uniform.
        world_size: number of ranks.
        rank: this rank.
        seed: seed of the draws.
    """

    def __init__(self, dataset, batch_size=1, drop_last=False, num_samples=None, weights=None,
                 world_size=None, rank=None, seed=None):
        super().__init__(dataset, batch_size, drop_last, num_samples, world_size, rank, seed)
        if weights is not None:
            if not isinstance(weights, (collections.abc.Sequence, np.ndarray)):
                raise ValueError(f"weights should be None or a sequence, but got weights={weights!r}")
            if len(weights) != len(dataset):
                raise ValueError(f"len(dataset)={len(dataset)} should be equal to "
                                 f"len(weights)={len(weights)}")
        self.weights = weights
        if self.weights is not None:
            self.weights = np.array(weights) / sum(weights)

    def sample(self) -> List:
        r"""``num_samples * world_size`` draws."""
        n = len(self.dataset)
        size = self.num_samples * self.world_size
        return self.rng.choice(n, size=size, replace=True, p=self.weights).tolist()


class Infinite(MapSampler):
    r"""Wraps a map sampler to repeat its epochs without end; other attributes (``batch_size``...)
    are the wrapped sampler's.

    Args:
        sampler: the sampler to repeat.
    """

    def __init__(self, sampler):  # pylint: disable=super-init-not-called
        if not isinstance(sampler, Sampler):
            raise ValueError(f"Infinite: sampler should be a Sampler, but got sampler={sampler!r}")
        self.sampler = sampler
        self.sampler_iter = iter(self.sampler)

    def sample(self):
        r"""Not supported: ``Infinite`` only repeats its sampler's batches."""
        raise NotImplementedError("sample method not supported in Infinite")

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.sampler_iter)
        except StopIteration:
            self.sampler_iter = iter(self.sampler)
            return next(self.sampler_iter)

    def __len__(self):
        return np.iinfo(np.int64).max

    def __getattr__(self, name):
        if name in ("sampler", "sampler_iter"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)
