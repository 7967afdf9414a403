"""Pooling: ``Pooling(mode, kernel, stride, padding)`` and ``AdaptivePooling(mode, shape)``.

Inputs are ``(N, C, *spatial)``; ``kernel``/``stride``/``padding`` have one entry per spatial dim.
Modes are MegEngine's: ``"max"``, ``"average"`` (padding counts in the divisor) and
``"average_count_exclude_padding"``.  Output size is ``(size + 2*padding - kernel) // stride + 1``
(floor, as MegEngine).

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

This module holds the op classes and their shape/dtype rules.  The CPU kernels are in
``mge/_core/device/cpu/kernels/pool.py``, the backward rules in
``mge/_core/autodiff/rules/pool.py``.
"""
from .base import OpDef, TensorDesc, def_infer, op_error

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
    long_running = False

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
    long_running = False


class MaxPoolingGather(OpDef):
    """``(x, y, z)`` -> ``z`` at the arg-max of each max-pooling window of ``x`` (``y`` its maxima)."""

    _fields = ("kernel", "stride", "padding")
    long_running = False

    def __init__(self, kernel, stride, padding):
        super().__init__(tuple(kernel), tuple(stride), tuple(padding))


class AdaptivePooling(OpDef):
    """Pooling to a given spatial output ``shape``."""

    _fields = ("mode", "shape")
    long_running = False

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


# -- backward ops ----------------------------------------------------------------------------------

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
