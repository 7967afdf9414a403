"""``SGD``: stochastic gradient descent with momentum, Nesterov momentum and weight decay."""
from .._core.ops.optimizer import SGDUpdate
from .optimizer import Optimizer, _float

__all__ = ["SGD", "SGDUpdate"]


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
        op = SGDUpdate.get(_float(param_group["lr"], "lr"), momentum,
                           _float(param_group["weight_decay"], "weight_decay"), bool(self.nesterov))
        self._apply_updates(param_group, op, ("momentum_buffer",) if momentum != 0.0 else ())
