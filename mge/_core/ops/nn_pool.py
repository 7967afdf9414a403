"""Pooling: ``Pooling(mode, kernel, stride, padding)`` and ``AdaptivePooling(mode, shape)``.

Inputs are ``(N, C, *spatial)``; ``kernel``/``stride``/``padding`` have one entry per spatial dim.
Modes are MegEngine's: ``"max"``, ``"average"`` (padding counts in the divisor) and
``"average_count_exclude_padding"``.  Output size is ``(size + 2*padding - kernel) // stride + 1``
(floor, as MegEngine).  The kernels take one strided slice of the padded input per kernel position
(a loop of ``prod(kernel)`` steps), never a loop over output pixels.

``AdaptivePooling`` is ``Pooling`` with ``stride = in // out`` and ``kernel = in - (out-1)*stride``
(MegEngine's rule); ``AdaptivePooling.as_pooling(in_shape)`` gives that op, so a backward rule of
``Pooling`` serves both.
"""
import itertools

import numpy as np

from .base import OpDef, TensorDesc, def_infer, def_kernel, op_error

__all__ = ["Pooling", "AdaptivePooling", "POOLING_MODES"]

POOLING_MODES = ("max", "average", "average_count_exclude_padding")


def _mode(cls, mode):
    m = str(mode).lower()
    if m not in POOLING_MODES:
        raise ValueError(f"{cls}: unknown mode {mode!r}; expected one of {POOLING_MODES}")
    return m


class Pooling(OpDef):
    """Window pooling over the spatial dims of ``(N, C, *spatial)``."""

    _fields = ("mode", "kernel", "stride", "padding")
    _defaults = {"stride": None, "padding": None}

    def __init__(self, mode, kernel, stride=None, padding=None):
        kernel = tuple(kernel)
        stride = kernel if stride is None else tuple(stride)
        padding = (0,) * len(kernel) if padding is None else tuple(padding)
        super().__init__(_mode("Pooling", mode), kernel, stride, padding)


class AdaptivePooling(OpDef):
    """Pooling to a given spatial output ``shape``."""

    _fields = ("mode", "shape")

    def __init__(self, mode, shape):
        super().__init__(_mode("AdaptivePooling", mode), tuple(shape))

    def as_pooling(self, in_shape):
        """The ``Pooling`` op this op equals on an input of ``in_shape`` (``(N, C, *spatial)``)."""
        sp = tuple(in_shape[2:])
        stride = tuple(i // o for i, o in zip(sp, self.shape))
        kernel = tuple(i - (o - 1) * s for i, o, s in zip(sp, self.shape, stride))
        return Pooling(self.mode, kernel, stride, (0,) * len(sp))


def _pool_out(op, descs):
    xs, dtype = descs[0]
    nd = len(op.kernel)
    if not (len(op.stride) == len(op.padding) == nd):
        raise op_error(ValueError, op, "kernel, stride and padding must have the same length", descs)
    if min(op.kernel) < 1 or min(op.stride) < 1 or min(op.padding) < 0:
        raise op_error(ValueError, op, f"invalid kernel {op.kernel}, stride {op.stride} or padding "
                       f"{op.padding}", descs)
    if any(p >= k for p, k in zip(op.padding, op.kernel)) and op.mode != "average":
        raise op_error(ValueError, op, f"padding {op.padding} must be smaller than the kernel "
                       f"{op.kernel}", descs)
    if op.mode != "max" and dtype.kind != "f":
        raise op_error(TypeError, op, "average pooling needs a floating point input", descs)
    if xs is None:
        return None
    if len(xs) != nd + 2:
        raise op_error(ValueError, op, f"input must be {nd + 2}-D (N, C, *spatial), got shape {xs}",
                       descs)
    out = tuple((xs[2 + i] + 2 * op.padding[i] - op.kernel[i]) // op.stride[i] + 1
                for i in range(nd))
    if any(o <= 0 for o in out):
        raise op_error(ValueError, op, f"kernel {op.kernel} is larger than the padded input "
                       f"{xs[2:]} (padding {op.padding})", descs)
    return tuple(xs[:2]) + out


@def_infer(Pooling)
def _infer_pooling(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    return [TensorDesc(_pool_out(op, descs), descs[0][1])]


@def_infer(AdaptivePooling)
def _infer_adaptive(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    xs, dtype = descs[0]
    if xs is None:
        return [TensorDesc(None, dtype)]
    if len(xs) != len(op.shape) + 2:
        raise op_error(ValueError, op, f"input must be {len(op.shape) + 2}-D (N, C, *spatial), got "
                       f"shape {xs}", descs)
    if any(o < 1 or o > i for o, i in zip(op.shape, xs[2:])):
        raise op_error(ValueError, op, f"output size {op.shape} must be between 1 and the input "
                       f"size {xs[2:]}", descs)
    return _infer_pooling(op.as_pooling(xs), descs)


def _slices(op, out):
    for pos in itertools.product(*(range(k) for k in op.kernel)):
        yield (slice(None), slice(None)) + tuple(
            slice(p, p + (o - 1) * s + 1, s) for p, o, s in zip(pos, out, op.stride))


def pool_forward(op, x):
    """The CPU computation of ``Pooling`` (also used by ``AdaptivePooling``)."""
    nd = len(op.kernel)
    out = tuple((x.shape[2 + i] + 2 * op.padding[i] - op.kernel[i]) // op.stride[i] + 1
                for i in range(nd))
    pad = ((0, 0), (0, 0)) + tuple((p, p) for p in op.padding)
    if op.mode == "max":
        if x.dtype.kind == "f":
            low = -np.inf
        elif x.dtype.kind == "b":
            low = False
        else:
            low = np.iinfo(x.dtype).min
        xp = np.pad(x, pad, constant_values=low) if any(op.padding) else x
        y = None
        for sl in _slices(op, out):
            y = xp[sl].copy() if y is None else np.maximum(y, xp[sl], out=y)
        return y
    acc_t = np.float32 if x.dtype == np.float16 else x.dtype
    xp = np.pad(x, pad) if any(op.padding) else x
    y = np.zeros(x.shape[:2] + out, acc_t)
    for sl in _slices(op, out):
        y += xp[sl]
    if op.mode == "average" or not any(op.padding):
        y /= np.prod(op.kernel)
    else:
        ones = np.pad(np.ones((1, 1) + x.shape[2:], np.int32), pad)
        cnt = np.zeros((1, 1) + out, np.int32)
        for sl in _slices(op, out):
            cnt += ones[sl]
        y /= cnt
    return y.astype(x.dtype, copy=False)


@def_kernel(Pooling)
def _cpu_pooling(op, x):
    return (pool_forward(op, x),)


@def_kernel(AdaptivePooling)
def _cpu_adaptive(op, x):
    return (pool_forward(op.as_pooling(x.shape), x),)
