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

Gradients.  Training-mode ``BatchNorm`` and ``LayerNorm`` have backward ops of their own (one
kernel instead of a dozen elementwise ops):

* ``BatchNormBackward(epsilon)``: ``(x, dy, mean, var, weight)`` -> ``(dx, dweight, dbias)``, the
  last two shaped ``(1, C, 1, ...)``.
* ``LayerNormBackward(affine, eps, axis_start, axis_end)``: ``(x, dy, mean, rstd[, weight])`` ->
  ``(dx[, dweight, dbias])``, the last two shaped like ``weight``.

As in MegEngine these two are not differentiable again (their rules raise
``NotImplementedError``), so batch and layer normalisation in training mode have first-order
gradients only.  Inference-mode ``BatchNorm`` is differentiated with ordinary ops, to any order;
unlike MegEngine (which gives ``None``) its running ``mean`` and ``var`` inputs get their true
gradients when asked for.  Gradients arriving at the statistics outputs (batch ``mean``/``var``,
layer ``mean``/``rstd``) are propagated to ``x`` too; ``F.batch_norm`` detaches them.

This module holds the op classes, their shape/dtype rules and the axis helpers that the kernels
(``mge/_core/device/cpu/kernels/norm.py``) and the backward rules
(``mge/_core/autodiff/rules/norm.py``) share with them.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["BatchNorm", "LayerNorm", "BatchNormBackward", "LayerNormBackward"]


class BatchNorm(OpDef):
    """Batch normalisation over all axes but 1 (see the module docstring for inputs/outputs)."""

    _fields = ("fwd_mode", "epsilon")
    _defaults = {"fwd_mode": "training", "epsilon": 1e-5}
    long_running = False

    def __init__(self, fwd_mode="training", epsilon=1e-5):
        mode = str(fwd_mode).lower()
        if mode not in ("training", "inference"):
            raise ValueError(f"BatchNorm: fwd_mode must be 'training' or 'inference', got {fwd_mode!r}")
        super().__init__(mode, float(epsilon))


class LayerNorm(OpDef):
    """Normalisation over the axes ``[axis_start, axis_end)``."""

    _fields = ("affine", "eps", "axis_start", "axis_end")
    _defaults = {"affine": True, "eps": 1e-5, "axis_start": -1, "axis_end": None}
    long_running = False


class BatchNormBackward(OpDef):
    """The gradient of training-mode ``BatchNorm``: ``(x, dy, mean, var, weight)`` ->
    ``(dx, dweight, dbias)``."""

    _fields = ("epsilon",)
    _defaults = {"epsilon": 1e-5}
    long_running = False


class LayerNormBackward(OpDef):
    """The gradient of ``LayerNorm``: ``(x, dy, mean, rstd[, weight])`` -> ``(dx[, dweight,
    dbias])``; same parameters as ``LayerNorm``."""

    _fields = LayerNorm._fields
    _defaults = LayerNorm._defaults
    long_running = False


def _check_float(op, descs):
    if descs[0][1].kind != "f":
        raise op_error(TypeError, op, "input must be floating point", descs)


def bn_stat_shape(shape):
    """The shape ``(1, C, 1, ...)`` of batch statistics of an input of ``shape`` ``(N, C, ...)``."""
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def bn_axes(ndim):
    """The axes ``BatchNorm`` reduces over on a ``ndim``-D input: all but axis 1."""
    return (0,) + tuple(range(2, ndim))


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
    stat = bn_stat_shape(xs)
    return [TensorDesc(xs, dtype), TensorDesc(stat, dtype), TensorDesc(stat, dtype)]


def layer_norm_range(op, ndim):
    """``(start, end)``: the normalised axes ``[start, end)`` of a ``LayerNorm`` or
    ``LayerNormBackward`` ``op`` on a ``ndim``-D input, as non-negative ints."""
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
    start, end = layer_norm_range(op, len(xs))
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


# -- backward ops --------------------------------------------------------------------------------

@def_infer(BatchNormBackward)
def _infer_bn_backward(op, descs):
    if len(descs) != 5:
        raise op_error(TypeError, op, f"expects 5 inputs (x, dy, mean, var, weight), got "
                       f"{len(descs)}", descs)
    _check_float(op, descs)
    (xs, dtype), (gs, _), _, _, (ws, wdt) = descs
    if xs is not None and gs is not None and tuple(xs) != tuple(gs):
        raise op_error(ValueError, op, "x and dy must have the same shape", descs)
    stat = None if xs is None else bn_stat_shape(xs)
    return [TensorDesc(xs, dtype), TensorDesc(stat, wdt), TensorDesc(stat, wdt)]


@def_infer(LayerNormBackward)
def _infer_ln_backward(op, descs):
    want = 5 if op.affine else 4
    if len(descs) != want:
        names = "(x, dy, mean, rstd, weight)" if op.affine else "(x, dy, mean, rstd)"
        raise op_error(TypeError, op, f"expects {want} inputs {names}, got {len(descs)}", descs)
    _check_float(op, descs)
    (xs, dtype), (gs, _) = descs[:2]
    if xs is not None and gs is not None and tuple(xs) != tuple(gs):
        raise op_error(ValueError, op, "x and dy must have the same shape", descs)
    out = [TensorDesc(xs, dtype)]
    if op.affine:
        out += [TensorDesc(descs[4][0], descs[4][1])] * 2
    return out
