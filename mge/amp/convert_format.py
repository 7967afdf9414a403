"""``convert_module_format`` and ``convert_tensor_format``: mark NCHW tensors as NHWC
(MegEngine 1.13's ``megengine.amp.convert_format``).

MegEngine stores a tensor marked ``"nhwc"`` in NHWC memory order while it keeps reporting the
logical NCHW shape, and its formatted-tensor transformation passes the mark on to op outputs.
mge keeps every tensor in its logical layout and ``Tensor.format`` is a label (see
docs/differences.rst): converting sets the label on 4-d and 5-d tensors, shapes and values are
unchanged, and op outputs do not inherit the label.
"""
from copy import deepcopy

from ..module import Module
from ..tensor import Tensor

__all__ = ["convert_module_format", "convert_tensor_format"]


def _is_nchw_format(x):
    return x.ndim in (4, 5) and x.format != "nhwc"


def convert_tensor_format(x: Tensor, inplace: bool = True):
    """Mark the 4-d or 5-d tensor ``x`` as ``"nhwc"``; other tensors and those already marked
    are returned as they are.

    Args:
        x: the tensor.
        inplace: mark ``x`` itself (``True``), or return a marked copy (``False``; the copy
            keeps ``x``'s value, dtype and device).
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"convert_tensor_format: expected a Tensor, got {type(x).__name__}")
    if not _is_nchw_format(x):
        return x
    if not inplace:
        x = type(x)(x.numpy(), dtype=x.dtype, device=x.device)
    x.format = "nhwc"
    return x


def convert_module_format(module: Module, inplace: bool = True):
    """Mark every 4-d and 5-d parameter and buffer of ``module`` as ``"nhwc"``.

    Args:
        module: the module.
        inplace: change ``module`` itself (``True``), or a deep copy of it (``False``).

    Returns:
        the converted module.
    """
    if not isinstance(module, Module):
        raise TypeError(f"convert_module_format: expected a Module, got {type(module).__name__}")
    if not inplace:
        module = deepcopy(module)
    for _, t in module.named_tensors():
        convert_tensor_format(t, inplace=True)
    return module
