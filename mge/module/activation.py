"""Activation modules: ``ReLU``, ``Sigmoid``, ``SiLU``, ``GELU``, ``Softmax``, ``LeakyReLU`` and
``PReLU`` (MegEngine 1.13's set)."""
import numpy as np

from ..functional.nn import gelu, leaky_relu, prelu, relu, sigmoid, silu, softmax
from ..tensor import Parameter
from .module import Module

__all__ = ["ReLU", "Sigmoid", "SiLU", "GELU", "Softmax", "LeakyReLU", "PReLU"]


class Softmax(Module):
    r"""``exp(x_i) / sum_j exp(x_j)`` along ``axis``.

    Args:
        axis: the axis; ``None`` picks MegEngine's default (axis 0 for 0-, 1- and 3-D input,
            else axis 1).

    Example:
        >>> import mge, mge.module as M
        >>> out = M.Softmax()(mge.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]))
        >>> print(np.round(out.numpy(), 6))
        [0.011656 0.031685 0.086129 0.234122 0.636409]
    """

    def __init__(self, axis=None, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis

    def forward(self, inputs):
        return softmax(inputs, self.axis)

    def _module_info_string(self):
        return "axis={axis}".format(axis=self.axis)


class Sigmoid(Module):
    r"""``1 / (1 + exp(-x))``, elementwise.

    Example:
        >>> import mge, mge.module as M
        >>> print(np.round(M.Sigmoid()(mge.tensor([-2.0, 0.0, 2.0])).numpy(), 6))
        [0.119203 0.5      0.880797]
    """

    def forward(self, inputs):
        return sigmoid(inputs)


class SiLU(Module):
    r"""``x * sigmoid(x)``, elementwise.

    Example:
        >>> import mge, mge.module as M
        >>> print(np.round(M.SiLU()(mge.tensor([-2.0, 0.0, 2.0])).numpy(), 6))
        [-0.238406  0.        1.761594]
    """

    def forward(self, inputs):
        return silu(inputs)


class GELU(Module):
    r"""``x * Phi(x)`` with ``Phi`` the standard normal CDF, elementwise.

    Example:
        >>> import mge, mge.module as M
        >>> print(np.round(M.GELU()(mge.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])).numpy(), 4))
        [-0.0455 -0.1587  0.      0.8413  1.9545]
    """

    def forward(self, inputs):
        return gelu(inputs)


class ReLU(Module):
    r"""``max(x, 0)``, elementwise.

    Example:
        >>> import mge, mge.module as M
        >>> M.ReLU()(mge.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])).numpy()
        array([0., 0., 0., 1., 2.], dtype=float32)
    """

    def forward(self, x):
        return relu(x)


class PReLU(Module):
    r"""``max(0, x) + a * min(0, x)`` with a learnt slope ``a`` (``weight``).

    Args:
        num_parameters: 1 (one slope for every channel, ``weight`` of shape ``(1,)``) or the
            number of channels of the ``(N, C, ...)`` input (``weight`` ``(1, C, 1, 1)``).
            Default: 1
        init: the initial slope. Default: 0.25

    Example:
        >>> import mge, mge.module as M
        >>> M.PReLU()(mge.tensor([-1.2, -3.7, 2.7])).numpy()
        array([-0.3  , -0.925,  2.7  ], dtype=float32)
    """

    def __init__(self, num_parameters=1, init=0.25, **kwargs):
        super().__init__(**kwargs)
        self.num_parameters = num_parameters
        if num_parameters > 1:
            self.weight = Parameter(np.full((1, num_parameters, 1, 1), init, dtype=np.float32))
        else:
            self.weight = Parameter(np.array([init], dtype=np.float32))

    def forward(self, inputs):
        weight = self.weight
        if weight.ndim == 4 and inputs.ndim != 4:
            # (1, C, 1, 1) against (N, C) or (N, C, L): keep the channel axis in place.
            weight = weight.reshape((1, self.num_parameters) + (1,) * (inputs.ndim - 2))
        return prelu(inputs, weight)


class LeakyReLU(Module):
    r"""``x`` where positive, else ``negative_slope * x``.

    Args:
        negative_slope: the slope for negative inputs. Default: 0.01

    Example:
        >>> import mge, mge.module as M
        >>> M.LeakyReLU(0.01)(mge.tensor([-8.0, -12.0, 6.0, 10.0])).numpy()
        array([-0.08, -0.12,  6.  , 10.  ], dtype=float32)
    """

    def __init__(self, negative_slope=0.01, **kwargs):
        super().__init__(**kwargs)
        self.negative_slope = negative_slope

    def forward(self, inputs):
        return leaky_relu(inputs, self.negative_slope)
