"""``mge.core.tensor.dtype``: MegEngine's dtype helpers and quantized dtypes.

A quantized dtype is a numpy integer dtype whose metadata names the MegEngine type and holds its
parameters (``np.dtype("int8", metadata={"mgb_dtype": {"name": "QuantizedS8", "scale": 0.1}})``),
exactly as MegEngine builds them, so arrays and tensors of these dtypes carry their scale and zero
point.  ``convert_to_*`` quantizes a float array, ``convert_from_*`` dequantizes.  mge computes on
the integer values as they are: it has no quantized kernels (see docs/differences.rst).

``bfloat16`` is ``ml_dtypes.bfloat16`` when the ``ml_dtypes`` package is installed.  MegEngine's
``intb1``/``intb2``/``intb4`` (odd-valued low-bit numpy types defined in C++) are not provided:
the names exist, and using one as a dtype raises ``NotImplementedError``.
"""
import re
from collections import namedtuple

import numpy as np

from ..._core import _accel
from .._imperative_rt.common import get_scale, get_zero_point, is_dtype_equal, is_quantize

try:
    import ml_dtypes as _ml_dtypes
    bfloat16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    bfloat16 = None

__all__ = [
    "QuantDtypeMeta", "bfloat16", "create_quantized_dtype", "get_dtype_bit", "get_scale",
    "get_zero_point", "is_bfloat16", "is_differentible_dtype", "is_dtype_equal", "is_lowbit",
    "is_quantize", "qint1", "qint4", "qint8", "qint32", "quint4", "quint8",
    "convert_to_qint1", "convert_from_qint1", "convert_to_qint4", "convert_from_qint4",
    "convert_to_qint8", "convert_from_qint8", "convert_to_qint32", "convert_from_qint32",
    "convert_to_quint4", "convert_from_quint4", "convert_to_quint8", "convert_from_quint8",
]


def get_dtype_bit(dtype_name: str):
    """The number of bits of a dtype named ``dtype_name`` (``"int8"`` -> 8, ``"bool"`` -> 1)."""
    if dtype_name == "bool":
        return 1
    numbers = re.findall(r"\d+", dtype_name)
    if len(numbers) != 1:
        raise ValueError(f"cannot tell the bit width of dtype {dtype_name!r}")
    return int(numbers[0])


def is_lowbit(dtype):
    """Whether ``dtype`` is one of MegEngine's low-bit types (none exist in mge)."""
    del dtype
    return False


def is_bfloat16(dtype):
    """Whether ``dtype`` is ``bfloat16``."""
    return bfloat16 is not None and dtype is not None and np.dtype(dtype) == bfloat16


def is_differentible_dtype(dtype):
    """Whether gradients flow through values of ``dtype`` (float32, float16, bfloat16)."""
    return dtype == np.float32 or dtype == np.float16 or is_bfloat16(dtype)


class QuantDtypeMeta(namedtuple("QuantDtypeMeta",
                                ["name", "cname", "np_dtype_str", "qmin", "qmax", "is_unsigned"])):
    """Metadata of a quantized dtype: its ``name``, MegEngine's C name ``cname``, the numpy
    storage dtype ``np_dtype_str``, the range ``[qmin, qmax]`` and ``is_unsigned`` (from
    ``np_dtype_str`` unless given).  Treated as a singleton by copy/deepcopy."""

    def __new__(cls, name, cname, np_dtype_str, qmin, qmax, is_unsigned=None):
        if not isinstance(np_dtype_str, str):
            raise TypeError("np_dtype_str must be a string")
        if is_unsigned is None:
            is_unsigned = np_dtype_str[0] == "u"
        return super().__new__(cls, name, cname, np_dtype_str, qmin, qmax, is_unsigned)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


_builtin_quant_dtypes = {
    "quint8": QuantDtypeMeta("quint8", "Quantized8Asymm", "uint8", 0, 255),
    "qint8": QuantDtypeMeta("qint8", "QuantizedS8", "int8", -128, 127),
    "qint8_narrow": QuantDtypeMeta("qint8_narrow", "QuantizedS8", "int8", -127, 127),
    "quint4": QuantDtypeMeta("quint4", "Quantized4Asymm", "uint8", 0, 15),
    "qint4": QuantDtypeMeta("qint4", "QuantizedS4", "int8", -8, 7),
    "qint1": QuantDtypeMeta("qint1", "QuantizedS1", "int8", 0, 1),
    "qint32": QuantDtypeMeta("qint32", "QuantizedS32", "int32", -(2 ** 31), 2 ** 31 - 1),
    "quint2": QuantDtypeMeta("quint2", None, "uint8", 0, 3),
    "qint2": QuantDtypeMeta("qint2", None, "int8", -2, 1),
}


def create_quantized_dtype(dtype_meta: QuantDtypeMeta, scale: float, zp):
    """The numpy dtype of ``dtype_meta`` with ``scale`` (and ``zp``, required for unsigned types
    and refused for signed ones) in its metadata."""
    if dtype_meta.cname is None:
        raise ValueError(f"dtype {dtype_meta.name} without cname attr is not supported.")
    meta = {"name": dtype_meta.cname, "scale": float(scale)}
    if dtype_meta.is_unsigned:
        if zp is None or int(zp) != zp:
            raise ValueError("zero_point should be an integer")
        zp = int(zp)
        if not dtype_meta.qmin <= zp <= dtype_meta.qmax:
            raise ValueError(f"zero_point should be within [{dtype_meta.qmin}, {dtype_meta.qmax}] "
                             f"for {dtype_meta.name}")
        meta["zero_point"] = zp
    elif zp is not None:
        raise ValueError(f"'{dtype_meta.name}' only supports symmetric quantization, zero_point "
                         f"should be None, but actually got '{zp}'")
    return np.dtype(dtype_meta.np_dtype_str, metadata={"mgb_dtype": meta})


def quint8(scale, zero_point):
    """Unsigned 8-bit quantized dtype: ``float = scale * (uint8 - zero_point)``."""
    return create_quantized_dtype(_builtin_quant_dtypes["quint8"], scale, zero_point)


def qint8(scale):
    """Signed 8-bit quantized dtype: ``float = scale * int8``."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint8"], scale, None)


def qint32(scale):
    """Signed 32-bit quantized dtype: ``float = scale * int32``."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint32"], scale, None)


def quint4(scale, zero_point):
    """Unsigned 4-bit quantized dtype (stored in uint8): ``float = scale * (q - zero_point)``."""
    return create_quantized_dtype(_builtin_quant_dtypes["quint4"], scale, zero_point)


def qint4(scale):
    """Signed 4-bit quantized dtype (stored in int8): ``float = scale * q``."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint4"], scale, None)


def qint1(scale):
    """1-bit quantized dtype (stored in int8): ``float = scale * q``."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint1"], scale, None)


def _check_meta(dtype, dtype_meta, what):
    if not is_quantize(dtype) or dtype.metadata["mgb_dtype"]["name"] != dtype_meta.cname:
        raise ValueError(f"{what} should be a {dtype_meta} dtype")


def _convert_to_quantized_dtype(arr, dtype, dtype_meta):
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr parameter should be instance of np.ndarray")
    dtype = np.dtype(dtype)
    _check_meta(dtype, dtype_meta, "dtype parameter")
    meta = dtype.metadata["mgb_dtype"]
    q = np.round(arr / meta["scale"])
    if dtype_meta.is_unsigned:
        q = q + meta["zero_point"]
    return q.clip(dtype_meta.qmin, dtype_meta.qmax).astype(dtype)


def _convert_from_quantized_dtype(arr, dtype_meta):
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr parameter should be instance of np.ndarray")
    _check_meta(arr.dtype, dtype_meta, "arr's dtype")
    meta = arr.dtype.metadata["mgb_dtype"]
    values = arr.astype(np.float32)
    if dtype_meta.is_unsigned:
        values = values - meta["zero_point"]
    return values * meta["scale"]


def _converters(name):
    meta = _builtin_quant_dtypes[name]

    def to(arr, q):
        return _convert_to_quantized_dtype(arr, q, meta)

    def from_(arr):
        return _convert_from_quantized_dtype(arr, meta)

    to.__name__, from_.__name__ = f"convert_to_{name}", f"convert_from_{name}"
    to.__doc__ = f"Quantize a float numpy array to the {name} dtype ``q`` (round, clip)."
    from_.__doc__ = f"Dequantize a {name} numpy array to float32."
    return to, from_


convert_to_qint1, convert_from_qint1 = _converters("qint1")
convert_to_qint4, convert_from_qint4 = _converters("qint4")
convert_to_qint8, convert_from_qint8 = _converters("qint8")
convert_to_qint32, convert_from_qint32 = _converters("qint32")
convert_to_quint4, convert_from_quint4 = _converters("quint4")
convert_to_quint8, convert_from_quint8 = _converters("quint8")

def _qrange(cname):
    for meta in _builtin_quant_dtypes.values():  # (the first of a shared C name: the widest)
        if meta.cname == cname:
            return meta.qmin, meta.qmax
    raise ValueError(f"unknown quantized dtype {cname!r}")


def _typecvt_quantized(x, dtype):
    """``x.astype(dtype)`` where ``x``'s dtype or ``dtype`` is quantized: MegEngine's TypeCvt, one
    op (``QuantizedTypeCvt``, which carries both quantizations as parameters): a quantized value
    is dequantized (``scale * (q - zero_point)`` in float32), a value converted to a quantized
    dtype is quantized (``round(v / scale) + zero_point``, halves away from zero, clipped to the
    range), so that converting between scales requantizes."""
    from ..._core import _accel
    from ..._core.ops.quantized import QuantizedTypeCvt, qspec
    apply = _accel.load("mge._core.dispatch").apply
    dst = qspec(dtype)
    return apply(QuantizedTypeCvt(dst if dst is not None else dtype, qspec(x.dtype)), x)[0]


class _LowBitType:
    """MegEngine's odd-valued low-bit numpy type ``intb<bits>`` (values ``-(2**bits - 1)``,
    ``...``, ``-1``, ``1``, ``...``, ``2**bits - 1`` in one byte), which MegEngine defines in its
    C++ extension as a numpy user dtype.  mge has no such dtype: the name exists (code that imports
    it loads), and using it as a dtype -- ``np.array(..., dtype=intb1)``, ``np.dtype(intb1)``,
    ``astype``, ``mge.tensor(..., dtype=intb1)`` -- raises ``NotImplementedError``."""

    def __init__(self, bits):
        self.bits = bits
        self.__name__ = f"intb{bits}"

    @property
    def dtype(self):
        # numpy reads ``.dtype`` of an object given as a dtype: the error surfaces at the use
        raise NotImplementedError(
            f"{self.__name__}: MegEngine's {self.bits}-bit odd-valued numpy type is defined in "
            "its C++ extension; mge does not provide it (docs/differences.rst)")

    def __repr__(self):
        return f"<mge: {self.__name__} (not provided)>"


intb1 = _LowBitType(1)
intb2 = _LowBitType(2)
intb4 = _LowBitType(4)


# Tensor.astype converts to and from quantized dtypes through this module (mge._core does not
# import the API layer: it is told here)
_accel.load("mge._core.tensor").QUANTIZED_TYPECVT = _typecvt_quantized
