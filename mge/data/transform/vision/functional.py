"""Image helpers of the vision transforms, on ``(H, W, C)`` arrays (OpenCV underneath)."""
import collections.abc
import functools
import random

import numpy as np

from ..._cv2 import cv2

__all__ = ["wrap_keepdims", "to_gray", "to_bgr", "pad", "flip", "resize"]


def wrap_keepdims(func):
    r"""Decorator: require a 3-d ``(H, W, C)`` image and give a 2-d OpenCV result its channel axis
    back."""

    @functools.wraps(func)
    def wrapper(image, *args, **kwargs):
        if len(image.shape) != 3:
            raise ValueError("image must have 3 dims, but got {} dims".format(len(image.shape)))
        ret = func(image, *args, **kwargs)
        if len(ret.shape) == 2:
            ret = ret[:, :, np.newaxis]
        return ret

    return wrapper


@wrap_keepdims
def to_gray(image):
    r"""A BGR image to grey, ``(H, W, 1)``."""
    cv = cv2()
    return cv.cvtColor(image, cv.COLOR_BGR2GRAY)


@wrap_keepdims
def to_bgr(image):
    r"""A grey image to BGR, ``(H, W, 3)``."""
    cv = cv2()
    return cv.cvtColor(image, cv.COLOR_GRAY2BGR)


@wrap_keepdims
def pad(input, size, value):
    r"""Pad ``input`` with the constant ``value``.

    Args:
        input: ``(H, W, C)`` data.
        size: an int (all four sides), ``(bottom, right)``, or ``(top, bottom, left, right)``.
        value: the padding value (a number or one per channel); a float value casts the image to
            float32.
    """
    cv = cv2()
    if isinstance(size, int):
        size = (size, size, size, size)
    elif isinstance(size, collections.abc.Sequence) and len(size) == 2:
        size = (0, size[0], 0, size[1])
    if np.array(value).dtype == float:
        input = input.astype(np.float32)
    return cv.copyMakeBorder(input, *size, cv.BORDER_CONSTANT, value=value)


@wrap_keepdims
def flip(image, flipCode):
    r"""Flip an image: ``flipCode`` 1 horizontally, 0 vertically, -1 both."""
    return cv2().flip(image, flipCode=flipCode)


@wrap_keepdims
def resize(input, size, interpolation=1):
    r"""Resize ``input`` to ``size = (height, width)``.

    ``interpolation`` is an OpenCV flag (default ``cv2.INTER_LINEAR``), or a sequence of flags to
    choose from at random (Python's ``random``).
    """
    if len(size) != 2:
        raise ValueError("resize needs (h, w), but got {}".format(size))
    if isinstance(interpolation, collections.abc.Sequence):
        interpolation = random.choice(interpolation)
    return cv2().resize(input, tuple(int(s) for s in size[::-1]), interpolation=interpolation)
