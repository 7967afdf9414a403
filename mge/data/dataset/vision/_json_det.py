"""The COCO-style json annotation index shared by ``COCO`` and ``Objects365``."""
import json
import os
from collections import defaultdict

import numpy as np

from ..._cv2 import imread

_DROP_IMAGE_KEYS = ("license", "coco_url", "date_captured", "flickr_url")


def load_index(ds, ann_file, keep_polygons):
    """Fill ``ds.imgs``, ``ds.img_to_anns``, ``ds.cats``, ``ds.ids`` from a json annotation file."""
    with open(ann_file, "r") as f:
        dataset = json.load(f)
    ds.imgs = dict()
    for img in dataset["images"]:
        for key in _DROP_IMAGE_KEYS:  # saves memory
            img.pop(key, None)
        ds.imgs[img["id"]] = img
    need_boxes = "boxes" in ds.order or "boxes_category" in ds.order
    ds.img_to_anns = defaultdict(list)
    for ann in dataset["annotations"]:
        if not need_boxes:
            ann.pop("bbox", None)
        if not keep_polygons:
            ann.pop("segmentation", None)
        ds.img_to_anns[ann["image_id"]].append(ann)
    ds.cats = {cat["id"]: cat for cat in dataset["categories"]}
    ds.ids = sorted(ds.imgs)


def filter_images(ds, is_valid):
    """Keep the images whose non-crowd, non-empty boxes pass ``is_valid(anno)``."""
    ids = []
    for img_id in ds.ids:
        anno = [obj for obj in ds.img_to_anns[img_id] if obj.get("iscrowd", 0) == 0]
        anno = [obj for obj in anno if obj["bbox"][2] > 0 and obj["bbox"][3] > 0]
        if is_valid(anno):
            ids.append(img_id)
            ds.img_to_anns[img_id] = anno
        else:
            del ds.imgs[img_id]
            ds.img_to_anns.pop(img_id, None)
    ds.ids = ids


def category_maps(ds):
    ds.json_category_id_to_contiguous_id = {v: i + 1 for i, v in enumerate(sorted(ds.cats))}
    ds.contiguous_category_id_to_json_id = {
        v: k for k, v in ds.json_category_id_to_contiguous_id.items()}


def get_field(ds, k, img_id, anno):
    """One sample field of image ``img_id``; None for a field this helper does not know."""
    if k == "image":
        return imread(os.path.join(ds.root, ds.imgs[img_id]["file_name"]))
    if k == "boxes":
        boxes = np.array([obj["bbox"] for obj in anno], dtype=np.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # xywh -> xyxy
        return boxes
    if k == "boxes_category":
        cats = [ds.json_category_id_to_contiguous_id[obj["category_id"]] for obj in anno]
        return np.array(cats, dtype=np.int32)
    if k == "info":
        info = ds.imgs[img_id]
        return [info["height"], info["width"], info["file_name"]]
    return None
