"""CPU kernels of the optimizers' fused update ops (``ops/optimizer.py``).

Each kernel is one optimizer step of one parameter, in numpy with in-place temporaries; SGD's
``param - lr * grad`` is one pass in C without the GIL (``handoff.add_scaled``), and SGD also
writes the new parameter over the old one when nothing else sees it (its in-place kernel).
"""
import numpy as np

from .... import _accel
from ....ops.optimizer import AdadeltaUpdate, AdagradUpdate, AdamUpdate, RMSpropUpdate, SGDUpdate
from ..table import def_inplace, def_kernel

_add_scaled = _accel.load("mge._core.device.cpu.handoff").add_scaled


@def_kernel(SGDUpdate)
def _cpu_sgd(op, param, grad, *buf):
    return _sgd(op, param, grad, buf, np.empty_like(param))


@def_inplace(SGDUpdate)
def _cpu_sgd_inplace(op, arrays, k):
    # the parameter's old value has no other user: the new one is written over it
    param, grad, *buf = arrays
    return _sgd(op, param, grad, buf, param if k == 0 else np.empty_like(param))


def _sgd(op, param, grad, buf, out):
    if op.weight_decay != 0.0:
        grad = grad + param * op.weight_decay
    if op.momentum != 0.0:
        v = buf[0] * op.momentum
        v += grad
        grad = grad + v * op.momentum if op.nesterov else v
        return _add_scaled(out, param, grad, -op.lr), v.astype(buf[0].dtype, copy=False)
    # param - lr * grad in one pass, in C without the GIL for large parameters
    return (_add_scaled(out, param, grad, -op.lr),)


@def_kernel(AdamUpdate)
def _cpu_adam(op, param, grad, exp_avg, exp_avg_sq, step):
    b0, b1, wd = op.beta0, op.beta1, op.weight_decay
    if wd != 0.0 and not op.decoupled:
        grad = grad + param * wd
    step = step + np.ones((), step.dtype)
    t = float(step)
    m = exp_avg * b0
    m += grad * (1.0 - b0)
    v = exp_avg_sq * b1
    v += np.square(grad) * (1.0 - b1)
    # (m / (1 - b0^t)) / (sqrt(v / (1 - b1^t)) + eps), MegEngine's order of operations
    denom = np.sqrt(v * (1.0 / (1.0 - b1 ** t)))
    denom += op.eps
    delta = m * (1.0 / (1.0 - b0 ** t))
    delta /= denom
    if wd != 0.0 and op.decoupled:
        delta += param * wd
    new = (param - delta * op.lr).astype(param.dtype, copy=False)
    return new, m, v, np.asarray(step, dtype=step.dtype)


@def_kernel(AdagradUpdate)
def _cpu_adagrad(op, param, grad, square_avg, step):
    step = step + np.ones((), step.dtype)
    if op.weight_decay != 0.0:
        grad = grad + param * op.weight_decay
    sq = square_avg + np.square(grad)
    delta = grad / np.sqrt(sq + op.eps)  # eps inside the root, as MegEngine
    clr = op.lr / (1.0 + (float(step) - 1.0) * op.lr_decay)
    new = (param - delta * clr).astype(param.dtype, copy=False)
    return new, sq, np.asarray(step, dtype=step.dtype)


@def_kernel(AdadeltaUpdate)
def _cpu_adadelta(op, param, grad, square_avg, acc_delta, step):
    rho, eps = op.rho, op.eps
    step = step + np.ones((), step.dtype)
    if op.weight_decay != 0.0:
        grad = grad + param * op.weight_decay
    sq = square_avg * rho
    sq += np.square(grad) * (1.0 - rho)
    delta = np.sqrt(acc_delta + eps) / np.sqrt(sq + eps) * grad
    new = (param - delta * op.lr).astype(param.dtype, copy=False)
    acc = acc_delta * rho
    acc += np.square(delta) * (1.0 - rho)
    return new, sq, acc, np.asarray(step, dtype=step.dtype)


@def_kernel(RMSpropUpdate)
def _cpu_rmsprop(op, param, grad, square_avg, step, *rest):
    alpha = op.alpha
    step = step + np.ones((), step.dtype)
    if op.weight_decay != 0.0:
        grad = grad + param * op.weight_decay
    sq = square_avg * alpha
    sq += np.square(grad) * (1.0 - alpha)
    outs = [None, sq, np.asarray(step, dtype=step.dtype)]
    if op.centered:
        g_avg = rest[-1] * alpha
        g_avg += grad * (1.0 - alpha)
        avg = np.sqrt(sq - np.square(g_avg))
    else:
        avg = np.sqrt(sq)
    avg += op.eps
    if op.momentum != 0.0:
        buf = rest[0] * op.momentum
        buf += grad / avg
        outs[0] = (param - buf * op.lr).astype(param.dtype, copy=False)
        outs.append(buf)
    else:
        outs[0] = (param - grad / avg * op.lr).astype(param.dtype, copy=False)
    if op.centered:
        outs.append(g_avg)
    return tuple(outs)
