"""``Adam`` (and the ``AdamUpdate`` op that ``AdamW`` shares)."""
from .._core.ops.optimizer import AdamUpdate
from .optimizer import Optimizer, _float

__all__ = ["Adam", "AdamUpdate"]


def _check_adam_args(lr, betas, weight_decay):
    if lr < 0.0:
        raise ValueError("Invalid learning rate: {}".format(lr))
    if weight_decay < 0.0:
        raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))


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
        op = AdamUpdate.get(
            _float(param_group["lr"], "lr"),
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
