"""The dataset base classes and the array / concatenation datasets."""
import bisect
from abc import ABC, abstractmethod
from typing import Tuple

__all__ = ["Dataset", "StreamDataset", "ArrayDataset", "ConcatDataset"]


class Dataset(ABC):
    r"""Abstract base class of map-style datasets: subclasses define ``__init__``,
    ``__getitem__(index)`` (one sample) and ``__len__()``.

    A :class:`~mge.data.DataLoader` asks its sampler for a batch of indices, fetches each with
    ``__getitem__``, transforms and collates them. Samples are numpy arrays (or numbers, strings,
    tuples, dicts of them); convert to :class:`~mge.Tensor` explicitly, or use
    ``DataLoader(preload=True)``.
    """

    @abstractmethod
    def __init__(self):
        pass

    @abstractmethod
    def __getitem__(self, index):
        pass

    @abstractmethod
    def __len__(self):
        pass


class StreamDataset(Dataset):
    r"""Abstract base class of iterable datasets (data from a stream): subclasses define
    ``__init__`` and ``__iter__``, which returns an iterator of samples. It has no length and no
    indexing.

    With ``DataLoader(num_workers=N, parallel_stream=True)`` every worker iterates its own
    ``iter(dataset)``; :func:`~mge.data.dataloader.get_worker_info` tells ``__iter__`` which worker
    it runs in (``idx``, ``worker``, ``seed``) so that it can read its own share of the stream.
    """

    @abstractmethod
    def __init__(self):
        pass

    @abstractmethod
    def __iter__(self):
        pass

    def __getitem__(self, idx):
        raise AssertionError("can not get item from StreamDataset by index")

    def __len__(self):
        raise AssertionError("StreamDataset does not have length")


class ArrayDataset(Dataset):
    r"""A dataset over one or more arrays of equal length: sample ``i`` is
    ``tuple(array[i] for array in arrays)``.

    Args:
        arrays: numpy arrays (or sequences) with the sample axis first.

    Example:
        >>> import numpy as np
        >>> from mge.data.dataset import ArrayDataset
        >>> ds = ArrayDataset(np.zeros((5, 2)), np.arange(5))
        >>> len(ds), ds[3][1]
        (5, 3)
    """

    def __init__(self, *arrays):
        super().__init__()
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        if not all(len(arrays[0]) == len(array) for array in arrays):
            raise ValueError("lengths of input arrays are inconsistent: "
                             f"{[len(a) for a in arrays]}")
        self.arrays = arrays

    def __getitem__(self, index: int) -> Tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])


class ConcatDataset(Dataset):
    r"""The concatenation of several map-style datasets: index ``i`` runs through the first
    dataset, then the second, ...

    Args:
        datasets: a non-empty list of map-style datasets (no :class:`StreamDataset`).
    """

    def __init__(self, datasets):
        super().__init__()
        self.datasets = list(datasets)
        assert len(self.datasets) > 0, "datasets should not be an empty iterable"
        for d in self.datasets:
            assert not isinstance(d, StreamDataset), "ConcatDataset does not support StreamDataset"
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        if dataset_idx == len(self.datasets):
            raise IndexError(f"ConcatDataset index {idx} out of range for length {len(self)}")
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]

    def __len__(self):
        return self.cumulative_sizes[-1]
