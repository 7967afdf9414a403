"""Runtime configuration (MegEngine's ``megengine.config``).

The settings are module properties, read and set as ``mge.config.async_level = 0``:

* ``async_level`` -- 0 sync after every op, 1 sync when an output shape is unknown, 2 fully
  asynchronous (the default);
* ``disable_memory_forwarding`` -- whether outputs may share storage with inputs (stored in the
  channel's options; mge's kernels decide sharing themselves);
* ``benchmark_kernel``, ``deterministic_kernel``, ``benchmark_with_subprocess`` -- MegEngine's
  kernel-selection switches.  mge has one numpy kernel per op, which gives the same result every
  run, so there is nothing to benchmark and every kernel is deterministic: the switches are kept
  (for code that saves and restores them) and change nothing;
* ``_compute_mode`` -- ``"default"`` or ``"float32"`` (the precision of intermediate results of
  float16 matmuls and convolutions; mge's kernels accumulate in float32 either way).

``_override(...)`` sets some of them for a ``with`` block (or a decorated function).
"""
import contextlib
import sys
import types

from ._core.channel import get_channel

__all__ = ["benchmark_kernel", "benchmark_with_subprocess", "deterministic_kernel", "async_level",
           "disable_memory_forwarding", "_compute_mode", "_override"]

_state = {"benchmark_kernel": False, "deterministic_kernel": False,
          "benchmark_with_subprocess": False, "compute_mode": "default"}

_COMPUTE_MODES = ("default", "float32")


def _as_bool(owner, value):
    if not isinstance(value, (bool, int)):
        raise TypeError(f"mge.config.{owner} must be a bool, got {value!r}")
    return bool(value)


class _Config(types.ModuleType):
    @property
    def async_level(self):
        """MegEngine's async level: 0 sync after every op (errors raised by the call that caused
        them), 1 sync when an output shape is unknown, 2 fully asynchronous (the default)."""
        return get_channel().get_option("async_level")

    @async_level.setter
    def async_level(self, value):
        get_channel().set_option("async_level", value)

    @property
    def disable_memory_forwarding(self):
        """Whether memory forwarding (outputs sharing storage with inputs) is off."""
        return bool(get_channel().get_option("disable_memory_forwarding"))

    @disable_memory_forwarding.setter
    def disable_memory_forwarding(self, value):
        get_channel().set_option("disable_memory_forwarding",
                                 int(_as_bool("disable_memory_forwarding", value)))

    @property
    def benchmark_kernel(self):
        """MegEngine: time the candidate kernels and pick the fastest.  mge has one kernel per
        op; the flag is kept and changes nothing."""
        return _state["benchmark_kernel"]

    @benchmark_kernel.setter
    def benchmark_kernel(self, value):
        _state["benchmark_kernel"] = _as_bool("benchmark_kernel", value)

    @property
    def deterministic_kernel(self):
        """MegEngine: choose only kernels whose results are reproducible.  mge's kernels always
        are; the flag is kept and changes nothing."""
        return _state["deterministic_kernel"]

    @deterministic_kernel.setter
    def deterministic_kernel(self, value):
        _state["deterministic_kernel"] = _as_bool("deterministic_kernel", value)

    @property
    def benchmark_with_subprocess(self):
        """MegEngine: run kernel benchmarks in a subprocess.  Kept; changes nothing in mge."""
        return _state["benchmark_with_subprocess"]

    @benchmark_with_subprocess.setter
    def benchmark_with_subprocess(self, value):
        _state["benchmark_with_subprocess"] = _as_bool("benchmark_with_subprocess", value)

    @property
    def _compute_mode(self):
        """``"default"`` or ``"float32"``: the precision of intermediate results of float16
        matmuls and convolutions (mge accumulates in float32 in both)."""
        return _state["compute_mode"]

    @_compute_mode.setter
    def _compute_mode(self, value):
        if value not in _COMPUTE_MODES:
            raise ValueError(f"mge.config._compute_mode must be one of {_COMPUTE_MODES}, "
                             f"got {value!r}")
        _state["compute_mode"] = value


@contextlib.contextmanager
def _override(benchmark_kernel=None, deterministic_kernel=None, async_level=None,
              compute_mode=None):
    """Set the given settings for a ``with`` block (or a function it decorates), then put the
    previous values back."""
    mod = sys.modules[__name__]
    wanted = {"benchmark_kernel": benchmark_kernel, "deterministic_kernel": deterministic_kernel,
              "async_level": async_level, "_compute_mode": compute_mode}
    saved = {}
    try:
        for name, value in wanted.items():
            if value is not None:
                saved[name] = getattr(mod, name)
                setattr(mod, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(mod, name, value)


sys.modules[__name__].__class__ = _Config
