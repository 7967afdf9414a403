"""The asynchronous interpreter (seed 003): commands, Del fusion, async levels, errors at sync
points, options, swap/drop, lifecycle (close, exit, fork, calls from the worker) and a stress run.

No test sleeps to synchronise: a custom op (``_Gate``) holds the worker on a ``threading.Event``
when a test needs it busy, and everything else waits through the channel's own sync points.
"""
import contextlib
import gc
import itertools
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import (
    AsyncError, OpDef, UnusableTensorError, apply, def_infer, def_kernel, get_option,
    set_option,
)
from mge._core.channel import OPTIONS, Channel, get_channel
from mge._core import _accel
HOST_COMPUTE_SIZE = _accel.load("mge._core.channel.channel").HOST_COMPUTE_SIZE
from mge._core.device import as_device
from mge._core.ops import Elemwise
from helpers import same_desc

ch = get_channel()
N = 16  # elements: more than HOST_COMPUTE_SIZE, so ops on these are queued (not host-computed)
SUBPROCESS_TIMEOUT = 60


# -- custom ops used by the tests ----------------------------------------------------------------
class _Gate(OpDef):
    """Identity whose kernel waits until the test opens its gate (keeps the worker busy)."""
    _fields = ("key",)


class _Fail(OpDef):
    """Raises ``ValueError('boom')`` in its kernel."""


class _CallsChannel(OpDef):
    """Its kernel calls the channel from the worker thread (``what`` says how)."""
    _fields = ("what",)


_GATES = {}
_gate_keys = itertools.count()
_SECOND = {}  # a second Channel for the close-from-the-worker test


for _cls in (_Gate, _Fail, _CallsChannel):
    def_infer(_cls)(same_desc)


@def_kernel(_Gate)
def _gate_kernel(op, x):
    entered, opened = _GATES[op.key]
    entered.set()
    assert opened.wait(30), "the test never opened the gate"
    return (x.copy(),)


@def_kernel(_Fail)
def _fail_kernel(op, x):
    raise ValueError("boom")


@def_kernel(_CallsChannel)
def _calls_channel_kernel(op, x):
    if op.what == "sync":
        get_channel().sync()
    elif op.what == "tensor":
        mge.tensor(np.ones(N, "float32"))
    elif op.what == "get_value":
        get_channel().get_value(_SECOND["pending"])
    elif op.what == "close":
        _SECOND["channel"].close()
    elif op.what == "gc":
        gc.collect()                 # runs Tensor finalizers on the worker thread
    return (x.copy(),)


@contextlib.contextmanager
def busy_worker():
    """The worker is inside a kernel until the block ends."""
    key = next(_gate_keys)
    entered, opened = threading.Event(), threading.Event()
    _GATES[key] = (entered, opened)
    try:
        g = apply(_Gate(key), big())[0]
        ch.flush()
        assert entered.wait(30)
        yield
    finally:
        opened.set()
    ch.wait_idle()  # not a sync point: errors queued inside the block are the test's to read
    del _GATES[key]
    del g


def big(start=0.0, n=N, dtype="float32"):
    return mge.tensor(np.arange(start, start + n, dtype=dtype))


def bad_index_pair():
    """``indexing_one_hot`` inputs whose index is out of range (the src is worker-sized)."""
    x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))
    idx = mge.tensor(np.array([0, 1, 7, 2], dtype="int32"))
    return x, idx


@pytest.fixture(autouse=True)
def _clean_channel():
    """Options restored after each test; a test must not leave unreported worker errors."""
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


def run_script(code, env=None, timeout=SUBPROCESS_TIMEOUT):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


# == 1. each command ==============================================================================
def test_put_apply_get_value_on_the_worker():
    x = big()
    assert x._info.h_value is None  # too big for the host: the worker computes ops on it
    y = x * 3 + 1
    assert y.shape == (N,) and y.dtype == np.float32 and y.device == x.device
    v = y.numpy()
    np.testing.assert_array_equal(v, np.arange(N, dtype="float32") * 3 + 1)
    assert not v.flags.writeable
    assert y._info.value is not None


def test_channel_commands_directly():
    c = Channel()
    try:
        cpu = as_device("cpu0")
        a = c.put(np.arange(N, dtype="float32"), cpu)
        b = c.put(np.ones(N, dtype="float32"), cpu)
        (s,) = c.apply_op(mge.core.ops.Elemwise("add"), [a, b])
        assert c.get_shape(s) == (N,) and c.get_dtype(s) == np.float32
        assert c.get_device(s) == cpu
        c.del_(a)
        c.del_(a)  # a second del is harmless
        c.sync()
        c.full_sync()
        np.testing.assert_array_equal(c.get_value(s), np.arange(N) + 1)
        assert a.value is None and a.deleted
        with pytest.raises(RuntimeError, match="deleted"):
            c.apply_op(mge.core.ops.Elemwise("neg"), [a])
    finally:
        c.close()


def test_ops_on_worker_sized_tensors_are_queued_and_tiny_ones_are_host_computed():
    with busy_worker():
        y = big() * 2
        assert y._info.value is None       # queued behind the busy worker
        assert y.shape == (N,)             # known at dispatch: no wait
        t = mge.tensor([1.0, 2.0, 3.0])
        u = (t * 2 + 1).sum()
        assert u._info.value is not None   # host-computed at dispatch on this thread
        assert u.numpy() == 15.0           # no wait for the busy worker
        w = F.concat([t, t])               # 6 elements: still host
        assert w._info.value is not None
        big_out = F.concat([t, t, t])      # 9 elements: the worker's job
        assert big_out._info.value is None
    np.testing.assert_array_equal(y.numpy(), np.arange(N) * 2)
    np.testing.assert_array_equal(big_out.numpy(), [1, 2, 3] * 3)


def test_host_compute_can_be_disabled():
    set_option("enable_host_compute", 0)
    with busy_worker():
        t = mge.tensor([1.0, 2.0]) + 1
        assert t._info.value is None
    assert t.tolist() == [2.0, 3.0]


def test_get_shape_waits_only_when_the_shape_is_unknown():
    x = big()
    mask = x > 5
    with busy_worker():
        vals, idx = F.cond_take(mask, x)
        y = x + 1
        assert y.shape == (N,)             # known: no wait while the worker is busy
        assert vals._info.shape is None    # unknown until the kernel runs
        assert vals.dtype == np.float32 and vals.device == x.device  # no wait either
    assert vals.shape == (N - 6,)
    np.testing.assert_array_equal(vals.numpy(), np.arange(6, N))
    np.testing.assert_array_equal(idx.numpy(), np.arange(6, N))


def test_sync_and_full_sync_wait_for_everything():
    ys = [big(i) * 2 for i in range(20)]
    mge._full_sync()
    assert all(y._info.value is not None for y in ys)
    zs = [y + 1 for y in ys]
    mge._sync()
    assert all(z._info.value is not None for z in zs)
    ch.sync()
    ch.full_sync()


def test_close_is_idempotent_finishes_queued_work_and_refuses_more():
    c = Channel()
    cpu = as_device("cpu0")
    a = c.put(np.arange(N, dtype="float32"), cpu)
    outs = [c.apply_op(mge.core.ops.Elemwise("mul"), [a, a])[0] for _ in range(10)]
    c.close()
    assert all(o.value is not None for o in outs)  # queued work ran before the worker stopped
    np.testing.assert_array_equal(outs[-1].value, np.arange(N) ** 2)
    c.close()
    tid = c.worker_thread()
    assert tid is not None and tid not in {t.ident for t in threading.enumerate()}  # stopped
    for call in (lambda: c.put(np.ones(1), cpu), lambda: c.sync(),
                 lambda: c.apply_op(mge.core.ops.Elemwise("neg"), [a])):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    c.del_(a)  # deleting after close is a no-op (tensors die after the channel at exit)


def test_close_reports_unread_errors(capfd):
    c = Channel()
    a = c.put(np.ones(N, "float32"), as_device("cpu0"))
    c.apply_op(_Fail(), [a])
    c.close()
    assert "boom" in capfd.readouterr().err


def test_set_option_and_get_option():
    assert get_option("buffer_length") == 3
    set_option("buffer_length", 7)
    assert get_option("buffer_length") == 7
    x = big()
    ys = [x + k for k in range(9)]
    assert len(ch.buffered()) == 7              # the buffer holds the last 7 commands
    assert mge.core.get_option("buffer_length") == ch.get_option("buffer_length")


def test_push_scope_and_pop_scope():
    ch.push_scope("outer")
    ch.push_scope("inner")
    y = big() * 2
    with pytest.raises(ValueError, match="'outer'.*'inner'"):
        ch.pop_scope("outer")
    ch.pop_scope("inner")
    ch.pop_scope("outer")
    with pytest.raises(ValueError, match="None"):
        ch.pop_scope("outer")
    assert ch.scopes == []
    np.testing.assert_array_equal(y.numpy(), np.arange(N) * 2)


# == 2. Del fusion and in-place reuse ============================================================
def _addr(info):
    return info.value.__array_interface__["data"][0]


def test_del_is_fused_into_the_last_use_and_the_buffer_is_reused():
    assert get_option("buffer_length") == 3
    x = big(1)
    mge._full_sync()
    addr = _addr(x._info)
    before = ch.counters()
    y = x * 2
    xi = x._info
    kind, op, inputs, dels = ch.buffered()[-1]
    assert kind == "ApplyOp" and op == Elemwise("mul") and inputs[0] is xi and not dels
    del x
    kind, op, inputs, dels = ch.buffered()[-1]
    assert kind == "ApplyOp" and op == Elemwise("mul") and dels == [xi]  # the Del rode along
    assert all(kind != "Del" for kind, *_ in ch.buffered())
    np.testing.assert_array_equal(y.numpy(), np.arange(1, N + 1) * 2)
    after = ch.counters()
    assert after["fused_dels"] == before["fused_dels"] + 1
    assert after["inplace"] == before["inplace"] + 1
    assert _addr(y._info) == addr               # the output lives in x's old buffer
    assert xi.value is None


def test_no_fusion_when_the_tensor_is_used_later_in_the_buffer():
    x = big()
    y = x * 2
    z = x + 1
    xi = x._info
    del x
    # a later buffered command reads x: the Del cannot move before it
    assert not any(kind == "ApplyOp" and dels and xi in dels
                   for kind, _, _, dels in ch.buffered())
    np.testing.assert_array_equal(y.numpy(), np.arange(N) * 2)
    np.testing.assert_array_equal(z.numpy(), np.arange(N) + 1)
    assert xi.value is None


def test_buffer_length_zero_disables_fusion():
    set_option("buffer_length", 0)
    x = big()
    fused = ch.counters()["fused_dels"]
    y = x * 2
    assert ch.buffered() == []                  # nothing held back
    del x
    np.testing.assert_array_equal(y.numpy(), np.arange(N) * 2)
    assert ch.counters()["fused_dels"] == fused


def test_changing_buffer_length_flushes_and_keeps_order():
    x = big()
    ys = [x * k for k in range(3)]
    assert len(ch.buffered()) == 3
    set_option("buffer_length", 1)
    assert ch.buffered() == []
    set_option("buffer_length", 10)
    zs = [x + k for k in range(8)]
    assert len(ch.buffered()) == 8
    for k in range(3):
        np.testing.assert_array_equal(ys[k].numpy(), np.arange(N) * k)
    for k in range(8):
        np.testing.assert_array_equal(zs[k].numpy(), np.arange(N) + k)


def test_a_live_tensor_is_never_overwritten():
    base = np.arange(N, dtype="float32")
    # 1. the user's own numpy array given to mge.tensor
    arr = base.copy()
    x = mge.tensor(arr)
    y = x * 2
    del x
    np.testing.assert_array_equal(y.numpy(), base * 2)
    np.testing.assert_array_equal(arr, base)
    # 2. a tensor the user still holds (aliased by another name)
    x = big()
    keep = x
    y = x * 2
    del x
    np.testing.assert_array_equal(y.numpy(), base * 2)
    np.testing.assert_array_equal(keep.numpy(), base)
    # 3. the user's .numpy() view of a tensor that is then deleted
    x = big()
    view = x.numpy()
    y = x * 2
    del x
    np.testing.assert_array_equal(y.numpy(), base * 2)
    np.testing.assert_array_equal(view, base)
    # 4. tensors sharing the buffer: a reshape view and a detached tensor
    x = big()
    r = x.reshape(4, 4)
    d = x.detach()
    y = x * 2
    del x
    np.testing.assert_array_equal(y.numpy(), base * 2)
    np.testing.assert_array_equal(r.numpy(), base.reshape(4, 4))
    np.testing.assert_array_equal(d.numpy(), base)
    # 5. the same tensor twice in the op: reuse is still correct
    x = big()
    y = x * x
    del x
    np.testing.assert_array_equal(y.numpy(), base * base)
    # 6. a chain that reuses buffers step after step
    x = big()
    for _ in range(5):
        x = x + 1
    np.testing.assert_array_equal(x.numpy(), base + 5)


# == 3. async levels and errors ===================================================================
def test_async_level_config_and_validation():
    assert mge.config.async_level == 2 == get_option("async_level")
    for level in (0, 1, 2):
        mge.config.async_level = level
        assert mge.config.async_level == level
    for bad in (3, -1, 1.5, "1", None):
        with pytest.raises(ValueError, match="async_level should be 0, 1 or 2"):
            mge.config.async_level = bad
    assert mge.config.async_level == 2


def test_async_level_from_environment():
    code = "import mge; print(mge.config.async_level)"
    for level in ("0", "1"):
        out = run_script(code, env={"MEGENGINE_INTERP_ASYNC_LEVEL": level})
        assert out.stdout.strip() == level, out.stderr
    out = run_script(code, env={"MEGENGINE_INTERP_ASYNC_LEVEL": "5"})
    assert out.returncode != 0 and "async_level should be 0, 1 or 2" in out.stderr


def test_async_level_0_runs_each_op_at_the_call():
    mge.config.async_level = 0
    y = big() * 2
    assert y._info.value is not None


def test_async_level_1_syncs_only_for_unknown_shapes():
    mge.config.async_level = 1
    x = big()
    with busy_worker():
        y = x * 2
        assert y._info.value is None               # shape known: stays asynchronous
    vals, _ = F.cond_take(x > 3, x)
    assert vals._info.shape == (N - 4,)            # synced at dispatch
    np.testing.assert_array_equal(vals.numpy(), np.arange(4, N))


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
    y = apply(_Fail(), big())[0]
    with pytest.raises(AsyncError) as info:
        mge._full_sync()
    assert isinstance(info.value.__cause__, ValueError) and str(info.value.__cause__) == "boom"
    mge._full_sync()
    y2 = apply(_Fail(), big())[0]
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
        apply(_Fail(), big())
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
    t = mge.tensor(np.zeros(4, "float32")) + x[:, 0]   # worker-computed chain start
    good = []
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
    ys = [apply(_Fail(), big())[0] for _ in range(3)]
    with pytest.raises(AsyncError, match="2 more") as info:
        mge._full_sync()
    assert len(info.value.errors) == 3
    mge._full_sync()
    del ys


# == 4. catch_worker_exception = 0 ================================================================
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


# == 5. options ===================================================================================
def test_options_table():
    expected = {
        "async_level": ("MEGENGINE_INTERP_ASYNC_LEVEL", 2),
        "enable_swap": ("MEGENGINE_ENABLE_SWAP", 0),
        "enable_drop": ("MEGENGINE_ENABLE_DROP", 0),
        "max_recompute_time": ("MEGENGINE_MAX_RECOMP_TIME", 1),
        "catch_worker_execption": ("MEGENGINE_CATCH_WORKER_EXEC", 1),
        "buffer_length": ("MEGENGINE_COMMAND_BUFFER_LENGTH", 3),
        "enable_host_compute": ("MEGENGINE_HOST_COMPUTE", 1),
        "disable_memory_forwarding": ("MEGENGINE_DISABLE_MEMORY_FORWARDING", 0),
        "record_computing_path": ("MEGENGINE_RECORD_COMPUTING_PATH", 0),
        "enable_dtr_auto_drop": ("MEGENGINE_DTR_AUTO_DROP", 0),
        "enable_dtr_sqrt_sampling": ("MEGENGINE_DTR_SQRT_SAMPLING", 0),
        "dtr_eviction_threshold": ("MEGENGINE_DTR_EVICTION_THRESHOLD", 0),
        "dtr_evictee_minimum_size": ("MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE", 1 << 20),
    }
    assert {k: v[:2] for k, v in OPTIONS.items()} == expected
    for name, (_, default) in expected.items():
        assert get_option(name) == default
    assert get_option("catch_worker_exception") == 1
    set_option("catch_worker_exception", 1)


def test_unknown_option_is_a_key_error_naming_the_valid_ones():
    for call in (lambda: get_option("no_such_option"), lambda: set_option("no_such_option", 1),
                 lambda: ch.get_option("asynclevel")):
        with pytest.raises(KeyError) as info:
            call()
        msg = str(info.value)
        assert all(name in msg for name in OPTIONS)


def test_options_are_read_from_the_environment():
    out = run_script("""
        from mge.core import get_option
        print(get_option("buffer_length"), get_option("enable_drop"), get_option("enable_swap"))
    """, env={"MEGENGINE_COMMAND_BUFFER_LENGTH": "5", "MEGENGINE_ENABLE_DROP": "1",
              "MEGENGINE_ENABLE_SWAP": "1"})
    assert out.stdout.split() == ["5", "1", "1"], out.stderr


# == 6. swap and drop =============================================================================
def _mem():
    return mge.device.get_allocated_memory()


def test_swap_out_and_in_keep_values_and_move_memory():
    set_option("enable_swap", 1)
    x = mge.tensor(np.random.rand(1000).astype("float32"))
    expected = x.numpy().copy()
    before = _mem()
    x._swap_out()
    after_out = _mem()
    assert after_out == before - 4000
    assert x._info.value is None
    x._swap_in()
    assert _mem() == before
    np.testing.assert_array_equal(x.numpy(), expected)
    # swapped out, then used directly: brought back on use
    x._swap_out()
    y = x * 2
    np.testing.assert_array_equal(y.numpy(), expected * 2)
    np.testing.assert_array_equal(x.numpy(), expected)
    x._swap_out()
    np.testing.assert_array_equal(x.numpy(), expected)


def test_swap_and_drop_do_nothing_without_their_options():
    x = big() * 3
    mge._full_sync()
    before = _mem()
    x._swap_out()
    x._drop()
    x._swap_in()
    mge._full_sync()
    assert x._info.value is not None and _mem() == before
    np.testing.assert_array_equal(x.numpy(), np.arange(N) * 3)


def _drop_options():
    set_option("enable_drop", 1)
    set_option("record_computing_path", 1)


def test_drop_recomputes_bit_identically():
    _drop_options()
    x = mge.tensor(np.random.rand(1000).astype("float32"))
    e = F.exp(x)
    y = e * 1.5
    expected = y.numpy().copy()
    gc.collect()  # garbage of earlier tests must not be freed between the memory readings
    gc.disable()
    try:
        before = _mem()
        recomputed = ch.counters()["recomputed"]
        y._drop()
        assert _mem() == before - 4000
        assert y._info.value is None
        np.testing.assert_array_equal(y.numpy(), expected)
        assert ch.counters()["recomputed"] == recomputed + 1
        assert _mem() == before
    finally:
        gc.enable()
    y._drop()
    z = y + 0                                       # a use by an op recomputes it too
    np.testing.assert_array_equal(z.numpy(), expected)


def test_drop_of_a_tensor_whose_input_was_a_deleted_temporary_is_ignored():
    _drop_options()
    x = mge.tensor(np.random.rand(N).astype("float32"))
    y = F.exp(x) * 1.5          # the temporary exp(x) is deleted (its Del fused into the mul)
    expected = y.numpy().copy()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y._drop()
        mge._full_sync()
    assert y._info.value is not None and any("deleted" in str(m.message) for m in w)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_drop_recomputes_recursively():
    _drop_options()
    x = mge.tensor(np.random.rand(N).astype("float32"))
    a = F.sin(x)                # named intermediates: a deleted temporary ends the path
    b = F.exp(a)
    c = b * b
    ea, eb, ec = a.numpy().copy(), b.numpy().copy(), c.numpy().copy()
    recomputed = ch.counters()["recomputed"]
    a._drop()
    b._drop()
    c._drop()
    mge._full_sync()
    assert a._info.value is None and b._info.value is None and c._info.value is None
    np.testing.assert_array_equal(c.numpy(), ec)    # c from b from a from x
    assert ch.counters()["recomputed"] == recomputed + 3
    np.testing.assert_array_equal(b.numpy(), eb)
    np.testing.assert_array_equal(a.numpy(), ea)


def test_drop_then_delete_the_producers_input():
    _drop_options()
    x = mge.tensor(np.random.rand(N).astype("float32"))
    a = F.sin(x)
    b = F.exp(a)
    ea, eb = a.numpy().copy(), b.numpy().copy()
    a._drop()
    b._drop()
    del x          # a must be regenerated before x's storage goes
    mge._full_sync()
    assert a._info.value is not None and b._info.value is None
    np.testing.assert_array_equal(a.numpy(), ea)
    np.testing.assert_array_equal(b.numpy(), eb)
    # a dropped tensor whose own producer's input is dropped, then that input is deleted
    x = mge.tensor(np.random.rand(N).astype("float32"))
    a = x * 2
    b = a + 1
    eb = b.numpy().copy()
    a._drop()
    b._drop()
    del a          # b is regenerated (recomputing a from x) before a goes
    np.testing.assert_array_equal(b.numpy(), eb)
    # with the input gone the tensor cannot be dropped again: warned and ignored
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        b._drop()
        mge._full_sync()
    assert b._info.value is not None
    assert any("deleted" in str(x.message) for x in w)


def test_drop_needs_the_path_recorded_before_the_op():
    set_option("enable_drop", 1)
    x = big()
    y = x * 2                  # not recorded
    set_option("record_computing_path", 1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y._drop()
        mge._full_sync()
    assert y._info.value is not None and w
    np.testing.assert_array_equal(y.numpy(), np.arange(N) * 2)


# == 8. lifecycle ===================================================================================
def test_subprocess_using_mge_exits_cleanly():
    out = run_script("""
        import numpy as np, mge, mge.functional as F
        from mge.core import set_option
        set_option("enable_swap", 1); set_option("enable_drop", 1)
        set_option("record_computing_path", 1)
        x = mge.tensor(np.arange(64, dtype="float32"))
        e = F.exp(x / 64)
        y = e * 2
        y._drop(); x._swap_out()
        z = (y + x).sum()
        print("value", round(float(z.numpy()), 3))
        w = x * 3                   # still queued at exit
        y._drop()
        print("done")
    """)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.strip() == "", out.stderr
    assert "done" in out.stdout


def test_subprocess_with_an_unread_error_exits_without_traceback():
    out = run_script("""
        import numpy as np, mge, mge.functional as F
        x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))
        y = F.nn.indexing_one_hot(x, mge.tensor([0, 1, 7, 2]))
        print("done")
    """)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "out of range" in out.stderr  # unread errors are reported at exit


_FORK = """
import os, numpy as np, mge
x = mge.tensor(np.arange(16, dtype="float32"))
y = x * 2
print("parent-before", y.numpy()[3], flush=True)
pending = [x + k for k in range(5)]
pid = os.fork()
if pid == 0:
    try:
        z = (x * 3 + 1)
        ok = z.numpy()[5] == 16.0 and (y + 1).numpy()[1] == 3.0
        t = mge.tensor(np.ones(32, "float32")).sum()
        ok = ok and t.item() == 32.0
        mge._full_sync()
        print("child", ok, flush=True)
        os._exit(0 if ok else 1)
    except BaseException as e:
        print("child-error", repr(e), flush=True)
        os._exit(2)
_, status = os.waitpid(pid, 0)
print("child-status", os.waitstatus_to_exitcode(status))
print("parent-after", float((y + x).numpy()[2]), [float(p.numpy()[0]) for p in pending])
"""


def test_forked_child_gets_a_fresh_channel_and_parent_keeps_working():
    out = run_script(_FORK)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child True" in out.stdout, out.stdout + out.stderr
    assert "child-status 0" in out.stdout
    assert "parent-after 6.0 [0.0, 1.0, 2.0, 3.0, 4.0]" in out.stdout, out.stdout


def test_calling_the_channel_from_the_worker_raises_instead_of_deadlocking():
    for what in ("sync", "tensor"):
        y = apply(_CallsChannel(what), big())[0]
        with pytest.raises(AsyncError) as info:
            y.numpy()
        cause = info.value.__cause__
        assert isinstance(cause, RuntimeError) and "worker thread" in str(cause), cause


def test_reading_a_pending_value_or_closing_from_the_worker_raises():
    c = Channel()
    _SECOND["channel"] = c
    try:
        cpu = as_device("cpu0")
        a = c.put(np.ones(N, "float32"), cpu)
        (out,) = c.apply_op(_CallsChannel("close"), [a])
        with pytest.raises(AsyncError) as info:
            c.get_value(out)
        assert "worker thread" in str(info.value.__cause__)
        assert not c.closed
        with busy_worker():
            # the kernel reads q, which is queued after it: it would wait for its own thread
            p = apply(_CallsChannel("get_value"), big())[0]
            q = big() * 2
            _SECOND["pending"] = q._info
        with pytest.raises(AsyncError) as info:
            p.numpy()
        assert "worker thread" in str(info.value.__cause__)
        np.testing.assert_array_equal(q.numpy(), np.arange(N) * 2)
    finally:
        _SECOND.clear()
        c.close()


def test_tensor_finalized_by_the_gc_on_the_worker_thread_is_freed_later():
    x = mge.tensor(np.ones(1000, "float32"))
    gc.collect()                                    # only our cycle is left for the kernel's gc
    mge._full_sync()
    before = _mem()
    cycle = [x]
    cycle.append(cycle)
    info = x._info
    gc.disable()
    try:
        del x, cycle
        y = apply(_CallsChannel("gc"), big())[0]   # the collection happens inside this kernel
        np.testing.assert_array_equal(y.numpy(), np.arange(N))
    finally:
        gc.enable()
    assert info.deleted
    mge._full_sync()                                # the deferred Del has run now
    assert info.value is None and _mem() == before - 4000 + N * 4


def test_command_buffer_is_safe_against_reentrant_enqueue():
    # A finalizer may enqueue a Del while the buffer is flushing: it must wait its turn.
    cb_mod = _accel.load("mge._core.channel.command_buffer")
    got = []
    box = {}

    def sink(cmd):
        got.append(cmd)
        if len(got) == 1:
            box["buf"].enqueue(cb_mod.Command(cb_mod.DEL, dest="late"))
    buf = box["buf"] = cb_mod.CommandBuffer(sink, 1)
    cmds = [cb_mod.Command(cb_mod.APPLY, None, [], []) for _ in range(3)]
    for c in cmds:
        buf.enqueue(c)
    buf.flush()
    # issued during the flush done by cmds[1]'s enqueue: after cmds[1], before cmds[2]
    assert [getattr(c, "dest", None) for c in got] == [None, None, "late", None]
    assert got[0] is cmds[0] and got[1] is cmds[1] and got[3] is cmds[2]
    assert not buf.busy and not buf.pending


# == 9. stress ======================================================================================
def test_stress_100k_small_ops():
    rng = np.random.RandomState(1)
    a0 = rng.rand(N).astype("float32")
    b0 = rng.rand(N).astype("float32")
    a, b = mge.tensor(a0), mge.tensor(b0)
    ea, eb = a0.copy(), b0.copy()
    for i in range(50_000):
        a = a * 0.5 + b              # 2 ops a step
        ea = ea * np.float32(0.5) + eb
        if i % 5000 == 4999:
            b = b - a * 0.001
            eb = eb - ea * np.float32(0.001)
            np.testing.assert_array_equal(a.numpy(), ea)
    np.testing.assert_array_equal(a.numpy(), ea)
    np.testing.assert_array_equal(b.numpy(), eb)
