"""QAT ``Elemwise``."""
from .. import misc as Float
from .module import QATModule

__all__ = ["Elemwise"]


class Elemwise(Float.Elemwise, QATModule):
    r"""A :class:`~mge.module.Elemwise` whose output is fake-quantized (no weight)."""

    with_weight = False

    def forward(self, *inps):
        return self.apply_quant_activation(super().forward(*inps))

    @classmethod
    def from_float_module(cls, float_module: Float.Elemwise):
        r"""A QAT ``Elemwise`` of the same method."""
        return cls(float_module.method, name=float_module.name)
