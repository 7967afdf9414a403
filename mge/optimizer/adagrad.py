"""``Adagrad``: per-coordinate learning rates from the sum of squared gradients."""
from .._core.ops.optimizer import AdagradUpdate
from .optimizer import Optimizer, _float

__all__ = ["Adagrad", "AdagradUpdate"]


class Adagrad(Optimizer):
    r"""Implements the Adagrad algorithm.

    It has been proposed in `"Adaptive Subgradient Methods for Online Learning and Stochastic
    Optimization" <http://jmlr.org/papers/v12/duchi11a.html>`_.  With ``g`` the gradient plus
    ``weight_decay * param`` and ``t`` the step count (MegEngine's formula: ``eps`` is inside the
    square root):

    .. code-block:: text

        s = s + g * g
        param = param - lr / (1 + (t - 1) * lr_decay) * g / sqrt(s + eps)

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: coefficient that scales delta before it is applied to the parameters. Default: 1e-2
        lr_decay: learning rate decay. Default: 0
        eps: term added to the denominator to improve numerical stability. Default: 1e-10
        weight_decay: weight decay (L2 penalty). Default: 0

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.Adagrad([w], lr=0.5)
        >>> w.grad = mge.tensor([2.0, -4.0])
        >>> opt.step().clear_grad()
        >>> w.numpy()
        array([0.5, 2.5], dtype=float32)
    """

    _STATE_NAMES = ("square_avg", "step")  # AdagradUpdate's state inputs, in order

    def __init__(self, params, lr=1e-2, lr_decay=0.0, eps=1e-10, weight_decay=0.0):
        assert lr >= 0.0, "Invalid learning rate: {}".format(lr)
        assert lr_decay >= 0, "Invalid learning rate decay: {}".format(lr_decay)
        assert eps >= 0.0, "Invalid epsilon value: {}".format(eps)
        assert weight_decay >= 0.0, "Invalid weight_decay value: {}".format(weight_decay)

        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self._disable_type_convert = True

    def _create_state(self, param_group):
        self._add_states(param_group, self._STATE_NAMES)

    def _updates(self, param_group):
        op = AdagradUpdate.get(
            _float(param_group["lr"], "lr"),
            _float(param_group["lr_decay"], "lr_decay"),
            _float(param_group["eps"], "eps"), _float(param_group["weight_decay"], "weight_decay"),
        )
        self._apply_updates(param_group, op, self._STATE_NAMES)
