"""The command buffer (seed 003): Del fusion into the last use, in-place reuse of the freed buffer
(never of a live one), the buffer's length, and re-entrant enqueues."""
import numpy as np
import pytest

import mge
from mge.core import get_option, set_option
from mge._core.channel import get_channel
from mge._core import _accel
from mge._core.ops import Elemwise
from helpers import big, WORKER_N as N, clean_channel  # noqa: F401 (clean_channel: a fixture)

ch = get_channel()
pytestmark = pytest.mark.usefixtures("clean_channel")


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

