"""The channel's options (seed 003): get/set, MegEngine's names and environment variables."""
import pytest

import mge
from mge.core import get_option, set_option
from mge._core.channel import OPTIONS, get_channel
from helpers import big, run_script, clean_channel  # noqa: F401 (clean_channel: a fixture)

ch = get_channel()
pytestmark = pytest.mark.usefixtures("clean_channel")


def test_set_option_and_get_option():
    assert get_option("buffer_length") == 3
    set_option("buffer_length", 7)
    assert get_option("buffer_length") == 7
    x = big()
    ys = [x + k for k in range(9)]
    assert len(ch.buffered()) == 7              # the buffer holds the last 7 commands
    assert mge.core.get_option("buffer_length") == ch.get_option("buffer_length")


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

