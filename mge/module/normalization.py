"""Normalisation over features: ``LayerNorm``, ``GroupNorm``, ``InstanceNorm``, ``GeneralNorm``
and ``LocalResponseNorm``."""
import numpy as np

from ..functional.nn import general_norm, group_norm, instance_norm, layer_norm, local_response_norm
from ..tensor import Parameter
from .init import ones_, zeros_
from .module import Module

__all__ = ["GroupNorm", "InstanceNorm", "LayerNorm", "GeneralNorm", "LocalResponseNorm"]


class _AffineNorm(Module):
    """Holds the optional ``weight`` (ones) and ``bias`` (zeros) of shape ``shape``."""

    def _make_affine(self, shape):
        if self.affine:
            self.weight = Parameter(np.ones(shape, dtype=np.float32))
            self.bias = Parameter(np.zeros(shape, dtype=np.float32))
        else:
            self.weight = None
            self.bias = None
        self.reset_parameters()

    def reset_parameters(self):
        """``weight`` back to 1 and ``bias`` to 0."""
        if self.affine:
            ones_(self.weight)
            zeros_(self.bias)


class GroupNorm(_AffineNorm):
    r"""Group normalisation: the channels of each sample are split into ``num_groups`` groups,
    each normalised by its own mean and (biased) variance, then scaled by the per-channel
    ``weight`` and shifted by ``bias`` (shape ``(num_channels,)``) when ``affine``.

    Args:
        num_groups: number of groups; must divide ``num_channels``.
        num_channels: number of channels ``C`` of the ``(N, C, ...)`` input.
        eps: added to the variance. Default: 1e-5
        affine: whether to learn ``weight`` and ``bias``. Default: ``True``

    Example:
        >>> import mge, mge.module as M
        >>> m = M.GroupNorm(3, 3)
        >>> m(mge.tensor(np.arange(96, dtype="float32").reshape(2, 3, 4, 4))).shape
        (2, 3, 4, 4)
    """

    _saved_flat = True  # saved flat (see Module)

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, **kwargs):
        super().__init__(**kwargs)
        if num_groups < 1 or num_channels % num_groups != 0:
            raise AssertionError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                                 f"num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self._make_affine((num_channels,))

    def forward(self, x):
        return group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self):
        return "groups={num_groups}, channels={num_channels}, eps={eps}, affine={affine}".format(
            **self.__dict__)


class InstanceNorm(_AffineNorm):
    r"""Instance normalisation: each channel of each sample normalised over its spatial axes
    (:class:`GroupNorm` with ``num_groups = num_channels``).

    Args:
        num_channels: number of channels ``C``.
        eps: added to the variance. Default: 1e-5
        affine: whether to learn per-channel ``weight`` and ``bias``. Default: ``True``
    """

    _saved_flat = True  # saved flat (see Module)

    def __init__(self, num_channels, eps=1e-05, affine=True, **kwargs):
        super().__init__(**kwargs)
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self._make_affine((num_channels,))

    def forward(self, x):
        return instance_norm(x, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self):
        return "channels={num_channels}, eps={eps}, affine={affine}".format(**self.__dict__)


class LayerNorm(_AffineNorm):
    r"""Layer normalisation over the trailing ``normalized_shape`` axes of each sample.

    Args:
        normalized_shape: an int (the last axis) or a tuple of the trailing axes' sizes.
        eps: added to the variance. Default: 1e-5
        affine: whether to learn ``weight`` and ``bias`` of shape ``normalized_shape``.
            Default: ``True``

    Example:
        >>> import mge, mge.module as M
        >>> m = M.LayerNorm((4, 4))
        >>> m(mge.tensor(np.arange(96, dtype="float32").reshape(2, 3, 4, 4))).shape
        (2, 3, 4, 4)
    """

    _saved_flat = True  # saved flat (see Module)

    def __init__(self, normalized_shape, eps=1e-05, affine=True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.affine = affine
        self._make_affine(self.normalized_shape)

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self):
        return "normalized_shape={normalized_shape}, eps={eps}, affine={affine}".format(
            **self.__dict__)


class GeneralNorm(_AffineNorm):
    r"""Normalisation over the axes ``normalized_axis`` (sorted), with ``weight`` and ``bias``
    of shape ``normalized_shape`` (the sizes of those axes) when ``affine``.

    Args:
        normalized_shape: sizes of the normalised axes (an int or a sequence); needed when
            ``affine``.
        normalized_axis: the axes (an int or a sequence, negative counts from the end), in
            increasing order. Default: 0
        eps: added to the variance. Default: 1e-5
        affine: whether to learn ``weight`` and ``bias``. Default: ``True``

    Example:
        >>> import mge, mge.module as M
        >>> m = M.GeneralNorm((2, 3), (0, 1))
        >>> m(mge.tensor(np.arange(96, dtype="float32").reshape(2, 3, 4, 4))).shape
        (2, 3, 4, 4)
    """

    def __init__(self, normalized_shape=None, normalized_axis=0, eps=1e-05, affine=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.eps = eps
        self.affine = affine
        if isinstance(normalized_axis, (int, np.integer)):
            normalized_axis = [int(normalized_axis)]
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = [int(normalized_shape)]
        if affine:
            if normalized_shape is None:
                raise AssertionError("normalized_shape must be specified when affine is true")
            if normalized_axis is None:
                raise AssertionError("normalized_axis must be specified when affine is true")
            if len(normalized_axis) != len(normalized_shape):
                raise AssertionError("The size of normalized_axis and normalized_shape are "
                                     "different")
        if normalized_axis is None:
            raise AssertionError("GeneralNorm: normalized_axis must be given")
        if len(set(normalized_axis)) != len(normalized_axis):
            raise AssertionError("there are duplicate axis in list normalized_axis")
        self.normalized_shape = normalized_shape
        self.normalized_axis = normalized_axis
        self._make_affine(tuple(normalized_shape) if affine else None)

    def forward(self, x):
        axes = [a + x.ndim if a < 0 else a for a in self.normalized_axis]
        if axes != sorted(axes):
            raise AssertionError(
                "The order of normalized_axis is incorrect, should be {}, but got {}. Please "
                "specify the values of axis in the correct order in normalized_axis".format(
                    sorted(axes), axes))
        if self.normalized_shape is not None:
            shape = tuple(x.shape)
            for i, a in enumerate(axes):
                if shape[a] != self.normalized_shape[i]:
                    raise AssertionError(
                        "inp.shape={}, normalized_axis={}, normalized_shape={}, "
                        "inp.shape[normalized_axis[{}]]({}) != normalized_shape[{}]({})".format(
                            shape, axes, self.normalized_shape, i, shape[a], i,
                            self.normalized_shape[i]))
        return general_norm(x, axes, self.affine, self.weight, self.bias, self.eps)

    def _module_info_string(self):
        return ("normalized_shape={normalized_shape}, normalized_axis={normalized_axis}, "
                "eps={eps}, affine={affine}").format(**self.__dict__)


class LocalResponseNorm(Module):
    r"""Local response normalisation across channels:
    ``y = x / (k + alpha * s) ** beta`` with ``s`` the sum of ``x**2`` over the ``kernel_size``
    channels centred on each channel.

    Args:
        kernel_size: the (odd) number of channels summed. Default: 5
        k: Default: 2.0
        alpha: Default: 1e-4
        beta: Default: 0.75
    """

    def __init__(self, kernel_size=5, k=2.0, alpha=1e-4, beta=0.75, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.k = k
        self.alpha = alpha
        self.beta = beta

    def forward(self, inp):
        return local_response_norm(inp, self.kernel_size, self.k, self.alpha, self.beta)
