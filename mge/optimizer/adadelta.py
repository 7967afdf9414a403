"""``Adadelta``: step sizes from running averages of squared gradients and squared updates."""
from .._core.ops.optimizer import AdadeltaUpdate
from .optimizer import Optimizer, _float

__all__ = ["Adadelta", "AdadeltaUpdate"]


class Adadelta(Optimizer):
    r"""Implements the Adadelta algorithm.

    It has been proposed in `"ADADELTA: An Adaptive Learning Rate Method"
    <https://arxiv.org/abs/1212.5701>`_.  With ``g`` the gradient plus ``weight_decay * param``:

    .. code-block:: text

        s = rho * s + (1 - rho) * g * g
        delta = sqrt(a + eps) / sqrt(s + eps) * g
        param = param - lr * delta
        a = rho * a + (1 - rho) * delta * delta

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: coefficient that scales delta before it is applied to the parameters. Default: 1.0
        rho: coefficient used for computing a running average of squared gradients. Default: 0.9
        eps: term added to the denominator to improve numerical stability. Default: 1e-6
        weight_decay: weight decay (L2 penalty). Default: 0

    The state of a parameter is ``square_avg`` (s), ``acc_delta`` (a) and ``step``.

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.Adadelta([w])
        >>> w.grad = mge.tensor([1.0, -1.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.9968, 2.0032], dtype=float32)
    """

    _STATE_NAMES = ("square_avg", "acc_delta", "step")  # AdadeltaUpdate's state inputs, in order

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
        assert lr >= 0.0, "Invalid learning rate: {}".format(lr)
        assert rho >= 0.0 and rho <= 1.0, "Invalid rho value: {}".format(rho)
        assert eps >= 0.0, "Invalid epsilon value: {}".format(eps)
        assert weight_decay >= 0.0, "Invalid weight_decay value: {}".format(weight_decay)

        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self._disable_type_convert = True

    def _create_state(self, param_group):
        self._add_states(param_group, self._STATE_NAMES)

    def _updates(self, param_group):
        op = AdadeltaUpdate.get(
            _float(param_group["lr"], "lr"), _float(param_group["rho"], "rho"),
            _float(param_group["eps"], "eps"), _float(param_group["weight_decay"], "weight_decay"),
        )
        self._apply_updates(param_group, op, self._STATE_NAMES)
