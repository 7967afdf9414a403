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

