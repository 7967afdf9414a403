"""The channel interface (seed 003) that the asynchronous interpreter will implement too."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mge
from mge.core import get_option, set_option, ops
from mge._core.channel import Channel, UnusableTensorError, get_channel
from mge._core.device import as_device


def test_put_apply_get_del():
    ch = Channel()
    cpu = as_device("cpu0")
    a = ch.put(np.arange(3, dtype="float32"), cpu)
    b = ch.put(np.ones(3, dtype="float32"), cpu)
    (c,) = ch.apply_op(ops.Elemwise("add"), [a, b])
    assert ch.get_shape(c) == (3,) and ch.get_dtype(c) == np.float32 and ch.get_device(c) == cpu
    v = ch.get_value(c)
    np.testing.assert_array_equal(v, [1, 2, 3])
    assert not v.flags.writeable
    ch.del_(a)
    ch.sync()
    np.testing.assert_array_equal(ch.get_value(c), [1, 2, 3])  # outputs outlive their inputs


def test_unknown_output_shape_is_known_after_running():
    ch = Channel()
    cpu = as_device("cpu0")
    x = ch.put(np.arange(5, dtype="float32"), cpu)
    m = ch.put(np.array([True, False, True, False, True]), cpu)
    vals, idx = ch.apply_op(ops.CondTake(), [m, x])
    assert ch.get_shape(vals) == (3,)
    np.testing.assert_array_equal(ch.get_value(vals), [0, 2, 4])


def test_rule_errors_name_op_and_shapes_and_channel_keeps_working():
    ch = Channel()
    cpu = as_device("cpu0")
    a = ch.put(np.ones((2, 3), "float32"), cpu)
    b = ch.put(np.ones((4,), "float32"), cpu)
    with pytest.raises(ValueError, match=r"Elemwise\.mul.*\(2, 3\).*\(4,\)"):
        ch.apply_op(ops.Elemwise("mul"), [a, b])
    (c,) = ch.apply_op(ops.Elemwise("mul"), [a, a])
    assert ch.get_shape(c) == (2, 3)


def test_an_unusable_input_is_refused():
    ch = Channel()
    cpu = as_device("cpu0")
    a = ch.put(np.ones(2, "float32"), cpu)
    a.error = RuntimeError("kernel failed")
    with pytest.raises(UnusableTensorError, match="unusable due to previous error"):
        ch.apply_op(ops.Elemwise("neg"), [a])
    with pytest.raises(UnusableTensorError):
        ch.get_value(a)


def test_close_is_idempotent_and_final():
    ch = Channel()
    ch.close()
    ch.close()
    with pytest.raises(RuntimeError, match="closed"):
        ch.put(np.ones(1), as_device("cpu0"))


def test_options_table():
    assert get_option("async_level") == 2 and get_option("buffer_length") == 3
    assert get_option("catch_worker_exception") == get_option("catch_worker_execption") == 1
    assert get_option("dtr_evictee_minimum_size") == 1 << 20
    with pytest.raises(KeyError, match="valid options: .*async_level"):
        get_option("no_such_option")
    with pytest.raises(KeyError, match="no_such_option"):
        set_option("no_such_option", 1)
    old = get_option("buffer_length")
    set_option("buffer_length", 5)
    assert get_channel().get_option("buffer_length") == 5
    set_option("buffer_length", old)


def test_async_level_config():
    assert mge.config.async_level == 2
    mge.config.async_level = 0
    try:
        assert mge.config.async_level == 0 and get_option("async_level") == 0
        assert (mge.tensor([1.0]) + 1).tolist() == [2.0]
    finally:
        mge.config.async_level = 2
    with pytest.raises(ValueError, match="async_level should be 0, 1 or 2"):
        mge.config.async_level = 3


def test_async_level_from_environment():
    env = dict(os.environ, MEGENGINE_INTERP_ASYNC_LEVEL="1")
    out = subprocess.run([sys.executable, "-c", "import mge; print(mge.config.async_level)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "1", out.stderr


def test_async_level_errors_are_megengines():
    # MegEngine: AssertionError for another integer, TypeError for a non-integer (both are
    # ValueErrors in mge as well)
    with pytest.raises(AssertionError, match="async_level should be 0, 1 or 2"):
        mge.config.async_level = 3
    with pytest.raises(TypeError):
        mge.config.async_level = "1"
    with pytest.raises(ValueError):
        mge.config.async_level = -1
    assert mge.config.async_level == 2
