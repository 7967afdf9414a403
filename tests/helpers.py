"""Small helpers shared by the tests (import them from here; do not copy them into a test file).

Arrays: ``arr`` (seeded float32 values of a few units), ``randn`` (standard normal float64, from a
seed or from a generator the caller keeps), ``indices`` (int32 index arrays).
Tensors: ``as_tensor`` (mge's default dtypes), ``float_tensor`` (converted by numpy, float32 by
default), ``exact_tensor`` (the array's own dtype: float64 stays float64); ``run`` (an op's outputs
as arrays).
Checks: ``check`` (exact shape, dtype and values), ``check_close`` (dtype, shape and values within
a tolerance), ``close`` (values within a tolerance of float32 references), ``raises_at_run``.
Ops: ``same_desc`` (an infer rule: one output like the first input), ``ops_run``, ``mge_sync``.
"""
import contextlib
import re

import numpy as np
import pytest

import mge
from mge.core import AsyncError, TensorDesc, apply


# -- arrays ---------------------------------------------------------------------------------------
def arr(shape, dtype="float32", seed=0):
    """A seeded random array of ``shape`` and ``dtype`` (values of a few units)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 5).astype(dtype)


def randn(*shape, seed=0, rng=None):
    """Standard normal float64 values of ``shape``: drawn from ``rng`` (a numpy ``Generator``,
    which advances: successive calls give new values) if given, else from a new generator seeded
    with ``seed`` (the same values for the same seed)."""
    if rng is None:
        rng = np.random.default_rng(seed)
    return rng.standard_normal(shape)


def indices(values):
    """An int32 array of ``values`` (index inputs)."""
    return np.array(values, dtype="int32")


# -- tensors --------------------------------------------------------------------------------------
def as_tensor(a, dtype=None):
    """``mge.tensor(np.asarray(a), dtype=dtype)``: mge's dtype rules (float64 values become
    float32 unless ``dtype`` says otherwise)."""
    return mge.tensor(np.asarray(a), dtype=dtype)


def float_tensor(values, dtype="float32"):
    """A tensor of ``values`` converted to ``dtype`` (float32 by default) by numpy first."""
    return mge.tensor(np.asarray(values, dtype=dtype))


def exact_tensor(a):
    """A tensor of ``a`` in ``a``'s own dtype (float64 stays float64)."""
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype)


def run(op, *arrays):
    """The outputs of ``apply(op, ...)`` on exact tensors of ``arrays``, as numpy arrays."""
    return [y.numpy() for y in apply(op, *[exact_tensor(a) for a in arrays])]


# -- checks ---------------------------------------------------------------------------------------
def check(t, ref):
    """``t`` has exactly ``ref``'s shape, dtype and values."""
    ref = np.asarray(ref)
    v = t.numpy()
    assert v.shape == ref.shape, (v.shape, ref.shape)
    assert v.dtype == ref.dtype, (v.dtype, ref.dtype)
    np.testing.assert_array_equal(v, ref)


def check_close(out, ref, dtype, rtol=1e-5, atol=1e-6, equal_nan=True):
    """``out`` is an mge tensor of ``dtype`` with ``ref``'s shape, and its values are within
    ``rtol``/``atol`` of ``ref``'s (compared in float64; NaN equals NaN unless ``equal_nan`` is
    false)."""
    assert isinstance(out, mge.Tensor)
    assert out.dtype == np.dtype(dtype), (out.dtype, dtype)
    assert out.shape == np.shape(ref), (out.shape, np.shape(ref))
    np.testing.assert_allclose(out.numpy().astype(np.float64), np.asarray(ref, np.float64),
                               rtol=rtol, atol=atol, equal_nan=equal_nan)


def close(tensor, expected, rtol=1e-5, atol=1e-6):
    """``tensor``'s values are within ``rtol``/``atol`` of ``expected`` taken as float32."""
    np.testing.assert_allclose(tensor.numpy(), np.asarray(expected, "float32"), rtol=rtol,
                               atol=atol)


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
    mge._full_sync()


# -- ops ------------------------------------------------------------------------------------------
def same_desc(op, descs):
    """An infer rule (``def_infer(cls)(same_desc)``): one output with the first input's shape and
    dtype."""
    return [TensorDesc(descs[0][0], descs[0][1])]


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
