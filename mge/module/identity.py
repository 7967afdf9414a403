"""``Identity``."""
from ..functional.tensor import copy
from .module import Module

__all__ = ["Identity"]


class Identity(Module):
    r"""Returns (a copy of) its input: a placeholder where a layer is optional.

    Example:
        >>> import mge, mge.module as M
        >>> M.Identity()(mge.tensor([1.0, 2.0])).numpy()
        array([1., 2.], dtype=float32)
    """

    def forward(self, x):
        return copy(x)
