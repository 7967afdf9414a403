"""``RMSprop`` (not in MegEngine 1.13: PyTorch's definition, defaults and state names)."""
from .._core.ops.optimizer import RMSpropUpdate
from .optimizer import Optimizer, _float

__all__ = ["RMSprop", "RMSpropUpdate"]


class RMSprop(Optimizer):
    r"""Implements the RMSprop algorithm (Tieleman and Hinton, lecture 6.5 of "Neural Networks for
    Machine Learning", 2012), as PyTorch defines it.

    MegEngine 1.13 has no RMSprop; this one follows ``torch.optim.RMSprop``: its arguments,
    defaults and state names (``square_avg``, ``step``, ``momentum_buffer``, ``grad_avg``).
    With ``g`` the gradient plus ``weight_decay * param``:

    .. code-block:: text

        v = alpha * v + (1 - alpha) * g * g
        c = alpha * c + (1 - alpha) * g;  avg = sqrt(v - c * c) + eps      (centered)
        avg = sqrt(v) + eps                                                 (otherwise)
        b = momentum * b + g / avg;  param = param - lr * b                 (momentum > 0)
        param = param - lr * g / avg                                        (otherwise)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate. Default: 1e-2
        alpha: smoothing constant of the running average of squared gradients. Default: 0.99
        eps: term added to the denominator to improve numerical stability. Default: 1e-8
        weight_decay: weight decay (L2 penalty). Default: 0
        momentum: momentum factor. Default: 0
        centered: normalize by an estimate of the gradient's variance instead of its second
            moment. Default: False

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.RMSprop([w], lr=0.01)
        >>> w.grad = mge.tensor([1.0, -1.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.9, 2.1], dtype=float32)
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= momentum:
            raise ValueError("Invalid momentum value: {}".format(momentum))
        if not 0.0 <= weight_decay:
            raise ValueError("Invalid weight_decay value: {}".format(weight_decay))
        if not 0.0 <= alpha:
            raise ValueError("Invalid alpha value: {}".format(alpha))

        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered)
        super().__init__(params, defaults)
        self._disable_type_convert = True

    @staticmethod
    def _state_names(param_group):
        names = ("square_avg", "step")
        if param_group["momentum"] != 0.0:
            names += ("momentum_buffer",)
        if param_group["centered"]:
            names += ("grad_avg",)
        return names

    def _create_state(self, param_group):
        self._add_states(param_group, self._state_names(param_group))

    def _updates(self, param_group):
        op = RMSpropUpdate.get(
            _float(param_group["lr"], "lr"),
            _float(param_group["alpha"], "alpha"),
            _float(param_group["eps"], "eps"), _float(param_group["weight_decay"], "weight_decay"),
            _float(param_group["momentum"], "momentum"), bool(param_group["centered"]),
        )
        self._apply_updates(param_group, op, self._state_names(param_group))
