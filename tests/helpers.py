"""Small helpers shared by the op tests."""
import contextlib
import re

import numpy as np
import pytest

from mge.core import AsyncError


def arr(shape, dtype="float32", seed=0):
    """A seeded random array of ``shape`` and ``dtype`` (values of a few units)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 5).astype(dtype)


def check(t, ref):
    """``t`` has exactly ``ref``'s shape, dtype and values."""
    ref = np.asarray(ref)
    v = t.numpy()
    assert v.shape == ref.shape, (v.shape, ref.shape)
    assert v.dtype == ref.dtype, (v.dtype, ref.dtype)
    np.testing.assert_array_equal(v, ref)


def raises_at_run(exc, match, fn):
    """``fn()`` fails with ``exc`` matching ``match``: at the call, or (an error found by the
    kernel) at the next sync point as an ``AsyncError`` caused by it."""
    with pytest.raises((exc, AsyncError)) as info:
        fn()
        mge_sync()
    e = info.value
    if isinstance(e, AsyncError):
        e = e.__cause__
    assert isinstance(e, exc) and re.search(match, str(e)), repr(e)


def mge_sync():
    import mge
    mge._full_sync()


@contextlib.contextmanager
def ops_run():
    """Within the block, the names of the ops that reach ``eval`` (the ops that really run) are
    appended to the yielded list."""
    from mge._core.plugins import stack  # on the stack directly: a test instrument, not a plugin
    from mge.core import Transformation
    seen = []

    class OpRecorder(Transformation):
        name = "test_ops_run_recorder"
        position = "before:eval"

        def apply(self, op, inputs, next):
            seen.append(op.name)
            return next(op, inputs)

    recorder = OpRecorder()
    stack.register(recorder)
    try:
        yield seen
    finally:
        stack.unregister(recorder)
