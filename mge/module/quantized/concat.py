"""Quantized ``Concat``."""
from typing import Iterable

from ... import functional as F
from ...tensor import Tensor
from ..qat import concat as QAT
from .module import QuantizedModule

__all__ = ["Concat"]


class Concat(QuantizedModule):
    r"""Quantized :func:`~mge.functional.concat`: every input converted to ``dtype``, then
    concatenated; for inference."""

    def __init__(self, dtype=None, **kwargs):
        super().__init__(**kwargs)
        self.output_dtype = dtype

    def forward(self, inps: Iterable[Tensor], axis: int = 0):
        return F.concat(tuple(x.astype(self.output_dtype) for x in inps), axis)

    @classmethod
    def from_qat_module(cls, qat_module: QAT.Concat):
        r"""A quantized ``Concat`` from a QAT one."""
        return cls(qat_module.get_activation_dtype(), name=qat_module.name)
