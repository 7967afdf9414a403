"""The interpreter channel: executes ops and owns tensor storage (seed ``003``)."""
from .channel import Channel, UnusableTensorError, get_channel  # noqa: F401
from .options import OPTIONS  # noqa: F401
