"""The channel's options: MegEngine's names, environment variables and defaults, in one table.

The descriptions give MegEngine's meaning.  ``async_level`` is validated (0, 1 or 2); the others
are converted with ``int()``.  The channel acts on all of them except ``max_recompute_time`` and
``disable_memory_forwarding``, which are stored only (``mge.dtr`` sets the DTR ones).
"""
import numbers
import os

__all__ = ["OPTIONS", "Options"]

# name: (environment variable, default, description)
OPTIONS = {
    "async_level": ("MEGENGINE_INTERP_ASYNC_LEVEL", 2,
                    "2: fully async; 1: sync when an output shape is unknown; 0: sync after every op"),
    "enable_swap": ("MEGENGINE_ENABLE_SWAP", 0, "allow Tensor._swap_out/_swap_in"),
    "enable_drop": ("MEGENGINE_ENABLE_DROP", 0, "allow Tensor._drop (recompute on use)"),
    "max_recompute_time": ("MEGENGINE_MAX_RECOMP_TIME", 1, "how often a dropped tensor may be recomputed"),
    "catch_worker_execption": ("MEGENGINE_CATCH_WORKER_EXEC", 1,
                               "1: worker errors are kept and raised at the next sync point"),
    "buffer_length": ("MEGENGINE_COMMAND_BUFFER_LENGTH", 3, "commands kept back for Del fusion"),
    "enable_host_compute": ("MEGENGINE_HOST_COMPUTE", 1, "run ops on tiny host values at dispatch"),
    "disable_memory_forwarding": ("MEGENGINE_DISABLE_MEMORY_FORWARDING", 0,
                                  "copy instead of sharing storage for reshape-like ops"),
    "record_computing_path": ("MEGENGINE_RECORD_COMPUTING_PATH", 0, "keep producers for recompute"),
    "enable_dtr_auto_drop": ("MEGENGINE_DTR_AUTO_DROP", 0, "DTR: evict tensors under a memory budget"),
    "enable_dtr_sqrt_sampling": ("MEGENGINE_DTR_SQRT_SAMPLING", 0, "DTR: score about sqrt(N) candidates"),
    "dtr_eviction_threshold": ("MEGENGINE_DTR_EVICTION_THRESHOLD", 0, "DTR: memory budget in bytes"),
    "dtr_evictee_minimum_size": ("MEGENGINE_DTR_EVICTEE_MINIMUM_SIZE", 1 << 20,
                                 "DTR: smallest tensor (bytes) worth evicting"),
}
# MegEngine's misspelling is the canonical name; the correct spelling is accepted too.
ALIASES = {"catch_worker_exception": "catch_worker_execption"}


class AsyncLevelRangeError(AssertionError, ValueError):
    """An integer async_level other than 0, 1, 2 (MegEngine raises AssertionError)."""


class AsyncLevelTypeError(TypeError, ValueError):
    """A non-integer async_level (MegEngine raises TypeError)."""


def _check_async_level(v):
    # Checked before the int() conversion, so 1.5 or "1" are refused rather than truncated or
    # parsed.  MegEngine refuses them with a TypeError, and other integers with an
    # AssertionError; both are ValueErrors here too.
    if isinstance(v, float) or not isinstance(v, numbers.Integral):
        raise AsyncLevelTypeError("async_level should be 0, 1 or 2")
    if v not in (0, 1, 2):
        raise AsyncLevelRangeError("async_level should be 0, 1 or 2")


_CHECKS = {"async_level": _check_async_level}


def _resolve(name):
    name = ALIASES.get(name, name)
    if name not in OPTIONS:
        valid = ", ".join(sorted(OPTIONS))
        raise KeyError(f"unknown channel option {name!r}; valid options: {valid}")
    return name


class Options:
    """The current values, read from the environment at start."""

    def __init__(self):
        self.values = {}
        for name, (env, default, _) in OPTIONS.items():
            raw = os.environ.get(env)
            value = default if raw is None else int(raw)
            _CHECKS.get(name, lambda v: None)(value)
            self.values[name] = value

    def get(self, name):
        return self.values[_resolve(name)]

    def set(self, name, value):
        """Validate and store; returns ``(canonical name, int value)``."""
        name = _resolve(name)
        _CHECKS.get(name, lambda v: None)(value)
        value = int(value)
        self.values[name] = value
        return name, value
