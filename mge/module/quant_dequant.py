"""``QuantStub`` and ``DequantStub`` (MegEngine 1.13's ``megengine.module.quant_dequant``).

In a float model both return their input; they mark where quantization would start and end.
(mge has no quantization: ``quantize_qat`` and the ``qat``/``quantized`` modules that would replace
them are not there.)
"""
from .module import Module

__all__ = ["QuantStub", "DequantStub"]


class QuantStub(Module):
    r"""Returns its input (the place where a quantized model would quantize)."""

    def forward(self, inp):
        return inp


class DequantStub(Module):
    r"""Returns its input (the place where a quantized model would dequantize)."""

    def forward(self, inp):
        return inp
