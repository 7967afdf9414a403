"""Data loading (MegEngine's ``megengine.data``): datasets, samplers, transforms, ``Collator`` and
``DataLoader`` with worker processes.

The submodules load on first use, so that ``import mge`` stays fast.

    >>> import numpy as np
    >>> from mge.data import DataLoader, RandomSampler
    >>> from mge.data.dataset import ArrayDataset
    >>> ds = ArrayDataset(np.zeros((8, 1, 4, 4), "float32"), np.arange(8))
    >>> loader = DataLoader(ds, sampler=RandomSampler(ds, batch_size=4, seed=0))
    >>> [data.shape for data, label in loader]
    [(4, 1, 4, 4), (4, 1, 4, 4)]
"""
import importlib

__all__ = ["Collator", "DataLoader", "Infinite", "MapSampler", "RandomSampler",
           "ReplacementSampler", "Sampler", "SequentialSampler", "StreamSampler"]

_HOME = {"Collator": "collator", "DataLoader": "dataloader"}
_SUBMODULES = ("collator", "dataloader", "dataset", "sampler", "transform")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module("." + name, __name__)
    if name in __all__:
        value = getattr(importlib.import_module("." + _HOME.get(name, "sampler"), __name__), name)
        globals()[name] = value
        return value
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
