"""``Tensor(data, dtype=<quantized dtype>)`` (and ``mge.tensor``, ``Parameter``) as MegEngine 1.13
makes it.

What MegEngine 1.13.0 gives was read off the release itself (``pip install megengine==1.13.0``,
CPU, x86-64, numpy 1.26) and its source (``imperative/python/src/tensor.cpp``: ``pyobj2hval``;
``helper.cpp``: ``np2tensor_try_borrow``; ``src/core/impl/dtype.cpp``).  In short:

* the data's values are the *stored integers*, not real values: nothing is divided by the scale
  (``astype`` quantizes).  They are cast as C casts them to the storage type (``int8``, ``uint8``,
  ``int32``): floats truncate toward zero, integers wrap.  A Python ``float`` is a C ``float``
  first, a Python ``int`` a 32-bit ``int`` first; lists, tuples, numpy scalars and arrays go
  through numpy's ``astype`` from the array numpy makes of them.
* the tensor's dtype is the quantized dtype, scale and zero point included, and so is the dtype of
  ``.numpy()``.
* ``qint4``/``quint4`` values must lie in ``[-8, 7]``/``[0, 15]`` after the cast (an assertion,
  a ``RuntimeError``); ``qint1`` is not checked.
* ``Tensor(tensor, dtype=...)`` converts nothing: the dtypes must match, quantization included.

Where MegEngine fails with an internal assertion instead -- an integer array already of the
storage type (``np.int8`` data for ``qint8``), or of another quantization of it; Python numbers
for the 4-bit types and ``qint1``; empty data for the 4-bit types -- mge takes the data by the same
rules (``docs/differences.rst``).  Each test states MegEngine's result beside mge's.  Run in both
modes (``MGE_PUREPYTHON=1`` for the pure-Python runtime).
"""
import warnings

import numpy as np
import pytest

import mge
from mge import Parameter, Tensor
from mge.core.tensor import dtype as D

CTORS = [Tensor, mge.tensor, Parameter]
ctor_ids = ["Tensor", "tensor", "Parameter"]


def q8():
    return D.qint8(0.1)


def u8():
    return D.quint8(0.1, 128)


def q32():
    return D.qint32(0.1)


def q4():
    return D.qint4(0.5)


def u4():
    return D.quint4(0.5, 8)


def meta(t):
    return t.dtype.metadata["mgb_dtype"]


def check(t, dtype, values, cls=Tensor):
    """``t`` is a ``cls`` of quantized ``dtype`` (its quantization too) holding ``values``."""
    assert isinstance(t, cls)
    want = np.asarray(values, dtype=np.dtype(dtype.str))
    assert t.dtype == want.dtype
    q = dtype.metadata["mgb_dtype"]
    got = meta(t)
    assert got["name"] == q["name"]
    # (MegEngine reports the scale as the float32 it keeps; mge the number given: one float32)
    assert np.float32(got["scale"]) == np.float32(q["scale"])
    assert got.get("zero_point") == q.get("zero_point")
    a = t.numpy()
    assert a.dtype == want.dtype and a.dtype.metadata["mgb_dtype"] == got  # .numpy() keeps it
    assert a.shape == want.shape
    np.testing.assert_array_equal(a, want)


# -- integer arrays ---------------------------------------------------------------------------
@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_array_of_the_storage_type_keeps_its_values_and_takes_the_quantization(ctor):
    # MegEngine: RuntimeError "assertion `dtype == layout.dtype' failed"
    # (np2tensor_try_borrow: numpy hands back the int8 array as it is, without the metadata);
    # mge: the integers as they are, as MegEngine stores any other integer array's (a deviation).
    check(ctor(np.array([1, 2, 3], np.int8), dtype=q8()), q8(), [1, 2, 3], ctor)
    check(ctor(np.array([1, 2, 200], np.uint8), dtype=u8()), u8(), [1, 2, 200], ctor)
    check(ctor(np.array([1, 2, -300], np.int32), dtype=q32()), q32(), [1, 2, -300], ctor)
    check(ctor(np.array([-8, 7], np.int8), dtype=q4()), q4(), [-8, 7], ctor)
    check(ctor(np.array([0, 15], np.uint8), dtype=u4()), u4(), [0, 15], ctor)
    check(ctor(np.array(3, np.int8), dtype=q8()), q8(), 3, ctor)  # 0-d
    check(ctor(np.arange(6, dtype=np.int8)[::2], dtype=q8()), q8(), [0, 2, 4], ctor)  # strided


@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_integer_arrays_of_other_types_wrap_to_the_storage_type(ctor):
    # MegEngine (numpy's cast to the storage type): the values wrap modulo 2**bits, unscaled
    data = np.array([1, 2, 300, -5], np.int32)
    check(ctor(data, dtype=q8()), q8(), [1, 2, 44, -5], ctor)
    check(ctor(data, dtype=u8()), u8(), [1, 2, 44, 251], ctor)
    check(ctor(np.array([1, 2, 300, -5], np.int64), dtype=q32()), q32(), [1, 2, 300, -5], ctor)
    check(ctor(np.array([1, 2, 200], np.uint8), dtype=q8()), q8(), [1, 2, -56], ctor)
    check(ctor(np.array([1, 2, 200], np.uint8), dtype=q32()), q32(), [1, 2, 200], ctor)
    check(ctor(np.array([1, 2, 3], np.int8), dtype=u8()), u8(), [1, 2, 3], ctor)
    check(ctor(np.array([259, -253], np.int16), dtype=q8()), q8(), [3, 3], ctor)
    check(ctor(np.array([259, -253], np.int16), dtype=q4()), q4(), [3, 3], ctor)
    check(ctor(np.array([True, False]), dtype=q8()), q8(), [1, 0], ctor)


# -- float arrays -----------------------------------------------------------------------------
FLOATS = [2.7, -2.7, 1.5, -1.5, 2.5, 7.9, 0.1, -0.35]


@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
@pytest.mark.parametrize("ftype", [np.float16, np.float32, np.float64])
def test_float_arrays_truncate_toward_zero_and_are_not_scaled(ctor, ftype):
    # MegEngine: [2, -2, 1, -1, 2, 7, 0, 0] (int8); in uint8 the negatives wrap (254, 255)
    data = np.array(FLOATS, ftype)
    want = np.trunc(data.astype(np.float64)).astype(np.int64)
    check(ctor(data, dtype=q8()), q8(), want, ctor)
    check(ctor(data, dtype=q32()), q32(), want, ctor)
    check(ctor(data, dtype=u8()), u8(), want % 256, ctor)
    check(ctor(np.array([0.1, 0.25, -0.35, 100.0], ftype), dtype=q8()), q8(), [0, 0, 0, 100], ctor)
    check(ctor(np.array([-8.9, 7.9], ftype), dtype=q4()), q4(), [-8, 7], ctor)


def test_out_of_range_floats_cast_as_c_does():
    # C leaves these casts undefined; MegEngine gives the platform's (x86-64: [44, -44, -1, 0]
    # for int8, [300, -300, 255, -2147483648] for int32), which is also numpy's cast here.
    data = np.array([300.0, -300.0, 255.9, 1e10])
    for dt in (q8(), u8(), q32()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = data.astype(np.dtype(dt.str))
            got = Tensor(data, dtype=dt)
        check(got, dt, want)


# -- Python lists, tuples and numbers ----------------------------------------------------------
@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_lists_and_tuples(ctor):
    # MegEngine: numpy's array of the list (int64 / float64), cast to the storage type
    check(ctor([0.1, 0.2, 0.25], dtype=q8()), q8(), [0, 0, 0], ctor)  # (not scaled)
    check(ctor([1, 2, 3], dtype=q8()), q8(), [1, 2, 3], ctor)
    check(ctor(FLOATS, dtype=q8()), q8(), [2, -2, 1, -1, 2, 7, 0, 0], ctor)
    check(ctor(FLOATS, dtype=u8()), u8(), [2, 254, 1, 255, 2, 7, 0, 0], ctor)
    check(ctor([1, 2.7], dtype=q8()), q8(), [1, 2], ctor)
    check(ctor([[1, 2], [3, 4]], dtype=u8()), u8(), [[1, 2], [3, 4]], ctor)
    check(ctor((1, -2), dtype=q32()), q32(), [1, -2], ctor)
    check(ctor([-1, 300], dtype=q8()), q8(), [-1, 44], ctor)
    check(ctor([-1, 300], dtype=u8()), u8(), [255, 44], ctor)
    check(ctor([-1, 300], dtype=q32()), q32(), [-1, 300], ctor)
    check(ctor([2 ** 40 + 3], dtype=q8()), q8(), [3], ctor)  # (int64, then the cast)
    check(ctor([True, False], dtype=q8()), q8(), [1, 0], ctor)
    check(ctor([np.int8(1), np.int8(2)], dtype=u8()), u8(), [1, 2], ctor)
    check(ctor([], dtype=q8()), q8(), np.zeros(0), ctor)
    check(ctor(None, dtype=q32()), q32(), np.zeros(0), ctor)  # MegEngine: None is []


def test_lists_beyond_int64_are_refused():
    # MegEngine: RuntimeError wrapping numpy's OverflowError; mge: that OverflowError
    with pytest.raises(OverflowError):
        Tensor([2 ** 70], dtype=q8())


@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_python_numbers(ctor):
    # MegEngine: a float is a C float, an int a 32-bit int, then the C cast to the storage type
    check(ctor(0.25, dtype=q8()), q8(), 0, ctor)
    check(ctor(2.7, dtype=q8()), q8(), 2, ctor)
    check(ctor(-2.7, dtype=q8()), q8(), -2, ctor)
    check(ctor(-2.7, dtype=u8()), u8(), 254, ctor)
    check(ctor(2.7, dtype=q32()), q32(), 2, ctor)
    check(ctor(3, dtype=q8()), q8(), 3, ctor)
    check(ctor(-1, dtype=u8()), u8(), 255, ctor)
    check(ctor(300, dtype=q8()), q8(), 44, ctor)
    check(ctor(300, dtype=u8()), u8(), 44, ctor)
    check(ctor(300, dtype=q32()), q32(), 300, ctor)
    check(ctor(True, dtype=q8()), q8(), 1, ctor)
    check(ctor(np.float32(2.7), dtype=q8()), q8(), 2, ctor)
    check(ctor(np.int64(5), dtype=q4()), q4(), 5, ctor)


def test_python_ints_are_32_bit_first():
    # MegEngine: 2**31 -> 0 (int8) / -2**31 (qint32); 2**31 + 5 -> 5 / -2**31 + 5; 2**40 + 3 -> 3;
    # -2**31 - 1 -> -1 (int8) / 2**31 - 1 (qint32)
    for v in (2 ** 31, 2 ** 31 + 5, 2 ** 40 + 3, -2 ** 31 - 1):
        as32 = np.array(v, np.int64).astype(np.int32)
        check(Tensor(v, dtype=q32()), q32(), as32)
        check(Tensor(v, dtype=q8()), q8(), as32.astype(np.int8))
        check(Tensor(v, dtype=u8()), u8(), as32.astype(np.uint8))
    check(Tensor(2 ** 40 + 3, dtype=q8()), q8(), 3)
    # MegEngine: SystemError (an exception left set); mge: OverflowError
    with pytest.raises(OverflowError):
        Tensor(2 ** 63 + 1, dtype=q8())


def test_python_floats_are_c_floats_first():
    # MegEngine (x86-64): 300.0 -> 44, -300.0 -> -44, 255.9 -> -1 (int8); nan, inf, 1e10 and
    # 3.4e39 (inf as a C float) -> 0 (int8), -2**31 (qint32): numpy's cast of the float32 here.
    # Its C casts do not warn; neither does mge for one number.
    for v in (300.0, -300.0, 255.9, 1e10, float("inf"), float("nan"), 3.4e39, -0.9):
        with np.errstate(all="ignore"):
            f = np.array(v, np.float32)
            want = {dt.str: f.astype(np.dtype(dt.str)) for dt in (q8(), u8(), q32())}
        for dt in (q8(), u8(), q32()):
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                t = Tensor(v, dtype=dt)
            check(t, dt, want[dt.str])
    check(Tensor(300.0, dtype=q8()), q8(), np.array(300.0, np.float32).astype(np.int8))


# -- arrays that already have a quantized dtype -------------------------------------------------
@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_arrays_of_the_quantized_dtype(ctor):
    # MegEngine: the array's integers and its quantization, with or without dtype=
    for dt, vals in ((q8(), [1, 2, 3]), (u8(), [1, 2, 255]), (q32(), [1, -2, 300]),
                     (q4(), [-8, 0, 7]), (u4(), [0, 15])):
        a = np.array(vals, dtype=np.dtype(dt.str)).astype(dt)
        assert a.dtype.metadata is not None
        check(ctor(a, dtype=dt), dt, vals, ctor)
        check(ctor(a), dt, vals, ctor)


def test_arrays_of_another_quantization():
    # Another quantized type: MegEngine casts the integers, ignoring the scales ([-1, 2] of
    # qint8(0.2) -> [255, 2] of quint8, [-1, 2] of qint32).  The same type with another scale or
    # zero point: MegEngine's assertion again; mge takes the integers under the dtype asked for.
    a = np.array([-1, 2], np.int8).astype(D.qint8(0.2))
    check(Tensor(a, dtype=u8()), u8(), [255, 2])
    check(Tensor(a, dtype=q32()), q32(), [-1, 2])
    check(Tensor(a, dtype=q8()), q8(), [-1, 2])
    b = np.array([1, 2], np.uint8).astype(u8())
    check(Tensor(b, dtype=D.quint8(0.1, 100)), D.quint8(0.1, 100), [1, 2])


def test_the_tensor_owns_its_storage():
    a = np.array([1, 2, 3], np.int8)
    t = Tensor(a, dtype=q8())
    a[0] = 100
    check(t, q8(), [1, 2, 3])
    b = a.astype(q8())
    u = Tensor(b)
    b[1] = 50
    check(u, q8(), [100, 2, 3])


# -- the 4-bit types: their range -------------------------------------------------------------
def test_4_bit_values_must_be_in_range():
    # MegEngine: RuntimeError "assertion `val >= ... && val <= ...' failed" (packing the data)
    cases = [
        (q4(), [1, 8]), (q4(), [-9]), (q4(), np.array([300], np.int32)),  # 300 -> 44 in int8
        (q4(), np.array([300.0, -300.0])), (q4(), [-1, 300]),
        (u4(), [16]), (u4(), [-1, 15]), (u4(), np.array([1, 200], np.uint8)),
        (u4(), np.array([-2.7])),  # -2 -> 254 in uint8
    ]
    for dt, data in cases:
        with pytest.raises(RuntimeError, match="exceeds range"):
            Tensor(data, dtype=dt)
        with pytest.raises(ValueError, match="exceeds range"):
            Parameter(data, dtype=dt)
    # an array of the dtype itself is checked too, given dtype= or not
    with pytest.raises(RuntimeError, match=r"range\(-8,7\)"):
        Tensor(np.array([1, 9], np.int8).astype(q4()))
    with pytest.raises(RuntimeError, match=r"range\(0,15\)"):
        Tensor(np.array([1, 16], np.uint8).astype(u4()), dtype=u4())


def test_4_bit_values_in_range_after_the_cast():
    # MegEngine checks the cast value: 259 is 3 in int8, so it passes
    check(Tensor([-8, 7], dtype=q4()), q4(), [-8, 7])
    check(Tensor([0, 15], dtype=u4()), u4(), [0, 15])
    check(Tensor([2.7, -2.7, 7.9], dtype=q4()), q4(), [2, -2, 7])
    check(Tensor(np.array([259, 3], np.int32), dtype=q4()), q4(), [3, 3])
    check(Tensor([True, False], dtype=u4()), u4(), [1, 0])


def test_4_bit_numbers_and_empty_data():
    # MegEngine refuses these: "can not assign to dtype QuantizedS4" (Python numbers) and
    # "assertion `layout.shape[i]' failed" (empty data), though a 0-d numpy array works there;
    # mge takes them by the rules above, the range included (a deviation).
    check(Tensor(3, dtype=q4()), q4(), 3)
    check(Tensor(-2.7, dtype=q4()), q4(), -2)
    check(Tensor(2 ** 32 + 5, dtype=q4()), q4(), 5)
    check(Tensor(15, dtype=u4()), u4(), 15)
    check(Tensor([], dtype=q4()), q4(), np.zeros(0))
    check(Tensor(None, dtype=u4()), u4(), np.zeros(0))
    with pytest.raises(RuntimeError, match="exceeds range"):
        Tensor(8, dtype=q4())
    with pytest.raises(RuntimeError, match="exceeds range"):
        Tensor(-1, dtype=u4())


def test_qint1_is_not_range_checked():
    # MegEngine: QuantizedS1 is a plain byte there (not one of its low-bit types): [2] stays 2,
    # empty data is fine.  A Python number it refuses ("can not assign to dtype QuantizedS1"),
    # though np.int64(2) works; mge takes it (the deviation of the 4-bit types).
    q1 = D.qint1(1.0)
    check(Tensor([0, 1], dtype=q1), q1, [0, 1])
    check(Tensor([-1, 2], dtype=q1), q1, [-1, 2])
    check(Tensor([], dtype=q1), q1, np.zeros(0))
    check(Tensor(np.int64(2), dtype=q1), q1, 2)
    check(Tensor(2, dtype=q1), q1, 2)
    check(Tensor(2.5, dtype=q1), q1, 2)


# -- the dtype and astype ---------------------------------------------------------------------
def test_dtype_queries():
    # MegEngine: dtype int8 (numpy's == ignores the metadata), scale float32(0.1), zero point 128
    t = Tensor([1, 2], dtype=q8())
    assert t.dtype == np.int8 and t.dtype == q8() and t.dtype.name == "int8"
    assert D.is_quantize(t.dtype)
    assert np.float32(D.get_scale(t.dtype)) == np.float32(0.1)
    u = Tensor([1, 2], dtype=u8())
    assert u.dtype == np.uint8 and D.get_zero_point(u.dtype) == 128
    assert meta(u)["name"] == "Quantized8Asymm"
    assert not D.is_quantize(Tensor(np.array([1], np.int8)).dtype)


def test_astype_dequantizes_and_requantizes():
    # MegEngine's values: float32 products scale * (q - zero_point); requantization rounds halves
    # away from zero and clips
    f = np.float32
    t = Tensor(np.array([1, 2, -3], np.int32), dtype=q8())
    np.testing.assert_array_equal(t.astype("float32").numpy(),
                                  np.array([1, 2, -3], f) * f(0.1))  # [0.1, 0.2, -0.3]
    np.testing.assert_array_equal(t.astype("int32").numpy(), [0, 0, 0])  # 0.1 -> 0 ...
    check(t.astype(D.qint8(0.2)), D.qint8(0.2), [1, 1, -2])  # 0.5 -> 1, -1.5 -> -2
    check(t.astype(D.qint32(0.05)), D.qint32(0.05), [2, 4, -6])
    u = Tensor([1, 2, 200], dtype=u8())
    np.testing.assert_array_equal(u.astype("float32").numpy(),
                                  (np.array([1, 2, 200], f) - f(128)) * f(0.1))  # [-12.7, ...]
    np.testing.assert_array_equal(Tensor([1, -2, 7], dtype=q4()).astype("float32").numpy(),
                                  [0.5, -1.0, 3.5])
    np.testing.assert_array_equal(Tensor([1, 2, 15], dtype=u4()).astype("float32").numpy(),
                                  [-3.5, -3.0, 3.5])
    np.testing.assert_array_equal(Tensor([1, 2, 300], dtype=q32()).astype("float32").numpy(),
                                  np.array([1, 2, 300], f) * f(0.1))
    # a float tensor: astype quantizes (creating with dtype= does not)
    check(Tensor([0.1, 0.25, -0.35, 100.0]).astype(q8()), q8(), [1, 3, -4, 127])
    check(Tensor([0.1, 0.25, -0.35, 100.0], dtype=q8()), q8(), [0, 0, 0, 100])


# -- a Tensor as the data, and resetting a quantized tensor ------------------------------------
@pytest.mark.parametrize("ctor", CTORS, ids=ctor_ids)
def test_tensor_data_must_match_the_quantization(ctor):
    # MegEngine: "assertion `dtype == m_tensor->dtype()' failed" unless the dtypes are one, the
    # scale compared as a C float and the zero point too
    t = Tensor([1, 2], dtype=q8())
    check(ctor(t), q8(), [1, 2], ctor)
    check(ctor(t, dtype=D.qint8(0.1)), q8(), [1, 2], ctor)
    check(ctor(t, dtype=D.qint8(0.1 + 1e-12)), q8(), [1, 2], ctor)  # one float32
    for other in (D.qint8(0.2), D.qint8(0.1 + 1e-8), "int8", D.quint8(0.1, 128)):
        with pytest.raises(RuntimeError, match="dtype mismatch"):
            ctor(t, dtype=other)
    with pytest.raises(RuntimeError, match="dtype mismatch"):
        ctor(Tensor(np.array([1, 2], np.int8)), dtype=q8())
    u = Tensor([1, 2], dtype=u8())
    check(ctor(u, dtype=D.quint8(0.1, 128)), u8(), [1, 2], ctor)
    with pytest.raises(RuntimeError, match="zero_point=100"):
        ctor(u, dtype=D.quint8(0.1, 100))


def test_reset_and_setitem_keep_the_quantized_dtype():
    # MegEngine: _reset/set_value convert new data by the creation rules ([7.9, 3] -> [7, 3]);
    # an int8 array there hits its assertion again, mge keeps the integers
    t = Tensor([1, 2], dtype=q8())
    t._reset([7.9, 3])
    check(t, q8(), [7, 3])
    t._reset(np.array([5, -6], np.int8))
    check(t, q8(), [5, -6])
    t[0] = 9
    check(t, q8(), [9, -6])
    p = Parameter([1, 2], dtype=u4())
    with pytest.raises(RuntimeError, match="exceeds range"):
        p._reset([1, 16])
    check(p, u4(), [1, 2], Parameter)
