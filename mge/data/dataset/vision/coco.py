"""MS COCO from its json annotation file and image directory."""
import numpy as np

from . import _json_det
from ._names import COCO_CLASS_NAMES, COCO_CLASSES_ORIGINID, COCO_KEYPOINT_NAMES
from .meta_vision import VisionDataset

__all__ = ["COCO"]

min_keypoints_per_image = 10


def _count_visible_keypoints(anno):
    return sum(sum(1 for v in ann["keypoints"][2::3] if v > 0) for ann in anno)


def has_valid_annotation(anno, order):
    """Whether an image's annotations are usable for the fields in ``order``."""
    if len(anno) == 0:
        return False
    if ("boxes" in order or "boxes_category" in order) and "bbox" not in anno[0]:
        return False
    if "keypoints" in order:
        if "keypoints" not in anno[0]:
            return False
        # keypoint detection keeps images with at least min_keypoints_per_image visible keypoints
        if _count_visible_keypoints(anno) < min_keypoints_per_image:
            return False
    return True


class COCO(VisionDataset):
    r"""`MS COCO <http://cocodataset.org/#home>`_ detection / keypoint data.

    Args:
        root: the image directory (``file_name`` of each image is relative to it).
        ann_file: the json annotation file (``images``, ``annotations``, ``categories``).
        remove_images_without_annotations: drop images without a usable (non-crowd, non-empty)
            annotation for the requested fields.
        order: sample fields from ``("image", "boxes", "boxes_category", "keypoints", "info")``:
            image (BGR uint8), boxes (xyxy float32 ``(N, 4)``), categories (contiguous ids from 1,
            int32), keypoints (``(N, 17, 3)`` float32), info (``[height, width, file_name]``).
    """

    supported_order = ("image", "boxes", "boxes_category", "keypoints", "info")
    class_names = COCO_CLASS_NAMES
    classes_originID = COCO_CLASSES_ORIGINID
    keypoint_names = COCO_KEYPOINT_NAMES

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, order=order, supported_order=self.supported_order)
        _json_det.load_index(self, ann_file, keep_polygons="polygons" in self.order)
        if remove_images_without_annotations:
            _json_det.filter_images(self, lambda anno: has_valid_annotation(anno, self.order))
        _json_det.category_maps(self)

    def __getitem__(self, index):
        img_id = self.ids[index]
        anno = self.img_to_anns[img_id]
        target = []
        for k in self.order:
            value = _json_det.get_field(self, k, img_id, anno)
            if value is None and k == "keypoints":
                value = np.array([obj["keypoints"] for obj in anno], dtype=np.float32).reshape(
                    -1, len(self.keypoint_names), 3)
            elif value is None:
                raise NotImplementedError(f"COCO: unsupported field {k!r}")
            target.append(value)
        return tuple(target)

    def __len__(self):
        return len(self.ids)

    def get_img_info(self, index):
        """The json record of image ``index`` (``id``, ``file_name``, ``height``, ``width``...)."""
        return self.imgs[self.ids[index]]
