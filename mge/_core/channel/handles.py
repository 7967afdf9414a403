"""``TensorInfo`` and ``ComputePath``: what the channel knows about a tensor (compiled; see ``_accel``).

A handle *is* its ``TensorInfo``.  The description (shape, dtype, device) is known at dispatch
time whenever the op's rule can tell; ``value`` is the device storage once produced (a numpy array
on the CPU).  Compiled, these are C structs (Cython ``cclass``); in pure-Python mode plain classes.

The C fields are declared in ``handles.pxd`` (add a field there, not here: Cython refuses
attributes declared in both).  ``handles_c.pxd`` includes it under the compiled module's name, so
that ``channel.py`` can ``cimport`` the types and read the fields as struct members.
"""
import cython

__all__ = ["TensorInfo", "ComputePath", "NONE", "SWAP", "DROP", "HOST_COMPUTE_SIZE"]

# The seed's limit for values kept and computed on the host (elements): ops on such values run at
# once on the caller's thread, so shape arithmetic never waits.
HOST_COMPUTE_SIZE = 7

# evict_type: why a produced tensor has no value now
NONE = 0
SWAP = 1   # swapped out: ``h_value`` holds it on the host
DROP = 2   # dropped: recompute from ``producer``


@cython.freelist(1024)  # (one or two per op: allocated and freed from a list, not malloc)
@cython.cclass
class TensorInfo:
    """One tensor in the channel: description, storage, producer and state.

    Attributes (C fields when compiled, declared in ``handles.pxd``): ``shape`` (tuple, or None
    while unknown), ``dtype`` (numpy dtype), ``device`` (CompNode), ``value`` (device storage,
    None until produced), ``h_value`` (host copy: tiny values, swapped out), ``producer``
    (ComputePath when recorded), ``users`` (ComputePaths that read this tensor), ``error`` (why
    this tensor is unusable), ``name``, ``evict_type``, ``in_worker`` (an op for the worker reads
    it), ``deleted``.
    """

    def __init__(self, shape, dtype, device):
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.value = None
        self.h_value = None
        self.producer = None
        self.users = None
        self.error = None
        self.name = None
        self.evict_type = NONE
        self.in_worker = False
        self.deleted = False

    def __repr__(self):
        if self.error is not None:
            state = "invalid"
        elif self.value is not None:
            state = "ready"
        elif self.evict_type == SWAP:
            state = "swapped"
        elif self.evict_type == DROP:
            state = "dropped"
        else:
            state = "pending"
        return f"<TensorInfo {self.shape} {self.dtype} {self.device} {state}>"


@cython.cclass
class ComputePath:
    """How a tensor was produced: ``op`` applied to ``inputs`` gave ``outputs`` (for recompute)."""

    def __init__(self, op, inputs, outputs):
        self.op = op
        self.inputs = inputs
        self.outputs = outputs
