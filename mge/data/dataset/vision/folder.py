"""``ImageFolder``: images in ``root/<class>/.../<file>``, labelled by their class directory."""
import os
from typing import Dict, List, Tuple

import numpy as np

from ..._cv2 import imread
from .meta_vision import VisionDataset
from .utils import is_img

__all__ = ["ImageFolder"]


class ImageFolder(VisionDataset):
    r"""Images organised as ``root/<class>/.../<image>``; labels are the indices of the sorted
    class directory names.

    Samples are ``(image, label)``: the image read by OpenCV (``(H, W, 3)`` uint8, BGR) and the
    class index (``np.int32``), or the class name with ``class_name=True``.

    Args:
        root: root directory of the image folder.
        check_valid_func: ``f(path) -> bool`` choosing the files to use; default: image file
            extensions (``.jpg``, ``.png``, ...).
        class_name: return the class name instead of its index.
    """

    def __init__(self, root: str, check_valid_func=None, class_name: bool = False):
        super().__init__(root, order=("image", "image_category"))
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"ImageFolder: root {root!r} is not a directory")
        self.check_valid = check_valid_func if check_valid_func is not None else is_img
        self.class_name = class_name
        self.class_dict = self.collect_class()
        self.samples = self.collect_samples()

    def collect_samples(self) -> List:
        """The ``(path, label)`` pairs, classes in sorted order, files sorted within."""
        samples = []
        for key in sorted(self.class_dict):
            d = os.path.join(self.root, key)
            for r, _, filenames in sorted(os.walk(d, followlinks=True)):
                for name in sorted(filenames):
                    path = os.path.join(r, name)
                    if self.check_valid(path):
                        samples.append((path, key if self.class_name else self.class_dict[key]))
        return samples

    def collect_class(self) -> Dict:
        """``{class name: np.int32 index}`` for the sorted sub-directories of ``root``."""
        classes = sorted(d.name for d in os.scandir(self.root) if d.is_dir())
        return {c: np.int32(i) for i, c in enumerate(classes)}

    def __getitem__(self, index: int) -> Tuple:
        path, label = self.samples[index]
        return imread(path), label

    def __len__(self):
        return len(self.samples)
