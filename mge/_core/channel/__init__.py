"""The interpreter channel: executes ops and owns tensor storage (seed ``003``).

``channel.py`` the channel, ``worker.py`` its thread, ``command_buffer.py`` the commands and Del
fusion, ``handles.py`` TensorInfo, ``memory.py`` the storage statistics, ``options.py`` the options.
"""
from .. import _accel
from .options import OPTIONS  # noqa: F401

_impl = _accel.load("mge._core.channel.channel")
Channel = _impl.Channel
UnusableTensorError = _impl.UnusableTensorError
AsyncError = _impl.AsyncError
get_channel = _impl.get_channel
