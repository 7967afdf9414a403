"""``SGD``: stochastic gradient descent with momentum, Nesterov momentum and weight decay."""
import numpy as np

from .._core._accel import load
from .._core.ops.base import def_inplace, def_kernel
from .optimizer import Optimizer, UpdateOp, _float, def_update_op, update_op

__all__ = ["SGD", "SGDUpdate"]

add_scaled = load("mge._core.device.cpu.handoff").add_scaled


@def_update_op
class SGDUpdate(UpdateOp):
    """One SGD step of one parameter: ``(param, grad[, momentum_buffer])`` -> new values."""

    _fields = ("lr", "momentum", "weight_decay", "nesterov")


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
        return add_scaled(out, param, grad, -op.lr), v.astype(buf[0].dtype, copy=False)
    # param - lr * grad in one pass, in C without the GIL for large parameters
    return (add_scaled(out, param, grad, -op.lr),)


class SGD(Optimizer):
    r"""Implements stochastic gradient descent.

    Nesterov momentum is based on the formula from `"On the importance of initialization and
    momentum in deep learning" <http://www.cs.toronto.edu/%7Ehinton/absps/momentum.pdf>`_.
    With ``g`` the gradient plus ``weight_decay * param``, a step is

    .. code-block:: text

        v = momentum * v + g                    (when momentum != 0)
        g = g + momentum * v   if nesterov else v
        param = param - lr * g

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        momentum: momentum factor. Default: 0.0
        nesterov: enables Nesterov momentum. Default: False
        weight_decay: weight decay (L2 penalty). Default: 0.0

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.SGD([w], lr=0.1)
        >>> w.grad = mge.tensor([1.0, -1.0])
        >>> opt.step().clear_grad()   # step() returns the optimizer
        >>> w.numpy()
        array([0.9, 2.1], dtype=float32)
    """

    def __init__(self, params, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
        assert lr >= 0.0, "Invalid learning rate: {}".format(lr)
        assert momentum >= 0.0, "Invalid momentum value: {}".format(momentum)
        assert weight_decay >= 0.0, "Invalid weight_decay value: {}".format(weight_decay)
        assert not nesterov or momentum > 0.0, "Nesterov momentum requires a momentum"

        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.nesterov = nesterov
        self._disable_type_convert = True

    def _create_state(self, param_group):
        if param_group["momentum"] != 0.0:
            for param in param_group["params"]:
                self._add_state(param, "momentum_buffer")

    def _updates(self, param_group):
        momentum = _float(param_group["momentum"], "momentum")
        op = update_op(SGDUpdate, _float(param_group["lr"], "lr"), momentum,
                       _float(param_group["weight_decay"], "weight_decay"), bool(self.nesterov))
        self._apply_updates(param_group, op, ("momentum_buffer",) if momentum != 0.0 else ())
