"""Pooling: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveMaxPool2d``, ``AdaptiveAvgPool2d``."""
from abc import abstractmethod

from ..functional.nn import adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, max_pool2d
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveMaxPool2d", "AdaptiveAvgPool2d"]


class _PoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.stride = stride or kernel_size
        self.padding = padding

    @abstractmethod
    def forward(self, inp):
        pass

    def _module_info_string(self):
        return "kernel_size={kernel_size}, stride={stride}, padding={padding}".format(
            **self.__dict__)


class MaxPool2d(_PoolNd):
    r"""2D max pooling of ``(N, C, H, W)`` input.

    Args:
        kernel_size: the window, an int or ``(kh, kw)``.
        stride: the window's step; ``kernel_size`` when ``None``. Default: ``None``
        padding: implicit padding on both sides (never the maximum). Default: 0

    Example:
        >>> import mge, mge.module as M
        >>> m = M.MaxPool2d(kernel_size=3, stride=1, padding=0)
        >>> m(mge.tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy()
        array([[[[10., 11.],
                 [14., 15.]]]], dtype=float32)
    """

    def forward(self, inp):
        return max_pool2d(inp, self.kernel_size, self.stride, self.padding)


class AvgPool2d(_PoolNd):
    r"""2D average pooling of ``(N, C, H, W)`` input.

    Args:
        kernel_size: the window, an int or ``(kh, kw)``.
        stride: the window's step; ``kernel_size`` when ``None``. Default: ``None``
        padding: implicit zero padding on both sides. Default: 0
        mode: ``"average_count_exclude_padding"`` (padded zeros do not count in the divisor) or
            ``"average"`` (they do). Default: ``"average_count_exclude_padding"``

    Example:
        >>> import mge, mge.module as M
        >>> m = M.AvgPool2d(kernel_size=2, stride=2, padding=[1, 0], mode="average")
        >>> m(mge.tensor(np.arange(12, dtype="float32").reshape(1, 1, 3, 4))).numpy()
        array([[[[0.25, 1.25],
                 [6.5 , 8.5 ]]]], dtype=float32)
    """

    def __init__(self, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding",
                 **kwargs):
        super().__init__(kernel_size, stride, padding, **kwargs)
        self.mode = mode

    def forward(self, inp):
        return avg_pool2d(inp, self.kernel_size, self.stride, self.padding, self.mode)

    def _module_info_string(self):
        return ("kernel_size={kernel_size}, stride={stride}, padding={padding}, "
                "mode={mode}").format(**self.__dict__)


class _AdaptivePoolNd(Module):
    def __init__(self, oshp, **kwargs):
        super().__init__(**kwargs)
        self.oshp = oshp

    @abstractmethod
    def forward(self, inp):
        pass


class AdaptiveMaxPool2d(_AdaptivePoolNd):
    r"""2D max pooling of ``(N, C, H, W)`` input to the spatial size ``oshp`` (an int or
    ``(OH, OW)``): stride ``H // OH``, window ``H - (OH - 1) * stride``, no padding.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.AdaptiveMaxPool2d((2, 2))
        >>> m(mge.tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy()
        array([[[[ 5.,  7.],
                 [13., 15.]]]], dtype=float32)
    """

    def forward(self, inp):
        return adaptive_max_pool2d(inp, self.oshp)


class AdaptiveAvgPool2d(_AdaptivePoolNd):
    r"""2D average pooling of ``(N, C, H, W)`` input to the spatial size ``oshp`` (an int or
    ``(OH, OW)``): stride ``H // OH``, window ``H - (OH - 1) * stride``, no padding.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.AdaptiveAvgPool2d((2, 2))
        >>> m(mge.tensor(np.arange(16, dtype="float32").reshape(1, 1, 4, 4))).numpy()
        array([[[[ 2.5,  4.5],
                 [10.5, 12.5]]]], dtype=float32)
    """

    def forward(self, inp):
        return adaptive_avg_pool2d(inp, self.oshp)
