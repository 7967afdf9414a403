"""The interpreter channel: executes ops and owns tensor storage (seed ``003``)."""
from .. import _accel
from .options import OPTIONS  # noqa: F401

_impl = _accel.load("mge._core.channel.channel")
Channel = _impl.Channel
UnusableTensorError = _impl.UnusableTensorError
get_channel = _impl.get_channel
