"""Devices: the default device and device names (MegEngine's ``megengine.device``)."""
from ._core.device import CompNode, as_device, get_default_device, set_default_device

__all__ = ["get_default_device", "set_default_device", "CompNode", "is_cuda_available", "get_device_count"]


def is_cuda_available():
    """Whether a CUDA device can be used (always ``False`` until mge's CUDA device exists)."""
    from ._core.device import _cuda_available
    return _cuda_available()


def get_device_count(device_type="cpu"):
    """Number of devices of ``device_type`` ("cpu" or "gpu"/"cuda")."""
    if device_type in ("gpu", "cuda"):
        return 1 if is_cuda_available() else 0
    return 1
