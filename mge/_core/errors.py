"""Exceptions of the runtime (MegEngine's names)."""
from .channel import AsyncError, UnusableTensorError

__all__ = ["AsyncError", "TraceError", "UnusableTensorError"]


class TraceError(RuntimeError):
    """A traced function did something that cannot be traced or replayed."""
