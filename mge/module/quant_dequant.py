"""``QuantStub`` and ``DequantStub`` (MegEngine 1.13's ``megengine.module.quant_dequant``).

In a float model both return their input; they mark where quantization starts and ends:
:func:`~mge.quantization.quantize_qat` replaces them by :class:`mge.module.qat.QuantStub` /
:class:`~mge.module.qat.DequantStub` (the activation fake-quantized) and
:func:`~mge.quantization.quantize` by the quantized ones (``astype`` to the observed quantized
dtype, and back to float32).
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
