"""Pooling: ``Pooling(mode, kernel, stride, padding)`` and ``AdaptivePooling(mode, shape)``.

Inputs are ``(N, C, *spatial)``; ``kernel``/``stride``/``padding`` have one entry per spatial dim.
Modes are MegEngine's: ``"max"``, ``"average"`` (padding counts in the divisor) and
``"average_count_exclude_padding"``.  Output size is ``(size + 2*padding - kernel) // stride + 1``
(floor, as MegEngine).  The kernels take one strided slice of the padded input per kernel position
(a loop of ``prod(kernel)`` steps), never a loop over output pixels.

``AdaptivePooling`` is ``Pooling`` with ``stride = in // out`` and ``kernel = in - (out-1)*stride``
(MegEngine's rule); ``AdaptivePooling.as_pooling(in_shape)`` gives that op, so a backward rule of
``Pooling`` serves both.

Backward ops (same parameters as ``Pooling``):

* ``PoolingBackward(mode, kernel, stride, padding)``: ``(x, y, dy)`` -> ``dx`` (MegEngine's op and
  input order).  ``max`` sends each window's gradient to the first position (in row-major window
  order) holding the maximum -- one arg-max per window, as cuDNN does; MegEngine's CPU kernel gives
  it to every tied maximum.  The average modes spread ``dy / divisor`` over the window.
* ``MaxPoolingGather(kernel, stride, padding)``: ``(x, y, z)`` -> ``z`` read at each window's
  arg-max: the transpose of max ``PoolingBackward`` (its gradient with respect to ``dy``), so max
  pooling is twice differentiable.  The transpose of an average ``PoolingBackward`` is the average
  ``Pooling`` itself.
"""
import itertools

import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .gradutil import cached_op, output, run

__all__ = ["Pooling", "AdaptivePooling", "PoolingBackward", "MaxPoolingGather", "POOLING_MODES"]

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
        OpDef.__init__(self, _mode(type(self).__name__, mode), kernel, stride, padding)


class PoolingBackward(OpDef):
    """The gradient of ``Pooling``: ``(x, y, dy)`` -> ``dx`` (see the module docstring).

    Not a subclass of ``Pooling``: layers that look at ``Pooling`` (dim_expansion) must not see it.
    """

    _fields = Pooling._fields
    _defaults = Pooling._defaults
    __init__ = Pooling.__init__


class MaxPoolingGather(OpDef):
    """``(x, y, z)`` -> ``z`` at the arg-max of each max-pooling window of ``x`` (``y`` its maxima)."""

    _fields = ("kernel", "stride", "padding")

    def __init__(self, kernel, stride, padding):
        super().__init__(tuple(kernel), tuple(stride), tuple(padding))


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


# -- backward --------------------------------------------------------------------------------------

def _check_backward_inputs(op, descs, names):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"expects 3 inputs {names}, got {len(descs)}", descs)
    (xs, dtype), (ys, _), (zs, zdt) = descs
    if zdt.kind != "f" or dtype.kind != "f":
        raise op_error(TypeError, op, "x and the gradient input must be floating point", descs)
    return xs, ys, zs, zdt


@def_infer(PoolingBackward)
def _infer_pooling_backward(op, descs):
    xs, ys, gs, dtype = _check_backward_inputs(op, descs, "(x, y, dy)")
    out = _pool_out(op, descs[:1])
    if out is not None and any(s is not None and tuple(s) != out for s in (ys, gs)):
        raise op_error(ValueError, op, f"y and dy must have the pooled shape {out}", descs)
    return [TensorDesc(xs, dtype)]


@def_infer(MaxPoolingGather)
def _infer_max_gather(op, descs):
    xs, ys, zs, dtype = _check_backward_inputs(op, descs, "(x, y, z)")
    out = _pool_out(Pooling("max", op.kernel, op.stride, op.padding), descs[:1])
    if out is not None and ys is not None and tuple(ys) != out:
        raise op_error(ValueError, op, f"y must have the pooled shape {out}", descs)
    if xs is not None and zs is not None and tuple(zs) != tuple(xs):
        raise op_error(ValueError, op, "z must have the shape of x", descs)
    return [TensorDesc(out, dtype)]


def _geometry(op, x):
    nd = len(op.kernel)
    out = tuple((x.shape[2 + i] + 2 * op.padding[i] - op.kernel[i]) // op.stride[i] + 1
                for i in range(nd))
    pad = ((0, 0), (0, 0)) + tuple((p, p) for p in op.padding)
    return out, pad


def _argmax_masks(op, x, y):
    """``(slice, mask)`` per kernel position: ``mask`` marks the windows whose first maximum is at
    that position of the window (so each window is marked exactly once).  The mask is one buffer,
    rewritten at each step: use it before taking the next."""
    out, pad = _geometry(op, x)
    # NaN padding equals nothing, so padding never takes a window's gradient (every window holds
    # a real element, since padding < kernel), even when the maximum is -inf.
    xp = np.pad(x, pad, constant_values=np.nan) if any(op.padding) else x
    taken = np.zeros(y.shape, bool)
    hit = np.empty(y.shape, bool)
    free = np.empty(y.shape, bool)
    for sl in _slices(op, out):
        np.equal(xp[sl], y, out=hit)
        hit &= np.logical_not(taken, out=free)
        taken |= hit
        yield sl, hit


def _crop(op, xp):
    if not any(op.padding):
        return xp
    return xp[(slice(None), slice(None)) + tuple(slice(p, xp.shape[2 + i] - p)
                                                 for i, p in enumerate(op.padding))]


@def_kernel(PoolingBackward)
def _cpu_pooling_backward(op, x, y, dy):
    out, pad = _geometry(op, x)
    acc = np.float32 if dy.dtype == np.float16 else dy.dtype
    padded = tuple(s + a + b for s, (a, b) in zip(x.shape, pad))
    dxp = np.zeros(padded, acc)
    if op.mode == "max":
        # A multiply by the mask, not a masked add: masked ufunc loops branch on every element.
        part = np.empty(y.shape, acc)
        for sl, hit in _argmax_masks(op, x, y):
            dxp[sl] += np.multiply(dy, hit, out=part)
    else:
        if op.mode == "average" or not any(op.padding):
            share = dy.astype(acc) / np.prod(op.kernel)
        else:
            ones = np.pad(np.ones((1, 1) + x.shape[2:], np.int32), pad)
            cnt = np.zeros((1, 1) + out, np.int32)
            for sl in _slices(op, out):
                cnt += ones[sl]
            share = dy.astype(acc) / cnt
        for sl in _slices(op, out):
            dxp[sl] += share
    return (np.ascontiguousarray(_crop(op, dxp), dtype=dy.dtype),)


@def_kernel(MaxPoolingGather)
def _cpu_max_gather(op, x, y, z):
    _, pad = _geometry(op, x)
    zp = np.pad(z, pad) if any(op.padding) else z
    acc = np.float32 if z.dtype == np.float16 else z.dtype
    res = np.zeros(y.shape, acc)
    part = np.empty(y.shape, acc)
    for sl, hit in _argmax_masks(op, x, y):
        res += np.multiply(zp[sl], hit, out=part)
    return (res.astype(z.dtype, copy=False),)


def _pool_output(op, inputs, outputs, g):
    # Only max pooling reads y; the average modes take any tensor of y's shape in its place, so a
    # forward output the grad transformation no longer holds is not recomputed for them.
    if outputs[0] is None and op.mode != "max":
        return g
    return output(op, inputs, outputs)


@def_backward(Pooling, keeps_outputs=lambda op: op.mode == "max")
def _pooling_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    bwd = cached_op(PoolingBackward, op.mode, op.kernel, op.stride, op.padding)
    return [run(bwd, inputs[0], _pool_output(op, inputs, outputs, g), g)]


@def_backward(AdaptivePooling, keeps_outputs=lambda op: op.mode == "max")
def _adaptive_pooling_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    p = op.as_pooling(inputs[0].shape)
    bwd = cached_op(PoolingBackward, p.mode, p.kernel, p.stride, p.padding)
    return [run(bwd, inputs[0], _pool_output(op, inputs, outputs, g), g)]


@def_backward(PoolingBackward)
def _pooling_backward_grad(op, inputs, outputs, grads, needs):
    # Linear in dy; x and y only choose the arg-max (piecewise constant), so they get none.
    g = grads[0]
    if g is None or not needs[2]:
        return [None, None, None]
    x, y = inputs[:2]
    if op.mode == "max":
        dg = run(cached_op(MaxPoolingGather, op.kernel, op.stride, op.padding), x, y, g)
    else:
        dg = run(cached_op(Pooling, op.mode, op.kernel, op.stride, op.padding), g)
    return [None, None, dg]


@def_backward(MaxPoolingGather)
def _max_gather_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[2]:
        return [None, None, None]
    x, y = inputs[:2]
    bwd = cached_op(PoolingBackward, "max", op.kernel, op.stride, op.padding)
    return [None, None, run(bwd, x, y, g)]
