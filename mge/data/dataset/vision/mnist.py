"""MNIST from its idx files (gzip-compressed, as published)."""
import gzip
import logging
import os
import struct
from typing import Tuple

import numpy as np

from .meta_vision import VisionDataset
from .utils import _default_dataset_root, load_raw_data_from_url

__all__ = ["MNIST"]

logger = logging.getLogger(__name__)


def _prepare_root(ds, root, download):
    if root is None:
        ds.root = ds._default_root
        os.makedirs(ds.root, exist_ok=True)
        return
    ds.root = os.path.expanduser(root)
    if not os.path.exists(ds.root):
        if not download:
            raise ValueError("dir %s does not exist" % ds.root)
        logger.debug("dir %s does not exist, will be automatically created", ds.root)
        os.makedirs(ds.root)


class MNIST(VisionDataset):
    r"""The MNIST handwritten digits: 60,000 training and 10,000 test images, 28x28, one channel.

    Samples are ``(image, label)``: ``image`` a ``(28, 28, 1)`` uint8 array, ``label`` an int32.

    Args:
        root: directory holding (or to receive) ``train-images-idx3-ubyte.gz``,
            ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz`` and
            ``t10k-labels-idx1-ubyte.gz``; ``None`` means ``~/.cache/megengine/MNIST``.
        train: the training split if ``True``, else the test split.
        download: fetch missing files from ``url_path`` (md5-checked).
    """

    url_path = "https://ossci-datasets.s3.amazonaws.com/mnist/"
    raw_file_name = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                     "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    raw_file_md5 = ["f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
                    "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"]

    def __init__(self, root: str = None, train: bool = True, download: bool = True):
        super().__init__(root, order=("image", "image_category"))
        _prepare_root(self, root, download)
        if self._check_raw_files():
            self.process(train)
        elif download:
            self.download()
            self.process(train)
        else:
            raise ValueError("root does not contain valid raw files, please set download=True")

    def __getitem__(self, index: int) -> Tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    @property
    def _default_root(self):
        return os.path.join(_default_dataset_root(), self.__class__.__name__)

    @property
    def meta(self):
        """The idx headers: ``{"images": {magic, imgs, height, width}, "labels": {magic, imgs}}``."""
        return self._meta_data

    def _check_raw_files(self):
        return all(os.path.exists(os.path.join(self.root, p)) for p in self.raw_file_name)

    def download(self):
        """Download the four raw files into ``root`` (skipping those present), checking md5."""
        for file_name, md5 in zip(self.raw_file_name, self.raw_file_md5):
            load_raw_data_from_url(self.url_path + file_name, file_name, md5, self.root)

    def process(self, train):
        """Parse the split's idx files into ``self.arrays = (images, labels)``."""
        logger.info("process the raw files of %s set...", "train" if train else "test")
        first = 0 if train else 2
        meta_images, images = parse_idx3(os.path.join(self.root, self.raw_file_name[first]))
        meta_labels, labels = parse_idx1(os.path.join(self.root, self.raw_file_name[first + 1]))
        if len(images) != len(labels):
            raise ValueError(f"MNIST: {len(images)} images but {len(labels)} labels in {self.root}")
        self._meta_data = {"images": meta_images, "labels": meta_labels}
        self.arrays = (images, labels.astype(np.int32))


def _read_gz(path):
    if not path.endswith(".gz"):
        raise ValueError(f"expected a .gz idx file, got {path!r}")
    with gzip.open(path, "rb") as f:
        return f.read()


def parse_idx3(idx3_file):
    """Parse an idx3 image file: ``(header dict, uint8 array of shape (N, H, W, 1))``."""
    logger.debug("parse idx3 file %s ...", idx3_file)
    data = _read_gz(idx3_file)
    magic, imgs, height, width = struct.unpack_from(">iiii", data, 0)
    if magic != 2051:
        raise ValueError(f"{idx3_file}: not an idx3 image file (magic {magic}, expected 2051)")
    meta = {"magic": magic, "imgs": imgs, "height": height, "width": width}
    offset = struct.calcsize(">iiii")
    n = imgs * height * width
    if len(data) - offset < n:
        raise ValueError(f"{idx3_file}: truncated ({len(data) - offset} of {n} pixel bytes)")
    images = np.frombuffer(data, dtype=np.uint8, count=n, offset=offset)
    return meta, images.reshape(imgs, height, width, 1).copy()


def parse_idx1(idx1_file):
    """Parse an idx1 label file: ``(header dict, int array of shape (N,))``."""
    logger.debug("parse idx1 file %s ...", idx1_file)
    data = _read_gz(idx1_file)
    magic, imgs = struct.unpack_from(">ii", data, 0)
    if magic != 2049:
        raise ValueError(f"{idx1_file}: not an idx1 label file (magic {magic}, expected 2049)")
    offset = struct.calcsize(">ii")
    if len(data) - offset < imgs:
        raise ValueError(f"{idx1_file}: truncated ({len(data) - offset} of {imgs} labels)")
    labels = np.frombuffer(data, dtype=np.uint8, count=imgs, offset=offset).astype(int)
    return {"magic": magic, "imgs": imgs}, labels
