"""Errors found by kernels on the worker: raised at the next sync point as ``AsyncError`` (once,
with the cause, never lost), the original error at async level 0, and
``catch_worker_exception = 0`` (the worker dies, waits do not hang)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError, UnusableTensorError, apply
from helpers import (  # noqa: F401 (clean_channel: a fixture)
    Fail, SUBPROCESS_TIMEOUT, bad_index_pair, big, busy_worker, WORKER_N as N, clean_channel,
)

pytestmark = pytest.mark.usefixtures("clean_channel")


def test_error_is_raised_at_the_next_sync_point_once():
    x, idx = bad_index_pair()
    y = F.nn.indexing_one_hot(x, idx)             # no error at the call
    with pytest.raises(AsyncError) as info:
        y.numpy()
    e = info.value
    assert isinstance(e, RuntimeError)
    assert isinstance(e.__cause__, IndexError) and "out of range" in str(e.__cause__)
    assert "async_level = 0" in str(e)
    mge._full_sync()                              # reported once: the next sync is clean
    with pytest.raises(UnusableTensorError, match="an input tensor is unusable due to previous error"):
        y.numpy()
    with pytest.raises(RuntimeError, match="an input tensor is unusable due to previous error"):
        y + 1
    np.testing.assert_array_equal((x * 2).numpy(), np.arange(20).reshape(4, 5) * 2)


def test_error_is_raised_by_full_sync_and_by_reading_an_unrelated_tensor():
    y = apply(Fail(), big())[0]
    with pytest.raises(AsyncError) as info:
        mge._full_sync()
    assert isinstance(info.value.__cause__, ValueError) and str(info.value.__cause__) == "boom"
    mge._full_sync()
    y2 = apply(Fail(), big())[0]
    z = big() + 1
    with pytest.raises(AsyncError):
        z.numpy()                                 # any sync point reports it
    np.testing.assert_array_equal(z.numpy(), np.arange(N) + 1)
    del y, y2


def test_error_at_async_level_0_is_the_original_at_the_call():
    mge.config.async_level = 0
    x, idx = bad_index_pair()
    with pytest.raises(IndexError, match="out of range") as info:
        F.nn.indexing_one_hot(x, idx)
    assert not isinstance(info.value, AsyncError)
    with pytest.raises(ValueError, match="boom"):
        apply(Fail(), big())
    mge._full_sync()
    np.testing.assert_array_equal((big() + 1).numpy(), np.arange(N) + 1)


def test_indexing_one_hot_out_of_range_is_never_lost():
    # MegEngine 1.13 on CPU returns garbage here; mge must raise.
    x, idx = bad_index_pair()
    with pytest.raises(AsyncError):
        F.nn.indexing_one_hot(x, idx).numpy()
    mge._full_sync()


def test_an_error_in_a_long_queued_chain_is_reported_once_with_its_cause():
    x, idx = bad_index_pair()
    good = []
    # The whole chain is queued before anything runs (the worker is held): had the failing op
    # run already, the ops issued after it would be refused at the call instead of queued.
    with busy_worker():
        t = mge.tensor(np.zeros(4, "float32")) + x[:, 0]   # worker-computed chain start
        for i in range(1000):
            if i == 500:
                t = t + F.nn.indexing_one_hot(x, idx)
            else:
                t = t + 1
            if i == 499:
                good = t
    with pytest.raises(AsyncError) as info:
        t.numpy()
    e = info.value
    assert isinstance(e.__cause__, IndexError)        # later ops did not hide it
    assert len(e.errors) == 1
    mge._full_sync()                                   # nothing left to report
    with pytest.raises(UnusableTensorError):
        t.numpy()
    np.testing.assert_array_equal(good.numpy(), np.arange(0, 20, 5) + 500)


def test_errors_of_several_independent_ops_are_reported_together_once():
    ys = [apply(Fail(), big())[0] for _ in range(3)]
    with pytest.raises(AsyncError, match="2 more") as info:
        mge._full_sync()
    assert len(info.value.errors) == 3
    mge._full_sync()
    del ys


_UNCAUGHT = """
import threading, numpy as np, mge
from mge.core import OpDef, TensorDesc, apply, def_infer, def_kernel, set_option, get_option
from mge._core.channel import get_channel
seen = []
threading.excepthook = lambda a: seen.append(f"{a.exc_type.__name__}: {a.exc_value}")
class Fail(OpDef):
    pass
def_infer(Fail)(lambda op, d: [TensorDesc(d[0][0], d[0][1])])
@def_kernel(Fail)
def k(op, x):
    raise ValueError("boom")
if NAME:
    set_option(NAME, 0)
assert get_option("catch_worker_exception") == get_option("catch_worker_execption") == 0
x = mge.tensor(np.ones(16, "float32"))
print("ok-before", (x + 1).numpy()[0])
y = apply(Fail(), x)[0]
try:
    y.numpy()
except RuntimeError as e:
    print("RAISED:", e, "| cause:", repr(e.__cause__))
tid = get_channel().worker_thread()    # the worker died: wait until its thread has ended
for t in threading.enumerate():
    if t.ident == tid:
        t.join(10)
print("HOOK:", seen)
try:
    (x * 2).numpy()
except RuntimeError as e:
    print("AGAIN:", e)
"""


def test_uncaught_worker_exception_propagates_and_waits_do_not_hang():
    procs = []
    for name, env in (("'catch_worker_exception'", {}), ("'catch_worker_execption'", {}),
                      ("None", {"MEGENGINE_CATCH_WORKER_EXEC": "0"})):
        env = dict(os.environ, **env)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", f"NAME = {name}\n" + _UNCAUGHT], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=SUBPROCESS_TIMEOUT)
        assert "ok-before 2.0" in out, err
        assert "RAISED: the mge worker thread died" in out and "ValueError('boom')" in out, out + err
        assert "HOOK: ['ValueError: boom']" in out, out + err
        assert "AGAIN: the mge worker thread died" in out, out + err
        assert p.returncode == 0, err



@pytest.mark.parametrize("level", [0, 1, 2])
def test_simulate_error_reports_where_the_async_level_says(level):
    # MegEngine's F.utils._simulate_error: a kernel that fails
    import mge.functional as F
    saved = mge.config.async_level
    mge.config.async_level = level
    try:
        if level == 0:
            with pytest.raises(RuntimeError, match="AssertEqual"):
                F.utils._simulate_error()
        else:
            y = F.utils._simulate_error()  # queued: the call returns
            with pytest.raises(RuntimeError) as info:
                y.numpy()
            assert isinstance(info.value, AsyncError)
            assert isinstance(info.value.__cause__, RuntimeError)
        np.testing.assert_array_equal((F.zeros(3) + 1).numpy(), np.ones(3))  # still working
    finally:
        mge.config.async_level = saved
