"""Normalisation: ``BatchNorm(fwd_mode, epsilon)`` and ``LayerNorm(affine, eps, axis_start, axis_end)``.

``BatchNorm`` normalises over every axis but axis 1 of an input of 2 or more dims (so it does not
need the dim_expansion plugin, and gives the same result when that plugin expands 2-D/3-D inputs
to 4-D first).  Its parameters (``weight``, ``bias``, ``mean``, ``var``) may have any shape with
``C`` elements.

* ``fwd_mode="training"``: inputs ``(x, weight, bias)``, outputs ``(y, mean, var)``: the batch
  mean and the biased batch variance, shaped ``(1, C, 1, ...)`` like ``x``'s dims.
* ``fwd_mode="inference"``: inputs ``(x, weight, bias, mean, var)``, output ``(y,)``.

``LayerNorm`` normalises over the contiguous axes ``[axis_start, axis_end)`` (negative values count
from the end; ``axis_end=None`` means the last axis); with ``affine`` it takes ``(x, weight, bias)``
shaped like those axes.  Outputs ``(y, mean, rstd)``, the statistics keeping the normalised axes
with size 1, so they broadcast against ``x`` in a backward rule.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, def_kernel, op_error

__all__ = ["BatchNorm", "LayerNorm"]


class BatchNorm(OpDef):
    """Batch normalisation over all axes but 1 (see the module docstring for inputs/outputs)."""

    _fields = ("fwd_mode", "epsilon")
    _defaults = {"fwd_mode": "training", "epsilon": 1e-5}

    def __init__(self, fwd_mode="training", epsilon=1e-5):
        mode = str(fwd_mode).lower()
        if mode not in ("training", "inference"):
            raise ValueError(f"BatchNorm: fwd_mode must be 'training' or 'inference', got {fwd_mode!r}")
        super().__init__(mode, float(epsilon))


class LayerNorm(OpDef):
    """Normalisation over the axes ``[axis_start, axis_end)``."""

    _fields = ("affine", "eps", "axis_start", "axis_end")
    _defaults = {"affine": True, "eps": 1e-5, "axis_start": -1, "axis_end": None}


def _acc(dtype):
    return np.float32 if dtype == np.float16 else dtype


def _check_float(op, descs):
    if descs[0][1].kind != "f":
        raise op_error(TypeError, op, "input must be floating point", descs)


@def_infer(BatchNorm)
def _infer_bn(op, descs):
    want = 3 if op.fwd_mode == "training" else 5
    if len(descs) != want:
        names = "(x, weight, bias)" if want == 3 else "(x, weight, bias, mean, var)"
        raise op_error(TypeError, op, f"expects {want} inputs {names}, got {len(descs)}", descs)
    _check_float(op, descs)
    xs, dtype = descs[0]
    if xs is None:
        return [TensorDesc(None, dtype)] * (3 if want == 3 else 1)
    if len(xs) < 2:
        raise op_error(ValueError, op, f"input must have at least 2 dims (N, C, ...), got shape {xs}",
                       descs)
    c = xs[1]
    for d in descs[1:]:
        if d[0] is not None and int(np.prod(d[0])) != c:
            raise op_error(ValueError, op, f"parameters must have {c} elements (channels), got "
                           f"shape {d[0]}", descs)
    if op.fwd_mode == "inference":
        return [TensorDesc(xs, dtype)]
    stat = (1, c) + (1,) * (len(xs) - 2)
    return [TensorDesc(xs, dtype), TensorDesc(stat, dtype), TensorDesc(stat, dtype)]


@def_kernel(BatchNorm)
def _cpu_bn(op, x, w, b, *stats):
    acc = _acc(x.dtype)
    xa = x.astype(acc, copy=False)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    w = w.reshape(shape).astype(acc, copy=False)
    b = b.reshape(shape).astype(acc, copy=False)
    if op.fwd_mode == "training":
        axes = (0,) + tuple(range(2, x.ndim))
        mean = xa.mean(axis=axes, keepdims=True)
        var = np.square(xa - mean).mean(axis=axes, keepdims=True)
    else:
        mean = stats[0].reshape(shape).astype(acc, copy=False)
        var = stats[1].reshape(shape).astype(acc, copy=False)
    scale = w / np.sqrt(var + op.epsilon)
    y = ((xa - mean) * scale + b).astype(x.dtype, copy=False)
    if op.fwd_mode == "inference":
        return (y,)
    return (y, mean.astype(x.dtype, copy=False), var.astype(x.dtype, copy=False))


def _axes(op, ndim):
    start = op.axis_start + ndim if op.axis_start < 0 else op.axis_start
    end = ndim if op.axis_end is None else (op.axis_end + ndim if op.axis_end < 0 else op.axis_end)
    return start, end


@def_infer(LayerNorm)
def _infer_ln(op, descs):
    want = 3 if op.affine else 1
    if len(descs) != want:
        raise op_error(TypeError, op, f"expects {want} input(s), got {len(descs)}", descs)
    _check_float(op, descs)
    xs, dtype = descs[0]
    if xs is None:
        return [TensorDesc(None, dtype)] * 3
    start, end = _axes(op, len(xs))
    if not 0 <= start < end <= len(xs):
        raise op_error(ValueError, op, f"normalised axes [{op.axis_start}, {op.axis_end}) are not "
                       f"valid for a {len(xs)}-D input", descs)
    norm = tuple(xs[start:end])
    for d in descs[1:]:
        if d[0] is not None and int(np.prod(d[0])) != int(np.prod(norm)):
            raise op_error(ValueError, op, f"weight and bias must have the normalised shape {norm}, "
                           f"got {d[0]}", descs)
    stat = tuple(xs[:start]) + (1,) * (end - start) + tuple(xs[end:])
    return [TensorDesc(xs, dtype), TensorDesc(stat, dtype), TensorDesc(stat, dtype)]


@def_kernel(LayerNorm)
def _cpu_ln(op, x, *wb):
    acc = _acc(x.dtype)
    xa = x.astype(acc, copy=False)
    start, end = _axes(op, x.ndim)
    axes = tuple(range(start, end))
    mean = xa.mean(axis=axes, keepdims=True)
    xc = xa - mean
    rstd = 1 / np.sqrt(np.square(xc).mean(axis=axes, keepdims=True) + op.eps)
    y = xc * rstd
    if op.affine:
        shape = x.shape[start:end] + (1,) * (x.ndim - end)
        y = y * wb[0].reshape(shape).astype(acc, copy=False) + wb[1].reshape(shape).astype(acc,
                                                                                           copy=False)
    dt = x.dtype
    return (y.astype(dt, copy=False), mean.astype(dt, copy=False), rstd.astype(dt, copy=False))
