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
"""
import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .gradutil import broadcast, cached_op, ew, reshape, run, runs
from .reduce import Reduce

__all__ = ["BatchNorm", "LayerNorm", "BatchNormBackward", "LayerNormBackward"]


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


class BatchNormBackward(OpDef):
    """The gradient of training-mode ``BatchNorm``: ``(x, dy, mean, var, weight)`` ->
    ``(dx, dweight, dbias)``."""

    _fields = ("epsilon",)
    _defaults = {"epsilon": 1e-5}


class LayerNormBackward(OpDef):
    """The gradient of ``LayerNorm``: ``(x, dy, mean, rstd[, weight])`` -> ``(dx[, dweight,
    dbias])``; same parameters as ``LayerNorm``."""

    _fields = LayerNorm._fields
    _defaults = LayerNorm._defaults


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


# -- backward ------------------------------------------------------------------------------------

def _stat_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _bn_axes(ndim):
    return (0,) + tuple(range(2, ndim))


@def_infer(BatchNormBackward)
def _infer_bn_backward(op, descs):
    if len(descs) != 5:
        raise op_error(TypeError, op, f"expects 5 inputs (x, dy, mean, var, weight), got "
                       f"{len(descs)}", descs)
    _check_float(op, descs)
    (xs, dtype), (gs, _), _, _, (ws, wdt) = descs
    if xs is not None and gs is not None and tuple(xs) != tuple(gs):
        raise op_error(ValueError, op, "x and dy must have the same shape", descs)
    stat = None if xs is None else (1, xs[1]) + (1,) * (len(xs) - 2)
    return [TensorDesc(xs, dtype), TensorDesc(stat, wdt), TensorDesc(stat, wdt)]


@def_kernel(BatchNormBackward)
def _cpu_bn_backward(op, x, dy, mean, var, w):
    # dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), the means over all axes but 1
    acc = _acc(x.dtype)
    shape = _stat_shape(x)
    axes = _bn_axes(x.ndim)
    m = x.size // max(x.shape[1], 1)
    rstd = 1 / np.sqrt(var.reshape(shape).astype(acc) + op.epsilon)
    xhat = x.astype(acc) - mean.reshape(shape).astype(acc)
    xhat *= rstd
    g = dy.astype(acc, copy=False)
    db = g.sum(axis=axes, keepdims=True)
    dw = np.multiply(g, xhat).sum(axis=axes, keepdims=True)
    xhat *= dw / m
    dx = np.subtract(g, xhat, out=xhat)
    dx -= db / m
    dx *= w.reshape(shape).astype(acc) * rstd
    wdt = w.dtype
    return (dx.astype(x.dtype, copy=False), dw.astype(wdt, copy=False), db.astype(wdt, copy=False))


def _sum_keepdims(t, axes):
    return run(cached_op(Reduce, "sum", axes, True), t)


def _stats_grad(x, mean, gmean, gsq, m):
    """Gradient to ``x`` of statistics over ``m`` elements: ``gmean`` arrives at their mean,
    ``gsq`` is the factor of ``(x - mean)`` that a function of their (biased) variance adds."""
    dx = None
    if gsq is not None:
        dx = (x - mean) * gsq
    if gmean is not None:
        gm = gmean * (1 / m)
        dx = broadcast(gm, x.shape) if dx is None else dx + gm
    return dx


def _add(a, b):
    return b if a is None else a if b is None else a + b


def _bn_train_grad(op, inputs, outputs, grads, needs):
    x, w, b = inputs
    _, mean, var = outputs
    gy, gmean, gvar = grads
    dx = dw = db = None
    if gy is not None:
        dx, dw, db = runs(cached_op(BatchNormBackward, op.epsilon), x, gy, mean, var, w)
        dw, db = reshape(dw, w.shape), reshape(db, b.shape)
    if needs[0] and (gmean is not None or gvar is not None):
        m = x.size // x.shape[1]
        gsq = None if gvar is None else gvar * (2 / m)     # d var / dx = 2 (x - mean) / m
        dx = _add(dx, _stats_grad(x, mean, gmean, gsq, m))
    return [dx if needs[0] else None, dw if needs[1] else None, db if needs[2] else None]


def _bn_inference_grad(op, inputs, outputs, grads, needs):
    # y = (x - mean) * w * rstd + b with rstd = 1 / sqrt(var + eps): ordinary ops, any order.
    g = grads[0]
    if g is None:
        return [None] * 5
    x, w, b, mean, var = inputs
    shape = _stat_shape(x)
    axes = _bn_axes(x.ndim)
    w4, mean4 = reshape(w, shape), reshape(mean, shape)
    rstd = ew("rsqrt", reshape(var, shape) + op.epsilon)
    scale = w4 * rstd
    dx = dw = db = dmean = dvar = None
    if needs[0]:
        dx = g * scale
    if needs[2] or needs[3]:
        gsum = _sum_keepdims(g, axes)
        db = reshape(gsum, b.shape) if needs[2] else None
        dmean = reshape(-gsum * scale, mean.shape) if needs[3] else None
    if needs[1] or needs[4]:
        gxc = _sum_keepdims(g * (x - mean4), axes)
        dw = reshape(gxc * rstd, w.shape) if needs[1] else None
        # d rstd / d var = -rstd**3 / 2
        dvar = reshape(gxc * w4 * rstd * rstd * rstd * -0.5, var.shape) if needs[4] else None
    return [dx, dw, db, dmean, dvar]


@def_backward(BatchNorm)
def _bn_grad(op, inputs, outputs, grads, needs):
    if op.fwd_mode == "inference":
        return _bn_inference_grad(op, inputs, outputs, grads, needs)
    return _bn_train_grad(op, inputs, outputs, grads, needs)


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


@def_kernel(LayerNormBackward)
def _cpu_ln_backward(op, x, dy, mean, rstd, *w):
    # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) with gw = dy * weight, the means over
    # the normalised axes; dweight and dbias sum over the other axes.
    acc = _acc(x.dtype)
    start, end = _axes(op, x.ndim)
    axes = tuple(range(start, end))
    rstd = rstd.astype(acc, copy=False)
    xhat = x.astype(acc) - mean.astype(acc, copy=False)
    xhat *= rstd
    g = dy.astype(acc, copy=False)
    grads = ()
    gw = g
    if op.affine:
        w = w[0]
        outer = tuple(range(start)) + tuple(range(end, x.ndim))
        dw = np.multiply(g, xhat).sum(axis=outer).reshape(w.shape).astype(w.dtype, copy=False)
        db = g.sum(axis=outer).reshape(w.shape).astype(w.dtype, copy=False)
        grads = (dw, db)
        gw = g * w.reshape(x.shape[start:end] + (1,) * (x.ndim - end)).astype(acc, copy=False)
    c1 = gw.mean(axis=axes, keepdims=True)
    c2 = np.multiply(gw, xhat).mean(axis=axes, keepdims=True)
    xhat *= c2
    dx = np.subtract(gw, xhat, out=xhat)
    dx -= c1
    dx *= rstd
    return (dx.astype(x.dtype, copy=False),) + grads


@def_backward(LayerNorm)
def _ln_grad(op, inputs, outputs, grads, needs):
    x = inputs[0]
    _, mean, rstd = outputs
    gy, gmean, grstd = grads
    res = [None] * len(inputs)
    if gy is not None:
        bwd = cached_op(LayerNormBackward, op.affine, op.eps, op.axis_start, op.axis_end)
        outs = runs(bwd, x, gy, mean, rstd, *inputs[1:2])
        res[0] = outs[0]
        if op.affine:
            res[1], res[2] = outs[1], reshape(outs[2], inputs[2].shape)
    if needs[0] and (gmean is not None or grstd is not None):
        start, end = _axes(op, x.ndim)
        m = int(np.prod(x.shape[start:end]))
        # d rstd / dx = -rstd**3 (x - mean) / m
        gsq = None if grstd is None else grstd * (rstd * rstd * rstd) * (-1 / m)
        res[0] = _add(res[0], _stats_grad(x, mean, gmean, gsq, m))
    return [r if need else None for r, need in zip(res, needs)]


def _no_second_order(name):
    def rule(op, inputs, outputs, grads, needs):
        raise NotImplementedError(f"{op.name}: the second-order gradient of {name} is not "
                                  f"implemented (its backward op is not differentiable)")
    return rule


def_backward(BatchNormBackward)(_no_second_order("batch normalisation in training mode"))
def_backward(LayerNormBackward)(_no_second_order("layer normalisation"))
