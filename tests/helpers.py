"""Small helpers shared by the tests (import them from here; do not copy them into a test file).

Arrays: ``arr`` (seeded float32 values of a few units), ``randn`` (standard normal float64, from a
seed or from a generator the caller keeps), ``indices`` (int32 index arrays).
Tensors: ``as_tensor`` (mge's default dtypes), ``float_tensor`` (converted by numpy, float32 by
default), ``exact_tensor`` (the array's own dtype: float64 stays float64); ``run`` (an op's outputs
as arrays).
Checks: ``check`` (exact shape, dtype and values), ``check_close`` (dtype, shape and values within
a tolerance), ``close`` (values within a tolerance of float32 references), ``raises_at_run``.
Ops: ``same_desc`` (an infer rule: one output like the first input), ``ops_run``, ``mge_sync``.
The asynchronous channel: the ops ``Gate``, ``Fail`` and ``CallsChannel``, ``busy_worker``, ``big``,
``bad_index_pair``, the fixture ``clean_channel`` and ``run_script`` (a fresh Python).
"""
import contextlib
import gc
import itertools
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import mge
from mge.core import (
    AsyncError, OpDef, TensorDesc, apply, def_infer, def_kernel, get_option, set_option,
)
from mge._core.channel import OPTIONS, get_channel


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


# -- the asynchronous channel (tests/test_async_*.py, test_command_buffer.py, test_swap_drop.py) --
# No test sleeps to synchronise: the ``Gate`` op holds the worker on a ``threading.Event`` when a
# test needs it busy, and everything else waits through the channel's own sync points.
WORKER_N = 16  # elements: more than the host-compute limit, so ops on these are queued
SUBPROCESS_TIMEOUT = 60


class Gate(OpDef):
    """Identity whose kernel waits until the test opens its gate (keeps the worker busy)."""
    _fields = ("key",)


class Fail(OpDef):
    """Raises ``ValueError('boom')`` in its kernel."""


class CallsChannel(OpDef):
    """Its kernel calls the channel from the worker thread (``what`` says how)."""
    _fields = ("what",)


_GATES = {}
_gate_keys = itertools.count()
SECOND = {}  # "channel": a second Channel to close from the worker; "pending": a value to read

for _cls in (Gate, Fail, CallsChannel):
    def_infer(_cls)(same_desc)


@def_kernel(Gate)
def _gate_kernel(op, x):
    entered, opened = _GATES[op.key]
    entered.set()
    assert opened.wait(30), "the test never opened the gate"
    return (x.copy(),)


@def_kernel(Fail)
def _fail_kernel(op, x):
    raise ValueError("boom")


@def_kernel(CallsChannel)
def _calls_channel_kernel(op, x):
    if op.what == "sync":
        get_channel().sync()
    elif op.what == "tensor":
        mge.tensor(np.ones(WORKER_N, "float32"))
    elif op.what == "get_value":
        get_channel().get_value(SECOND["pending"])
    elif op.what == "close":
        SECOND["channel"].close()
    elif op.what == "gc":
        gc.collect()                 # runs Tensor finalizers on the worker thread
    return (x.copy(),)


@contextlib.contextmanager
def busy_worker():
    """The worker is inside a kernel until the block ends."""
    ch = get_channel()
    key = next(_gate_keys)
    entered, opened = threading.Event(), threading.Event()
    _GATES[key] = (entered, opened)
    try:
        g = apply(Gate(key), big())[0]
        ch.flush()
        assert entered.wait(30)
        yield
    finally:
        opened.set()
    ch.wait_idle()  # not a sync point: errors queued inside the block are the test's to read
    del _GATES[key]
    del g


def big(start=0.0, n=WORKER_N, dtype="float32"):
    """A worker-sized tensor ``arange(start, start + n)``."""
    return mge.tensor(np.arange(start, start + n, dtype=dtype))


def bad_index_pair():
    """``indexing_one_hot`` inputs whose index is out of range (the src is worker-sized)."""
    x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))
    idx = mge.tensor(np.array([0, 1, 7, 2], dtype="int32"))
    return x, idx


@pytest.fixture
def clean_channel():
    """Options restored after the test; the test must not leave unreported worker errors.
    (A test module uses it with ``pytestmark = pytest.mark.usefixtures("clean_channel")``.)"""
    saved = {name: get_option(name) for name in OPTIONS}
    yield
    leftover = []
    try:
        mge._full_sync()             # a sync point: it raises the errors nobody read
    except AsyncError as e:
        leftover = e.errors
    finally:
        for name, value in saved.items():
            if get_option(name) != value:
                set_option(name, value)
    assert not leftover, f"errors never reported: {leftover}"


def allocated_bytes():
    """The CPU device's tensor storage now (``mge.device.get_allocated_memory()``)."""
    return mge.device.get_allocated_memory()


def run_script(code, env=None, timeout=SUBPROCESS_TIMEOUT):
    """Run ``code`` (dedented) in a fresh Python with ``env`` added to the environment."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
