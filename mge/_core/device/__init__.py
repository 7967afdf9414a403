"""Devices (MegEngine's CompNode): names, the default device, and the registry of device kinds.

A ``CompNode`` names a device (``cpu0``, ``xpux``...); its ``impl`` is the ``Device`` that owns
its storage and kernels (``base.py`` says what a device provides).  ``cpu0`` is numpy on the host
(``cpu/``).  MegEngine's logical names are accepted: ``xpux`` means "the best device there is"
(``gpu0`` when a CUDA device is usable, else ``cpu0``), ``cpux`` is the CPU.  A new device kind is
one package plus ``register_device_kind(kind, factory)``; nothing CUDA is imported at start.
"""
from . import cpu  # noqa: F401  (registers the CPU device)
from .base import Device
from .registry import (DEVICE_KINDS, CompNode, DeviceKind, _cuda_available, as_device,
                       get_default_device, register_device_kind, set_default_device)

__all__ = ["CompNode", "Device", "DeviceKind", "as_device", "get_default_device",
           "set_default_device", "register_device_kind", "DEVICE_KINDS"]
