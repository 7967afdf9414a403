"""``mge.module`` (``M``): layers as objects holding their parameters (MegEngine's
``megengine.module``).

A :class:`Module` finds its parameters, buffers and submodules among its attributes; ``state_dict``
and ``load_state_dict`` save and restore them by dotted name; ``train()`` / ``eval()`` switch the
layers that behave differently in training (:class:`Dropout`, batch norm).  Parameters start as
MegEngine 1.13 initialises them, drawn from :mod:`mge.random` (so ``mge.random.seed(n)`` makes
building a model reproducible); :mod:`mge.module.init` has the initialisers.

    >>> import mge, mge.module as M
    >>> net = M.Sequential(M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8), M.ReLU(),
    ...                    M.AdaptiveAvgPool2d(1))
    >>> net(mge.tensor(np.zeros((2, 3, 8, 8), "float32"))).shape
    (2, 8, 1, 1)

The quantization-aware-training and quantized versions of the quantable modules are in
:mod:`mge.module.qat` and :mod:`mge.module.quantized` (see :mod:`mge.quantization`).  Not in mge
(MegEngine 1.13 has them): MegEngine's vision augmentation modules.  MegEngine 1.13 has no ``Flatten`` module (use
:func:`mge.functional.flatten`) and no GRU.
"""
from . import init  # noqa: F401
from .activation import GELU, LeakyReLU, PReLU, ReLU, Sigmoid, SiLU, Softmax
from .batch_matmul_activation import BatchMatMulActivation
from .batchnorm import BatchNorm1d, BatchNorm2d, SyncBatchNorm
from .conv import (
    Conv1d, Conv2d, Conv3d, ConvRelu2d, ConvTranspose2d, ConvTranspose3d, ConvTransposeRelu2d,
    LocalConv2d,
)
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .deformable_conv import DeformableConv2d, RegionRestrictedConv
from .deformable_psroi_pooling import DeformablePSROIPooling
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .dropout import Dropout
from .embedding import Embedding
from .identity import Identity
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .misc import Concat, Elemwise, Pad, PixelShuffle
from .module import Module
from .multiheadattn import MultiHeadAttention
from .normalization import GeneralNorm, GroupNorm, InstanceNorm, LayerNorm, LocalResponseNorm
from .quant_dequant import DequantStub, QuantStub
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d
from .rnn import LSTM, RNN, LSTMCell, RNNCell
from .sequential import Sequential
from .sliding_window import SlidingWindow, SlidingWindowTranspose

__all__ = [
    "Module", "Sequential", "Identity",
    "Linear", "LinearRelu",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d", "ConvRelu2d",
    "ConvTransposeRelu2d", "LocalConv2d", "BatchMatMulActivation",
    "DeformableConv2d", "RegionRestrictedConv", "DeformablePSROIPooling",
    "SlidingWindow", "SlidingWindowTranspose",
    "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm",
    "LayerNorm", "GroupNorm", "InstanceNorm", "GeneralNorm", "LocalResponseNorm",
    "Dropout", "Embedding",
    "MaxPool2d", "AvgPool2d", "AdaptiveMaxPool2d", "AdaptiveAvgPool2d",
    "ReLU", "Sigmoid", "SiLU", "GELU", "Softmax", "LeakyReLU", "PReLU",
    "Elemwise", "Concat", "Pad", "PixelShuffle",
    "ConvBn2d", "ConvBnRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d", "LinearBn1d",
    "LinearBnRelu1d",
    "RNNCell", "LSTMCell", "RNN", "LSTM", "MultiHeadAttention", "QuantStub", "DequantStub",
    "init",
]


def __getattr__(name):
    # ``M.qat`` / ``M.quantized`` load on first use (they import ``mge.quantization``).
    if name in ("qat", "quantized"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
