"""Convolution modules: ``Conv1d``, ``Conv2d``, ``Conv3d``, ``ConvTranspose2d``,
``ConvTranspose3d``, the fused ``ConvRelu2d`` / ``ConvTransposeRelu2d`` and the locally connected
``LocalConv2d``.

Weights keep MegEngine's layouts (so state dicts load both ways): ``(O, I, *kernel)``, or
``(G, O/G, I/G, *kernel)`` with ``groups=G``; transposed convolutions swap ``O`` and ``I``.
Biases have shape ``(1, O, 1, ...)``.  Every weight starts as
:math:`\\mathcal{N}(0, 1/\\text{fan_in})` (``fan_in = in_channels * prod(kernel)``; for transposed
convolutions ``out_channels * prod(kernel)``) and every bias at zero, as in MegEngine 1.13.
"""
from abc import abstractmethod

import numpy as np

from ..functional.nn import conv1d, conv2d, conv3d, conv_transpose2d, conv_transpose3d, pad, relu
from ..tensor import Parameter
from . import init
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "ConvRelu2d",
           "ConvTransposeRelu2d", "LocalConv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate")


def _ntuple(owner, what, value, n, allow_zero):
    """``value`` (an int or ``n`` ints) as a tuple of ``n`` ints, each >= 0 (>= 1 unless
    ``allow_zero``)."""
    if isinstance(value, (int, np.integer)):
        value = (int(value),) * n
    else:
        value = tuple(int(v) for v in value)
        if len(value) != n:
            raise ValueError(f"{owner}: {what} must be an int or {n} ints, got {value}")
    low = 0 if allow_zero else 1
    if min(value) < low:
        raise ValueError(f"{owner}: {what} must be >= {low}, got {value}")
    return value


def _spatial_args(owner, n, kernel_size, stride, padding, dilation):
    """``kernel_size``, ``stride``, ``padding`` and ``dilation`` as tuples of ``n`` ints, checked
    (only ``padding`` may be 0)."""
    return (_ntuple(owner, "kernel_size", kernel_size, n, False),
            _ntuple(owner, "stride", stride, n, False),
            _ntuple(owner, "padding", padding, n, True),
            _ntuple(owner, "dilation", dilation, n, False))


def _check_padding_mode(owner, padding_mode):
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"{owner}: padding_mode must be one of {_PADDING_MODES}, got "
                         f"{padding_mode!r}")


def _padded_input(module, owner, inp):
    """``(inp, padding)`` for the convolution of ``module`` (a ``Conv1d``/``Conv2d``): with a
    ``padding_mode`` other than ``"zeros"``, ``inp`` is padded here by :func:`pad` and the
    convolution itself pads nothing."""
    _check_padding_mode(owner, module.padding_mode)
    if module.padding_mode == "zeros":
        return inp, module.padding
    return pad(inp, module.get_pad_witdth(), module.padding_mode), 0


class _ConvNd(Module):
    """Base of the convolution modules: checks the channels, makes and initialises the
    parameters."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding,
                 dilation, groups, bias=True, **kwargs):
        super().__init__(**kwargs)
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.output_padding = output_padding
        self.dilation = dilation
        self.groups = groups
        self.weight = Parameter(np.zeros(self._infer_weight_shape(), dtype=np.float32))
        self.bias = None
        if bias:
            self.bias = Parameter(np.zeros(self._infer_bias_shape(), dtype=np.float32))
        self.reset_parameters()

    @abstractmethod
    def _get_fanin(self):
        pass

    @abstractmethod
    def _infer_weight_shape(self):
        pass

    @abstractmethod
    def _infer_bias_shape(self):
        pass

    def reset_parameters(self):
        """Draw ``weight`` from :math:`\\mathcal{N}(0, 1/\\text{fan_in})`; zero ``bias``."""
        init.normal_(self.weight, 0.0, np.sqrt(1 / self._get_fanin()))
        if self.bias is not None:
            init.zeros_(self.bias)

    def _grouped_shape(self, first, second, kernel):
        g = self.groups
        if g == 1:
            return (first, second) + kernel
        return (g, first // g, second // g) + kernel

    def _module_info_string(self):
        def as_tuple(v):
            return v if isinstance(v, tuple) else (v,)

        stride, padding, dilation = (as_tuple(v) for v in (self.stride, self.padding,
                                                           self.dilation))
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}"
        if stride != (1,) * len(stride):
            s += ", stride={stride}"
        if padding != (0,) * len(padding):
            s += ", padding={padding}"
        if dilation != (1,) * len(dilation):
            s += ", dilation={dilation}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        return s.format(**self.__dict__)


class Conv1d(_ConvNd):
    r"""1D convolution over ``(N, C_in, L)`` input.

    Args:
        in_channels: number of input channels.
        out_channels: number of output channels.
        kernel_size: size of the kernel (an int).
        stride: stride. Default: 1
        padding: padding added on both sides. Default: 0
        dilation: dilation. Default: 1
        groups: number of channel groups; ``in_channels`` and ``out_channels`` must be divisible
            by it. Default: 1
        bias: whether to add a learnt bias. Default: ``True``
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``.
        padding_mode: ``"zeros"``, ``"reflect"`` or ``"replicate"``. Default: ``"zeros"``

    ``weight`` is ``(out_channels, in_channels, kernel_size)``, or
    ``(groups, out_channels // groups, in_channels // groups, kernel_size)`` when grouped
    (MegEngine's layout; unlike MegEngine 1.13, grouped ``Conv1d`` runs).

    Example:
        >>> import mge, mge.module as M
        >>> m = M.Conv1d(in_channels=3, out_channels=1, kernel_size=3)
        >>> m(mge.tensor(np.arange(24, dtype="float32").reshape(2, 3, 4))).shape
        (2, 1, 2)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros", **kwargs):
        kernel_size, stride, padding, dilation = (
            v[0] for v in _spatial_args("Conv1d", 1, kernel_size, stride, padding, dilation))
        _check_padding_mode("Conv1d", padding_mode)
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 0, dilation,
                         groups, bias, **kwargs)

    def _get_fanin(self):
        return self.kernel_size * self.in_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.out_channels, self.in_channels, (self.kernel_size,))

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1)

    def get_pad_witdth(self):
        """The ``pad_width`` for :func:`~mge.functional.nn.pad` (MegEngine's spelling)."""
        return ((0, 0), (0, 0), (self.padding, self.padding))

    def calc_conv(self, inp, weight, bias):
        inp, padding = _padded_input(self, "Conv1d", inp)
        if weight.ndim == 4:
            # F.conv1d takes the grouped weight flat, as (O, I/G, K).
            weight = weight.reshape(self.out_channels, -1, self.kernel_size)
        return conv1d(inp, weight, bias, self.stride, padding, self.dilation, self.groups,
                      self.conv_mode, self.compute_mode)

    def forward(self, inp):
        return self.calc_conv(inp, self.weight, self.bias)


class Conv2d(_ConvNd):
    r"""2D convolution (cross-correlation) over ``(N, C_in, H, W)`` input.

    Args:
        in_channels: number of input channels.
        out_channels: number of output channels.
        kernel_size: an int or ``(kh, kw)``.
        stride: an int or a pair. Default: 1
        padding: zero padding on both sides, an int or a pair. Default: 0
        dilation: an int or a pair. Default: 1
        groups: number of channel groups. Default: 1
        bias: whether to add a learnt bias. Default: ``True``
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``.
        padding_mode: ``"zeros"``, ``"reflect"`` or ``"replicate"``. Default: ``"zeros"``

    The output is ``(N, C_out, H_out, W_out)`` with
    :math:`H_{out} = \lfloor (H + 2p_h - d_h (k_h - 1) - 1) / s_h \rfloor + 1`.
    ``weight`` is ``(out_channels, in_channels, kh, kw)``, or
    ``(groups, out_channels // groups, in_channels // groups, kh, kw)``; ``bias`` is
    ``(1, out_channels, 1, 1)``.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.Conv2d(in_channels=3, out_channels=1, kernel_size=3)
        >>> m(mge.tensor(np.arange(96, dtype="float32").reshape(2, 3, 4, 4))).shape
        (2, 1, 2, 2)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros", **kwargs):
        kernel_size, stride, padding, dilation = _spatial_args(
            "Conv2d", 2, kernel_size, stride, padding, dilation)
        _check_padding_mode("Conv2d", padding_mode)
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 0, dilation,
                         groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.out_channels, self.in_channels, self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1)

    def get_pad_witdth(self):
        """The ``pad_width`` for :func:`~mge.functional.nn.pad` (MegEngine's spelling)."""
        ph, pw = self.padding
        return ((0, 0), (0, 0), (ph, ph), (pw, pw))

    def calc_conv(self, inp, weight, bias):
        inp, padding = _padded_input(self, "Conv2d", inp)
        return conv2d(inp, weight, bias, self.stride, padding, self.dilation, self.groups,
                      self.conv_mode, self.compute_mode)

    def forward(self, inp):
        return self.calc_conv(inp, self.weight, self.bias)


class Conv3d(_ConvNd):
    r"""3D convolution over ``(N, C_in, T, H, W)`` input; arguments as :class:`Conv2d` with
    triples (no ``compute_mode`` or ``padding_mode``).

    ``weight`` is ``(out_channels, in_channels, kt, kh, kw)``, or
    ``(groups, out_channels // groups, in_channels // groups, kt, kh, kw)``.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.Conv3d(in_channels=3, out_channels=1, kernel_size=3)
        >>> m(mge.tensor(np.zeros((2, 3, 4, 4, 4), "float32"))).shape
        (2, 1, 2, 2, 2)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", **kwargs):
        kernel_size, stride, padding, dilation = _spatial_args(
            "Conv3d", 3, kernel_size, stride, padding, dilation)
        self.conv_mode = conv_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 0, dilation,
                         groups, bias, **kwargs)

    def _get_fanin(self):
        kt, kh, kw = self.kernel_size
        return kt * kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.out_channels, self.in_channels, self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1, 1)

    def calc_conv(self, inp, weight, bias):
        return conv3d(inp, weight, bias, self.stride, self.padding, self.dilation, self.groups,
                      self.conv_mode)

    def forward(self, inp):
        return self.calc_conv(inp, self.weight, self.bias)


class ConvTranspose2d(_ConvNd):
    r"""2D transposed convolution (the gradient of :class:`Conv2d` with respect to its input),
    which maps a small input to a larger output.

    Args:
        in_channels: number of input channels.
        out_channels: number of output channels.
        kernel_size: an int or ``(kh, kw)``.
        stride: an int or a pair. Default: 1
        padding: an int or a pair. Default: 0
        output_padding: extra size at the end of the output, an int or a pair. Default: 0
        dilation: an int or a pair. Default: 1
        groups: number of channel groups. Default: 1
        bias: whether to add a learnt bias. Default: ``True``
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``.

    ``weight`` is ``(in_channels, out_channels, kh, kw)``, or
    ``(groups, in_channels // groups, out_channels // groups, kh, kw)``.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.ConvTranspose2d(in_channels=2, out_channels=3, kernel_size=3, stride=2)
        >>> m(mge.tensor(np.zeros((1, 2, 4, 4), "float32"))).shape
        (1, 3, 9, 9)
    """

    output_padding = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, groups=1, bias=True,
                 conv_mode="cross_correlation", compute_mode="default", **kwargs):
        name = type(self).__name__
        kernel_size, stride, padding, dilation = _spatial_args(
            name, 2, kernel_size, stride, padding, dilation)
        output_padding = _ntuple(name, "output_padding", output_padding, 2, True)
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                         dilation, groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.out_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.in_channels, self.out_channels, self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1)

    def calc_conv_transpose2d(self, inp, weight, bias):
        return conv_transpose2d(inp, weight, bias, self.stride, self.padding, self.output_padding,
                                self.dilation, self.groups, self.conv_mode, self.compute_mode)

    def forward(self, inp):
        return self.calc_conv_transpose2d(inp, self.weight, self.bias)


class ConvTranspose3d(_ConvNd):
    r"""3D transposed convolution; arguments as :class:`ConvTranspose2d` with triples (no
    ``conv_mode`` or ``compute_mode``).

    ``weight`` is ``(in_channels, out_channels, kt, kh, kw)``, or
    ``(groups, in_channels // groups, out_channels // groups, kt, kh, kw)``.  As in MegEngine
    1.13, ``fan_in`` for the initialisation is ``in_channels * prod(kernel)``.
    """

    output_padding = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, groups=1, bias=True, **kwargs):
        kernel_size, stride, padding, dilation = _spatial_args(
            "ConvTranspose3d", 3, kernel_size, stride, padding, dilation)
        output_padding = _ntuple("ConvTranspose3d", "output_padding", output_padding, 3, True)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding,
                         dilation, groups, bias, **kwargs)

    def _get_fanin(self):
        kt, kh, kw = self.kernel_size
        return kt * kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.in_channels, self.out_channels, self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1, 1)

    def forward(self, inp):
        return conv_transpose3d(inp, self.weight, self.bias, self.stride, self.padding,
                                self.output_padding, self.dilation, self.groups)


class ConvRelu2d(Conv2d):
    """:class:`Conv2d` followed by :func:`~mge.functional.relu` (MegEngine's fused module)."""

    def forward(self, inp):
        return relu(self.calc_conv(inp, self.weight, self.bias))


class ConvTransposeRelu2d(ConvTranspose2d):
    """:class:`ConvTranspose2d` followed by :func:`~mge.functional.relu`."""

    def forward(self, inp):
        return relu(self.calc_conv_transpose2d(inp, self.weight, self.bias))


def _local_conv2d(inp, weight, stride, padding, dilation):
    """The locally connected convolution, composed of differentiable ops: every output position
    ``(oh, ow)`` has its own kernel ``weight[g, oh, ow]`` of shape ``(IC/G, KH, KW, OC/G)``.

    ``inp`` is ``(N, IC, H, W)``, ``weight`` ``(G, OH, OW, IC/G, KH, KW, OC/G)`` (or the same
    without ``G``); the output is ``(N, OC, OH, OW)``.
    """
    from ..functional import matmul, reshape, stack, transpose
    if weight.ndim == 6:
        weight = weight.reshape((1,) + tuple(weight.shape))
    if inp.ndim != 4 or weight.ndim != 7:
        raise ValueError(f"LocalConv2d: expected a 4-d input and a 6-d or 7-d weight, got "
                         f"input {tuple(inp.shape)} and weight {tuple(weight.shape)}")
    n, c, h, w = (int(s) for s in inp.shape)
    g, oh, ow, icg, kh, kw, ocg = (int(s) for s in weight.shape)
    if c != g * icg:
        raise ValueError(f"LocalConv2d: the input has {c} channels, the weight "
                         f"{tuple(weight.shape)} expects {g * icg}")
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if ph or pw:
        inp = pad(inp, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        h, w = h + 2 * ph, w + 2 * pw
    if (h - dh * (kh - 1) - 1) // sh + 1 < oh or (w - dw * (kw - 1) - 1) // sw + 1 < ow:
        raise ValueError(f"LocalConv2d: a {h}x{w} (padded) input has fewer output positions "
                         f"than the weight's {oh}x{ow}")
    # patches: one (N, C, OH, OW) slice per kernel offset -> (N, C, KH, KW, OH, OW)
    taps = [inp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]
    patches = reshape(stack(taps, axis=2), (n, g, icg * kh * kw, oh * ow))
    # (G*OH*OW, N, ICg*KH*KW) @ (G*OH*OW, ICg*KH*KW, OCg) -> (G*OH*OW, N, OCg)
    patches = reshape(transpose(patches, (1, 3, 0, 2)), (g * oh * ow, n, icg * kh * kw))
    kernels = reshape(weight, (g * oh * ow, icg * kh * kw, ocg))
    out = matmul(patches, kernels)
    out = transpose(reshape(out, (g, oh, ow, n, ocg)), (3, 0, 4, 1, 2))
    return reshape(out, (n, g * ocg, oh, ow))


class LocalConv2d(Conv2d):
    r"""A locally connected layer: a 2D convolution whose kernel is different at every output
    position (untied weights), over ``(N, C_in, input_height, input_width)`` input.

    Args:
        in_channels, out_channels: numbers of channels.
        input_height, input_width: the input's spatial size (the weight has one kernel per
            output position).
        kernel_size, stride, padding, dilation, groups: as for :class:`Conv2d` (zero padding).
        conv_mode: only ``"cross_correlation"``.

    ``weight`` is ``(groups, out_height, out_width, in_channels // groups, kh, kw,
    out_channels // groups)`` with ``out_height = (input_height + 2 * ph - kh) // sh + 1`` (the
    weight's size ignores the dilation, as MegEngine's does); there is no bias.
    """

    def __init__(self, in_channels, out_channels, input_height, input_width, kernel_size,
                 stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation",
                 **kwargs):
        self.input_height = input_height
        self.input_width = input_width
        if str(conv_mode).lower() != "cross_correlation":
            raise ValueError(f"LocalConv2d: conv_mode must be 'cross_correlation', got "
                             f"{conv_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias=False, conv_mode=conv_mode, **kwargs)

    def _infer_weight_shape(self):
        g = self.groups
        oh = (self.input_height + self.padding[0] * 2 - self.kernel_size[0]) // self.stride[0] + 1
        ow = (self.input_width + self.padding[1] * 2 - self.kernel_size[1]) // self.stride[1] + 1
        return (g, oh, ow, self.in_channels // g, self.kernel_size[0], self.kernel_size[1],
                self.out_channels // g)

    def forward(self, inp):
        return _local_conv2d(inp, self.weight, self.stride, self.padding, self.dilation)
