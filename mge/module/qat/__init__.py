"""``mge.module.qat``: the quantization-aware-training modules (MegEngine 1.13's
``megengine.module.qat``).  Each computes like its float module while observing and
fake-quantizing its weight and output as its :class:`~mge.quantization.QConfig` says."""
from .batch_matmul_activation import BatchMatMulActivation
from .concat import Concat
from .conv import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .elemwise import Elemwise
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .module import QATModule
from .quant_dequant import DequantStub, QuantStub

__all__ = [
    "QATModule", "BatchMatMulActivation", "Concat", "Conv2d", "ConvRelu2d", "ConvTranspose2d",
    "ConvTransposeRelu2d", "ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d",
    "ConvTransposeBnRelu2d", "Elemwise", "Linear", "LinearRelu", "LinearBn1d",
    "LinearBnRelu1d", "QuantStub", "DequantStub",
]
