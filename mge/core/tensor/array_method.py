"""``mge.core.tensor.array_method``: the helpers behind ``Tensor``'s operators (MegEngine's
``_elwise``, ``_matmul``, ``ArrayMethodMixin``), over mge's ops."""
import abc

from ..ops import builtin
from ..ops.builtin import apply
from ...tensor import Tensor

__all__ = ["ArrayMethodMixin", "_elwise", "_elwise_apply", "_matmul", "_elemwise_multi_type"]


def _elwise_apply(args, mode):
    """Apply ``Elemwise(mode)`` to ``args`` (a sequence); returns the one output."""
    return apply(builtin.Elemwise(mode=mode), *args)[0]


def _elwise(*args, mode):
    """``Elemwise(mode)`` of ``args``; ``mode`` is an ``Elemwise.Mode`` or its name."""
    return _elwise_apply(args, mode)


def _matmul(inp1, inp2, transpose_a=False, transpose_b=False, compute_mode="default"):
    """Matrix product with numpy's broadcasting rules (``F.matmul``)."""
    from ... import functional as F
    return F.matmul(inp1, inp2, transpose_a=transpose_a, transpose_b=transpose_b,
                    compute_mode=compute_mode)


def _elemwise_multi_type(*args, mode, **kwargs):
    """MegEngine's quantized elementwise ops (``ElemwiseMultiType``'s ``q*`` modes), as
    ``mge.functional.quantized._elemwise_multi_type``."""
    from ...functional.quantized import _elemwise_multi_type as impl
    return impl(*args, mode=mode, **kwargs)


class ArrayMethodMixin(abc.ABC):
    """The array interface of ``Tensor`` (MegEngine's mixin); ``isinstance(t, ArrayMethodMixin)``
    holds for mge's tensors."""


ArrayMethodMixin.register(Tensor)
