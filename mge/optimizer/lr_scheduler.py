"""``LRScheduler``: the base of the learning-rate schedulers."""
from .optimizer import Optimizer

__all__ = ["LRScheduler"]


class LRScheduler:
    r"""Base class for all learning rate based schedulers.

    A scheduler sets ``lr`` of every parameter group of ``optimizer`` from the group's
    ``initial_lr`` (recorded when the scheduler is created) and the epoch count.  Creating it
    performs the first :meth:`step`, so ``current_epoch`` is 0 afterwards; call :meth:`step`
    once per epoch.

    Args:
        optimizer: wrapped optimizer.
        current_epoch: the index of current epoch. Default: -1 (a new run).  To resume, pass the
            last finished epoch; the groups must then have ``initial_lr`` (from the optimizer's
            saved state dict).

    A subclass implements :meth:`get_lr` and names the attributes that make up its state in
    ``_state_keys`` (:meth:`state_dict`/:meth:`load_state_dict` save and restore them).
    """

    _state_keys = ()

    def __init__(self, optimizer, current_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError("optimizer argument given to the lr_scheduler should be Optimizer")
        self.optimizer = optimizer
        self.current_epoch = current_epoch
        if current_epoch == -1:
            for group in self.optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        "param 'initial_lr' is not specified in "
                        "param_groups[{}] when resuming an optimizer".format(i)
                    )
        self.base_lrs = [group["initial_lr"] for group in self.optimizer.param_groups]

        self.step()

    def state_dict(self):
        r"""Return the state of the scheduler as a :class:`dict`: the attributes a subclass names
        in ``_state_keys`` (``NotImplementedError`` for a subclass that names none, as in
        MegEngine's base class)."""
        if not self._state_keys:
            raise NotImplementedError
        return {key: self.__dict__[key] for key in self._state_keys}

    def load_state_dict(self, state_dict):
        r"""Load the scheduler's state: ``state_dict`` must hold every key of :meth:`state_dict`;
        nothing is set when one is missing.

        Args:
            state_dict: scheduler state, as returned by :meth:`state_dict`.
        """
        if not self._state_keys:
            raise NotImplementedError
        tmp_dict = {}
        for key in self._state_keys:
            if key not in state_dict.keys():
                raise KeyError(
                    "key '{}'' is not specified in state_dict when loading state dict".format(key)
                )
            tmp_dict[key] = state_dict[key]
        self.__dict__.update(tmp_dict)

    def get_lr(self):
        r"""Compute the current learning rate of every group (a list)."""
        raise NotImplementedError

    def step(self, epoch=None):
        """Advance to the next epoch (or to ``epoch``) and set the groups' ``lr``."""
        if epoch is None:
            self.current_epoch += 1
        else:
            self.current_epoch = epoch

        values = self.get_lr()
        for param_group, lr in zip(self.optimizer.param_groups, values):
            param_group["lr"] = lr
