"""Neural-network functions (``megengine.functional.nn``): convolution, pooling, normalisation,
activations, softmax, dropout, padding, one-hot.

The names in ``__all__`` are also ``F.<name>``; the losses of :mod:`mge.functional.loss` are
reachable as ``F.nn.<loss>`` (as in MegEngine) but not as ``F.<loss>``.
"""
import numpy as np

from .._core.ops import (
    AdaptivePooling, AddAxis, BatchNorm, Convolution, ConvolutionBackwardData, Detach, Dimshuffle,
    Dropout, IndexingOneHot, LayerNorm, LogSoftmax, MatrixMul, OneHot, Pad, Pooling,
    Reduce, RemoveAxis, Reshape, Softmax, elemwise_op,
)
from .._core.ops.rng import next_seed
from ..tensor import Tensor
from ..core import apply

__all__ = [
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "batch_norm", "conv1d", "conv2d",
    "conv3d", "conv_transpose2d", "conv_transpose3d", "deformable_conv2d",
    "deformable_psroi_pooling", "dropout", "embedding", "gelu", "general_norm", "group_norm",
    "hsigmoid", "instance_norm", "hswish", "indexing_one_hot", "layer_norm", "leaky_relu", "linear",
    "local_conv2d", "local_response_norm", "logsigmoid", "logsumexp", "logsoftmax", "max_pool2d",
    "normalize", "one_hot", "prelu", "pad", "relu", "relu6", "remap", "sigmoid", "sliding_window",
    "sliding_window_transpose", "silu", "softmax", "softplus", "sync_batch_norm", "warp_affine",
    "warp_perspective", "pixel_shuffle", "region_restricted_conv", "multi_head_attention",
]


# -- helpers ---------------------------------------------------------------------------------------

def _tuple(name, value, n):
    if isinstance(value, Tensor):
        value = value.numpy().tolist()
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ValueError(f"{name}: expected an int or a tuple of {n} ints, got {value}")
    return value


def _reshape(x, shape):
    return apply(Reshape(tuple(int(s) for s in shape)), x)[0]


def _param_shape(x, ndim):
    """A 1-D per-channel parameter as ``(1, C, 1, ...)``; other shapes are left alone."""
    if x.ndim == 1:
        return _reshape(x, (1, x.shape[0]) + (1,) * (ndim - 2))
    return x


def _check_conv_mode(name, conv_mode):
    mode = getattr(conv_mode, "name", conv_mode)
    if str(mode).lower() != "cross_correlation":
        raise ValueError(f"{name}: only conv_mode='cross_correlation' is supported, got {conv_mode!r}")


def _add_bias(name, out, bias):
    if bias is None:
        return out
    return out + _param_shape(bias, out.ndim)


def _conv(name, nd, inp, weight, bias, stride, padding, dilation, groups, compute_mode, conv_mode):
    _check_conv_mode(name, conv_mode)
    op = Convolution(_tuple(name, stride, nd), _tuple(name, padding, nd), _tuple(name, dilation, nd),
                     int(groups), compute_mode)
    return _add_bias(name, apply(op, inp, weight)[0], bias)


def _not_implemented(name, why="is not implemented in mge"):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} {why}")
    fn.__name__ = name
    fn.__doc__ = f"Not implemented in mge: calling ``{name}`` raises ``NotImplementedError``."
    return fn


# -- convolution -------------------------------------------------------------------------------

def conv1d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """1D convolution of ``(N, C, L)`` input with a ``(O, C, K)`` weight.

    ``conv1d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
    conv_mode='cross_correlation', compute_mode='default')``.  Runs as a 2D convolution over
    ``(N, C, L, 1)`` (as MegEngine).  ``bias`` has shape ``(1, O, 1)`` or ``(O,)``.
    """
    if inp.ndim != 3:
        raise ValueError(f"conv1d: input must be 3-D (N, C, L), got shape {inp.shape}")
    if weight.ndim != 3:
        raise ValueError(f"conv1d: weight must be 3-D (O, C/groups, K), got shape {weight.shape}")
    if groups != 1:
        o = weight.shape[0]
        weight = _reshape(weight, (groups, o // groups) + tuple(weight.shape[1:]))
    x4 = apply(AddAxis((3,)), inp)[0]
    w4 = apply(AddAxis((weight.ndim,)), weight)[0]
    s, p, d = (_tuple("conv1d", v, 1)[0] for v in (stride, padding, dilation))
    out = _conv("conv1d", 2, x4, w4, None, (s, 1), (p, 0), (d, 1), groups, compute_mode, conv_mode)
    return _add_bias("conv1d", apply(RemoveAxis((3,)), out)[0], bias)


def conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """2D convolution (cross-correlation) of NCHW input.

    ``conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
    conv_mode='cross_correlation', compute_mode='default')``.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(O, C, KH, KW)``; with ``groups > 1``, ``(groups, O/groups, C/groups, KH, KW)``.
        bias: ``(1, O, 1, 1)`` or ``(O,)``, added to the output.
        stride, padding, dilation: an int or a pair ``(h, w)``.
        groups: number of channel groups.

    Returns:
        ``(N, O, OH, OW)`` with ``OH = (H + 2*ph - dh*(KH-1) - 1) // sh + 1``.
    """
    return _conv("conv2d", 2, inp, weight, bias, stride, padding, dilation, groups, compute_mode,
                 conv_mode)


def conv3d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation"):
    """3D convolution of NCDHW input; the 3-D analogue of :func:`conv2d`.

    ``conv3d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
    conv_mode='cross_correlation')``.
    """
    return _conv("conv3d", 3, inp, weight, bias, stride, padding, dilation, groups, "default",
                 conv_mode)


def _conv_transpose(name, nd, inp, weight, bias, stride, padding, output_padding, dilation, groups,
                    compute_mode, conv_mode):
    _check_conv_mode(name, conv_mode)
    op = ConvolutionBackwardData(_tuple(name, stride, nd), _tuple(name, padding, nd),
                                 _tuple(name, dilation, nd), int(groups),
                                 _tuple(name, output_padding, nd), compute_mode)
    return _add_bias(name, apply(op, weight, inp)[0], bias)


def conv_transpose2d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """2D transposed convolution (the gradient of :func:`conv2d` w.r.t. its input).

    ``conv_transpose2d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
    groups=1, conv_mode='cross_correlation', compute_mode='default')``.

    Args:
        inp: input ``(N, C, H, W)``.
        weight: ``(C, O, KH, KW)``; with ``groups > 1``, ``(groups, C/groups, O/groups, KH, KW)``.
        output_padding: extra rows/columns at the end of the output (smaller than the stride).

    Returns:
        ``(N, O, OH, OW)`` with ``OH = (H-1)*sh - 2*ph + dh*(KH-1) + output_padding + 1``.
    """
    return _conv_transpose("conv_transpose2d", 2, inp, weight, bias, stride, padding, output_padding,
                           dilation, groups, compute_mode, conv_mode)


def conv_transpose3d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """3D transposed convolution; the 3-D analogue of :func:`conv_transpose2d`.

    ``conv_transpose3d(inp, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
    groups=1)``.
    """
    return _conv_transpose("conv_transpose3d", 3, inp, weight, bias, stride, padding, output_padding,
                           dilation, groups, "default", "cross_correlation")


def linear(inp, weight, bias=None, compute_mode="default"):
    """``inp @ weight.T + bias``.

    ``linear(inp, weight, bias=None, compute_mode='default')``: ``inp`` is ``(..., in)``,
    ``weight`` ``(out, in)``, ``bias`` ``(out,)``.
    """
    shape = inp.shape
    if weight.ndim != 2 or shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input {shape} and weight {weight.shape} do not match "
                         f"(weight must be (out, {shape[-1]}))")
    x = inp if inp.ndim == 2 else _reshape(inp, (-1, shape[-1]))
    out = apply(MatrixMul.get(False, True, compute_mode), x, weight)[0]
    if inp.ndim != 2:
        out = _reshape(out, tuple(shape[:-1]) + (weight.shape[0],))
    return out if bias is None else out + bias


def embedding(inp, weight, padding_idx=None, max_norm=None, norm_type=None):
    """Rows of ``weight`` picked by the integer tensor ``inp``: shape ``inp.shape + (dim,)``.

    ``embedding(inp, weight, padding_idx=None, max_norm=None, norm_type=None)``; as in MegEngine,
    ``padding_idx``, ``max_norm`` and ``norm_type`` are not supported (``ValueError``).
    """
    if padding_idx is not None:
        raise ValueError("embedding: padding_idx is not supported")
    if max_norm is not None or norm_type is not None:
        raise ValueError("embedding: max_norm/norm_type (weight normalisation) is not supported")
    flat = _reshape(inp, (-1,))
    return _reshape(weight[flat], tuple(inp.shape) + (weight.shape[-1],))


# -- pooling -------------------------------------------------------------------------------------

def max_pool2d(inp, kernel_size, stride=None, padding=0):
    """2D max pooling of NCHW input.

    ``max_pool2d(inp, kernel_size, stride=None, padding=0)``: ``stride`` defaults to
    ``kernel_size``; the output size is ``(H + 2*padding - kernel) // stride + 1``.
    """
    k = _tuple("max_pool2d", kernel_size, 2)
    s = k if stride is None else _tuple("max_pool2d", stride, 2)
    return apply(Pooling("max", k, s, _tuple("max_pool2d", padding, 2)), inp)[0]


def avg_pool2d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding"):
    """2D average pooling of NCHW input.

    ``avg_pool2d(inp, kernel_size, stride=None, padding=0, mode='average_count_exclude_padding')``:
    with ``mode='average'`` padded zeros count in the divisor.
    """
    k = _tuple("avg_pool2d", kernel_size, 2)
    s = k if stride is None else _tuple("avg_pool2d", stride, 2)
    m = str(getattr(mode, "name", mode)).lower()
    if m not in ("average", "average_count_exclude_padding"):
        raise ValueError(f"avg_pool2d: mode must be 'average' or 'average_count_exclude_padding', "
                         f"got {mode!r}")
    return apply(Pooling(m, k, s, _tuple("avg_pool2d", padding, 2)), inp)[0]


def adaptive_max_pool2d(inp, oshp):
    """Max pooling of NCHW input to the spatial size ``oshp`` (an int or ``(OH, OW)``).

    ``adaptive_max_pool2d(inp, oshp)``: stride ``H // OH``, kernel ``H - (OH-1)*stride``.
    """
    return apply(AdaptivePooling("max", _tuple("adaptive_max_pool2d", oshp, 2)), inp)[0]


def adaptive_avg_pool2d(inp, oshp):
    """Average pooling of NCHW input to the spatial size ``oshp`` (an int or ``(OH, OW)``).

    ``adaptive_avg_pool2d(inp, oshp)``: stride ``H // OH``, kernel ``H - (OH-1)*stride``.
    """
    return apply(AdaptivePooling("average", _tuple("adaptive_avg_pool2d", oshp, 2)), inp)[0]


# -- normalisation -------------------------------------------------------------------------------

def _full(value, n, like):
    return Tensor(np.full((n,), value, like.dtype), device=like.device)


def batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *, training=False,
               momentum=0.9, eps=1e-5, inplace=True):
    """Batch normalisation over every axis but 1.

    ``batch_norm(inp, running_mean=None, running_var=None, weight=None, bias=None, *,
    training=False, momentum=0.9, eps=1e-05, inplace=True)``.

    With ``training=True`` the batch statistics normalise the input and the running statistics
    become ``running * momentum + batch * (1 - momentum)`` (the unbiased batch variance for
    ``running_var``): in place (``Tensor._reset``) when ``inplace``, else returned as
    ``(out, new_mean, new_var)`` (without running statistics, ``out`` alone).  With ``training=False`` the running statistics are used and
    must be given.  Parameters have shape ``(1, C, 1, 1)`` or ``(C,)``.
    """
    if inp.ndim < 2:
        raise ValueError(f"batch_norm: input must have at least 2 dims (N, C, ...), got {inp.shape}")
    c = inp.shape[1]
    weight = _full(1, c, inp) if weight is None else weight
    bias = _full(0, c, inp) if bias is None else bias
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var must be given when "
                             "training=False")
        return apply(BatchNorm("inference", eps), inp, weight, bias, running_mean, running_var)[0]
    out, mean, var = apply(BatchNorm("training", eps), inp, weight, bias)
    if running_mean is None and running_var is None:
        return out  # nothing to update: the output alone, inplace or not (as in MegEngine)
    n = inp.size // c
    new_mean = new_var = None
    if running_mean is not None:
        mean = apply(Detach(), mean)[0]
        mean = mean if mean.shape == running_mean.shape else _reshape(mean, running_mean.shape)
        new_mean = running_mean * momentum + mean * (1 - momentum)
    if running_var is not None:
        var = apply(Detach(), var)[0]
        var = var if var.shape == running_var.shape else _reshape(var, running_var.shape)
        new_var = running_var * momentum + var * ((1 - momentum) * n / max(n - 1, 1))
    if not inplace:
        return out, new_mean, new_var
    if new_mean is not None:
        running_mean._reset(new_mean)
    if new_var is not None:
        running_var._reset(new_var)
    return out


def sync_batch_norm(inp, running_mean, running_var, weight=None, bias=None, training=False,
                    momentum=0.9, eps=1e-5, eps_mode="additive", group=None):
    """Batch normalisation synchronised over a process group; with one process (the only case
    mge runs) it is :func:`batch_norm`.

    ``sync_batch_norm(inp, running_mean, running_var, weight=None, bias=None, training=False,
    momentum=0.9, eps=1e-05, eps_mode='additive', group=WORLD)``.
    """
    if eps_mode != "additive":
        raise NotImplementedError(f"sync_batch_norm: eps_mode={eps_mode!r} is not implemented")
    return batch_norm(inp, running_mean, running_var, weight, bias, training=training,
                      momentum=momentum, eps=eps)


def _norm(name, inp, start, end, affine, weight, bias, eps):
    if affine:
        if weight is None or bias is None:
            raise ValueError(f"{name}: weight and bias must be given when affine=True")
        return apply(LayerNorm(True, float(eps), start, end), inp, weight, bias)[0]
    return apply(LayerNorm(False, float(eps), start, end), inp)[0]


def layer_norm(inp, normalized_shape, affine, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift if ``affine``.

    ``layer_norm(inp, normalized_shape, affine, weight=None, bias=None, eps=1e-05)``: ``weight`` and
    ``bias`` have shape ``normalized_shape``.
    """
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    nd = len(normalized_shape)
    if nd == 0 or tuple(inp.shape[-nd:]) != normalized_shape or nd > inp.ndim:
        raise ValueError(f"layer_norm: normalized_shape {normalized_shape} does not match the "
                         f"trailing dims of the input {inp.shape}")
    return _norm("layer_norm", inp, -nd, None, affine, weight, bias, eps)


def general_norm(inp, normalized_axis, affine=True, weight=None, bias=None, eps=1e-5):
    """Normalise over the axes ``normalized_axis`` (sorted, any positions).

    ``general_norm(inp, normalized_axis, affine=True, weight=None, bias=None, eps=1e-05)``:
    ``weight`` and ``bias`` have the shape of those axes.
    """
    axes = [normalized_axis] if isinstance(normalized_axis, int) else list(normalized_axis)
    nd = inp.ndim
    axes = [a + nd if a < 0 else a for a in axes]
    if not axes or axes != sorted(set(axes)) or axes[-1] >= nd or axes[0] < 0:
        raise ValueError(f"general_norm: normalized_axis {normalized_axis} must be sorted, distinct "
                         f"axes of the {nd}-D input")
    if axes[-1] - axes[0] == len(axes) - 1:
        return _norm("general_norm", inp, axes[0], axes[-1] + 1, affine, weight, bias, eps)
    rest = [a for a in range(nd) if a not in axes]
    perm = tuple(rest + axes)
    x = apply(Dimshuffle(perm), inp)[0]
    y = _norm("general_norm", x, len(rest), None, affine, weight, bias, eps)
    return apply(Dimshuffle(tuple(int(i) for i in np.argsort(perm))), y)[0]


def group_norm(inp, num_groups, affine, weight=None, bias=None, eps=1e-5):
    """Normalise each group of ``C / num_groups`` channels of each sample.

    ``group_norm(inp, num_groups, affine, weight=None, bias=None, eps=1e-05)``: input
    ``(N, C, ...)``; ``weight`` and ``bias`` are per channel, shape ``(C,)``.
    """
    shape = tuple(inp.shape)
    if len(shape) < 2 or num_groups < 1 or shape[1] % num_groups:
        raise ValueError(f"group_norm: {num_groups} groups do not divide the channels of input "
                         f"{shape}")
    y = _norm("group_norm", _reshape(inp, (shape[0], num_groups, -1)), 2, None, False, None, None,
              eps)
    y = _reshape(y, shape)
    if affine:
        if weight is None or bias is None:
            raise ValueError("group_norm: weight and bias must be given when affine=True")
        y = y * _param_shape(weight, len(shape)) + _param_shape(bias, len(shape))
    return y


def instance_norm(inp, affine, weight=None, bias=None, eps=1e-5):
    """Normalise each channel of each sample over its spatial dims.

    ``instance_norm(inp, affine, weight=None, bias=None, eps=1e-05)``: ``weight``, ``bias``:
    ``(C,)``.
    """
    if inp.ndim < 2:
        raise ValueError(f"instance_norm: input must be (N, C, ...), got {inp.shape}")
    return group_norm(inp, inp.shape[1], affine, weight, bias, eps)


def local_response_norm(inp, kernel_size=5, k=2.0, alpha=1e-4, beta=0.75):
    """Local response normalisation across channels.

    ``local_response_norm(inp, kernel_size=5, k=2.0, alpha=0.0001, beta=0.75)``:
    ``y = x / (k + alpha * s) ** beta`` where ``s`` sums ``x**2`` over the ``kernel_size`` (odd)
    channels centred on each channel (as MegEngine's LRN).
    """
    n = int(kernel_size)
    if n < 1 or n % 2 == 0:
        raise ValueError(f"local_response_norm: kernel_size must be a positive odd int, got "
                         f"{kernel_size}")
    shape = tuple(inp.shape)
    if len(shape) < 2:
        raise ValueError(f"local_response_norm: input must be (N, C, ...), got {shape}")
    sq = _reshape(inp * inp, (shape[0], 1, shape[1], -1))
    s = apply(Pooling("average", (n, 1), (1, 1), (n // 2, 0)), sq)[0] * n
    s = _reshape(s, shape)
    return inp / (s * alpha + k) ** beta


# -- softmax family ------------------------------------------------------------------------------

def _softmax_axis(ndim):
    return 0 if ndim in (0, 1, 3) else 1


def _axis_arg(axis):
    return tuple(int(a) for a in axis) if isinstance(axis, (list, tuple)) else int(axis)


def softmax(inp, axis=None):
    """``exp(x) / sum(exp(x))`` along ``axis`` (max-shifted, so it does not overflow).

    ``softmax(inp, axis=None)``: without ``axis``, axis 0 for 0-, 1- and 3-D input, else axis 1
    (MegEngine's rule).
    """
    if axis is None:
        axis = _softmax_axis(inp.ndim)
    return apply(Softmax(_axis_arg(axis)), inp)[0]


def logsoftmax(inp, axis):
    """``x - logsumexp(x)`` along ``axis`` (an int or a sequence of ints), computed stably.

    ``logsoftmax(inp, axis)``.
    """
    return apply(LogSoftmax(_axis_arg(axis)), inp)[0]


log_softmax = logsoftmax


def logsumexp(inp, axis, keepdims=False):
    """``log(sum(exp(x)))`` along ``axis``, shifted by the maximum so it does not overflow.

    ``logsumexp(inp, axis, keepdims=False)``.
    """
    axis = _axis_arg(axis)
    m = apply(Reduce("max", axis, True), apply(Detach(), inp)[0])[0]
    e = apply(elemwise_op("exp"), inp - m)[0]
    out = apply(elemwise_op("log"), apply(Reduce("sum", axis, True), e)[0])[0] + m
    if keepdims:
        return out
    axes = axis if isinstance(axis, tuple) else (axis,)
    nd = inp.ndim
    return apply(RemoveAxis(tuple(sorted(a % nd for a in axes))), out)[0]


# -- activations ---------------------------------------------------------------------------------

def _act(mode, doc):
    op = elemwise_op(mode)

    def fn(x):
        return apply(op, x)[0]
    fn.__name__ = mode
    fn.__doc__ = doc
    return fn


relu = _act("relu", "``max(x, 0)``, elementwise.\n\n``relu(x)``.")
relu6 = _act("relu6", "``min(max(x, 0), 6)``, elementwise.\n\n``relu6(x)``.")
sigmoid = _act("sigmoid", "``1 / (1 + exp(-x))``, elementwise.\n\n``sigmoid(x)``.")
hsigmoid = _act("hsigmoid", "``relu6(x + 3) / 6``, elementwise.\n\n``hsigmoid(x)``.")
hswish = _act("hswish", "``x * relu6(x + 3) / 6``, elementwise.\n\n``hswish(x)``.")
gelu = _act("gelu", "``x * Phi(x)`` with ``Phi`` the standard normal CDF (exact, erf based).\n\n"
            "``gelu(x)``.")
silu = _act("silu", "``x * sigmoid(x)``, elementwise.\n\n``silu(x)``.")
_softplus = _act("softplus", "")
_logsigmoid = _act("logsigmoid", "")


def softplus(inp):
    """``log(1 + exp(x))``, computed without overflow.

    ``softplus(inp)``.
    """
    return _softplus(inp)


def logsigmoid(inp):
    """``log(sigmoid(x)) = -softplus(-x)``, computed without overflow.

    ``logsigmoid(inp)``.
    """
    return _logsigmoid(inp)


def prelu(x, y):
    """``x`` where positive, else ``x * y`` (``y`` broadcasts, e.g. a per-channel slope).

    ``prelu(x, y)``.
    """
    return apply(elemwise_op("max"), x, 0)[0] + apply(elemwise_op("min"), x, 0)[0] * y


def leaky_relu(inp, negative_slope=0.01):
    """``x`` where positive, else ``negative_slope * x``.

    ``leaky_relu(inp, negative_slope=0.01)``.
    """
    return prelu(inp, negative_slope)


# -- dropout, padding, one-hot -------------------------------------------------------------------

def _dropout_seed():
    # The mask's seed comes from the global RNG handle (0), the stream that ``mge.random.seed``
    # restarts, so that seeding makes dropout reproducible like every other random op.
    return next_seed(0)


def dropout(inp, drop_prob, training=True):
    """Zero each element with probability ``drop_prob`` and scale the rest by ``1/(1-drop_prob)``.

    ``dropout(inp, drop_prob, training=True)``: the identity when ``training`` is false or
    ``drop_prob`` is 0.  The mask is drawn from the global random stream, so
    :func:`mge.random.seed` makes it reproducible.

    Example::

        >>> import numpy as np
        >>> import mge
        >>> import mge.functional as F
        >>> x = mge.tensor(np.ones(6, "float32"))
        >>> mge.random.seed(7)
        >>> a = F.nn.dropout(x, 0.5).numpy()
        >>> mge.random.seed(7)
        >>> b = F.nn.dropout(x, 0.5).numpy()
        >>> bool((a == b).all()), sorted(set(a.tolist())) <= [0.0, 2.0]
        (True, True)
    """
    if not 0 <= drop_prob < 1:
        raise ValueError(f"dropout: drop_prob must be in [0, 1), got {drop_prob}")
    if not training or drop_prob == 0:
        return inp
    return apply(Dropout(float(drop_prob), _dropout_seed()), inp)[0]


def pad(src, pad_width, mode="constant", constant_value=0.0):
    """Pad the leading ``len(pad_width)`` axes of ``src``.

    ``pad(src, pad_width, mode='constant', constant_value=0.0)``: ``pad_width`` is a tuple of
    ``(before, after)`` pairs; ``mode`` is ``'constant'``, ``'reflect'`` (mirror without repeating
    the edge) or ``'replicate'``/``'edge'`` (repeat the edge).
    """
    if isinstance(pad_width, (int, np.integer)) or any(
            isinstance(p, (int, np.integer)) for p in pad_width):
        raise ValueError(f"pad: pad_width must be a tuple of (before, after) pairs, got {pad_width}")
    return apply(Pad(pad_width, mode, constant_value), src)[0]


def one_hot(inp, num_classes):
    """Integer labels to int32 one-hot vectors: shape ``inp.shape + (num_classes,)``.

    ``one_hot(inp, num_classes)``.
    """
    return apply(OneHot(int(num_classes)), inp)[0]


def indexing_one_hot(src, index, axis=1, keepdims=False):
    """``src`` picked along ``axis`` at the positions ``index`` (``src``'s shape without ``axis``).

    ``indexing_one_hot(src, index, axis=1, keepdims=False)``.
    """
    return apply(IndexingOneHot(int(axis), bool(keepdims)), src, index)[0]


def pixel_shuffle(inp, upscale_factor):
    """Rearrange ``(..., C*r*r, H, W)`` into ``(..., C, H*r, W*r)``.

    ``pixel_shuffle(inp, upscale_factor)``.
    """
    r = int(upscale_factor)
    shape = tuple(inp.shape)
    if len(shape) < 3 or r < 1 or shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: channels of input {shape} are not divisible by "
                         f"upscale_factor**2 = {r * r}")
    lead, (c, h, w) = shape[:-3], shape[-3:]
    x = _reshape(inp, (-1, c // (r * r), r, r, h, w))
    x = apply(Dimshuffle((0, 1, 4, 2, 5, 3)), x)[0]
    return _reshape(x, lead + (c // (r * r), h * r, w * r))


from .math import normalize  # noqa: F401,E402  (MegEngine's F.nn re-exports it from F.math)

from ._nn_extra import (  # noqa: E402,F401  (sliding windows, local/deformable/RR convolutions)
    deformable_conv2d, deformable_psroi_pooling, local_conv2d, region_restricted_conv,
    sliding_window, sliding_window_transpose,
)

from .attention import multi_head_attention  # noqa: E402,F401  (composed in its own file)
from .loss import *  # noqa: E402,F401,F403  (MegEngine: F.nn.cross_entropy and friends)
from .metric import *  # noqa: E402,F401,F403  (MegEngine: F.nn.topk_accuracy)
from .vision import *  # noqa: E402,F401,F403  (MegEngine: F.nn.remap, F.nn.interpolate, ...)
