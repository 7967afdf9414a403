"""``mge.tensor``: the Tensor class and its alias ``tensor``."""
from ._core import _accel

_impl = _accel.load("mge._core.tensor")
Tensor = _impl.Tensor
Parameter = _impl.Parameter
tensor = Tensor

__all__ = ["Tensor", "tensor", "Parameter"]
