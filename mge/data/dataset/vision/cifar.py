"""CIFAR-10 / CIFAR-100 from their pickled python batches."""
import logging
import os
import pickle
import tarfile
from typing import Tuple

import numpy as np

from .meta_vision import VisionDataset
from .mnist import _prepare_root
from .utils import _default_dataset_root, _extract, load_raw_data_from_url

__all__ = ["CIFAR10", "CIFAR100"]

logger = logging.getLogger(__name__)


def _unpickle(path):
    logger.debug("unpickle file %s", path)
    with open(path, "rb") as fo:
        return pickle.load(fo, encoding="bytes")


def _bgr_hwc(flat):
    # rows of 3072 bytes, RGB planes of 32x32 -> (N, 32, 32, 3) BGR, as OpenCV reads images
    return np.ascontiguousarray(flat.reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1))[..., ::-1])


class CIFAR10(VisionDataset):
    r"""CIFAR-10: 50,000 training and 10,000 test 32x32 colour images in 10 classes.

    Samples are ``(image, label)``: ``image`` a ``(32, 32, 3)`` uint8 array in BGR order,
    ``label`` an int32.

    Args:
        root: directory holding ``cifar-10-batches-py/`` (or the archive
            ``cifar-10-python.tar.gz`` to extract); ``None`` means ``~/.cache/megengine/CIFAR10``.
        train: the training split if ``True``, else the test split.
        download: fetch and extract the archive when the batches are missing.
        timeout: seconds a download may wait for the server.
    """

    url_path = "http://www.cs.utoronto.ca/~kriz/"
    raw_file_name = "cifar-10-python.tar.gz"
    raw_file_md5 = "c58f30108f718f92721af3b95e74349a"
    raw_file_dir = "cifar-10-batches-py"
    train_batch = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"]
    test_batch = ["test_batch"]
    meta_info = {"name": "batches.meta"}

    def __init__(self, root: str = None, train: bool = True, download: bool = True,
                 timeout: int = 500):
        super().__init__(root, order=("image", "image_category"))
        self.timeout = timeout
        _prepare_root(self, root, download)
        self.target_file = os.path.join(self.root, self.raw_file_dir)
        if not os.path.exists(self.target_file):
            if not download:
                raise ValueError("dir does not contain target file %s, please set download=True"
                                 % self.target_file)
            self.download()
        self.arrays = self.bytes2array(self.train_batch if train else self.test_batch)

    def __getitem__(self, index: int) -> Tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    @property
    def _default_root(self):
        return os.path.join(_default_dataset_root(), self.__class__.__name__)

    @property
    def meta(self):
        """The unpickled meta file (label names), keys as bytes."""
        return _unpickle(os.path.join(self.root, self.raw_file_dir, self.meta_info["name"]))

    def download(self):
        """Download (md5-checked) and extract the archive into ``root``."""
        load_raw_data_from_url(self.url_path + self.raw_file_name, self.raw_file_name,
                               self.raw_file_md5, self.root, timeout=self.timeout)
        self.process()

    def untar(self, file_path, dirs):
        """Extract the ``.tar.gz`` archive ``file_path`` into ``dirs``."""
        assert file_path.endswith(".tar.gz")
        logger.debug("untar file %s to %s", file_path, dirs)
        with tarfile.open(file_path) as t:
            _extract(t, dirs)

    def bytes2array(self, filenames):
        """Read the pickled batches ``filenames``: ``(images (N, 32, 32, 3) BGR, labels int32)``."""
        data, label = [], []
        for filename in filenames:
            dic = _unpickle(os.path.join(self.root, self.raw_file_dir, filename))
            data.append(_bgr_hwc(np.asarray(dic[b"data"])))
            label.extend(dic[b"labels"])
        return (np.concatenate(data), np.array(label, dtype=np.int32))

    def process(self):
        """Extract the downloaded archive."""
        logger.info("process raw data ...")
        self.untar(os.path.join(self.root, self.raw_file_name), self.root)


class CIFAR100(CIFAR10):
    r"""CIFAR-100: like :class:`CIFAR10` with 100 fine classes grouped in 20 coarse ones.

    Samples are ``(image, fine_label, coarse_label)``; ``root`` holds ``cifar-100-python/``.
    """

    url_path = "http://www.cs.utoronto.ca/~kriz/"
    raw_file_name = "cifar-100-python.tar.gz"
    raw_file_md5 = "eb9058c3a382ffc7106e4002c42a8d85"
    raw_file_dir = "cifar-100-python"
    train_batch = ["train"]
    test_batch = ["test"]
    meta_info = {"name": "meta"}

    def bytes2array(self, filenames):
        """Read the pickled batches: ``(images, fine labels, coarse labels)``."""
        data, fine, coarse = [], [], []
        for filename in filenames:
            dic = _unpickle(os.path.join(self.root, self.raw_file_dir, filename))
            data.append(_bgr_hwc(np.asarray(dic[b"data"])))
            fine.extend(dic[b"fine_labels"])
            coarse.extend(dic[b"coarse_labels"])
        return (np.concatenate(data), np.array(fine, dtype=np.int32),
                np.array(coarse, dtype=np.int32))
