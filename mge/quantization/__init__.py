"""``mge.quantization``: quantization-aware training and post-training quantization
(MegEngine 1.13's ``megengine.quantization``).

* observers (:mod:`.observer`) record ranges and answer qparams; fake quantizers
  (:mod:`.fake_quant`: :class:`FakeQuantize`, :class:`TQT`, :class:`LSQ`) quantize and
  dequantize in float, with straight-through or learned-scale gradients;
* a :class:`QConfig` says which of them a QAT module uses (presets such as
  :data:`ema_fakequant_qconfig`);
* :func:`quantize_qat` turns a float model into a QAT model (``mge.module.qat``) and
  :func:`quantize` a QAT model into a quantized one (``mge.module.quantized``), whose layers
  compute on quantized tensors (simulated in float on mge's CPU device, see
  ``docs/differences.rst``).
"""
from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver, HistogramObserver, MinMaxObserver, Observer,
    PassiveObserver, SyncExponentialMovingAverageObserver, SyncMinMaxObserver,
)
from .qconfig import (
    QConfig, calibration_qconfig, easyquant_qconfig, ema_fakequant_qconfig,
    ema_lowbit_fakequant_qconfig, min_max_fakequant_qconfig, passive_qconfig,
    sync_ema_fakequant_qconfig, tqt_qconfig,
)
from .quantize import (
    apply_easy_quant, disable_fake_quant, disable_observer, enable_fake_quant, enable_observer,
    propagate_qconfig, quantize, quantize_qat, reset_qconfig,
)
from .utils import QParams, QuantMode, create_qparams, fake_quant_bias, fake_quant_tensor

__all__ = [
    "FakeQuantize", "TQT", "LSQ",
    "Observer", "MinMaxObserver", "SyncMinMaxObserver", "ExponentialMovingAverageObserver",
    "SyncExponentialMovingAverageObserver", "HistogramObserver", "PassiveObserver",
    "QConfig", "min_max_fakequant_qconfig", "ema_fakequant_qconfig",
    "sync_ema_fakequant_qconfig", "ema_lowbit_fakequant_qconfig", "calibration_qconfig",
    "tqt_qconfig", "passive_qconfig", "easyquant_qconfig",
    "quantize", "quantize_qat", "reset_qconfig", "propagate_qconfig", "apply_easy_quant",
    "enable_fake_quant", "disable_fake_quant", "enable_observer", "disable_observer",
    "QParams", "QuantMode", "create_qparams", "fake_quant_tensor", "fake_quant_bias",
]

