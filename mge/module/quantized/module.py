"""``QuantizedModule``: the base of the quantized (inference) modules."""
from abc import abstractmethod

from ..module import Module
from ..qat import QATModule

__all__ = ["QuantizedModule"]


class QuantizedModule(Module):
    r"""Base class of the quantized modules: made from a :class:`~mge.module.qat.QATModule`
    (:meth:`from_qat_module`, or :func:`~mge.quantization.quantize` for a whole model), they
    compute on quantized tensors and only run in evaluation mode (``ValueError`` in training
    mode).  On mge the integer kernels are simulated exactly (see
    :mod:`mge.functional.quantized`)."""

    def __call__(self, *inputs, **kwargs):
        if self.training:
            raise ValueError("quantized module only support inference.")
        return super().__call__(*inputs, **kwargs)

    def __repr__(self):
        return "Quantized." + super().__repr__()

    @classmethod
    @abstractmethod
    def from_qat_module(cls, qat_module: QATModule):
        r"""A quantized module from ``qat_module`` (its weights quantized with the observed
        dtype)."""
