"""Small modules over single functions: ``Elemwise``, ``Concat``, ``Pad`` and ``PixelShuffle``
(MegEngine has them so that quantization can swap them; here they are plain wrappers)."""
from ..core import apply
from .._core.ops import ELEMWISE_MODES, elemwise_op
from ..functional.nn import pad, pixel_shuffle
from ..functional.tensor import concat
from .module import Module

__all__ = ["Elemwise", "Concat", "Pad", "PixelShuffle"]


class Elemwise(Module):
    r"""The elementwise op ``method`` (MegEngine's mode names, any case: ``"add"``,
    ``"fuse_add_relu"``, ``"relu"``, ``"h_swish"``, ``"fuse_mul_add3"``...) on the inputs.

    Modes mge has a kernel for run directly; MegEngine's other names (``H_SWISH``,
    ``NEGATE``, the ``FUSE_*`` compositions...) go through MegEngine's ``Elemwise`` op of
    ``megengine.core.ops.builtin``, which maps them onto mge's kernels.

    Example:
        >>> import mge, mge.module as M
        >>> M.Elemwise("fuse_add_relu")(mge.tensor([1.0, -3.0]), mge.tensor([1.0, 1.0])).numpy()
        array([2., 0.], dtype=float32)
    """

    def __init__(self, method, **kwargs):
        super().__init__(**kwargs)
        self.method = method

    def forward(self, *inps):
        mode = str(self.method).lower()
        if mode in ELEMWISE_MODES:
            return apply(elemwise_op(mode), *inps)[0]
        from ..core._imperative_rt.core2 import apply as apply_builtin
        from ..core.ops.builtin import Elemwise as BuiltinElemwise
        try:
            op = BuiltinElemwise(mode=mode.upper())
        except ValueError as exc:
            raise ValueError(f"Elemwise: unknown method {self.method!r} ({exc})") from None
        return apply_builtin(op, *inps)[0]


class Concat(Module):
    r""":func:`~mge.functional.concat` as a module: ``Concat()(inps, axis=0)``."""

    def forward(self, inps, axis=0):
        return concat(inps, axis)


class Pad(Module):
    r"""Pads the input (see :func:`~mge.functional.nn.pad`).

    Args:
        pad_width: a tuple of ``(before, after)`` pairs, one per leading axis.
        mode: ``"constant"``, ``"reflect"`` or ``"replicate"``. Default: ``"constant"``
        constant_val: the fill value for ``"constant"``. Default: 0

    Example:
        >>> import mge, mge.module as M
        >>> M.Pad(pad_width=((1, 1),), constant_val=9)(mge.tensor([[1.0, 2.0]])).numpy()
        array([[9., 9.],
               [1., 2.],
               [9., 9.]], dtype=float32)
    """

    def __init__(self, pad_width, mode="constant", constant_val=0.0, **kwargs):
        super().__init__(**kwargs)
        self.pad_width = pad_width
        self.mode = mode
        self.pad_val = constant_val

    def forward(self, src):
        return pad(src, pad_width=self.pad_width, mode=self.mode, constant_value=self.pad_val)


class PixelShuffle(Module):
    r"""Rearranges ``(*, C * r^2, H, W)`` into ``(*, C, H * r, W * r)`` with
    ``r = upscale_factor``."""

    def __init__(self, upscale_factor, **kwargs):
        super().__init__(**kwargs)
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return pixel_shuffle(x, self.upscale_factor)
