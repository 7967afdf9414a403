"""Creation ops: tensors made from parameters alone (``Fill``, ``Arange``, ``Linspace``, ``Eye``),
and their shape/dtype rules.

They have no tensor inputs, so the output device is the op's ``device`` (``sets_device``), and
nothing to differentiate (a created tensor is a constant; ``autodiff/rules/creation.py``).  The
CPU kernels (``device/cpu/kernels/creation.py``) compute in float64 on the host and convert to
``dtype`` once, so ``float32`` results are the correctly rounded float64 values.
"""
import math
import sys

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Fill", "Arange", "Linspace", "Eye"]


class Fill(OpDef):
    """A tensor of ``shape`` filled with ``value``."""

    _fields = ("shape", "value", "dtype", "device")
    sets_device = True
    long_running = False
    trace_parameters = True  # a new fill value (a GradScaler's scale) replays recompiled


class Arange(OpDef):
    """``start, start + step, ...`` up to (excluding) ``stop``."""

    _fields = ("start", "stop", "step", "dtype", "device")
    sets_device = True
    long_running = False


class Linspace(OpDef):
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included)."""

    _fields = ("start", "stop", "num", "dtype", "device")
    sets_device = True
    long_running = False


class Eye(OpDef):
    """An ``N x M`` matrix with ones on diagonal ``k``."""

    _fields = ("N", "M", "k", "dtype", "device")
    _defaults = {"k": 0}
    sets_device = True
    long_running = False


def _no_inputs(op, descs):
    if descs:
        raise op_error(TypeError, op, f"takes no tensor inputs, got {len(descs)}", descs)


def _check_bytes(op, shape):
    # the byte size of the result must fit an index: refused here, at the call, not by the
    # kernel's allocation after the fact.  numpy's rule: the product of the non-zero sizes
    n = 1
    for s in shape:
        if s:
            n *= s
    if n * op.dtype.itemsize > sys.maxsize:
        raise op_error(ValueError, op, f"a tensor of shape {tuple(shape)} and dtype {op.dtype} is "
                       f"too large (its byte size must be at most {sys.maxsize})")


@def_infer(Fill)
def _infer_fill(op, descs):
    _no_inputs(op, descs)
    for i, s in enumerate(op.shape):
        if s < 0:  # MegEngine: "expect shape[0] >= 0 or use `None` to auto infer, got -1"
            raise op_error(ValueError, op, f"negative size in shape {op.shape}: expect "
                           f"shape[{i}] >= 0, got {s}")
    _check_bytes(op, op.shape)
    return [TensorDesc(op.shape, op.dtype)]


def arange_length(start, stop, step):
    """Length of ``arange(start, stop, step)``: MegEngine's ``ceil((stop - start) / step)``."""
    return max(0, math.ceil((stop - start) / step))


@def_infer(Arange)
def _infer_arange(op, descs):
    _no_inputs(op, descs)
    if op.step == 0:
        raise op_error(ValueError, op, "step must not be zero")
    shape = (arange_length(op.start, op.stop, op.step),)
    _check_bytes(op, shape)
    return [TensorDesc(shape, op.dtype)]


@def_infer(Linspace)
def _infer_linspace(op, descs):
    _no_inputs(op, descs)
    if op.num < 0:
        raise op_error(ValueError, op, f"num must be non-negative, got {op.num}")
    _check_bytes(op, (op.num,))
    return [TensorDesc((op.num,), op.dtype)]


@def_infer(Eye)
def _infer_eye(op, descs):
    _no_inputs(op, descs)
    if op.N < 0 or op.M < 0:
        raise op_error(ValueError, op, f"sizes must be non-negative, got N={op.N}, M={op.M}")
    _check_bytes(op, (op.N, op.M))
    return [TensorDesc((op.N, op.M), op.dtype)]
