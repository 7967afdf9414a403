"""Exceptions of the runtime (MegEngine's names)."""
from .channel import UnusableTensorError

__all__ = ["AsyncError", "TraceError", "UnusableTensorError"]


class AsyncError(RuntimeError):
    """An error that happened in the worker, raised at the next sync point.

    Its ``__cause__`` is the original exception.
    """


class TraceError(RuntimeError):
    """A traced function did something that cannot be traced or replayed."""
