"""Transforms applied to each sample before collation (MegEngine's ``megengine.data.transform``).

The vision transforms compute with OpenCV as MegEngine does; ``cv2`` (``pip install "mge[data]"``)
is imported the first time one needs it.
"""
from .meta_transform import CudaTransform, PseudoTransform, Transform
from .vision import *  # noqa: F401,F403
from .vision import __all__ as _vision_all

__all__ = ["Transform", "PseudoTransform", "CudaTransform"] + list(_vision_all)
