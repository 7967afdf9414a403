"""A kernel that raises a ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit``) is reported like any kernel error and leaves the runtime working.

A ``KeyboardInterrupt`` or ``SystemExit`` reaches the caller's thread as itself at the next sync
point (so ``except KeyboardInterrupt`` still works); any other exception as ``AsyncError`` with the
original as its cause.  At ``async_level`` 0 the call raises it.
"""
import numpy as np
import pytest

import mge
from helpers import WORKER_N, big, same_desc
from mge.core import AsyncError, OpDef, def_infer, def_kernel


class Raises(OpDef):
    """Its kernel raises ``exc()`` (the exception class is the parameter)."""
    _fields = ("exc",)


def_infer(Raises)(same_desc)


@def_kernel(Raises)
def _raises_kernel(op, x):
    raise op.exc("raised inside a kernel")


EXCEPTIONS = [KeyboardInterrupt, SystemExit, GeneratorExit]


@pytest.fixture
def level():
    saved = mge.config.async_level
    yield
    mge.config.async_level = saved


def _still_works():
    x = big()
    np.testing.assert_array_equal((x * 2 + 1).numpy(), np.arange(WORKER_N, dtype="float32") * 2 + 1)


@pytest.mark.parametrize("exc", EXCEPTIONS, ids=lambda e: e.__name__)
def test_a_base_exception_in_a_kernel_is_reported_at_the_next_sync_point(exc, level):
    mge.config.async_level = 2
    y = mge.core.apply(Raises(exc), big())[0]     # returns: the kernel runs later
    z = big(1.0) * 3                              # unrelated work goes on
    if exc in (KeyboardInterrupt, SystemExit):
        with pytest.raises(exc, match="raised inside a kernel"):
            mge._full_sync()
    else:
        with pytest.raises(AsyncError) as info:
            mge._full_sync()
        assert isinstance(info.value.__cause__, exc)
    np.testing.assert_array_equal(z.numpy(), (np.arange(WORKER_N, dtype="float32") + 1) * 3)
    with pytest.raises(mge.core.UnusableTensorError):
        y.numpy()
    _still_works()                               # the worker did not die
    mge._full_sync()                             # and nothing is reported twice


@pytest.mark.parametrize("exc", EXCEPTIONS, ids=lambda e: e.__name__)
def test_a_base_exception_in_a_kernel_is_raised_by_the_call_at_level_0(exc, level):
    mge.config.async_level = 0
    with pytest.raises(exc, match="raised inside a kernel"):
        mge.core.apply(Raises(exc), big())
    _still_works()
    mge._full_sync()
