"""``async_level`` (MegEngine's ``config.async_level``): its validation, the environment variable,
and what levels 0 and 1 change."""
import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import get_option
from helpers import (  # noqa: F401 (clean_channel: a fixture)
    big, busy_worker, run_script, WORKER_N as N, clean_channel,
)

pytestmark = pytest.mark.usefixtures("clean_channel")


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



def test_config_kernel_switches_and_override():
    import mge.config as config
    assert config.deterministic_kernel is False and config.benchmark_kernel is False
    assert config._compute_mode == "default" and config.disable_memory_forwarding is False
    with config._override(deterministic_kernel=True, benchmark_kernel=True, async_level=1,
                          compute_mode="float32"):
        assert config.deterministic_kernel and config.benchmark_kernel
        assert config.async_level == 1 and config._compute_mode == "float32"
    assert (config.deterministic_kernel, config.benchmark_kernel, config.async_level,
            config._compute_mode) == (False, False, 2, "default")

    @config._override(deterministic_kernel=True)
    def inside():
        return config.deterministic_kernel

    assert inside() is True and config.deterministic_kernel is False
    config.disable_memory_forwarding = True
    try:
        assert config.disable_memory_forwarding is True
        assert mge.core.get_option("disable_memory_forwarding") == 1
    finally:
        config.disable_memory_forwarding = False
    with pytest.raises(TypeError, match="deterministic_kernel must be a bool"):
        config.deterministic_kernel = "yes"
    with pytest.raises(ValueError, match="_compute_mode must be one of"):
        config._compute_mode = "float64"
