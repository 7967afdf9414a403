"""``CosineAnnealingLR`` (not in MegEngine 1.13: PyTorch's schedule, in MegEngine's form)."""
import math
import numbers

from .lr_scheduler import LRScheduler

__all__ = ["CosineAnnealingLR"]


class CosineAnnealingLR(LRScheduler):
    r"""Anneals the learning rate of each parameter group along a cosine, from ``initial_lr`` at
    epoch 0 to ``eta_min`` at epoch ``T_max``, as proposed in `"SGDR: Stochastic Gradient Descent
    with Warm Restarts" <https://arxiv.org/abs/1608.03983>`_ (without the restarts):

    .. math::

        \eta_t = \eta_{min} + \frac{1}{2}(\eta_{initial} - \eta_{min})
                 \left(1 + \cos\left(\frac{t}{T_{max}}\pi\right)\right)

    MegEngine 1.13 has no such scheduler; this is PyTorch's ``CosineAnnealingLR`` in its closed
    form (PyTorch's ``_get_closed_form_lr``, the same values as its recursive form when nothing
    else changes the lr), with MegEngine's ``current_epoch`` in place of PyTorch's
    ``last_epoch``.  Past ``T_max`` the cosine continues, so the rate rises again (as in
    PyTorch).

    Args:
        optimizer: wrapped optimizer.
        T_max: the number of epochs of the half period (PyTorch's name).
        eta_min: the minimum learning rate. Default: 0
        current_epoch: the index of current epoch. Default: -1

    Example::

        >>> import mge, mge.optimizer as optim
        >>> opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
        >>> sched = optim.CosineAnnealingLR(opt, T_max=4)
        >>> lrs = []
        >>> for epoch in range(5):
        ...     lrs.append(round(opt.param_groups[0]["lr"], 4))
        ...     sched.step()
        >>> lrs
        [1.0, 0.8536, 0.5, 0.1464, 0.0]
    """

    _state_keys = ("T_max", "eta_min", "current_epoch")

    def __init__(self, optimizer, T_max, eta_min=0.0, current_epoch=-1):
        if isinstance(T_max, bool) or not isinstance(T_max, numbers.Real) or not T_max > 0:
            raise ValueError("T_max should be a positive number of epochs. Got {!r}".format(T_max))
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, current_epoch)

    def get_lr(self):
        cos = math.cos(math.pi * self.current_epoch / self.T_max)
        return [self.eta_min + (base_lr - self.eta_min) * (1 + cos) / 2 for base_lr in self.base_lrs]
