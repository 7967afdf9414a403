"""The CPU device: numpy on the host.

* ``device.py`` -- ``CpuDevice``: buffers are numpy arrays; ``execute`` is the kernel door.
* ``table.py`` -- the kernel tables (``KERNELS``, ``INPLACE``) and their decorators.
* ``kernels/`` -- the kernels, one file per op family.
* ``handoff.py`` -- the GIL hand-off between the caller's thread and the worker, and the C loops
  and CBLAS GEMMs that run without the GIL (``CPU``).
* ``blas.py`` -- finds numpy's own CBLAS for ``handoff.CPU``.
"""
from ... import _accel
from ..registry import register_device_kind
from . import kernels  # noqa: F401  (fills the tables)
from .table import INPLACE, KERNELS, def_inplace, def_kernel

__all__ = ["CpuDevice", "KERNELS", "INPLACE", "def_kernel", "def_inplace", "C_LOOPS"]

CpuDevice = _accel.load("mge._core.device.cpu.device").CpuDevice
C_LOOPS = _accel.load("mge._core.device.cpu.handoff").CPU  # GEMMs and loops without the GIL

register_device_kind("cpu", CpuDevice)
