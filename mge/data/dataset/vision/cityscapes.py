"""Cityscapes semantic segmentation (``leftImg8bit/`` images, ``gtFine``/``gtCoarse`` label ids)."""
import json
import os

import numpy as np

from ..._cv2 import cv2, imread
from ._names import CITYSCAPES_CLASS_NAMES
from .meta_vision import VisionDataset

__all__ = ["Cityscapes"]

# label ids of the 19 evaluated classes, in train-id order; every other id becomes 255
_TRAIN_LABEL_IDS = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33)


class Cityscapes(VisionDataset):
    r"""`Cityscapes <http://www.cityscapes-dataset.com/>`_ semantic segmentation.

    Args:
        root: the dataset root, holding ``leftImg8bit/<image_set>/<city>/*_leftImg8bit.png`` and
            ``<mode>/<image_set>/<city>/*_<mode>_labelIds.png``.
        image_set: ``"train"``, ``"val"``, ``"test"`` (or ``"train_extra"`` with gtCoarse).
        mode: ``"gtFine"`` or ``"gtCoarse"``.
        order: sample fields from ``("image", "mask", "info")``; the mask holds train ids 0..18
            and 255 (``(H, W, 1)`` uint8).
    """

    supported_order = ("image", "mask", "info")
    class_names = CITYSCAPES_CLASS_NAMES

    def __init__(self, root, image_set, mode, *, order=None):
        super().__init__(root, order=order, supported_order=self.supported_order)
        if not os.path.isdir(self.root):
            raise RuntimeError(f"Dataset not found or corrupted: {self.root!r} is not a directory.")
        self.mode = mode
        self.images_dir = os.path.join(self.root, "leftImg8bit", image_set)
        self.masks_dir = os.path.join(self.root, self.mode, image_set)
        self.images, self.masks = [], []
        for city in sorted(os.listdir(self.images_dir)):
            img_dir = os.path.join(self.images_dir, city)
            mask_dir = os.path.join(self.masks_dir, city)
            for file_name in sorted(os.listdir(img_dir)):
                mask_name = "{}_{}".format(file_name.split("_leftImg8bit")[0],
                                           self._get_target_suffix(self.mode, "semantic"))
                self.images.append(os.path.join(img_dir, file_name))
                self.masks.append(os.path.join(mask_dir, mask_name))

    def __getitem__(self, index):
        target = []
        image = None
        for k in self.order:
            if k == "image":
                image = imread(self.images[index])
                target.append(image)
            elif k == "mask":
                mask = self._trans_mask(imread(self.masks[index], cv2().IMREAD_GRAYSCALE))
                target.append(mask[:, :, np.newaxis])
            elif k == "info":
                if image is None:
                    image = imread(self.images[index])
                target.append([image.shape[0], image.shape[1], self.images[index]])
            else:
                raise NotImplementedError(f"Cityscapes: unsupported field {k!r}")
        return tuple(target)

    def __len__(self):
        return len(self.images)

    def _trans_mask(self, mask):
        label = np.full(mask.shape, 255, dtype=np.uint8)
        for i, tl in enumerate(_TRAIN_LABEL_IDS):
            label[mask == tl] = i
        return label

    def _get_target_suffix(self, mode, target_type):
        suffix = {"instance": "instanceIds.png", "semantic": "labelIds.png",
                  "color": "color.png"}.get(target_type, "polygons.json")
        return "{}_{}".format(mode, suffix)

    def _load_json(self, path):
        with open(path, "r") as file:
            return json.load(file)
