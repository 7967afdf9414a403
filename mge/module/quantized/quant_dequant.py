"""Quantized ``QuantStub`` (to the quantized dtype) and ``DequantStub`` (to float32)."""
from ..qat import quant_dequant as QAT
from .module import QuantizedModule

__all__ = ["QuantStub", "DequantStub"]


class QuantStub(QuantizedModule):
    r"""Converts its input to the quantized ``dtype`` observed in QAT."""

    def __init__(self, dtype=None, **kwargs):
        super().__init__(**kwargs)
        self.output_dtype = dtype

    def forward(self, inp):
        return inp.astype(self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.QuantStub):
        r"""A quantized ``QuantStub`` with the QAT module's activation dtype."""
        return cls(qat_module.get_activation_dtype(), name=qat_module.name)


class DequantStub(QuantizedModule):
    r"""Converts its (quantized) input back to float32."""

    def forward(self, inp):
        return inp.astype("float32")

    @classmethod
    def from_qat_module(cls, qat_module: QAT.DequantStub):
        r"""A quantized ``DequantStub``."""
        return cls(name=qat_module.name)
