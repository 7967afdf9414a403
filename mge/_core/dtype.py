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
           "scalar_dtype", "quantization", "same_dtype", "describe", "quantized_host_array",
           "QuantizedRangeError"]

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

    The result never aliases ``data``: a tensor owns its storage.  A quantized ``dtype``, or a
    numpy array of a quantized dtype given without one, goes through
    :func:`quantized_host_array`.
    """
    if dtype is not None:
        dtype = canonical(dtype)
        if quantization(dtype) is not None:
            return quantized_host_array(data, dtype)
        try:
            arr = np.array(data, dtype=dtype, order="C")
        except (ValueError, TypeError) as e:
            raise TypeError(f"cannot convert {type(data).__name__} to a tensor of {dtype}: {e}") from e
        return arr
    if isinstance(data, np.ndarray):
        if quantization(data.dtype) is not None:
            # (its own dtype: the low-bit range is checked, as MegEngine checks it for any array)
            return quantized_host_array(data, data.dtype)
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


# -- quantized dtypes ---------------------------------------------------------------------------
#: MegEngine's quantized types packed in fewer bits than their storage byte (its
#: ``MEGDNN_FOREACH_QUANTIZED_LOWBIT_DTYPE``): a tensor of one only holds values in this range.
#: (``QuantizedS1`` is not among them: MegEngine stores it as a plain byte and checks nothing.)
_LOWBIT_RANGE = {"QuantizedS4": (-8, 7), "Quantized4Asymm": (0, 15)}
int64 = np.dtype("int64")


class QuantizedRangeError(ValueError, RuntimeError):
    """Data for a 4-bit quantized tensor has a value outside the type's range (a
    ``RuntimeError`` too: MegEngine's assertion raises one)."""


def quantization(d):
    """The ``mgb_dtype`` metadata (``{"name", "scale"[, "zero_point"]}``) of a quantized numpy
    dtype ``d``, or ``None`` for any other dtype."""
    md = d.metadata
    if not md:
        return None
    q = md.get("mgb_dtype")
    if q is None or not str(q.get("name", "")).startswith("Quantized"):
        return None
    return q


def _qkey(q):
    # MegEngine keeps a scale as a C++ float: two scales are one if they are one in float32
    zp = q.get("zero_point")
    return (q["name"], np.float32(q["scale"]), None if zp is None else int(zp))


def same_dtype(a, b):
    """Whether numpy dtypes ``a`` and ``b`` are one MegEngine dtype: numpy's ``==`` ignores
    metadata (``qint8(0.1) == qint8(0.2) == int8``), so the quantization -- type name, scale (in
    float32, as MegEngine compares it) and zero point -- is compared too."""
    if a != b:
        return False
    qa, qb = quantization(a), quantization(b)
    if qa is None or qb is None:
        return qa is qb
    return _qkey(qa) == _qkey(qb)


def describe(d):
    """``d`` for an error message: a quantized dtype shows its quantization (``str`` of it is
    only the storage dtype's name)."""
    q = quantization(d)
    if q is None:
        return str(d)
    zp = q.get("zero_point")
    return (f"{d}({q['name']}, scale={q['scale']}" + ("" if zp is None else f", zero_point={zp}")
            + ")")


def quantized_host_array(data, dtype):
    """The host array of ``Tensor(data, dtype=dtype)`` for a quantized ``dtype``, as MegEngine
    1.13's ``TensorWrapper`` makes it (``pyobj2hval`` and ``np2tensor`` in its
    ``imperative/python/src``).

    The values are *not* quantized (``astype`` does that): they are taken as the stored integers
    and cast, as C casts them, to the storage type (``int8``, ``uint8``, ``int32``):

    * a Python ``float`` becomes a C ``float``, a Python ``int`` a 32-bit C ``int`` (``2**32 + 3``
      gives 3), then the storage type: floats truncate toward zero (``2.7`` -> 2, ``-2.7`` -> -2),
      integers wrap (``300`` -> 44 in ``int8``, ``-1`` -> 255 in ``uint8``);
    * anything else (lists, tuples, numpy arrays and scalars, ``bool``) becomes a numpy array as
      numpy makes it, whose values numpy's ``astype`` casts the same way (an array of the storage
      type, or of another quantization, keeps its integers);
    * ``None`` is an empty array;
    * for ``qint4``/``quint4`` every value, after the cast, must lie in ``[-8, 7]``/``[0, 15]``
      (:class:`QuantizedRangeError` otherwise), as MegEngine checks when it packs them.

    The result has ``dtype`` itself, scale and zero point included, and never aliases ``data``.
    Where MegEngine fails instead (an array already of the storage type or of another
    quantization of it; Python numbers for the 4-bit types and ``qint1``; empty data for the 4-bit
    types), mge takes the data by the same rules (``docs/differences.rst``).
    """
    storage = np.dtype(dtype.str)  # the plain storage dtype: numpy casts to it, then the view
    t = type(data)  # exact types, as MegEngine tells them (bool goes the numpy way: it is not int)
    # (MegEngine's C casts of one number are silent; numpy's of nan/inf/overflow warn)
    if t is float:
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.array(data, dtype=float32).astype(storage)
    elif t is int:
        # (beyond int64 numpy raises OverflowError; MegEngine a SystemError)
        arr = np.array(data, dtype=int64).astype(int32).astype(storage)
    else:
        try:
            src = np.asarray([] if data is None else data)
            arr = src.astype(storage, order="C")  # (a copy, even of a storage-typed array)
        except (ValueError, TypeError) as e:
            raise TypeError(f"cannot convert {type(data).__name__} to a tensor of "
                            f"{describe(dtype)}: {e}") from e
    q = quantization(dtype)
    rng = _LOWBIT_RANGE.get(q["name"])
    if rng is not None and arr.size:
        # (MegEngine reads the byte as int8 for both 4-bit types: for quint4's uint8 the test
        # on the uint8 value is the same one)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < rng[0] or hi > rng[1]:
            raise QuantizedRangeError(
                f"data exceeds range({rng[0]},{rng[1]}) of data type {q['name']}: the values, "
                f"cast to {storage}, lie in [{lo}, {hi}]")
    return arr.view(dtype)


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
