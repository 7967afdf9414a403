"""``VisionDataset``: the base of the vision datasets, with the ``order`` of sample fields."""
import collections.abc
import os

from ..meta_dataset import Dataset

__all__ = ["VisionDataset"]


class VisionDataset(Dataset):
    r"""Base class of vision datasets.

    Args:
        root: root directory of the data (``~`` is expanded).
        order: the fields of a sample, in order, e.g. ``("image", "boxes", "boxes_category")``;
            default ``("image",)``.
        supported_order: the fields this dataset can produce; others raise NotImplementedError.
    """

    _repr_indent = 4

    def __init__(self, root, *, order=None, supported_order=None):
        if isinstance(root, (str, bytes)):
            root = os.path.expanduser(root)
        self.root = root
        if order is None:
            order = ("image",)
        if not isinstance(order, collections.abc.Sequence) or isinstance(order, str):
            raise ValueError(f"order should be a sequence, but got order={order!r}")
        if supported_order is not None:
            assert isinstance(supported_order, collections.abc.Sequence)
            for k in order:
                if k not in supported_order:
                    raise NotImplementedError(f"{k} is unsupported data type "
                                              f"(supported: {tuple(supported_order)})")
        self.order = order

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")
