"""QAT ``Concat``."""
from typing import Iterable

from ...tensor import Tensor
from .. import misc as Float
from .module import QATModule

__all__ = ["Concat"]


class Concat(Float.Concat, QATModule):
    r"""A :class:`~mge.module.Concat` whose output is fake-quantized."""

    def forward(self, inps: Iterable[Tensor], axis: int = 0):
        return self.apply_quant_activation(super().forward(inps, axis))

    @classmethod
    def from_float_module(cls, float_module):
        r"""A QAT ``Concat``."""
        return cls(name=float_module.name)
