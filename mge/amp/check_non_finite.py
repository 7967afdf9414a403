"""``CheckNonFinite``: scale gradients and report whether any is NaN or infinite, in one op.

MegEngine has the same builtin op (used by ``functional.math._check_non_finite``); the grad
scaler unscales every gradient and learns whether the step overflowed with one op and one read.
"""
import numpy as np

from .._core.device.cpu.table import def_kernel
from .._core.ops.base import OpDef, TensorDesc, def_infer, op_error
from ..core import apply

__all__ = ["CheckNonFinite", "check_non_finite"]

_int32 = np.dtype("int32")


class CheckNonFinite(OpDef):
    """Inputs: tensors.  Outputs: each input times ``scale`` (same dtype), then an int32 0-d flag,
    1 when some input holds a NaN or an infinity."""

    _fields = ("scale",)
    trace_parameters = True  # the scaler's scale changes between traced steps


@def_infer(CheckNonFinite)
def _infer_check_non_finite(op, descs):
    for shape, dtype in descs:
        if dtype.kind != "f":
            raise op_error(TypeError, op, "inputs must be floating point", descs)
    return [TensorDesc(s, d) for s, d in descs] + [TensorDesc((), _int32)]


@def_kernel(CheckNonFinite)
def _cpu_check_non_finite(op, *arrays):
    found = False
    outs = []
    for a in arrays:
        if not found and not np.isfinite(a).all():
            found = True
        outs.append((a * op.scale).astype(a.dtype, copy=False))
    outs.append(np.array(int(found), dtype=_int32))
    return tuple(outs)


def check_non_finite(tensors, scale=1.0):
    """Multiply every tensor of ``tensors`` by ``scale`` in place (``_reset``) and return an int32
    0-d tensor, 1 when some tensor held a NaN or an infinity before scaling, else 0."""
    tensors = list(tensors)
    outs = apply(CheckNonFinite(float(scale)), *tensors)
    for t, new in zip(tensors, outs):
        t._reset(new)
    return outs[-1]
