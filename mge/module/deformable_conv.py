"""``DeformableConv2d`` and ``RegionRestrictedConv`` (in MegEngine's ``module.conv``; re-exported
there by mge too)."""
from ..functional.nn import deformable_conv2d, region_restricted_conv
from .conv import _ConvNd, _check_padding_mode, _spatial_args

__all__ = ["DeformableConv2d", "RegionRestrictedConv"]


class DeformableConv2d(_ConvNd):
    r"""Deformable (modulated) 2D convolution: ``forward(inp, offset, mask)`` (see
    :func:`~mge.functional.nn.deformable_conv2d` for the layouts of ``offset`` and ``mask``).

    Args:
        in_channels, out_channels: numbers of channels.
        kernel_size: an int or ``(kh, kw)``.
        stride, padding, dilation: ints or pairs (zero padding). Defaults: 1, 0, 1
        groups: channel groups. Default: 1
        bias: whether to add a learnt bias. Default: ``True``
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``.

    ``weight`` is ``(out_channels, in_channels, kh, kw)`` or, with groups,
    ``(groups, out_channels // groups, in_channels // groups, kh, kw)``, drawn from
    :math:`\mathcal{N}(0, 1/(kh \cdot kw \cdot in\_channels))`; ``bias`` is
    ``(1, out_channels, 1, 1)``, zero.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 **kwargs):
        kernel_size, stride, padding, dilation = _spatial_args(
            "DeformableConv2d", 2, kernel_size, stride, padding, dilation)
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 0, dilation,
                         groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.in_channels

    def _infer_weight_shape(self):
        return self._grouped_shape(self.out_channels, self.in_channels, self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1)

    def calc_conv(self, inp, weight, offset, mask, bias):
        """The deformable convolution of ``inp`` with the given parameters."""
        return deformable_conv2d(inp, weight, offset, mask, bias, self.stride, self.padding,
                                 self.dilation, self.groups, self.conv_mode, self.compute_mode)

    def forward(self, inp, offset, mask):
        return self.calc_conv(inp, self.weight, offset, mask, self.bias)


class RegionRestrictedConv(_ConvNd):
    r"""Region-restricted 2D convolution: ``forward(inp, rin, rout)`` with integer region maps
    ``rin`` ``(N, H, W)`` and ``rout`` ``(N, OH, OW)`` (see
    :func:`~mge.functional.nn.region_restricted_conv`).

    Args:
        in_channels, out_channels: numbers of channels.
        kernel_size: an int or ``(kh, kw)``.
        groups: channel groups. Default: 1
        bias: whether to add a learnt bias. Default: ``True``
        stride, padding, dilation: ints or pairs. Defaults: 1, 0, 1
        conv_mode: only ``"cross_correlation"``.
        compute_mode: ``"default"`` or ``"float32"``.
        padding_mode: ``"zeros"``, ``"reflect"`` or ``"replicate"`` (checked; the convolution
            pads with zeros, as MegEngine's does).

    ``weight`` is always grouped: ``(groups, out_channels // groups, in_channels // groups, kh,
    kw)``, drawn from :math:`\mathcal{N}(0, 1/(kh \cdot kw \cdot in\_channels))`; ``bias`` is
    ``(1, out_channels, 1, 1)``, zero.

    Example:
        >>> import mge, mge.module as M
        >>> rrconv = M.RegionRestrictedConv(in_channels=2, out_channels=2, kernel_size=2, groups=2)
        >>> inp = mge.tensor(np.random.randn(1, 2, 2, 2).astype(np.float32))
        >>> rin = mge.tensor(np.zeros((1, 2, 2), np.int32))
        >>> rout = mge.tensor(np.zeros((1, 1, 1), np.int32))
        >>> rrconv(inp, rin, rout).shape
        (1, 2, 1, 1)
    """

    def __init__(self, in_channels, out_channels, kernel_size, groups=1, bias=True, stride=1,
                 padding=0, dilation=1, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros", **kwargs):
        kernel_size, stride, padding, dilation = _spatial_args(
            "RegionRestrictedConv", 2, kernel_size, stride, padding, dilation)
        _check_padding_mode("RegionRestrictedConv", padding_mode)
        self.conv_mode = conv_mode
        self.compute_mode = compute_mode
        self.padding_mode = padding_mode
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, 0, dilation,
                         groups, bias, **kwargs)

    def _get_fanin(self):
        kh, kw = self.kernel_size
        return kh * kw * self.in_channels

    def _infer_weight_shape(self):
        g = self.groups
        return (g, self.out_channels // g, self.in_channels // g) + tuple(self.kernel_size)

    def _infer_bias_shape(self):
        return (1, self.out_channels, 1, 1)

    def get_pad_width(self):
        """The ``pad_width`` of this convolution's padding (MegEngine's name)."""
        ph, pw = self.padding
        return ((0, 0), (0, 0), (ph, ph), (pw, pw))

    def calc_conv(self, inp, weight, rin, rout, bias):
        """The region-restricted convolution of ``inp`` with the given parameters."""
        return region_restricted_conv(inp, weight, rin, rout, bias, self.stride, self.padding,
                                      self.dilation, self.groups, self.conv_mode,
                                      self.compute_mode)

    def forward(self, inp, rin, rout):
        return self.calc_conv(inp, self.weight, rin, rout, self.bias)
