"""QAT ``QuantStub`` and ``DequantStub``."""
from .. import quant_dequant as Float
from .module import QATModule

__all__ = ["QuantStub", "DequantStub"]


class QuantStub(Float.QuantStub, QATModule):
    r"""Fake-quantizes its input as an activation; becomes a quantization (to the observed
    dtype) after :func:`~mge.quantization.quantize`."""

    with_weight = False

    def forward(self, inp):
        return self.apply_quant_activation(inp)

    @classmethod
    def from_float_module(cls, float_module: Float.QuantStub):
        r"""A QAT ``QuantStub``."""
        return cls(name=float_module.name)


class DequantStub(Float.DequantStub, QATModule):
    r"""Returns its input; becomes a dequantization (to float32) after
    :func:`~mge.quantization.quantize`."""

    with_weight = False
    with_act = False

    def forward(self, inp):
        return inp

    @classmethod
    def from_float_module(cls, float_module: Float.DequantStub):
        r"""A QAT ``DequantStub``."""
        return cls(name=float_module.name)
