"""The asynchronous interpreter's commands (seed 003): put, apply, get value, host compute of tiny
values, get_shape, sync and full_sync, scopes, and a stress run of many small queued ops."""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import set_option
from mge._core.channel import Channel, get_channel
from mge._core.device import as_device
from helpers import (  # noqa: F401 (clean_channel: a fixture)
    big, busy_worker, WORKER_N as N, clean_channel,
)

ch = get_channel()
pytestmark = pytest.mark.usefixtures("clean_channel")


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

