"""``TensorInfo``: what the channel knows about one tensor (compiled; see ``_accel``).

A handle *is* its ``TensorInfo``.  The description (shape, dtype, device) is known at dispatch
time whenever the op's rule can tell; ``value`` is the storage once computed.
"""
import cython  # noqa: F401  (Cython pure-Python mode; a no-op module when not compiled)

__all__ = ["TensorInfo"]


class TensorInfo:
    """One tensor in the channel: description, storage, producer and state."""

    __slots__ = ("shape", "dtype", "device", "value", "producer", "error", "name", "__weakref__")

    def __init__(self, shape, dtype, device, value=None, producer=None):
        self.shape = shape          # tuple, or None while unknown
        self.dtype = dtype          # numpy dtype
        self.device = device        # CompNode
        self.value = value          # the storage (numpy array on cpu), None until computed
        self.producer = producer    # (op, input infos), kept for drop/DTR when recorded
        self.error = None           # the exception that made this tensor unusable
        self.name = None

    def __repr__(self):
        state = "invalid" if self.error is not None else ("ready" if self.value is not None else "pending")
        return f"<TensorInfo {self.shape} {self.dtype} {self.device} {state}>"
