"""An ``opaque`` device kind (``opaque0``, ``opaque1``...) for tests: buffers that are not ndarrays.

DESIGN.md section 6: "The tests keep a third, opaque device whose buffers are not ndarrays: any
numpy assumption above the device layer fails there."  A buffer here is an ``OpaqueBuffer``: a
``bytearray`` (its own storage, never shared), the shape and the dtype.  Nothing above the device
layer can use it as an array: the channel, swap/drop, DTR and the memory statistics must go
through the ``Device`` methods (``mge/_core/device/base.py``) for everything.

Kernels run on the host: ``execute`` unpacks the inputs (``to_host``), calls the CPU device's
kernel door on them and packs every result into a new buffer.  Public counters
(``executed``, ``ops``, ``threads``, ``to_host_calls``, ``from_host_calls``, ``transfers_in``)
show what ran here, and on which thread.

Storage is a ``bytearray`` rather than ``bytes`` on purpose: CPython shares the ``bytes``
objects of length 0 and 1, so two one-byte tensors would have the same storage owner (the
contract says: the same storage).

``register()`` registers the kind once (idempotent: the instances, and so their counters, stay).
"""
import collections
import threading

import numpy as np

from mge._core.device import DEVICE_KINDS, as_device, register_device_kind
from mge._core.device.base import Device

__all__ = ["OpaqueBuffer", "OpaqueDevice", "register", "device"]

KIND = "opaque"


class OpaqueBuffer:
    """A value on an opaque device: raw bytes (C order), shape and dtype; not an array."""

    __slots__ = ("data", "shape", "dtype", "index", "__weakref__")

    def __init__(self, data, shape, dtype, index):
        self.data = data
        self.shape = shape
        self.dtype = dtype
        self.index = index  # the device that owns it: opaque<index>

    def __repr__(self):
        return (f"<OpaqueBuffer opaque{self.index} {self.dtype} {self.shape}, "
                f"{len(self.data)} bytes>")


class OpaqueDevice(Device):
    """``opaque<index>``: ``OpaqueBuffer`` storage; kernels of the CPU run on unpacked copies."""

    kind = KIND

    def __init__(self, index=0):
        super().__init__(index)
        self._lock = threading.Lock()  # the worker and the caller's thread both call in
        self.executed = 0         # calls of execute (the kernel door)
        self.ops = collections.Counter()  # op name -> kernels run here
        self.to_host_calls = 0
        self.from_host_calls = 0
        self.transfers_in = 0     # host arrays given to execute (Copy from another device)
        self.threads = collections.defaultdict(set)  # op name -> idents of the threads that ran it

    def reset_counters(self):
        with self._lock:
            self.executed = self.to_host_calls = self.from_host_calls = self.transfers_in = 0
            self.ops.clear()
            self.threads.clear()

    # -- storage and transfers -------------------------------------------------------------------
    def _pack(self, array):
        array = np.asarray(array, order="C")  # (not ascontiguousarray: it makes 0-d arrays 1-d)
        return OpaqueBuffer(bytearray(array.data), tuple(array.shape), array.dtype, self.index)

    def from_host(self, array):
        """A new buffer holding a copy of ``array``'s bytes."""
        with self._lock:
            self.from_host_calls += 1
        return self._pack(array)

    def to_host(self, buffer):
        """A read-only array over the buffer's bytes."""
        self._check(buffer, "to_host")
        with self._lock:
            self.to_host_calls += 1
        return self._unpack(buffer)

    def _check(self, buffer, what):
        # a real device cannot read host arrays or another device's memory as its own
        if not isinstance(buffer, OpaqueBuffer):
            raise TypeError(f"{self!r}.{what}: not a buffer of this device: "
                            f"{type(buffer).__name__}")
        if buffer.index != self.index:
            raise TypeError(f"{self!r}.{what}: a buffer of opaque{buffer.index}")

    @staticmethod
    def _unpack(buffer):
        arr = np.frombuffer(buffer.data, dtype=buffer.dtype).reshape(buffer.shape)
        arr.flags.writeable = False
        return arr

    def storage(self, buffer):
        return buffer.data, len(buffer.data)

    def shape(self, buffer):
        return buffer.shape

    def nbytes(self, buffer):
        return len(buffer.data)

    def free_beside(self, buffer):
        return 0

    # runs_long: Device's (the op's ``long_running`` fact), as the CPU device does.

    # -- the kernel door ---------------------------------------------------------------------------
    def execute(self, op, inputs, descs, reuse=None):
        """Run ``op`` through the CPU's kernel door on host copies; new buffers for the results.

        The input of a transfer (an op that ``sets_device``: ``Copy`` from another device) may
        be a host ndarray, taken with ``from_host`` semantics (copied); any other input must be a
        buffer of this device (a ``TypeError`` otherwise, as a real device could not read it).
        ``reuse`` is ignored: results are always new buffers.
        """
        host = []
        transfers = 0
        for buf in inputs:
            if isinstance(buf, np.ndarray) and op.sets_device:
                transfers += 1
                host.append(np.array(buf, copy=True))
                continue
            self._check(buf, f"execute({op.name})")
            host.append(self._unpack(buf))
        outs = as_device("cpu0").impl.execute(op, host, list(descs))
        with self._lock:
            self.executed += 1
            self.ops[op.name] += 1
            self.threads[op.name].add(threading.get_ident())
            self.transfers_in += transfers
        return [self._pack(np.asarray(v, dtype=d.dtype)) for v, d in zip(outs, descs)]


def register():
    """Register the ``opaque`` kind (once; later calls keep the registered instances)."""
    kind = DEVICE_KINDS.get(KIND)
    if kind is None or kind.factory is not OpaqueDevice:
        register_device_kind(KIND, OpaqueDevice)


def device(name="opaque0"):
    """The ``OpaqueDevice`` behind ``name`` (registers the kind first)."""
    register()
    return as_device(name).impl


register()
