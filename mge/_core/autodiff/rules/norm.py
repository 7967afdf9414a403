"""Backward rules of the normalisation ops (``mge/_core/ops/nn_norm.py``).

Training-mode ``BatchNorm`` and ``LayerNorm`` run their backward ops (one kernel each), which are
not differentiable again; inference-mode ``BatchNorm`` is differentiated with ordinary ops, to any
order.  Gradients arriving at the statistics outputs are propagated to ``x`` too.
"""
import numpy as np

from ...ops.nn_norm import (
    BatchNorm, BatchNormBackward, LayerNorm, LayerNormBackward, bn_axes, bn_stat_shape,
    layer_norm_range,
)
from ...ops.reduce import Reduce
from ..gradutil import broadcast, ew, reshape, run, runs
from ..registry import def_backward


def _sum_keepdims(t, axes):
    return run(Reduce.get("sum", axes, True), t)


def _mul(a, b, *rest):
    """``a * b * ...``, multiplied left to right."""
    p = ew("mul", a, b)
    for c in rest:
        p = ew("mul", p, c)
    return p


def _add(a, b):
    return b if a is None else a if b is None else ew("add", a, b)


def _stats_grad(x, mean, gmean, gsq, m):
    """Gradient to ``x`` of statistics over ``m`` elements: ``gmean`` arrives at their mean,
    ``gsq`` is the factor of ``(x - mean)`` that a function of their (biased) variance adds."""
    dx = None
    if gsq is not None:
        dx = ew("mul", ew("sub", x, mean), gsq)
    if gmean is not None:
        gm = ew("mul", gmean, 1 / m)
        dx = broadcast(gm, x.shape) if dx is None else ew("add", dx, gm)
    return dx


def _bn_train_grad(op, inputs, outputs, grads, needs):
    x, w, b = inputs
    _, mean, var = outputs
    gy, gmean, gvar = grads
    dx = dw = db = None
    if gy is not None:
        dx, dw, db = runs(BatchNormBackward.get(op.epsilon), x, gy, mean, var, w)
        dw, db = reshape(dw, w.shape), reshape(db, b.shape)
    if needs[0] and (gmean is not None or gvar is not None):
        m = x.size // x.shape[1]
        gsq = None if gvar is None else ew("mul", gvar, 2 / m)  # d var / dx = 2 (x - mean) / m
        dx = _add(dx, _stats_grad(x, mean, gmean, gsq, m))
    return [dx if needs[0] else None, dw if needs[1] else None, db if needs[2] else None]


def _bn_inference_grad(op, inputs, outputs, grads, needs):
    # y = (x - mean) * w * rstd + b with rstd = 1 / sqrt(var + eps): ordinary ops, any order.
    g = grads[0]
    if g is None:
        return [None] * 5
    x, w, b, mean, var = inputs
    shape = bn_stat_shape(x.shape)
    axes = bn_axes(x.ndim)
    w4, mean4 = reshape(w, shape), reshape(mean, shape)
    rstd = ew("rsqrt", ew("add", reshape(var, shape), op.epsilon))
    scale = ew("mul", w4, rstd)
    dx = dw = db = dmean = dvar = None
    if needs[0]:
        dx = ew("mul", g, scale)
    if needs[2] or needs[3]:
        gsum = _sum_keepdims(g, axes)
        db = reshape(gsum, b.shape) if needs[2] else None
        dmean = reshape(ew("mul", ew("neg", gsum), scale), mean.shape) if needs[3] else None
    if needs[1] or needs[4]:
        gxc = _sum_keepdims(ew("mul", g, ew("sub", x, mean4)), axes)
        dw = reshape(ew("mul", gxc, rstd), w.shape) if needs[1] else None
        # d rstd / d var = -rstd**3 / 2
        dvar = reshape(_mul(gxc, w4, rstd, rstd, rstd, -0.5), var.shape) if needs[4] else None
    return [dx, dw, db, dmean, dvar]


@def_backward(BatchNorm)
def _bn_grad(op, inputs, outputs, grads, needs):
    if op.fwd_mode == "inference":
        return _bn_inference_grad(op, inputs, outputs, grads, needs)
    return _bn_train_grad(op, inputs, outputs, grads, needs)


@def_backward(LayerNorm)
def _ln_grad(op, inputs, outputs, grads, needs):
    x = inputs[0]
    _, mean, rstd = outputs
    gy, gmean, grstd = grads
    res = [None] * len(inputs)
    if gy is not None:
        bwd = LayerNormBackward.get(op.affine, op.eps, op.axis_start, op.axis_end)
        outs = runs(bwd, x, gy, mean, rstd, *inputs[1:2])
        res[0] = outs[0]
        if op.affine:
            res[1], res[2] = outs[1], reshape(outs[2], inputs[2].shape)
    if needs[0] and (gmean is not None or grstd is not None):
        start, end = layer_norm_range(op, x.ndim)
        m = int(np.prod(x.shape[start:end]))
        # d rstd / dx = -rstd**3 (x - mean) / m
        gsq = None if grstd is None else ew("mul", ew("mul", grstd, _mul(rstd, rstd, rstd)), -1 / m)
        res[0] = _add(res[0], _stats_grad(x, mean, gmean, gsq, m))
    return [r if need else None for r, need in zip(res, needs)]


def _no_second_order(name):
    def rule(op, inputs, outputs, grads, needs):
        raise NotImplementedError(f"{op.name}: the second-order gradient of {name} is not "
                                  f"implemented (its backward op is not differentiable)")
    return rule


def_backward(BatchNormBackward)(_no_second_order("batch normalisation in training mode"))
def_backward(LayerNormBackward)(_no_second_order("layer normalisation"))
