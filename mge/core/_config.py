"""``megengine.core._config``: where MegEngine keeps ``megengine.config``'s settings.

In mge the settings live in :mod:`mge.config`; this module shows MegEngine's names over them (the
same values, settable here or there) and the layout switch ``get/set_auto_format_convert``.
"""
import sys
import types

from .. import config as _config
from ._imperative_rt.core2 import get_auto_format_convert, set_auto_format_convert

__all__ = ["benchmark_kernel", "benchmark_with_subprocess", "deterministic_kernel",
           "async_level", "disable_memory_forwarding", "_compute_mode", "_auto_format_convert",
           "_override", "get_auto_format_convert", "set_auto_format_convert"]

_override = _config._override
_SETTINGS = ("benchmark_kernel", "benchmark_with_subprocess", "deterministic_kernel",
             "async_level", "disable_memory_forwarding", "_compute_mode")


def _forward(name):
    def get(self):
        return getattr(_config, name)

    def put(self, value):
        setattr(_config, name, value)
    return property(get, put, doc=f"``mge.config.{name}`` (settable here too).")


class _ConfigView(types.ModuleType):
    @property
    def _auto_format_convert(self):
        """Whether tensors marked ``"nhwc"`` are converted automatically (settable)."""
        return get_auto_format_convert()

    @_auto_format_convert.setter
    def _auto_format_convert(self, option):
        set_auto_format_convert(option)


for _name in _SETTINGS:
    setattr(_ConfigView, _name, _forward(_name))

sys.modules[__name__].__class__ = _ConfigView
