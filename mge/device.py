"""Devices and their memory statistics (MegEngine's ``megengine.device``).

Unlike MegEngine, whose CPU device reports 0, mge counts the bytes of live tensor storage on the
CPU exactly: a buffer shared by several tensors (views, detached copies) counts once.

The CUDA queries (count, compute capability, properties, versions) ask the driver through pycuda
(``_core/device/cuda/driver.py``), imported on the first such call; without pycuda, the driver
or a GPU they raise ``RuntimeError`` naming what is missing.
"""
import operator

from ._core.channel import get_channel
from ._core.device import CompNode, as_device, get_default_device, set_default_device
from ._core.device.registry import _cuda_available, _cuda_driver

__all__ = ["get_default_device", "set_default_device", "CompNode", "is_cuda_available",
           "get_device_count", "get_allocated_memory", "get_max_allocated_memory",
           "reset_max_memory_stats", "get_mem_status_bytes", "get_reserved_memory",
           "get_max_reserved_memory", "coalesce_free_memory", "set_prealloc_config",
           "get_cuda_compute_capability", "get_cuda_device_property", "get_cuda_version",
           "get_cudnn_version", "get_cuda_driver_version", "DeviceType"]


def is_cuda_available():
    """Whether tensors can live on a CUDA device: a GPU, its driver and pycuda are there, and
    mge's CUDA device is written (``False`` until it is, see issue 16)."""
    return _cuda_available()


def get_device_count(device_type):
    """Number of devices of ``device_type`` ("cpu", or "gpu"/"cuda": the GPUs the CUDA driver
    sees, 0 without pycuda, the driver or a GPU)."""
    if device_type in ("gpu", "cuda"):
        return _cuda_driver().device_count()
    return 1


def _stats(device):
    ch = get_channel()
    ch.wait_idle()  # queued ops first: the numbers describe everything issued so far
    return ch.memory, as_device(device)


def get_allocated_memory(device=None):
    """Bytes of tensor storage alive on ``device`` (default: the default device)."""
    memory, dev = _stats(device)
    return memory.allocated(dev)


def get_max_allocated_memory(device=None):
    """The peak of ``get_allocated_memory`` since start or the last ``reset_max_memory_stats``."""
    memory, dev = _stats(device)
    return memory.peak(dev)


def reset_max_memory_stats(device=None):
    """Start measuring the peaks afresh from the current allocation (and, on a device with a
    memory pool, its reservation)."""
    memory, dev = _stats(device)
    memory.reset_peak(dev)
    pool = _pool_stats(dev)
    if pool is not None:
        dev.impl.reset_peak()


def _pool_stats(dev):
    # a device with a memory pool (the CUDA device) reports its figures; the CPU device keeps none
    stats = getattr(dev.impl, "memory_stats", None)
    return stats() if stats is not None else None


class _DeviceTypeMember(int):
    def __new__(cls, name, value):
        m = int.__new__(cls, value)
        m.name = name
        return m

    def __repr__(self):
        return f"DeviceType.{self.name}"

    __str__ = __repr__


class DeviceType:
    """MegEngine's ``CompNode.DeviceType`` (the device kinds)."""

    UNSPEC = _DeviceTypeMember("UNSPEC", 0)
    CUDA = _DeviceTypeMember("CUDA", 1)
    CPU = _DeviceTypeMember("CPU", 2)
    CAMBRICON = _DeviceTypeMember("CAMBRICON", 3)
    ROCM = _DeviceTypeMember("ROCM", 4)
    ATLAS = _DeviceTypeMember("ATLAS", 5)
    MULTITHREAD = _DeviceTypeMember("MULTITHREAD", 6)


def get_mem_status_bytes(device=None):
    """``(total, free)`` bytes of the memory of ``device``: for the CPU, the machine's physical
    memory and what is available of it (``MemAvailable`` of ``/proc/meminfo`` where there is
    one)."""
    dev = as_device(device)
    if dev.kind == "cuda":
        return _cuda_driver().memory_info(dev.index)
    total = free = 0
    try:
        with open("/proc/meminfo") as f:
            info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ln.strip()}
        total, free = info.get("MemTotal", 0), info.get("MemAvailable", info.get("MemFree", 0))
    except (OSError, ValueError, IndexError):
        import os
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            pass
    return total, free


def get_reserved_memory(device=None):
    """Bytes the allocator holds for ``device``: a CUDA device's pool segments; the CPU device
    keeps no pool (buffers are freed when their last tensor goes), so there it is
    :func:`get_allocated_memory`."""
    memory, dev = _stats(device)
    pool = _pool_stats(dev)
    return memory.allocated(dev) if pool is None else pool["reserved"]


def get_max_reserved_memory(device=None):
    """The peak of :func:`get_reserved_memory` (on the CPU, :func:`get_max_allocated_memory`)."""
    memory, dev = _stats(device)
    pool = _pool_stats(dev)
    return memory.peak(dev) if pool is None else pool["peak_reserved"]


def coalesce_free_memory():
    """Give the wholly free segments of every device's memory pool back (MegEngine merges its
    pool's free blocks); the CPU device keeps no pool.  Returns ``None``."""
    from ._core.device.registry import DEVICE_KINDS

    get_channel().wait_idle()
    for kind in list(DEVICE_KINDS.values()):
        for impl in list(kind.impls.values()):
            empty = getattr(impl, "empty_cache", None)
            if empty is not None:
                empty()


def set_prealloc_config(alignment=1, min_req=32 * 1024 * 1024, max_overhead=0, growth_factor=2.0,
                        device_type=DeviceType.CUDA):
    """MegEngine's preallocation policy of its CUDA memory pool.  The arguments are checked as
    MegEngine checks them; mge has no CUDA device and no pool, so they configure nothing."""
    assert alignment > 0, "alignment must be positive"
    assert min_req > 0, "min_req must be positive"
    assert max_overhead >= 0, "max_overhead must be non-negative"
    assert growth_factor >= 1, "growth_factor must be at least 1"


def _gpu_index(what, device, device_type):
    if device_type != DeviceType.CUDA:  # MegEngine: "unsupport device type for get_device_prop"
        raise RuntimeError(f"{what}: unsupported device type {device_type!r} (only "
                           "DeviceType.CUDA has device properties)")
    return operator.index(device)


def get_cuda_compute_capability(device, device_type=DeviceType.CUDA):
    """The compute capability of CUDA device ``device`` (an index) as MegEngine gives it:
    ``major * 10 + minor`` (86 for 8.6)."""
    index = _gpu_index("get_cuda_compute_capability", device, device_type)
    major, minor = _cuda_driver().compute_capability(index,
                                                     f"get_cuda_compute_capability({index})")
    return major * 10 + minor


def get_cuda_device_property(device, device_type=DeviceType.CUDA):
    """The properties of CUDA device ``device`` (an index): an object with ``name``,
    ``total_memory`` (bytes), ``major`` and ``minor``, as MegEngine's ``DeviceProperties``."""
    index = _gpu_index("get_cuda_device_property", device, device_type)
    return _cuda_driver().properties(index, f"get_cuda_device_property({index})")


def get_cuda_version():
    """The CUDA version mge's CUDA code was built against -- pycuda's, ``major * 1000 +
    minor * 10`` (12040 for 12.4); needs pycuda, not a GPU."""
    return _cuda_driver().cuda_version()


def get_cudnn_version():
    """The cuDNN version mge was built with: ``-1``, what MegEngine returns when built without
    cuDNN (mge's CUDA device generates its own kernels and uses no cuDNN)."""
    return -1


def get_cuda_driver_version():
    """The latest CUDA version the installed driver supports, ``major * 1000 + minor * 10``
    (``cuDriverGetVersion``); needs pycuda and the driver library, not a GPU."""
    return _cuda_driver().driver_version()
