"""Devices and their memory statistics (MegEngine's ``megengine.device``).

Unlike MegEngine, whose CPU device reports 0, mge counts the bytes of live tensor storage on the
CPU exactly: a buffer shared by several tensors (views, detached copies) counts once.
"""
from ._core.channel import get_channel
from ._core.device import CompNode, as_device, get_default_device, set_default_device
from ._core.device.registry import _cuda_available

__all__ = ["get_default_device", "set_default_device", "CompNode", "is_cuda_available",
           "get_device_count", "get_allocated_memory", "get_max_allocated_memory",
           "reset_max_memory_stats"]


def is_cuda_available():
    """Whether a CUDA device can be used (always ``False`` until mge's CUDA device exists)."""
    return _cuda_available()


def get_device_count(device_type="cpu"):
    """Number of devices of ``device_type`` ("cpu" or "gpu"/"cuda")."""
    if device_type in ("gpu", "cuda"):
        return 1 if is_cuda_available() else 0
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
    """Start measuring the peak afresh from the current allocation."""
    memory, dev = _stats(device)
    memory.reset_peak(dev)
