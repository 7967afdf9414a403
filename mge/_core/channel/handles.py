"""``TensorInfo``: what the channel knows about one tensor (compiled; see ``_accel``).

A handle *is* its ``TensorInfo``.  The description (shape, dtype, device) is known at dispatch
time whenever the op's rule can tell; ``value`` is the storage once computed.  Compiled, this is a
C struct (a Cython ``cclass``); in pure-Python mode a plain class.
"""
import cython

__all__ = ["TensorInfo"]


@cython.cclass
class TensorInfo:
    """One tensor in the channel: description, storage, producer and state."""

    shape = cython.declare(object, visibility="public")     # tuple, or None while unknown
    dtype = cython.declare(object, visibility="public")     # numpy dtype
    device = cython.declare(object, visibility="public")    # CompNode
    value = cython.declare(object, visibility="public")     # storage (numpy array on cpu)
    producer = cython.declare(object, visibility="public")  # (op, input infos) when recorded
    error = cython.declare(object, visibility="public")     # why this tensor is unusable
    name = cython.declare(object, visibility="public")
    __weakref__ = cython.declare(object)

    def __init__(self, shape, dtype, device, value=None, producer=None):
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.value = value
        self.producer = producer
        self.error = None
        self.name = None

    def __repr__(self):
        state = "invalid" if self.error is not None else ("ready" if self.value is not None else "pending")
        return f"<TensorInfo {self.shape} {self.dtype} {self.device} {state}>"
