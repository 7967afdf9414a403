"""Objects365 from its COCO-style json annotation file."""
from . import _json_det
from ._names import OBJECTS365_CLASS_NAMES
from .meta_vision import VisionDataset

__all__ = ["Objects365"]


class Objects365(VisionDataset):
    r"""`Objects365 <https://www.objects365.org/overview.html>`_ detection data (COCO's json format).

    Args:
        root: the image directory.
        ann_file: the json annotation file.
        remove_images_without_annotations: drop images without a non-crowd, non-empty box.
        order: sample fields from ``("image", "boxes", "boxes_category", "info")`` (as :class:`COCO`).
    """

    supported_order = ("image", "boxes", "boxes_category", "info")
    class_names = OBJECTS365_CLASS_NAMES

    def __init__(self, root, ann_file, remove_images_without_annotations=False, *, order=None):
        super().__init__(root, order=order, supported_order=self.supported_order)
        _json_det.load_index(self, ann_file, keep_polygons=True)
        if remove_images_without_annotations:
            _json_det.filter_images(self, lambda anno: len(anno) > 0)
        _json_det.category_maps(self)

    def __getitem__(self, index):
        img_id = self.ids[index]
        anno = self.img_to_anns[img_id]
        return tuple(_json_det.get_field(self, k, img_id, anno) for k in self.order)

    def __len__(self):
        return len(self.ids)

    def get_img_info(self, index):
        """The json record of image ``index``."""
        return self.imgs[self.ids[index]]
