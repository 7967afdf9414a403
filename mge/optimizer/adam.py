"""``Adam`` (and the ``AdamUpdate`` op that ``AdamW`` shares)."""
import numpy as np

from .._core.ops.base import def_kernel
from .optimizer import Optimizer, UpdateOp, _float, def_update_op, update_op

__all__ = ["Adam", "AdamUpdate"]


@def_update_op
class AdamUpdate(UpdateOp):
    """One Adam step of one parameter: ``(param, grad, exp_avg, exp_avg_sq, step)`` -> new values.

    ``decoupled`` selects AdamW's weight decay (added to the update) over Adam's (added to the
    gradient).
    """

    _fields = ("lr", "beta0", "beta1", "eps", "weight_decay", "decoupled")


def _check_adam_args(lr, betas, weight_decay):
    if lr < 0.0:
        raise ValueError("Invalid learning rate: {}".format(lr))
    if weight_decay < 0.0:
        raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))


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


class _AdamBase(Optimizer):
    # The state and the update shared by Adam and AdamW (they differ in the weight decay only).
    _decoupled = False
    _STATE_NAMES = ("exp_avg", "exp_avg_sq", "step")  # AdamUpdate's state inputs, in order

    def __init__(self, params, lr, betas, eps, weight_decay):
        _check_adam_args(lr, betas, weight_decay)
        defaults = dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
        super().__init__(params, defaults)
        self._disable_type_convert = True

    def _create_state(self, param_group):
        self._add_states(param_group, self._STATE_NAMES)

    def _updates(self, param_group):
        beta0, beta1 = param_group["betas"]
        op = update_op(
            AdamUpdate, _float(param_group["lr"], "lr"),
            _float(beta0, "betas"), _float(beta1, "betas"),
            _float(param_group["eps"], "eps"), _float(param_group["weight_decay"], "weight_decay"),
            self._decoupled,
        )
        self._apply_updates(param_group, op, self._STATE_NAMES)


class Adam(_AdamBase):
    r"""Implements the Adam algorithm proposed in `"Adam: A Method for Stochastic Optimization"
    <https://arxiv.org/abs/1412.6980>`_.

    With ``g`` the gradient plus ``weight_decay * param`` and ``t`` the parameter's step count:

    .. code-block:: text

        m = beta0 * m + (1 - beta0) * g
        v = beta1 * v + (1 - beta1) * g * g
        param = param - lr * (m / (1 - beta0**t)) / (sqrt(v / (1 - beta1**t)) + eps)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients used for computing running averages of the gradient and its square.
            Default: (0.9, 0.999)
        eps: term added to the denominator to improve numerical stability. Default: 1e-8
        weight_decay: weight decay (L2 penalty). Default: 0

    The state of a parameter is ``exp_avg`` (m), ``exp_avg_sq`` (v) and ``step`` (t).

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.Adam([w], lr=0.1)
        >>> w.grad = mge.tensor([0.5, -3.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)   # the first step moves each weight by about lr
        array([0.9, 2.1], dtype=float32)
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr, betas, eps, weight_decay)
