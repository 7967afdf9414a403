r"""Initialisation of parameters in place (MegEngine's ``megengine.module.init``).

Each function gives the tensor a new value with :meth:`Tensor._reset`, so the tensor object (which
modules and optimizers hold) stays the same.  Random values come from :mod:`mge.random`'s global
sequence: after ``mge.random.seed(n)`` the same model is built with the same parameters.

    >>> import mge, mge.module as M
    >>> mge.random.seed(3)
    >>> a = M.Linear(4, 2).weight.numpy()
    >>> mge.random.seed(3)
    >>> bool((M.Linear(4, 2).weight.numpy() == a).all())
    True
"""
import math

from ..functional import full
from ..random import normal, uniform
from ..tensor import Tensor

__all__ = [
    "fill_", "zeros_", "ones_", "uniform_", "normal_", "calculate_gain",
    "calculate_fan_in_and_fan_out", "calculate_correct_fan", "xavier_uniform_", "xavier_normal_",
    "msra_uniform_", "msra_normal_",
]


def _check(tensor, fname):
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fname}: expected a Tensor, got {type(tensor).__name__}")


def _assign(tensor, value):
    # Random tensors are made on the default device; the parameter keeps its own device and dtype.
    if value.device != tensor.device:
        value = value.to(tensor.device)
    tensor._reset(value.astype(tensor.dtype))


def fill_(tensor, val):
    """Fill ``tensor`` with the value ``val``.

    Example:
        >>> import mge, mge.module.init as init
        >>> t = mge.Parameter([1.0, 2.0])
        >>> init.fill_(t, 7)
        >>> t.numpy()
        array([7., 7.], dtype=float32)
    """
    _check(tensor, "fill_")
    tensor._reset(full(shape=tensor.shape, value=val, dtype=tensor.dtype, device=tensor.device))


def zeros_(tensor):
    """Fill ``tensor`` with 0."""
    fill_(tensor, 0)


def ones_(tensor):
    """Fill ``tensor`` with 1."""
    fill_(tensor, 1)


def uniform_(tensor, a=0.0, b=1.0):
    r"""Fill ``tensor`` with samples of :math:`\mathcal{U}(a, b)`.

    Args:
        tensor: the tensor to initialise.
        a: lower bound of the interval.
        b: upper bound of the interval.
    """
    _check(tensor, "uniform_")
    if a == b:
        # A zero-width interval (a fan of infinite size, a zero gain) is the constant itself.
        fill_(tensor, a)
        return
    _assign(tensor, uniform(size=tensor.shape, low=a, high=b))


def normal_(tensor, mean=0.0, std=1.0):
    r"""Fill ``tensor`` with samples of :math:`\mathcal{N}(\text{mean}, \text{std}^2)`."""
    _check(tensor, "normal_")
    _assign(tensor, normal(size=tensor.shape, mean=mean, std=std))


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d")


def calculate_gain(nonlinearity, param=None):
    r"""The recommended gain for the nonlinearity ``nonlinearity``.

    ================= ====================================================
    nonlinearity      gain
    ================= ====================================================
    Linear / Identity :math:`1`
    Conv{1,2,3}D      :math:`1`
    Sigmoid           :math:`1`
    Tanh              :math:`\frac{5}{3}`
    ReLU              :math:`\sqrt{2}`
    Leaky Relu        :math:`\sqrt{\frac{2}{1 + {\text{negative_slope}}^2}}`
    ================= ====================================================

    Args:
        nonlinearity: the function's name (``"relu"``, ``"leaky_relu"``, ``"tanh"``...).
        param: ``negative_slope`` for ``"leaky_relu"`` (default 0.01).

    Example:
        >>> import mge.module.init as init
        >>> round(init.calculate_gain("relu"), 4)
        1.4142
    """
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            negative_slope = param
        else:
            raise ValueError("negative_slope {} not a valid number".format(param))
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    raise ValueError("Unsupported nonlinearity {}".format(nonlinearity))


def calculate_fan_in_and_fan_out(tensor):
    r"""``(fan_in, fan_out)`` of a weight in MegEngine's layouts.

    A 2-D ``(out, in)`` weight (``Linear``) has ``fan_in = in``; a convolution weight
    ``(O, I, *kernel)`` has ``fan_in = I * prod(kernel)`` and ``fan_out = O * prod(kernel)``.  For
    a grouped weight ``(G, O/G, I/G, *kernel)`` (5 or more dims) the group axis is ignored, so
    ``fan_out = O/G * prod(kernel)`` (PyTorch uses ``O * prod(kernel)``).

    Example:
        >>> import mge, mge.module.init as init
        >>> init.calculate_fan_in_and_fan_out(mge.Parameter(np.zeros((8, 3, 3, 3), "float32")))
        (27, 72)
    """
    shape = tuple(tensor.shape)
    ndim = len(shape)
    if ndim < 2:
        raise ValueError("fan_in and fan_out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    if ndim == 2:
        return shape[1], shape[0]
    if ndim >= 5:
        shape = shape[1:]
    receptive_field = math.prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


def calculate_correct_fan(tensor, mode):
    """``fan_in`` or ``fan_out`` of ``tensor`` (``mode`` is ``"fan_in"`` or ``"fan_out"``, any
    case); see :func:`calculate_fan_in_and_fan_out`."""
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError("Mode {} not supported, please use one of {}".format(mode, valid_modes))
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor, gain=1.0):
    r"""Glorot initialisation: :math:`\mathcal{U}(-a, a)` with
    :math:`a = \text{gain} \sqrt{6 / (\text{fan_in} + \text{fan_out})}`."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    r"""Glorot initialisation: :math:`\mathcal{N}(0, \text{std}^2)` with
    :math:`\text{std} = \text{gain} \sqrt{2 / (\text{fan_in} + \text{fan_out})}`."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    normal_(tensor, 0.0, std)


def msra_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    r"""He (MSRA) initialisation: :math:`\mathcal{U}(-b, b)` with
    :math:`b = \text{gain} \sqrt{3 / \text{fan}}` (:math:`\sqrt{6 / ((1 + a^2)\,\text{fan_in})}`
    for the default leaky ReLU).

    Args:
        tensor: the tensor to initialise.
        a: the negative slope for ``nonlinearity="leaky_relu"`` (see :func:`calculate_gain`).
        mode: ``"fan_in"`` or ``"fan_out"`` (see :func:`calculate_correct_fan`).
        nonlinearity: the nonlinearity whose gain scales the bound.
    """
    fan = calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    uniform_(tensor, -bound, bound)


def msra_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    r"""He (MSRA) initialisation: :math:`\mathcal{N}(0, \text{std}^2)` with
    :math:`\text{std} = \text{gain} / \sqrt{\text{fan}}` (arguments as :func:`msra_uniform_`)."""
    fan = calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    normal_(tensor, 0, std)
