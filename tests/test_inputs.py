"""Inputs that must be refused or normalised: a custom op's kernel checked against its shape rule
(``CpuDevice.execute``), operands no tensor can hold (strings, complex numbers, ``None``,
``numpy.longdouble``) refused at the call, big-endian data made native, and creation shapes that
cannot be allocated refused by the shape rule."""
import re

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError, OpDef, TensorDesc, apply, def_infer, def_kernel
from helpers import clean_channel, WORKER_N as N  # noqa: F401 (clean_channel: a fixture)

pytestmark = pytest.mark.usefixtures("clean_channel")

f32 = np.dtype("float32")


# -- a custom op's kernel is checked against its declared outputs ---------------------------------
class ShortOutput(OpDef):
    """Declares shape (64,); its kernel returns shape (2,)."""
    long_running = False


class BareArray(OpDef):
    """Its kernel returns a bare array, not a tuple of arrays."""
    long_running = False


class TwoOutputs(OpDef):
    """Declares one output; its kernel returns two."""
    long_running = False


class GoodOp(OpDef):
    """Declares (64,) as a list of numpy ints; its kernel returns a list with a (64,) array."""
    long_running = False


SEEN = []


@def_infer(ShortOutput)
@def_infer(TwoOutputs)
def _declares_64(op, descs):
    SEEN.append(descs)
    return [TensorDesc((64,), f32)]


@def_infer(BareArray)
def _like_input(op, descs):
    return [TensorDesc(descs[0][0], descs[0][1])]


@def_infer(GoodOp)
def _declares_64_as_list(op, descs):
    return [TensorDesc([np.int64(64)], f32)]


@def_kernel(ShortOutput)
def _short(op, x):
    return (np.zeros(2, np.float32),)


@def_kernel(BareArray)
def _bare(op, x):
    return x + 1


@def_kernel(TwoOutputs)
def _two(op, x):
    return (np.zeros(64, np.float32), np.zeros(64, np.float32))


@def_kernel(GoodOp)
def _good(op, x):
    return [np.full(64, 3.0)]  # float64: converted to the declared float32


def _worker_input():
    return mge.tensor(np.arange(N, dtype="float32"))


def _raises_at_level(level, exc, match, fn):
    """``fn()`` fails with ``exc``: at the next sync as the cause of an AsyncError at async level
    2, at the call itself at level 0."""
    mge.config.async_level = level
    if level == 0:
        with pytest.raises(exc, match=match) as info:
            fn()
        assert not isinstance(info.value, AsyncError)
        return
    with pytest.raises(AsyncError) as info:
        fn().numpy()
    assert isinstance(info.value.__cause__, exc), info.value.__cause__
    assert re.search(match, str(info.value.__cause__)), str(info.value.__cause__)


@pytest.mark.parametrize("level", [2, 0])
def test_a_kernel_output_of_the_wrong_shape_is_refused(level):
    _raises_at_level(level, ValueError,
                     r"ShortOutput: the CPU kernel returned an output of shape \(2,\) for output 0, "
                     r"the op declares \(64,\)",
                     lambda: apply(ShortOutput(), _worker_input())[0])
    mge._full_sync()


@pytest.mark.parametrize("level", [2, 0])
def test_a_kernel_returning_a_bare_array_is_refused(level):
    _raises_at_level(level, TypeError, r"BareArray: the CPU kernel must return a tuple of arrays",
                     lambda: apply(BareArray(), _worker_input())[0])
    mge._full_sync()


@pytest.mark.parametrize("level", [2, 0])
def test_a_kernel_returning_too_many_outputs_is_refused(level):
    _raises_at_level(level, RuntimeError, r"TwoOutputs: the CPU kernel returned 2 output\(s\), "
                     r"the op declares 1", lambda: apply(TwoOutputs(), _worker_input())[0])
    mge._full_sync()


@pytest.mark.parametrize("level", [2, 0])
def test_a_kernel_of_the_declared_shape_passes(level):
    mge.config.async_level = level
    y, = apply(GoodOp(), _worker_input())
    assert y.numpy().shape == (64,) and y.dtype == f32
    np.testing.assert_array_equal(y.numpy(), np.full(64, 3.0, np.float32))


def test_the_channel_is_usable_after_a_refused_kernel():
    with pytest.raises(AsyncError):
        apply(ShortOutput(), _worker_input())[0].numpy()
    np.testing.assert_array_equal((_worker_input() + 1).numpy(), np.arange(N) + 1)


def test_a_shape_rule_receives_descs_with_shape_and_dtype():
    SEEN.clear()
    mge.config.async_level = 0
    with pytest.raises(ValueError):
        apply(ShortOutput(), mge.tensor(np.ones((3, 2), "float32")))
    d = SEEN[-1][0]
    assert d.shape == (3, 2) and d.dtype == f32


# -- operands no tensor can hold: a TypeError at the call, naming the op and the type -----------
BAD_OPERANDS = [
    ("a", "str"), ("1", "str"), (b"1", "bytes"), (1 + 2j, "complex"), (None, "NoneType"),
    (np.longdouble(1), "longdouble"), (np.ones(4, np.longdouble), "ndarray"),
    (np.ones(4, np.complex64), "ndarray"), (["a", "b", "c", "d"], "list"),
]


@pytest.mark.parametrize("level", [2, 0])
@pytest.mark.parametrize("value,type_name", BAD_OPERANDS)
def test_a_bad_operand_is_refused_at_the_call(level, value, type_name):
    mge.config.async_level = level
    x = mge.tensor(np.ones(4, "float32"))
    for fn, op in [(lambda: x + value, "Elemwise.add"), (lambda: value * x, "Elemwise.mul"),
                   (lambda: F.maximum(x, value), "Elemwise.max")]:
        with pytest.raises(TypeError) as info:
            fn()
        text = "\n".join([str(info.value)] + getattr(info.value, "__notes__", []))
        assert op in text and type_name in text, text  # (None: MegEngine's text, op in a note)


@pytest.mark.parametrize("value,type_name", [(1j, "complex"), (None, "NoneType"), ("2", "str")])
def test_a_bad_operand_alone_is_refused(value, type_name):
    with pytest.raises(TypeError, match=rf"Elemwise.exp: .*{type_name}"):
        F.exp(value)


def test_a_tensor_refuses_such_data_too():
    # (None is MegEngine's empty float32 tensor: tests/test_tensor.py)
    for data in ["a", 1j, np.ones(2, np.longdouble), np.ones(2, np.complex128)]:
        with pytest.raises(TypeError):
            mge.tensor(data)
    with pytest.raises(TypeError, match="unsupported dtype"):
        mge.tensor([1.0, 2.0], dtype=np.longdouble)


# -- big-endian data becomes native-endian tensors --------------------------------------------------
@pytest.mark.parametrize("level", [2, 0])
def test_big_endian_arrays_become_native_tensors(level):
    mge.config.async_level = level
    x = mge.tensor(np.arange(16, dtype=">f4"))
    assert x.dtype == f32 and x.dtype.isnative
    assert x.sum().numpy() == 120.0
    np.testing.assert_array_equal(x.numpy(), np.arange(16, dtype="float32"))
    for src, dtype in [(">i4", "int32"), (">i8", "int32"), (">f8", "float32"), (">u2", "uint16")]:
        t = mge.tensor(np.arange(5, dtype=src))
        assert t.dtype == np.dtype(dtype) and t.dtype.isnative, (src, t.dtype)
        np.testing.assert_array_equal(t.numpy(), np.arange(5))
    t = mge.tensor([1.0, 2.0], dtype=">f4")
    assert t.dtype == f32 and t.dtype.isnative


@pytest.mark.parametrize("level", [2, 0])
def test_a_big_endian_operand_is_converted(level):
    mge.config.async_level = level
    x = mge.tensor(np.ones(4, "float32"))
    y = x + np.arange(4, dtype=">f4")
    assert y.dtype == f32 and y.dtype.isnative
    np.testing.assert_array_equal(y.numpy(), np.arange(4) + 1.0)
    z = F.exp(np.zeros(4, dtype=">f8"))
    assert z.dtype == f32 and z.dtype.isnative
    np.testing.assert_array_equal(z.numpy(), np.ones(4, "float32"))
    i = mge.tensor(np.arange(4, dtype="int32")) + np.arange(4, dtype=">i4")
    assert i.dtype == np.dtype("int32") and i.dtype.isnative
    np.testing.assert_array_equal(i.numpy(), 2 * np.arange(4))


# -- creation shapes: negative sizes and byte sizes that cannot fit, refused at the call -----------
@pytest.mark.parametrize("level", [2, 0])
def test_creation_shapes_that_cannot_be_allocated_are_refused(level):
    mge.config.async_level = level
    for fn in [lambda: F.zeros((2 ** 64,)), lambda: F.ones((2 ** 32, 2 ** 32)),
               lambda: F.full((2 ** 62,), 1.0), lambda: F.arange(0, 2 ** 63, 1)]:
        with pytest.raises(ValueError, match="too large"):
            fn()
    with pytest.raises(ValueError, match=r"shape\[0\] >= 0, got -1"):
        F.zeros((-1,))
    with pytest.raises(ValueError, match=r"shape\[1\] >= 0, got -3"):
        F.ones((2, -3))
    assert F.zeros((0, 2 ** 60)).numpy().shape == (0, 2 ** 60)  # no bytes at all: fine
    with pytest.raises(ValueError, match="too large"):
        F.zeros((0, 2 ** 62))  # numpy's rule: the non-zero sizes must fit
    np.testing.assert_array_equal(F.zeros((3,)).numpy(), np.zeros(3, "float32"))
