"""A ``cudahost`` device kind (``cudahost0``, ``cudahost1``...) for tests: the CUDA device's code
on a host emulation of a GPU.

``cudahost<N>`` is ``CudaDevice(N, backend=HostBackend(capacity=CAPACITY))``
(``mge/_core/device/cuda/device.py`` and ``host_backend.py``): the CUDA device's buffers, views,
caching pool, launchers and kernel sources -- built with g++ instead of NVRTC and run on host
memory at real addresses -- under the whole runtime (``mge.tensor(x, device="cudahost0")``, the
channel, autodiff, DTR, memory statistics), on machines without a GPU.  Its buffers are
``CudaBuffer``s, not arrays: as with the ``opaque`` device, a numpy assumption above the device
layer fails here.

Its backend is asynchronous as a GPU is (``HostBackend(asynchronous=True)``: kernels and copies
run later, in order, on the emulated stream's thread), so a missing wait above the backend shows
here; ``MGE_CUDAHOST_SYNC=1`` runs the work at once instead (to tell an ordering bug from
another).

``register()`` registers the kind once (idempotent: the devices, their pools and counters stay);
``device(name)`` is the ``CudaDevice`` behind a name.  A test that needs a fresh pool builds its
own ``CudaDevice`` over its own ``HostBackend``, or re-registers with ``register(capacity=...,
fresh=True)``.
"""
import os

from mge._core.device import DEVICE_KINDS, as_device, register_device_kind
from mge._core.device.cuda.device import CudaDevice
from mge._core.device.cuda.host_backend import HostBackend

__all__ = ["KIND", "CAPACITY", "ASYNCHRONOUS", "register", "register_kind", "device", "make"]

KIND = "cudahost"
CAPACITY = 256 << 20  # bytes of emulated device memory per device
ASYNCHRONOUS = os.environ.get("MGE_CUDAHOST_SYNC") != "1"


def make(index, capacity=CAPACITY, kind=KIND):
    """A ``CudaDevice`` of the kind ``kind`` over a new ``HostBackend``."""
    backend = HostBackend(capacity=capacity, index=index, asynchronous=ASYNCHRONOUS)
    return CudaDevice(index, backend=backend, kind=kind)


def register_kind(kind, capacity=CAPACITY):
    """Register another kind of the same emulation (``kind`` in lower-case letters), with its
    own devices and pools of ``capacity`` bytes -- for a test that needs exact pool figures or
    a small memory -- replacing any earlier kind of that name."""
    register_device_kind(kind, lambda index: make(index, capacity, kind))


def register(capacity=CAPACITY, fresh=False):
    """Register the kind (once, unless ``fresh``: then new devices with ``capacity`` bytes)."""
    kind = DEVICE_KINDS.get(KIND)
    if fresh or kind is None or getattr(kind.factory, "_cuda_host", False) is not True:
        def factory(index):
            return make(index, capacity)
        factory._cuda_host = True
        register_device_kind(KIND, factory)


def device(name="cudahost0"):
    """The ``CudaDevice`` behind ``name`` (registers the kind first)."""
    register()
    return as_device(name).impl


register()
