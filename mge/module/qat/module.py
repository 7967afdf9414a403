"""``QATModule``: the base of the quantization-aware-training modules
(MegEngine 1.13's ``megengine.module.qat.module``)."""
from abc import abstractmethod

from ...quantization.fake_quant import FakeQuantize  # noqa: F401  (type comments)
from ...quantization.observer import Observer  # noqa: F401  (type comments)
from ...quantization.qconfig import QConfig
from ...quantization.utils import fake_quant_bias
from ...tensor import Tensor
from ..module import Module

__all__ = ["QATModule"]


class QATModule(Module):
    r"""Base class of the modules that compute in float while observing and fake-quantizing
    their weight and activation (for quantization-aware training and calibration).

    Make one from a float module with :meth:`from_float_module`, or convert a whole model with
    :func:`~mge.quantization.quantize_qat`; :func:`~mge.quantization.quantize` turns it into a
    :class:`~mge.module.quantized.QuantizedModule` for inference.  ``with_weight`` and
    ``with_act`` say which of the two it quantizes.
    """

    with_weight = True
    with_act = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.weight_observer = None  # type: Observer
        self.act_observer = None  # type: Observer
        self.weight_fake_quant = None  # type: FakeQuantize
        self.act_fake_quant = None  # type: FakeQuantize

    def __repr__(self):
        return "QAT." + super().__repr__()

    def set_qconfig(self, qconfig: QConfig):
        r"""Make the observers and fake quantizers of the activation and the weight from
        ``qconfig`` (a None entry leaves that one out)."""
        def safe_call(func):
            return func() if func is not None else None

        if self.with_act:
            self.act_observer = safe_call(qconfig.act_observer)
            self.act_fake_quant = safe_call(qconfig.act_fake_quant)
        if self.with_weight:
            self.weight_observer = safe_call(qconfig.weight_observer)
            self.weight_fake_quant = safe_call(qconfig.weight_fake_quant)

    def _enable_exec(self, with_module, func, enable):
        if not with_module or not func:
            return
        if enable:
            func.enable()
        else:
            func.disable()

    def set_fake_quant(self, enable):
        r"""Enable or disable both fake quantizers."""
        self._enable_exec(self.with_act, self.act_fake_quant, enable)
        self._enable_exec(self.with_weight, self.weight_fake_quant, enable)

    def set_observer(self, enable):
        r"""Enable or disable both observers."""
        self._enable_exec(self.with_act, self.act_observer, enable)
        self._enable_exec(self.with_weight, self.weight_observer, enable)

    def _apply_fakequant_with_observer(self, target: Tensor, fake_quant, observer):
        if observer is None:
            oup, qparams = target, None
        else:
            oup = observer(target)
            qparams = observer.get_qparams()
        if fake_quant is not None:
            oup = fake_quant(oup, qparams)
            if hasattr(fake_quant, "get_qparams"):
                qparams = fake_quant.get_qparams()
        if qparams is not None:
            oup.qparams.update(qparams)
        return oup

    def apply_quant_weight(self, target: Tensor):
        r"""Observe and fake-quantize ``target`` as a weight (its qparams are set)."""
        return self._apply_fakequant_with_observer(target, self.weight_fake_quant,
                                                   self.weight_observer)

    def apply_quant_activation(self, target: Tensor):
        r"""Observe and fake-quantize ``target`` as an activation (its qparams are set)."""
        return self._apply_fakequant_with_observer(target, self.act_fake_quant,
                                                   self.act_observer)

    def apply_quant_bias(self, target: Tensor, inp: Tensor, w_qat: Tensor):
        r"""Fake-quantize the bias ``target`` to qint32 (:func:`~mge.quantization.fake_quant_bias`)
        when both fake quantizers are enabled; else return it unchanged."""
        if (self.act_fake_quant and self.act_fake_quant.enabled and self.weight_fake_quant
                and self.weight_fake_quant.enabled):
            return fake_quant_bias(target, inp, w_qat)
        return target

    def _get_method_result(self, method, fake_quant, observer):
        if hasattr(fake_quant, method):
            return getattr(fake_quant, method)()
        if hasattr(observer, method):
            return getattr(observer, method)()
        return None

    def get_weight_dtype(self):
        r"""The quantized dtype of the weight (from its fake quantizer, else its observer)."""
        return self._get_method_result("get_quantized_dtype", self.weight_fake_quant,
                                       self.weight_observer)

    def get_activation_dtype(self):
        r"""The quantized dtype of the activation (fake quantizer first, then observer)."""
        return self._get_method_result("get_quantized_dtype", self.act_fake_quant,
                                       self.act_observer)

    def get_weight_qparams(self):
        r"""The qparams of the weight."""
        return self._get_method_result("get_qparams", self.weight_fake_quant,
                                       self.weight_observer)

    def get_activation_qparams(self):
        r"""The qparams of the activation."""
        return self._get_method_result("get_qparams", self.act_fake_quant, self.act_observer)

    @classmethod
    @abstractmethod
    def from_float_module(cls, float_module: Module):
        r"""A QAT module with the configuration and parameters of ``float_module``."""
