"""Exceptions of the runtime (MegEngine's names)."""
from .channel import UnusableTensorError

__all__ = ["AsyncError", "TraceError", "UnusableTensorError"]


class AsyncError(RuntimeError):
    """An error that happened while an op ran asynchronously, raised at the next sync point.

    Its ``__cause__`` is the original exception.  The channel of this version runs ops
    synchronously, so errors are raised by the call that caused them and this is not raised yet.
    """


class TraceError(RuntimeError):
    """A traced function did something that cannot be traced or replayed."""
