"""Dtype conventions of MegEngine on top of numpy dtypes, and its promotion rules, in one place.

* ``common_dtype(dtypes)`` -- the dtype mixed tensors compute in (the dtype_promote layer casts
  to it; the ops' shape/dtype rules use it too);
* ``scalar_dtype(dtype, value)`` -- the dtype a Python number takes next to a tensor (numbers are
  weak), and ``promote_args`` -- the dtype of the non-tensor arguments of ``apply``.

MegEngine has no 64-bit default types: Python ints and int64 data become int32, Python floats and
float64 data become float32, bools stay bool.  mge also accepts ``float64``/``int64`` when asked for
explicitly (useful for float64 reference checks); this difference is written down in
``docs/differences.rst``.  A tensor's dtype is always native-endian (big-endian data is converted,
value by value), and never wider than 64 bits (``numpy.longdouble`` is refused, as in MegEngine).
"""
import numpy as np

__all__ = ["canonical", "host_array", "storable", "promote_args", "common_dtype", "where_dtype",
           "scalar_dtype"]

_NARROW = {
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("int32"),
    np.dtype("uint32"): np.dtype("int32"),
}
float32 = np.dtype("float32")
float16 = np.dtype("float16")
int32 = np.dtype("int32")
bool_ = np.dtype("bool")
_cache = {}


_KINDS = ("mge tensors hold bool, integer or float (bfloat16 too) data of at most 64 bits, or "
          "complex64")
complex64 = np.dtype("complex64")


def is_bfloat16(d):
    """Whether numpy dtype ``d`` is ``bfloat16`` (``ml_dtypes``'s, a 2-byte kind-``V`` dtype),
    told without importing ``ml_dtypes``."""
    return d.kind == "V" and d.itemsize == 2 and d.name == "bfloat16"


def _holds(d):
    """Whether a tensor can hold data of the native-endian dtype ``d``."""
    if d.kind in "biuf":
        return d.itemsize <= 8
    if d == complex64:
        _complex_seen()
        return True
    return is_bfloat16(d)


#: Called once, when the first complex64 value is made (``ops.base`` registers the switch that
#: makes the ops that cannot take one refuse it).  (A hook: ``ops`` imports this module.)
ON_FIRST_COMPLEX = []


def _complex_seen():
    while ON_FIRST_COMPLEX:
        ON_FIRST_COMPLEX.pop()()


def storable(d):
    """The dtype a tensor holds data of numpy dtype ``d`` in, or ``None`` if it cannot.

    Native byte order; the 64-bit defaults narrowed (``_NARROW``); bool, integer and float kinds
    of at most 8 bytes (``numpy.longdouble``, complex, strings and objects have none).
    """
    if not d.isnative:
        d = d.newbyteorder("=")
    d = _NARROW.get(d, d)
    if not _holds(d):
        return None
    return d


def canonical(dtype):
    """Turn a user's dtype argument (``"float32"``, ``np.int32``, ``np.dtype``) into a numpy dtype."""
    # A dtype with metadata (quantized: ``qint8(0.1)``) equals and hashes as its plain dtype, so
    # it never goes through the cache.
    if getattr(dtype, "metadata", None) is None:
        try:
            return _cache[dtype]
        except (KeyError, TypeError):
            pass
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"unsupported dtype {dtype!r}") from e
    if not d.isnative:
        d = d.newbyteorder("=")  # ">f4" asks for float32 values: tensors are native-endian
    if not _holds(d):
        raise TypeError(f"unsupported dtype {d}: {_KINDS}")
    if d.metadata is None:
        try:
            _cache[dtype] = d
        except TypeError:
            pass
    return d


def host_array(data, dtype=None):
    """A fresh, contiguous host array for ``data`` with MegEngine's default dtype rules.

    The result never aliases ``data``: a tensor owns its storage.
    """
    if dtype is not None:
        dtype = canonical(dtype)
        try:
            arr = np.array(data, dtype=dtype, order="C")
        except (ValueError, TypeError) as e:
            raise TypeError(f"cannot convert {type(data).__name__} to a tensor of {dtype}: {e}") from e
        return arr
    if isinstance(data, np.ndarray):
        d = storable(data.dtype)
        if d is None:
            raise TypeError(f"unsupported dtype {data.dtype}: {_KINDS}")
        return np.array(data, dtype=d, order="C")
    if isinstance(data, bool):
        return np.array(data, dtype=bool_)
    if isinstance(data, int):
        return np.array(data, dtype=int32)
    if isinstance(data, float):
        return np.array(data, dtype=float32)
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise TypeError(f"cannot convert {type(data).__name__} to a tensor: {e}") from e
    d = storable(arr.dtype)
    if d is None:
        raise TypeError(f"cannot convert {type(data).__name__} with dtype {arr.dtype} to a tensor: "
                        f"{_KINDS}")
    return np.array(arr, dtype=d, order="C")


def common_dtype(dtypes):
    """The dtype mixed inputs compute in (MegEngine's rules).

    Numpy promotion, except: bool mixed with numbers computes in float32; float16 mixed with
    integers computes in float32; float64 appears only if an input is float64; mixing signed and
    unsigned integers is an error, as in MegEngine.
    """
    kinds = {x.kind for x in dtypes}
    if "b" in kinds and len(kinds) > 1:
        dtypes = [float32 if x.kind == "b" else x for x in dtypes]
        kinds.discard("b")
    if kinds == {"i", "u"}:
        names = " ".join(x.name.capitalize() for x in dtypes)
        raise TypeError(f"dtype promotion rule between different signedness is undefined: {names}")
    d = dtypes[0]
    for x in dtypes[1:]:
        if x != d:
            d = np.promote_types(d, x)
    if d.kind == "c":
        d = complex64  # the one complex dtype a tensor holds (int32 with complex64 is complex128)
    elif d == np.float64 and all(x != np.float64 for x in dtypes):
        d = float32  # e.g. int32 with float16 gives float64 in numpy; MegEngine says float32
    elif d == float16 and kinds != {"f"}:
        d = float32  # float16 with int8/uint8 is float16 in numpy; MegEngine says float32
    return d


def where_dtype(dtypes):
    """The dtype ``where``'s two branches meet in (MegEngine's ``dtype_promotion``).

    Not the elementwise rule: the widest float among the inputs wins outright (``float16`` with
    ``int32`` is ``float16``), integers promote as in numpy whatever their signedness (``int8``
    with ``uint8`` is ``int16``), and a bool gives way to any number.
    """
    floats = [x for x in dtypes if x.kind == "f"]
    if floats:
        return max(floats, key=lambda x: x.itemsize)
    ints = [x for x in dtypes if x.kind in "iu"]
    if not ints:
        return bool_
    d = ints[0]
    for x in ints[1:]:
        d = np.promote_types(d, x)
    return _NARROW.get(d, d)


def scalar_dtype(dtype, value):
    """The dtype a Python number ``value`` takes next to a tensor of ``dtype`` (numbers are weak:
    a float meets integers and bools as float32, an int meets bools as int32)."""
    kind = dtype.kind
    if type(value) is float:
        return dtype if kind == "f" else float32
    if type(value) is int:
        return int32 if kind == "b" else dtype
    return dtype


def promote_args(tensor_dtypes, others, name="apply"):
    """The dtype given to non-tensor arguments of ``apply`` (MegEngine's ``_dtype_promotion``).

    ``tensor_dtypes`` are the dtypes of the tensor and array arguments; ``others`` are the Python
    values.  Python numbers are weak: they do not widen a tensor's dtype, except that a float meets
    integers with float32.  An operand no tensor can hold (a string, a complex number, ``None``,
    ``numpy.longdouble`` data) is a ``TypeError`` naming ``name`` (the op) and the operand's type.
    """
    has_float = has_int = False
    for v in others:
        if isinstance(v, bool):
            pass  # a bool number never changes the dtype of what it meets
        elif isinstance(v, int):
            has_int = True
        elif isinstance(v, float):
            has_float = True
        elif v is None:
            # MegEngine's words (its tests compare them); which op, in a note
            e = TypeError("the operand is None and is not supported.")
            e.add_note(f"{name}: an operand of type NoneType")
            raise e
        else:
            try:
                a = np.asarray(v)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{name}: cannot take an operand of type {type(v).__name__}: {e}") from None
            d = storable(a.dtype)
            if d is None or d.kind == "c":  # complex data comes in as a tensor only
                raise TypeError(f"{name}: an operand of type {type(v).__name__} (numpy dtype {a.dtype}) "
                                f"is not supported: {_KINDS}" + ("" if d is None else
                                " (complex data as an operand: make it a Tensor first)"))
            tensor_dtypes = tensor_dtypes + [d] if isinstance(tensor_dtypes, list) else list(tensor_dtypes) + [d]
    if tensor_dtypes:
        d = tensor_dtypes[0]
        for x in tensor_dtypes[1:]:
            if x != d:
                d = np.promote_types(d, x)
        d = _NARROW.get(d, d)
        if has_float and d.kind != "f":
            return float32
        if has_int and d.kind == "b":
            return int32
        return d
    if has_float:
        return float32
    if has_int:
        return int32
    return bool_
