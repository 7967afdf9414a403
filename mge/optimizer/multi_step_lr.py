"""``MultiStepLR``: decay the learning rate by ``gamma`` at given epochs."""
from bisect import bisect_right

from .lr_scheduler import LRScheduler

__all__ = ["MultiStepLR"]


class MultiStepLR(LRScheduler):
    r"""Decays the learning rate of each parameter group by gamma once the number of epoch
    reaches one of the milestones: ``lr = initial_lr * gamma ** (milestones passed)``.

    Args:
        optimizer: wrapped optimizer.
        milestones: list of epoch indices which should be increasing.
        gamma: multiplicative factor of learning rate decay. Default: 0.1
        current_epoch: the index of current epoch. Default: -1

    Example::

        >>> import mge, mge.optimizer as optim
        >>> opt = optim.SGD([mge.Parameter([1.0])], lr=0.1)
        >>> sched = optim.MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
        >>> lrs = []
        >>> for epoch in range(6):
        ...     lrs.append(opt.param_groups[0]["lr"])
        ...     sched.step()
        >>> lrs
        [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    """

    _state_keys = ("milestones", "gamma", "current_epoch")

    def __init__(self, optimizer, milestones, gamma=0.1, current_epoch=-1):
        if not list(milestones) == sorted(milestones):
            raise ValueError(
                "Milestones should be a list of increasing integers. Got {}".format(milestones)
            )

        self.milestones = milestones
        self.gamma = gamma
        super().__init__(optimizer, current_epoch)

    def get_lr(self):
        return [
            base_lr * self.gamma ** bisect_right(self.milestones, self.current_epoch)
            for base_lr in self.base_lrs
        ]
