"""``_imperative_rt.common``: ``CompNode``, ``DeviceTensorND`` and the dtype helpers MegEngine
keeps in C++ (``get_scale``, ``get_zero_point``, ``is_quantize``, ``is_dtype_equal``)."""
import numpy as np

from ..._core.device import CompNode as _CompNode
from ..._core.device import as_device

__all__ = ["CompNode", "DeviceTensorND", "get_scale", "get_zero_point", "is_quantize",
           "is_dtype_equal"]


class _CompNodeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _CompNode)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _CompNode)


class CompNode(metaclass=_CompNodeMeta):
    """MegEngine's ``CompNode(name)``: the device ``name`` (``"xpux"``, ``"cpu0"``, ...), as mge's
    device object (``mge._core.device.CompNode``); ``isinstance`` accepts mge's devices."""

    def __new__(cls, name=None):
        if name is None:
            return as_device("xpux")
        return as_device(name)


class DeviceTensorND:
    """A tensor's device value (MegEngine's ``DeviceTensorND``): ``shape``, ``dtype``,
    ``comp_node`` and ``numpy()`` of the value the tensor held when it was taken."""

    def __init__(self, tensor):
        self._tensor = tensor.detach()

    @property
    def shape(self):
        """The shape, a tuple."""
        return self._tensor.shape

    @property
    def dtype(self):
        """The numpy dtype."""
        return self._tensor.dtype

    @property
    def comp_node(self):
        """The device."""
        return self._tensor.device

    def numpy(self):
        """The value as a numpy array."""
        return self._tensor.numpy()


def is_quantize(dtype):
    """Whether ``dtype`` is a quantized dtype (a numpy dtype with ``mgb_dtype`` metadata naming a
    ``Quantized*`` type)."""
    try:
        meta = np.dtype(dtype).metadata
    except TypeError:
        return False
    return bool(meta) and "mgb_dtype" in meta and \
        meta["mgb_dtype"].get("name", "").startswith("Quantized")


def get_scale(dtype):
    """The scale of a quantized dtype."""
    if not is_quantize(dtype):
        raise ValueError(f"{dtype} is not a quantized dtype")
    return np.dtype(dtype).metadata["mgb_dtype"]["scale"]


def get_zero_point(dtype):
    """The zero point of an asymmetric quantized dtype (``quint8``, ``quint4``)."""
    if not is_quantize(dtype):
        raise ValueError(f"{dtype} is not a quantized dtype")
    meta = np.dtype(dtype).metadata["mgb_dtype"]
    if "zero_point" not in meta:
        raise ValueError(f"{meta['name']} has no zero point")
    return meta["zero_point"]


def is_dtype_equal(a, b):
    """Whether two dtypes are equal, quantization parameters included."""
    if a is None or b is None:
        return a is b
    a, b = np.dtype(a), np.dtype(b)
    if is_quantize(a) or is_quantize(b):
        return is_quantize(a) and is_quantize(b) and a == b and \
            a.metadata["mgb_dtype"] == b.metadata["mgb_dtype"]
    return a == b
