"""Runtime configuration (MegEngine's ``megengine.config``)."""
import sys
import types

from ._core.channel import get_channel

__all__ = ["async_level"]


class _Config(types.ModuleType):
    @property
    def async_level(self):
        """MegEngine's async level: 0 sync after every op (errors raised by the call that caused
        them), 1 sync when an output shape is unknown, 2 fully asynchronous (the default)."""
        return get_channel().get_option("async_level")

    @async_level.setter
    def async_level(self, value):
        get_channel().set_option("async_level", value)


sys.modules[__name__].__class__ = _Config
