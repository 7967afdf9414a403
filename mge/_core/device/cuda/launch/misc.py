"""Launchers of ``Identity``, ``Detach``, ``Copy`` and ``Fill``.

* ``Identity`` and ``Detach`` return the input buffer itself (storage shared, as on the CPU:
  nothing writes a buffer another tensor can see).
* ``Copy`` to this device: its input is the source device's ``to_host`` array when the value
  comes from another device (one host-to-device copy), or a buffer of this device (a
  device-to-device copy of a dense buffer; a view is copied by the relayout kernel, which makes
  it dense).
* ``Fill``: a value whose bytes are all alike (0, -1, ``True``...) is one ``memset``; any other
  is written by the general TypeCvt kernel from a one-element buffer broadcast with stride 0
  (the value is converted on the host, by numpy, exactly as the CPU's ``np.full`` does).
"""
import numpy as np

from ....ops.creation import Fill
from ....ops.misc import Copy, Detach, Identity
from ..kernels.elemwise import typecvt_kernel
from . import def_launcher
from .elemwise import launch_general

__all__ = []


@def_launcher(Identity, strided=True)
@def_launcher(Detach, strided=True)
def _identity(device, op, inputs, descs):
    return (inputs[0],)


@def_launcher(Copy, strided=True)
def _copy(device, op, inputs, descs):
    (x,) = inputs
    dtype = descs[0].dtype
    if isinstance(x, np.ndarray):
        return (device.from_host(np.asarray(x, dtype=dtype)),)
    if not x.is_contiguous:
        return (device.relayout(x),)
    out = device.empty(x.shape, x.dtype, f"a copy of {x.dtype} {x.shape}")
    device.backend.copy_dtod(out.address, x.address, x.size * x.dtype.itemsize)
    return (out,)


@def_launcher(Fill)
def _fill(device, op, inputs, descs):
    dtype = descs[0].dtype
    out = device.empty(op.shape, dtype, f"the output of {op.name} ({dtype} {op.shape})")
    if out.size == 0:
        return (out,)
    value = np.full((), op.value, dtype=dtype)  # numpy's conversion, as the CPU kernel's
    raw = value.tobytes()
    if raw == raw[:1] * len(raw):
        device.backend.memset(out.address, raw[0], out.size * dtype.itemsize)
        return (out,)
    one = device.from_host(value)
    scalar = device.view(one, out.shape, (0,) * out.ndim)
    launch_general(device, typecvt_kernel, (dtype, dtype), out, [scalar],
                   f"{op.name} on {device.name}")
    return (out,)
