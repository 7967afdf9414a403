"""``SlidingWindow`` and ``SlidingWindowTranspose`` (MegEngine's ``module.sliding_window``)."""
from ..functional.nn import sliding_window, sliding_window_transpose
from .module import Module

__all__ = ["SlidingWindow", "SlidingWindowTranspose"]


class SlidingWindow(Module):
    r"""Copy every sliding window of an ``(N, C, IH, IW)`` input to its own output location:
    the output is ``(N, C, OH, OW, window_h, window_w)`` (see
    :func:`~mge.functional.nn.sliding_window`), with
    :math:`out_{n, c, oh, ow, wh, ww} =
    src_{n, c, ih + wh \cdot dilation_h, iw + ww \cdot dilation_w}`,
    :math:`ih = -pad_h + oh \cdot stride_h` (zero outside the input).

    Args:
        kernel_size: the window size, an int or a pair.
        padding: zero padding on both sides. Default: 0
        stride: stride of the window. Default: 1
        dilation: dilation of the window. Default: 1

    Example:
        >>> import mge, mge.module as M
        >>> inp = mge.tensor(np.arange(30).reshape(1, 1, 5, 6))
        >>> M.SlidingWindow(kernel_size=3, padding=1, stride=2, dilation=2)(inp).shape
        (1, 1, 2, 2, 3, 3)
    """

    def __init__(self, kernel_size, padding=0, stride=1, dilation=1, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.dilation = dilation

    def forward(self, inp):
        return sliding_window(inp, self.kernel_size, self.padding, self.stride, self.dilation)


class SlidingWindowTranspose(Module):
    r"""The opposite of :class:`SlidingWindow`: sum every element of an
    ``(N, C, IH, IW, window_h, window_w)`` input back onto its location in an
    ``(N, C, *output_size)`` output (see :func:`~mge.functional.nn.sliding_window_transpose`).
    ``IH`` and ``IW`` must be the number of windows ``output_size`` gives:
    :math:`IH = \lfloor (output\_size_h + 2 padding_h - dilation_h (kernel\_size_h - 1) - 1) /
    stride_h \rfloor + 1`.

    Args:
        output_size: the output's spatial size, an int or a pair.
        kernel_size: the window size.
        padding: zero padding on both sides. Default: 0
        stride: stride of the window. Default: 1
        dilation: dilation of the window. Default: 1
    """

    def __init__(self, output_size, kernel_size, padding=0, stride=1, dilation=1, **kwargs):
        super().__init__(**kwargs)
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.dilation = dilation

    def forward(self, inp):
        return sliding_window_transpose(inp, self.output_size, self.kernel_size, self.padding,
                                        self.stride, self.dilation)
