"""Pascal VOC: detection (``Annotations/*.xml``) or segmentation (``SegmentationClass/*.png``)."""
import collections
import os
import xml.etree.ElementTree as ET

import numpy as np

from ..._cv2 import cv2, imread
from ._names import VOC_CLASS_COLORS, VOC_CLASS_NAMES
from .meta_vision import VisionDataset

__all__ = ["PascalVOC"]


class PascalVOC(VisionDataset):
    r"""`Pascal VOC <http://host.robots.ox.ac.uk/pascal/VOC/>`_ in its devkit layout under ``root``
    (``JPEGImages/``, ``Annotations/``, ``ImageSets/Main/<image_set>.txt`` for detection;
    ``SegmentationClass[_aug]/``, ``ImageSets/Segmentation/<image_set>.txt`` for segmentation).

    Args:
        root: the ``VOC20xx`` directory.
        image_set: the split name, e.g. ``"train"``, ``"val"``, ``"trainval"``; a name with
            ``"aug"`` reads grey label masks from ``SegmentationClass_aug``.
        order: the sample fields, from ``("image", "boxes", "boxes_category", "mask", "info")``;
            boxes (xyxy float32) and categories (1-based int32) or mask (``(H, W, 1)`` uint8 class
            ids, 255 elsewhere), not both.
    """

    supported_order = ("image", "boxes", "boxes_category", "mask", "info")
    class_names = VOC_CLASS_NAMES
    class_colors = [list(c) for c in VOC_CLASS_COLORS]

    def __init__(self, root, image_set, *, order=None):
        order = ("image",) if order is None else order
        detection = "boxes" in order or "boxes_category" in order
        if detection and "mask" in order:
            raise ValueError("PascalVOC only supports boxes & boxes_category or mask, not both.")
        super().__init__(root, order=order, supported_order=self.supported_order)
        if not os.path.isdir(self.root):
            raise RuntimeError(f"Dataset not found or corrupted: {self.root!r} is not a directory.")
        self.image_set = image_set
        image_dir = os.path.join(self.root, "JPEGImages")
        if detection:
            split_dir = os.path.join(self.root, "ImageSets", "Main")
        elif "mask" in order:
            split_dir = os.path.join(self.root, "ImageSets", "Segmentation")
        else:
            raise NotImplementedError("PascalVOC needs 'boxes'/'boxes_category' or 'mask' in order, "
                                      f"got order={order!r}")
        with open(os.path.join(split_dir, image_set.rstrip("\n") + ".txt")) as f:
            self.file_names = [x.strip() for x in f if x.strip()]
        self.images = [os.path.join(image_dir, x + ".jpg") for x in self.file_names]
        if detection:
            annotation_dir = os.path.join(self.root, "Annotations")
            self.annotations = [os.path.join(annotation_dir, x + ".xml") for x in self.file_names]
        else:
            mask_dir = os.path.join(self.root, "SegmentationClass_aug" if "aug" in image_set
                                    else "SegmentationClass")
            self.masks = [os.path.join(mask_dir, x + ".png") for x in self.file_names]
        self.img_infos = dict()

    def _objects(self, index):
        anno = self.parse_voc_xml(ET.parse(self.annotations[index]).getroot())
        objs = anno["annotation"].get("object", [])
        return objs if isinstance(objs, list) else [objs]

    def __getitem__(self, index):
        target = []
        image = None
        for k in self.order:
            if k == "image":
                image = imread(self.images[index])
                target.append(image)
            elif k == "boxes":
                boxes = [obj["bndbox"] for obj in self._objects(index)]
                boxes = [(bb["xmin"], bb["ymin"], bb["xmax"], bb["ymax"]) for bb in boxes]
                target.append(np.array(boxes, dtype=np.float32).reshape(-1, 4))
            elif k == "boxes_category":
                cats = [self.class_names.index(obj["name"]) + 1 for obj in self._objects(index)]
                target.append(np.array(cats, dtype=np.int32))
            elif k == "mask":
                if "aug" in self.image_set:
                    mask = imread(self.masks[index], cv2().IMREAD_GRAYSCALE)
                else:
                    mask = self._trans_mask(imread(self.masks[index]))
                target.append(mask[:, :, np.newaxis])
            elif k == "info":
                info = self.get_img_info(index, image)
                target.append([info["height"], info["width"], info["file_name"]])
            else:
                raise NotImplementedError(f"PascalVOC: unsupported field {k!r}")
        return tuple(target)

    def __len__(self):
        return len(self.images)

    def get_img_info(self, index, image=None):
        """``{"height", "width", "file_name"}`` of image ``index`` (cached)."""
        if index not in self.img_infos:
            if image is None:
                image = imread(self.images[index])
            self.img_infos[index] = dict(height=image.shape[0], width=image.shape[1],
                                         file_name=self.file_names[index])
        return self.img_infos[index]

    def _trans_mask(self, mask):
        label = np.full(mask.shape[:2], 255, dtype=np.uint8)
        for i, (b, g, r) in enumerate(self.class_colors):
            label[(mask[:, :, 0] == b) & (mask[:, :, 1] == g) & (mask[:, :, 2] == r)] = i
        return label

    def parse_voc_xml(self, node):
        """A VOC annotation element as nested dicts (repeated tags as lists; objects always a
        list); leaf values are stripped strings."""
        voc_dict = {}
        children = list(node)
        if children:
            def_dic = collections.defaultdict(list)
            for dc in map(self.parse_voc_xml, children):
                for ind, v in dc.items():
                    def_dic[ind].append(v)
            if node.tag == "annotation":
                def_dic["object"] = [def_dic["object"]]
            voc_dict = {node.tag: {ind: v[0] if len(v) == 1 else v for ind, v in def_dic.items()}}
        if node.text:
            text = node.text.strip()
            if not children:
                voc_dict[node.tag] = text
        return voc_dict
