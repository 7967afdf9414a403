"""The vision transforms (MegEngine's ``megengine.data.transform.vision.transform``).

Each transform applies one per-sample random draw (from numpy's global RNG, as MegEngine does) to
every field of the sample named by ``order``: images are ``(H, W, C)`` arrays (BGR), boxes
``(N, 4)`` xyxy, coords ``(N, 2)``, keypoints ``(N, K, 3)``, masks ``(H, W, 1)``; fields whose name
ends in ``category`` or ``info`` pass through unchanged.
"""
import collections.abc
import math
from typing import List, Sequence, Tuple

import numpy as np

from ..._cv2 import cv2
from ..meta_transform import Transform
from . import functional as F

__all__ = [
    "VisionTransform", "ToMode", "Compose", "TorchTransformCompose", "Pad", "Resize",
    "ShortestEdgeResize", "RandomResize", "RandomCrop", "RandomResizedCrop", "CenterCrop",
    "RandomHorizontalFlip", "RandomVerticalFlip", "Normalize", "GaussianNoise",
    "BrightnessTransform", "SaturationTransform", "ContrastTransform", "HueTransform", "ColorJitter",
    "Lighting",
]

_INTER_NEAREST = 0
_INTER_LINEAR = 1


def _pair(size):
    return (size, size) if isinstance(size, int) else size


class VisionTransform(Transform):
    r"""Base class of the vision transforms.

    ``apply(input)`` takes one sample, a tuple whose fields are named by ``order`` (a lone array
    is a 1-tuple), and calls ``_apply_<field>`` on each: ``_apply_image``, ``_apply_coords``,
    ``_apply_boxes``, ``_apply_mask``, ``_apply_keypoints``, ``_apply_polygons``. Fields beyond
    ``order`` and ``*category`` / ``*info`` fields pass through. Subclasses that draw random
    parameters do it once per sample in ``apply`` so that every field gets the same ones.

    Args:
        order: the field names of a sample, default ``("image",)``; e.g.
            ``("image", "boxes", "boxes_category")``. Available: ``"image"``, ``"coords"``,
            ``"boxes"``, ``"mask"``, ``"keypoints"``, ``"polygons"``, ``"*category"``,
            ``"*info"``; another name needs its ``_apply_<name>`` method.
    """

    def __init__(self, order=None):
        super().__init__()
        if order is None:
            order = ("image",)
        elif not isinstance(order, collections.abc.Sequence) or isinstance(order, str):
            raise ValueError("order should be a sequence, but got order={!r}".format(order))
        for k in order:
            if k in ("batch",):
                raise ValueError("{} is invalid data type".format(k))
            if k.endswith("category") or k.endswith("info"):
                continue  # passed through when no _apply_ method exists
            if self._get_apply(k) is None:
                raise NotImplementedError("{} is unsupported data type".format(k))
        self.order = order

    def apply_batch(self, inputs: Sequence[Tuple]):
        r"""Apply the transform to each sample of a batch."""
        return tuple(self.apply(input) for input in inputs)

    def apply(self, input: Tuple):
        r"""Apply the transform to one sample."""
        if not isinstance(input, tuple):
            input = (input,)
        appliers = self._appliers()
        output = [x if f is None else f(x) for f, x in zip(appliers, input)]
        if len(input) > len(appliers):
            output.extend(input[len(appliers):])
        return output[0] if len(output) == 1 else tuple(output)

    def _appliers(self):
        # the _apply_* method of each field of ``order``, looked up once per order
        cache = self.__dict__.get("_appliers_cache")
        order = self.order
        if cache is None or cache[0] is not order:
            cache = (order, [self._get_apply(k) for k in order])
            self.__dict__["_appliers_cache"] = cache
        return cache[1]

    def _get_apply(self, key):
        return getattr(self, "_apply_{}".format(key), None)

    def _get_image(self, input: Tuple):
        if not isinstance(input, tuple):
            input = (input,)
        return input[self.order.index("image")]

    def _apply_image(self, image):
        raise NotImplementedError(f"{type(self).__name__} does not transform images")

    def _apply_coords(self, coords):
        raise NotImplementedError(f"{type(self).__name__} does not transform coordinates")

    def _apply_boxes(self, boxes):
        # the four corners of each box, transformed as coords, then their bounding box
        idxs = np.array([(0, 1), (2, 1), (0, 3), (2, 3)]).flatten()
        coords = np.asarray(boxes).reshape(-1, 4)[:, idxs].reshape(-1, 2)
        coords = self._apply_coords(coords).reshape((-1, 4, 2))
        return np.concatenate((coords.min(axis=1), coords.max(axis=1)), axis=1)

    def _apply_mask(self, mask):
        raise NotImplementedError(f"{type(self).__name__} does not transform masks")

    def _apply_keypoints(self, keypoints):
        coords, visibility = keypoints[..., :2], keypoints[..., 2:]
        trans_coords = [self._apply_coords(p) for p in coords]
        return np.concatenate((trans_coords, visibility), axis=-1)

    def _apply_polygons(self, polygons):
        return [[self._apply_coords(p) for p in instance] for instance in polygons]


class _Passthrough:
    """Mixin: coords and masks unchanged (transforms of pixel values only)."""

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        return mask


class ToMode(VisionTransform):
    r"""Change the layout of images and masks: ``"CHW"`` moves the channel axis first
    (contiguous), as networks expect.

    Args:
        mode: the output layout; only ``"CHW"``.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, mode="CHW", *, order=None):
        super().__init__(order)
        assert mode in ["CHW"], "unsupported mode: {}".format(mode)
        self.mode = mode

    def _apply_image(self, image):
        if self.mode == "CHW":
            return np.ascontiguousarray(np.rollaxis(image, 2))
        return image

    def _apply_coords(self, coords):
        return coords

    def _apply_mask(self, mask):
        if self.mode == "CHW":
            return np.ascontiguousarray(np.rollaxis(mask, 2))
        return mask


class Compose(VisionTransform):
    r"""Apply several transforms in sequence (their ``order`` becomes this one's).

    Args:
        transforms: the :class:`VisionTransform` s.
        batch_compose: apply each transform to the whole batch in turn (``apply_batch``) instead
            of all transforms to each sample; excludes ``shuffle_indices``.
        shuffle_indices: groups of 1-based positions in ``transforms`` whose order is shuffled
            per sample (``np.random.permutation``), e.g. ``[(1, 2, 3)]``.
        order: as :class:`VisionTransform`.

    Example:
        >>> import numpy as np
        >>> import mge.data.transform as T
        >>> t = T.Compose([T.Normalize(mean=127.5, std=127.5), T.ToMode("CHW")])
        >>> t.apply(np.zeros((4, 4, 3), np.uint8)).shape
        (3, 4, 4)
    """

    def __init__(self, transforms: List[VisionTransform] = [], batch_compose: bool = False,
                 shuffle_indices: List[Tuple] = None, *, order=None):
        super().__init__(order)
        self.transforms = transforms
        self._set_order()
        if batch_compose and shuffle_indices is not None:
            raise ValueError("Do not support shuffle when apply transforms along the whole batch")
        self.batch_compose = batch_compose
        if shuffle_indices is not None:
            shuffle_indices = [tuple(x - 1 for x in idx) for idx in shuffle_indices]
        self.shuffle_indices = shuffle_indices

    def _set_order(self):
        for t in self.transforms:
            t.order = self.order
            if isinstance(t, Compose):
                t._set_order()

    def apply_batch(self, inputs: Sequence[Tuple]):
        r"""Apply to a batch (transform by transform when ``batch_compose``)."""
        if self.batch_compose:
            for t in self.transforms:
                inputs = t.apply_batch(inputs)
            return inputs
        return super().apply_batch(inputs)

    def apply(self, input: Tuple):
        r"""Apply every transform (shuffled per ``shuffle_indices``) to one sample."""
        for t in self._shuffle():
            input = t.apply(input)
        return input

    def _shuffle(self):
        if self.shuffle_indices is None:
            return self.transforms
        source_idx = list(range(len(self.transforms)))
        for idx in self.shuffle_indices:
            shuffled = np.random.permutation(idx).tolist()
            for src, dst in zip(idx, shuffled):
                source_idx[src] = dst
        return [self.transforms[i] for i in source_idx]


class TorchTransformCompose(VisionTransform):
    r"""Apply torchvision transforms (which take PIL images) to the image field: the BGR array
    becomes an RGB PIL image, goes through ``transforms`` and comes back as a BGR uint8 array.
    torchvision's tensor transforms (``ToTensor``, ``Normalize``) are not supported. Needs Pillow.

    Args:
        transforms: callables on PIL images (e.g. torchvision transforms).
        order: as :class:`VisionTransform`.
    """

    def __init__(self, transforms, *, order=None):
        super().__init__(order)
        self.transforms = transforms

    def _apply_image(self, image):
        try:
            from PIL import Image
        except ImportError as e:
            raise ImportError("TorchTransformCompose needs Pillow: pip install pillow") from e
        try:
            import accimage
        except ImportError:
            accimage = None
        cv = cv2()
        if image.shape[0] == 3:  # CHW
            image = np.ascontiguousarray(image[[2, 1, 0]])
        elif image.shape[2] == 3:  # HWC
            image = cv.cvtColor(image, cv.COLOR_BGR2RGB)
        image = Image.fromarray(image.astype(np.uint8))
        for t in self.transforms:
            image = t(image)
        if isinstance(image, Image.Image) or (accimage is not None
                                              and isinstance(image, accimage.Image)):
            image = np.array(image, dtype=np.uint8)
        if image.shape[0] == 3:  # CHW
            image = np.ascontiguousarray(image[[2, 1, 0]])
        elif image.shape[2] == 3:  # HWC
            image = cv.cvtColor(image, cv.COLOR_RGB2BGR)
        return image


class Pad(VisionTransform):
    r"""Pad images (and masks, coords) with constants.

    Args:
        size: an int (all four sides), ``(bottom, right)`` or ``(top, bottom, left, right)``.
        value: padding value of images, a number or one per channel; a float casts to float32.
        mask_value: padding value of masks (an int).
        order: as :class:`VisionTransform`.
    """

    def __init__(self, size=0, value=0, mask_value=0, *, order=None):
        super().__init__(order)
        if isinstance(size, int):
            size = (size, size, size, size)
        elif isinstance(size, collections.abc.Sequence) and len(size) == 2:
            size = (0, size[0], 0, size[1])
        elif not (isinstance(size, collections.abc.Sequence) and len(size) == 4):
            raise ValueError("size should be a list/tuple which contains (top, down, left, right) "
                             "four pad sizes, but got size={!r}".format(size))
        self.size = size
        self.value = value
        if not isinstance(mask_value, int):
            raise ValueError("mask_value should be a positive integer, "
                             "but got mask_value={!r}".format(mask_value))
        self.mask_value = mask_value

    def _apply_image(self, image):
        return F.pad(image, self.size, self.value)

    def _apply_coords(self, coords):
        coords[:, 0] += self.size[2]
        coords[:, 1] += self.size[0]
        return coords

    def _apply_mask(self, mask):
        return F.pad(mask, self.size, self.mask_value)


class _ResizeBase(VisionTransform):
    """Resize to ``self._get_shape(image)`` -> ``(h, w, th, tw)``; masks with nearest neighbour."""

    def apply(self, input: Tuple):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        self._shape_info = self._get_shape(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return image
        return F.resize(image, (th, tw), self.interpolation)

    def _apply_coords(self, coords):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return coords
        coords[:, 0] = coords[:, 0] * (tw / w)
        coords[:, 1] = coords[:, 1] * (th / h)
        return coords

    def _apply_mask(self, mask):
        h, w, th, tw = self._shape_info
        if h == th and w == tw:
            return mask
        return F.resize(mask, (th, tw), _INTER_NEAREST)


class Resize(_ResizeBase):
    r"""Resize images (bilinear by default), masks (nearest) and coordinates.

    Args:
        output_size: ``(height, width)``, or an int: the shorter side's length, keeping the aspect
            ratio (the longer side truncated to an int).
        interpolation: an OpenCV flag (``cv2.INTER_NEAREST`` 0, ``INTER_LINEAR`` 1,
            ``INTER_CUBIC`` 2, ``INTER_AREA`` 3, ``INTER_LANCZOS4`` 4), or a sequence to choose from.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, output_size, interpolation=_INTER_LINEAR, *, order=None):
        super().__init__(order)
        self.output_size = output_size
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w, _ = image.shape
        if isinstance(self.output_size, int):
            if min(h, w) == self.output_size:
                return h, w, h, w
            if h < w:
                return h, w, self.output_size, int(self.output_size * w / h)
            return h, w, int(self.output_size * h / w), self.output_size
        return (h, w, *self.output_size)


class ShortestEdgeResize(_ResizeBase):
    r"""Resize so that the shorter side has a random length from ``min_size`` (and the longer one
    is at most ``max_size``), keeping the aspect ratio.

    Args:
        min_size: the shorter side's length: ``(low, high)`` drawn uniformly (``"range"``) or a
            sequence of choices (``"choice"``); an int means exactly that.
        max_size: the longest allowed side.
        sample_style: ``"range"`` or ``"choice"``.
        interpolation: an OpenCV interpolation flag.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, min_size, max_size, sample_style="range", interpolation=_INTER_LINEAR, *,
                 order=None):
        super().__init__(order)
        if sample_style not in ("range", "choice"):
            raise NotImplementedError("{} is unsupported sample style".format(sample_style))
        self.sample_style = sample_style
        if isinstance(min_size, int):
            min_size = (min_size, min_size)
        self.min_size = min_size
        self.max_size = max_size
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w, _ = image.shape
        if self.sample_style == "range":
            size = np.random.randint(self.min_size[0], self.min_size[1] + 1)
        else:
            size = np.random.choice(self.min_size)
        scale = size / min(h, w)
        if h < w:
            th, tw = size, scale * w
        else:
            th, tw = scale * h, size
        if max(th, tw) > self.max_size:
            scale = self.max_size / max(th, tw)
            th, tw = th * scale, tw * scale
        return h, w, int(round(th)), int(round(tw))


class RandomResize(_ResizeBase):
    r"""Resize by a random factor drawn uniformly from ``scale_range``.

    Args:
        scale_range: ``(low, high)`` of the factor.
        interpolation: an OpenCV interpolation flag.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, scale_range, interpolation=_INTER_LINEAR, *, order=None):
        super().__init__(order)
        self.scale_range = scale_range
        self.interpolation = interpolation

    def _get_shape(self, image):
        h, w, _ = image.shape
        scale = np.random.uniform(*self.scale_range)
        return h, w, int(round(h * scale)), int(round(w * scale))


class RandomCrop(VisionTransform):
    r"""Pad, then crop a random ``output_size`` window; an image smaller than the window is padded
    at the bottom / right up to it.

    Args:
        output_size: ``(height, width)`` or an int.
        padding_size: as ``size`` of :class:`Pad`.
        padding_value: as ``value`` of :class:`Pad`.
        padding_maskvalue: padding value of masks.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, output_size, padding_size=0, padding_value=[0, 0, 0], padding_maskvalue=0, *,
                 order=None):
        super().__init__(order)
        self.output_size = _pair(output_size)
        self.pad = Pad(padding_size, padding_value, order=self.order)
        self.padding_value = padding_value
        self.padding_maskvalue = padding_maskvalue

    def apply(self, input):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        input = self.pad.apply(input)
        self._h, self._w, _ = self._get_image(input).shape
        self._th, self._tw = self.output_size
        self._x = np.random.randint(0, max(0, self._w - self._tw) + 1)
        self._y = np.random.randint(0, max(0, self._h - self._th) + 1)
        return super().apply(input)

    def _window(self, data, value):
        if self._th > self._h:
            data = F.pad(data, (self._th - self._h, 0), value)
        if self._tw > self._w:
            data = F.pad(data, (0, self._tw - self._w), value)
        return data[self._y: self._y + self._th, self._x: self._x + self._tw]

    def _apply_image(self, image):
        return self._window(image, self.padding_value)

    def _apply_coords(self, coords):
        coords[:, 0] -= self._x
        coords[:, 1] -= self._y
        return coords

    def _apply_mask(self, mask):
        return self._window(mask, self.padding_maskvalue)


class RandomResizedCrop(VisionTransform):
    r"""Crop a window of random area (``scale_range`` of the image's) and aspect ratio
    (``ratio_range``, drawn log-uniformly), then resize it to ``output_size``; after 10 failed
    draws, a central crop of the nearest allowed ratio.

    Args:
        output_size: ``(height, width)`` or an int.
        scale_range: ``(min, max)`` fraction of the image area.
        ratio_range: ``(min, max)`` width / height ratio.
        interpolation: an OpenCV interpolation flag.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, output_size, scale_range=(0.08, 1.0), ratio_range=(3.0 / 4, 4.0 / 3),
                 interpolation=_INTER_LINEAR, *, order=None):
        super().__init__(order)
        self.output_size = _pair(output_size)
        assert scale_range[0] <= scale_range[1], "scale_range should be of kind (min, max)"
        assert ratio_range[0] <= ratio_range[1], "ratio_range should be of kind (min, max)"
        self.scale_range = scale_range
        self.ratio_range = ratio_range
        self.interpolation = interpolation

    def apply(self, input: Tuple):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        self._coord_info = self._get_coord(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        x, y, w, h = self._coord_info
        return F.resize(image[y: y + h, x: x + w], self.output_size, self.interpolation)

    def _apply_coords(self, coords):
        x, y, w, h = self._coord_info
        coords[:, 0] = (coords[:, 0] - x) * self.output_size[1] / w
        coords[:, 1] = (coords[:, 1] - y) * self.output_size[0] / h
        return coords

    def _apply_mask(self, mask):
        x, y, w, h = self._coord_info
        return F.resize(mask[y: y + h, x: x + w], self.output_size, _INTER_NEAREST)

    def _get_coord(self, image, attempts=10):
        height, width, _ = image.shape
        area = height * width
        log_ratio = tuple(math.log(x) for x in self.ratio_range)
        for _ in range(attempts):
            target_area = np.random.uniform(*self.scale_range) * area
            aspect_ratio = math.exp(np.random.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                x = np.random.randint(0, width - w + 1)
                y = np.random.randint(0, height - h + 1)
                return x, y, w, h
        in_ratio = float(width) / float(height)  # fallback: central crop
        if in_ratio < min(self.ratio_range):
            w, h = width, int(round(width / min(self.ratio_range)))
        elif in_ratio > max(self.ratio_range):
            h, w = height, int(round(height * max(self.ratio_range)))
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h


class CenterCrop(VisionTransform):
    r"""Crop the central ``output_size`` window.

    Args:
        output_size: ``(height, width)`` or an int; not larger than the image.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, output_size, *, order=None):
        super().__init__(order)
        self.output_size = _pair(output_size)

    def apply(self, input: Tuple):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        self._coord_info = self._get_coord(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image):
        x, y = self._coord_info
        th, tw = self.output_size
        return image[y: y + th, x: x + tw]

    def _apply_coords(self, coords):
        x, y = self._coord_info
        coords[:, 0] -= x
        coords[:, 1] -= y
        return coords

    def _apply_mask(self, mask):
        return self._apply_image(mask)

    def _get_coord(self, image):
        th, tw = self.output_size
        h, w, _ = image.shape
        assert th <= h and tw <= w, "output size is bigger than image size"
        return int(round((w - tw) / 2.0)), int(round((h - th) / 2.0))


class RandomHorizontalFlip(VisionTransform):
    r"""Flip left-right with probability ``prob``.

    Args:
        prob: the probability of flipping.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, prob: float = 0.5, *, order=None):
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Tuple):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        self._flipped = np.random.random() < self.prob
        self._w = self._get_image(input).shape[1]
        return super().apply(input)

    def _apply_image(self, image):
        return F.flip(image, flipCode=1) if self._flipped else image

    def _apply_coords(self, coords):
        if self._flipped:
            coords[:, 0] = self._w - coords[:, 0]
        return coords

    def _apply_mask(self, mask):
        return self._apply_image(mask)


class RandomVerticalFlip(VisionTransform):
    r"""Flip upside down with probability ``prob``.

    Args:
        prob: the probability of flipping.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, prob: float = 0.5, *, order=None):
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Tuple):
        r"""Apply to one sample: one random draw, shared by all its fields."""
        self._flipped = np.random.random() < self.prob
        self._h = self._get_image(input).shape[0]
        return super().apply(input)

    def _apply_image(self, image):
        return F.flip(image, flipCode=0) if self._flipped else image

    def _apply_coords(self, coords):
        if self._flipped:
            coords[:, 1] = self._h - coords[:, 1]
        return coords

    def _apply_mask(self, mask):
        return self._apply_image(mask)


class Normalize(_Passthrough, VisionTransform):
    r"""``(image - mean) / std`` per channel (float32 for uint8 images).

    Args:
        mean: a number or one per channel.
        std: a number or one per channel.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, mean=0.0, std=1.0, *, order=None):
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image):
        return (image - self.mean) / self.std


class GaussianNoise(_Passthrough, VisionTransform):
    r"""Add ``normal(mean, std) * 255`` noise, clipped to ``[0, 255]``, keeping the dtype.

    Args:
        mean: mean of the noise (before the factor 255).
        std: standard deviation of the noise (before the factor 255).
        order: as :class:`VisionTransform`.
    """

    def __init__(self, mean=0.0, std=1.0, *, order=None):
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image):
        dtype = image.dtype
        noise = np.random.normal(self.mean, self.std, image.shape) * 255
        image = image + noise.astype(np.float32)
        return np.clip(image, 0, 255).astype(dtype)


def _non_negative(value, what):
    if value < 0:
        raise ValueError("{} value should be non-negative, but got {!r}".format(what, value))
    return value


def _alpha(value):
    return np.random.uniform(max(0, 1 - value), 1 + value)


class BrightnessTransform(_Passthrough, VisionTransform):
    r"""Scale pixel values by a factor drawn from ``[max(0, 1 - value), 1 + value]``.

    Args:
        value: the jitter; 0 leaves images unchanged.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        self.value = _non_negative(value, "brightness")

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32) * _alpha(self.value)
        return image.clip(0, 255).astype(dtype)


class ContrastTransform(_Passthrough, VisionTransform):
    r"""Blend with the mean grey level: ``image * a + mean(gray) * (1 - a)``, ``a`` drawn from
    ``[max(0, 1 - value), 1 + value]``.

    Args:
        value: the jitter; 0 leaves images unchanged.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        self.value = _non_negative(value, "contrast")

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = _alpha(self.value)
        image = image * alpha + F.to_gray(image).mean() * (1 - alpha)
        return image.clip(0, 255).astype(dtype)


class SaturationTransform(_Passthrough, VisionTransform):
    r"""Blend with the grey image: ``image * a + gray * (1 - a)``, ``a`` drawn from
    ``[max(0, 1 - value), 1 + value]``.

    Args:
        value: the jitter; 0 leaves images unchanged.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        self.value = _non_negative(value, "saturation")

    def _apply_image(self, image):
        if self.value == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = _alpha(self.value)
        image = image * alpha + F.to_gray(image) * (1 - alpha)
        return image.clip(0, 255).astype(dtype)


class HueTransform(_Passthrough, VisionTransform):
    r"""Rotate the hue (OpenCV's full-range HSV) by a fraction drawn from ``[-value, value]``.

    Args:
        value: the jitter, in ``[0, 0.5]``; 0 leaves images unchanged.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, value, *, order=None):
        super().__init__(order)
        if value < 0 or value > 0.5:
            raise ValueError("hue value should be in [0.0, 0.5], but got {!r}".format(value))
        self.value = value

    def _apply_image(self, image):
        if self.value == 0:
            return image
        cv = cv2()
        dtype = image.dtype
        image = image.astype(np.uint8)
        h, s, v = cv.split(cv.cvtColor(image, cv.COLOR_BGR2HSV_FULL))
        alpha = np.random.uniform(-self.value, self.value)
        h = h.astype(np.uint8)
        # uint8 arithmetic wraps the hue around; the shift truncates toward zero and wraps as
        # numpy 1's ``np.uint8(alpha * 255)`` does (numpy 2 refuses negative values)
        with np.errstate(over="ignore"):
            h += np.uint8(int(alpha * 255) % 256)
        return cv.cvtColor(cv.merge([h, s, v]), cv.COLOR_HSV2BGR_FULL).astype(dtype)


class ColorJitter(VisionTransform):
    r"""Brightness, contrast, saturation and hue jitter, in a random order per sample.

    Args:
        brightness: as :class:`BrightnessTransform` (0: off).
        contrast: as :class:`ContrastTransform` (0: off).
        saturation: as :class:`SaturationTransform` (0: off).
        hue: as :class:`HueTransform` (0: off).
        order: as :class:`VisionTransform`.
    """

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0, *, order=None):
        super().__init__(order)
        transforms = []
        if brightness != 0:
            transforms.append(BrightnessTransform(brightness))
        if contrast != 0:
            transforms.append(ContrastTransform(contrast))
        if saturation != 0:
            transforms.append(SaturationTransform(saturation))
        if hue != 0:
            transforms.append(HueTransform(hue))
        self.transforms = Compose(transforms,
                                  shuffle_indices=[tuple(range(1, len(transforms) + 1))],
                                  order=order)

    def apply(self, input):
        r"""Apply the jitters, shuffled, to one sample."""
        return self.transforms.apply(input)


class Lighting(_Passthrough, VisionTransform):
    r"""AlexNet-style PCA lighting noise: adds ``eigvec @ (alpha * eigval)`` with
    ``alpha ~ normal(0, scale * 255)`` per channel, clipped to ``[0, 255]``.

    Args:
        scale: standard deviation of ``alpha`` (before the factor 255); 0 leaves images unchanged.
        order: as :class:`VisionTransform`.
    """

    def __init__(self, scale, *, order=None):
        super().__init__(order)
        self.scale = _non_negative(scale, "lighting scale")
        # ImageNet's RGB principal components, first axis reversed for BGR
        self.eigvec = np.array([[-0.5836, -0.6948, 0.4203],
                                [-0.5808, -0.0045, -0.8140],
                                [-0.5675, 0.7192, 0.4009]])
        self.eigval = np.array([0.2175, 0.0188, 0.0045])

    def _apply_image(self, image):
        if self.scale == 0:
            return image
        dtype = image.dtype
        image = image.astype(np.float32)
        alpha = np.random.normal(scale=self.scale * 255, size=3)
        image = image + self.eigvec.dot(alpha * self.eigval)
        return image.clip(0, 255).astype(dtype)
