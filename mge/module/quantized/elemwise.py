"""Quantized ``Elemwise``."""
from ...functional.quantized import _elemwise_multi_type
from ..qat import elemwise as QAT
from .module import QuantizedModule

__all__ = ["Elemwise"]


class Elemwise(QuantizedModule):
    r"""Quantized :class:`~mge.module.qat.Elemwise`: the elementwise op on quantized inputs,
    output in ``dtype`` (MegEngine's ``q*`` modes of ``ElemwiseMultiType``)."""

    def __init__(self, method, dtype=None, **kwargs):
        super().__init__(**kwargs)
        self.method = "q" + method
        self.output_dtype = dtype

    def forward(self, *inps):
        if self.training:
            raise ValueError("quantized module only support inference.")
        return _elemwise_multi_type(*inps, mode=self.method, dtype=self.output_dtype)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Elemwise):
        r"""A quantized ``Elemwise`` from a QAT one."""
        return cls(qat_module.method, qat_module.get_activation_dtype(), name=qat_module.name)
