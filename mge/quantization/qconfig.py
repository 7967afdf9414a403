"""``QConfig`` and its presets (MegEngine 1.13's ``megengine.quantization.qconfig``)."""
from collections import namedtuple
from functools import partial

from ..module import Module
from .fake_quant import TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver, HistogramObserver, MinMaxObserver, PassiveObserver,
    SyncExponentialMovingAverageObserver, SyncMinMaxObserver,
)

__all__ = [
    "QConfig", "min_max_fakequant_qconfig", "ema_fakequant_qconfig",
    "sync_ema_fakequant_qconfig", "ema_lowbit_fakequant_qconfig", "calibration_qconfig",
    "tqt_qconfig", "passive_qconfig", "easyquant_qconfig",
]


class QConfig(namedtuple("QConfig", ["weight_observer", "act_observer", "weight_fake_quant",
                                     "act_fake_quant"])):
    r"""How a :class:`~mge.module.qat.QATModule` observes and fake-quantizes its weight and
    its activation: four callables (classes, usually ``functools.partial`` of one) that make an
    :class:`~.Observer` or a fake quantizer, or None.  See
    :meth:`~mge.module.qat.QATModule.set_qconfig`.

    Args:
        weight_observer: makes the observer of the weight.
        act_observer: makes the observer of the activation.
        weight_fake_quant: makes the fake quantizer of the weight.
        act_fake_quant: makes the fake quantizer of the activation.

    Weights usually take the narrow dtype (``qint8_narrow``, ``[-127, 127]``), so that sums of
    products cannot overflow; activations the full one.

    Example:
        >>> from functools import partial
        >>> from mge.quantization import QConfig, MinMaxObserver, FakeQuantize
        >>> qconfig = QConfig(weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
        ...                   act_observer=partial(MinMaxObserver, dtype="qint8"),
        ...                   weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
        ...                   act_fake_quant=partial(FakeQuantize, dtype="qint8"))
    """

    def __new__(cls, weight_observer, act_observer, weight_fake_quant, act_fake_quant):
        if isinstance(act_observer, Module) or isinstance(weight_observer, Module):
            raise ValueError(
                "QConfig must not receive observer instance, please pass observer"
                " class generator using `partial(Observer, ...)` instead. Use"
                " partial(MyObserver, x=1) to override arguments to constructor if needed")
        return super().__new__(cls, weight_observer, act_observer, weight_fake_quant,
                               act_fake_quant)


#: Min-max observers and fake quantization (qint8_narrow weights, qint8 activations).
min_max_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(MinMaxObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

#: The default of :func:`~.quantize_qat`: min-max weights, moving-average activations.
ema_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

#: :data:`ema_fakequant_qconfig` with the distributed observers.
sync_ema_fakequant_qconfig = QConfig(
    weight_observer=partial(SyncMinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(SyncExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

#: :data:`ema_fakequant_qconfig` in 4 bits (qint4).
ema_lowbit_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint4"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint4"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint4"),
    act_fake_quant=partial(FakeQuantize, dtype="qint4"),
)

#: Calibration (no fake quantization): min-max weights, histogram activations.
calibration_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(HistogramObserver, dtype="qint8"),
    weight_fake_quant=None,
    act_fake_quant=None,
)

#: TQT: learned thresholds, no observers.
tqt_qconfig = QConfig(
    weight_observer=None,
    act_observer=None,
    weight_fake_quant=partial(TQT, dtype="qint8_narrow"),
    act_fake_quant=partial(TQT, dtype="qint8"),
)

#: Passive observers (scales set from outside) and fake quantization.
passive_qconfig = QConfig(
    weight_observer=partial(PassiveObserver, dtype="qint8_narrow"),
    act_observer=partial(PassiveObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)

#: The qconfig of :func:`~.apply_easy_quant` (:data:`passive_qconfig`).
easyquant_qconfig = passive_qconfig
