"""``mge.tensor``: the Tensor class and its alias ``tensor``."""
from ._core.tensor import Parameter, Tensor

tensor = Tensor

__all__ = ["Tensor", "tensor", "Parameter"]
