"""``QuantMode`` and ``QParams``: the quantization parameters of a tensor (``Tensor.qparams``),
as MegEngine's ``megengine.quantization.utils`` defines them."""
from enum import Enum

__all__ = ["QuantMode", "QParams", "create_qparams"]


class QuantMode(Enum):
    """Quantization mode (MegEngine's spelling)."""

    SYMMERTIC = 1
    ASYMMERTIC = 2


class QParams:
    """``mode``, ``dtype_meta`` (a ``QuantDtypeMeta``), ``scale`` and ``zero_point`` (tensors)."""

    __slots__ = "mode", "dtype_meta", "scale", "zero_point"

    def __init__(self, mode, dtype_meta, scale, zero_point):
        self.mode = mode
        self.dtype_meta = dtype_meta
        self.scale = scale
        self.zero_point = zero_point

    def update(self, qparams):
        """Copy every field of ``qparams``."""
        for key in self.__slots__:
            setattr(self, key, getattr(qparams, key))

    def __eq__(self, other):
        if len(self.__slots__) != len(getattr(other, "__slots__", ())):
            return False
        return all(hasattr(other, k) and getattr(self, k) == getattr(other, k)
                   for k in self.__slots__)

    __hash__ = None

    def __repr__(self):
        return "QParams({})".format(", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__))


def create_qparams(mode=QuantMode.SYMMERTIC, dtype_meta=None, scale=None, zero_point=None):
    """A ``QParams``; ``mode`` is a ``QuantMode``."""
    return QParams(mode, dtype_meta, scale, zero_point)


def qparams_of_dtype(dtype):
    """The default ``qparams`` of a tensor (MegEngine's: empty, whatever the dtype)."""
    del dtype
    return create_qparams()
