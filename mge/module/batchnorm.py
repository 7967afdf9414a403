"""Batch normalisation: ``BatchNorm1d``, ``BatchNorm2d`` and ``SyncBatchNorm``."""
import numpy as np

from ..functional.nn import batch_norm, sync_batch_norm
from ..tensor import Parameter, Tensor
from . import init
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "SyncBatchNorm"]


class _BatchNorm(Module):
    """Common part of the batch-norm modules: parameters, running statistics, ``forward``.

    Parameters and statistics are kept as ``(1, C, 1, 1)`` (MegEngine's layout, saved flat by
    ``state_dict``); they broadcast over 2-D, 3-D and 4-D inputs alike.
    """

    _saved_flat = True  # (1, C, 1, 1) inside, (C,) in a state dict (see Module)

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True,
                 track_running_stats=True, freeze=False, **kwargs):
        super().__init__(**kwargs)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self._track_running_stats_saved = track_running_stats
        self.freeze = freeze
        if freeze and not track_running_stats:
            raise AssertionError("track_running_stats must be initilized to True if freeze is "
                                 "True")
        shape = (1, num_features, 1, 1)
        if affine:
            self.weight = Parameter(np.ones(shape, dtype=np.float32))
            self.bias = Parameter(np.zeros(shape, dtype=np.float32))
        else:
            self.weight = None
            self.bias = None
        if track_running_stats:
            self.running_mean = Tensor(np.zeros(shape, dtype=np.float32))
            self.running_var = Tensor(np.ones(shape, dtype=np.float32))
        else:
            self.running_mean = None
            self.running_var = None

    def reset_running_stats(self):
        """Running mean back to 0 and running variance to 1."""
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)

    def reset_parameters(self):
        """Reset the running statistics, ``weight`` to 1 and ``bias`` to 0."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_ndim(self, inp):
        raise NotImplementedError

    def _check_channels(self, inp):
        if inp.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels "
                             f"(axis 1), got input of shape {tuple(inp.shape)}")

    def forward(self, inp):
        self._check_input_ndim(inp)
        self._check_channels(inp)
        if not self._track_running_stats_saved and self.track_running_stats:
            raise AssertionError("track_running_stats can not be initilized to False and "
                                 "changed to True later")
        weight, bias = self.weight, self.bias
        if self.freeze:
            # Frozen: a fixed affine map from the running statistics; nothing is learnt or
            # updated.
            if weight is not None:
                weight = weight.detach()
            if bias is not None:
                bias = bias.detach()
            scale = (self.running_var + self.eps) ** (-0.5)
            if weight is not None:
                scale = scale * weight
            shift = -self.running_mean * scale
            if bias is not None:
                shift = shift + bias
            return inp * _match(scale, inp) + _match(shift, inp)

        track = self.track_running_stats
        return batch_norm(
            inp,
            self.running_mean if track else None,
            self.running_var if track else None,
            weight,
            bias,
            training=self.training or (self.running_mean is None and self.running_var is None),
            momentum=self.momentum if (self.training and track) else 0.0,
            eps=self.eps,
        )

    def _module_info_string(self):
        s = ("{num_features}, eps={eps}, momentum={momentum}, affine={affine}, "
             "track_running_stats={track_running_stats}")
        return s.format(**self.__dict__)


def _match(param, inp):
    # A (1, C, 1, 1) parameter against a 2-D or 3-D input: keep the first inp.ndim axes.
    if inp.ndim == 4:
        return param
    return param.reshape(tuple(param.shape[:inp.ndim]))


class BatchNorm1d(_BatchNorm):
    r"""Batch normalisation of ``(N, C)`` or ``(N, C, L)`` input; see :class:`BatchNorm2d`.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.BatchNorm1d(3)
        >>> m(mge.tensor(np.arange(12, dtype="float32").reshape(4, 3))).shape
        (4, 3)
    """

    def _check_input_ndim(self, inp):
        if inp.ndim not in (2, 3):
            raise ValueError("expected 2D or 3D input (got {}D input)".format(inp.ndim))


class BatchNorm2d(_BatchNorm):
    r"""Batch normalisation of ``(N, C, H, W)`` input.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \gamma + \beta

    with mean and (biased) variance over ``N, H, W`` for each channel.  In training the batch
    statistics normalise, and the running statistics are updated as
    ``running = momentum * running + (1 - momentum) * batch`` (with the unbiased batch variance
    for ``running_var``; MegEngine's ``momentum=0.9`` is PyTorch's 0.1).  In eval mode the
    running statistics normalise.

    Args:
        num_features: the number of channels ``C``.
        eps: added to the variance. Default: 1e-5
        momentum: weight of the old running statistics. Default: 0.9
        affine: whether to learn ``weight`` (:math:`\gamma`) and ``bias`` (:math:`\beta`).
            Default: ``True``
        track_running_stats: whether to keep running statistics; without them the batch
            statistics are used in eval mode too. Default: ``True``
        freeze: use the running statistics and the parameters as constants, in training too
            (needs ``track_running_stats``). Default: ``False``

    Example:
        >>> import mge, mge.module as M
        >>> m = M.BatchNorm2d(4)
        >>> y = m(mge.tensor(np.random.rand(2, 4, 3, 3).astype("float32")))
        >>> print(m.weight.numpy().flatten(), m.bias.numpy().flatten())
        [1. 1. 1. 1.] [0. 0. 0. 0.]
    """

    def _check_input_ndim(self, inp):
        if inp.ndim != 4:
            raise ValueError("expected 4D input (got {}D input)".format(inp.ndim))


class SyncBatchNorm(_BatchNorm):
    r"""Batch normalisation with statistics synchronised over the processes of ``group``.

    In training, the per-channel mean and variance are those of the whole batch over the ranks
    of ``group`` (default ``WORLD``): two ``all_reduce_sum`` of the channels' sums (the mean,
    then the squared deviations from it), so the result and the gradients equal batch
    normalisation of the concatenated batch.  With one process it is batch normalisation of 2-D,
    3-D or 4-D input.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.9, affine=True,
                 track_running_stats=True, freeze=False, group=None, **kwargs):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, freeze,
                         **kwargs)
        self.group = group

    def _check_input_ndim(self, inp):
        if inp.ndim not in (2, 3, 4):
            raise ValueError("expected 2D, 3D or 4D input (got {}D input)".format(inp.ndim))

    def forward(self, inp):
        self._check_input_ndim(inp)
        self._check_channels(inp)
        weight, bias = self.weight, self.bias
        if self.freeze:
            weight = None if weight is None else weight.detach()
            bias = None if bias is None else bias.detach()
        no_stats = self.running_mean is None and self.running_var is None
        from ..distributed import group as _dist_group
        group = self.group if self.group is not None else _dist_group.WORLD
        training = (self.training and not self.freeze) or no_stats
        if training and group.size > 1:
            return self._forward_across_ranks(inp, weight, bias, group)
        return sync_batch_norm(
            inp, self.running_mean, self.running_var, weight, bias,
            training=(self.training and not self.freeze) or no_stats,
            momentum=self.momentum if (self.training and self.track_running_stats) else 0.0,
            eps=self.eps,
        )

    def _forward_across_ranks(self, inp, weight, bias, group):
        from .. import functional as F
        from ..distributed.functional import all_reduce_sum
        x = inp
        if x.ndim != 4:  # (N, C) or (N, C, L): as (N, C, L, 1)
            x = x.reshape(tuple(x.shape) + (1,) * (4 - x.ndim))
        n_local = x.shape[0] * x.shape[2] * x.shape[3]
        count = all_reduce_sum(mge_tensor([float(n_local)]), group).numpy()[0]
        mean = all_reduce_sum(x.sum(axis=(0, 2, 3), keepdims=True), group) / count
        dev = x - mean
        var = all_reduce_sum((dev * dev).sum(axis=(0, 2, 3), keepdims=True), group) / count
        y = dev / F.sqrt(var + self.eps)
        if weight is not None:
            y = y * weight + bias
        if self.training and self.track_running_stats and self.running_mean is not None:
            m = self.momentum
            unbiased = var.detach() * (count / max(count - 1, 1))
            self.running_mean._reset(self.running_mean * m + mean.detach() * (1 - m))
            self.running_var._reset(self.running_var * m + unbiased * (1 - m))
        return y.reshape(inp.shape) if inp.ndim != 4 else y


def mge_tensor(value):
    return Tensor(np.asarray(value, dtype=np.float32))
