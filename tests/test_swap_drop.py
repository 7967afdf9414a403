"""``Tensor._swap_out``/``_swap_in`` and ``_drop`` (seed 003): values kept, memory moved, dropped
tensors recomputed bit-identically (recursively, before their inputs go), and what is ignored."""
import gc
import warnings

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import set_option
from mge._core.channel import get_channel
from helpers import (  # noqa: F401 (clean_channel: a fixture)
    allocated_bytes as _mem, big, WORKER_N as N, clean_channel,
)

ch = get_channel()
pytestmark = pytest.mark.usefixtures("clean_channel")


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

