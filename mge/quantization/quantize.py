"""Converting models (MegEngine 1.13's ``megengine.quantization.quantize``): float modules to
QAT modules (:func:`quantize_qat`), QAT modules to quantized ones (:func:`quantize`), and the
switches of their observers and fake quantizers."""
from copy import copy, deepcopy
from functools import partial
from typing import Callable

import numpy as np

from ..functional import concat, norm
from ..logger import get_logger
from ..module import Module
from ..tensor import Tensor
from ..utils.module_utils import set_expand_structure
from .qconfig import QConfig, ema_fakequant_qconfig

__all__ = [
    "quantize", "quantize_qat", "reset_qconfig", "propagate_qconfig", "hook_qat_module",
    "apply_easy_quant", "enable_fake_quant", "disable_fake_quant", "enable_observer",
    "disable_observer",
]

logger = get_logger(__name__)


def _qat_base():
    # mge.module.qat imports this package (its QATModule uses the observers and fake
    # quantizers), so the module packages are imported when first needed.
    from ..module.qat import QATModule

    return QATModule


def _get_quantable_module_names():
    from ..module import quantized as Quantized
    from ..module.quantized import QuantizedModule

    def is_quantable(key):
        value = getattr(Quantized, key)
        return (isinstance(value, type) and issubclass(value, QuantizedModule)
                and value is not QuantizedModule)

    return [key for key in dir(Quantized) if is_quantable(key)]


def _get_convert_dict():
    from .. import module as Float
    from ..module import qat as QAT
    from ..module import quantized as Quantized

    names = _get_quantable_module_names()
    float_modules = [getattr(Float, key) for key in names]
    qat_modules = [getattr(QAT, key) for key in names]
    quantized_modules = [getattr(Quantized, key) for key in names]
    return dict(zip(float_modules, qat_modules)), dict(zip(qat_modules, quantized_modules))


_DICTS = []


def _convert_dicts():
    if not _DICTS:
        _DICTS.extend(_get_convert_dict())
    return _DICTS


def __getattr__(name):
    # MegEngine's module-level tables, built on first use.
    if name == "_float2qat_dict":
        return _convert_dicts()[0]
    if name == "_qat2quantized_dict":
        return _convert_dicts()[1]
    if name == "qat_modules":
        return tuple(_convert_dicts()[1].keys())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def quantize(module: Module, inplace: bool = True, mapping: dict = None):
    r"""Replace every :class:`~mge.module.qat.QATModule` under ``module`` by its
    :class:`~mge.module.quantized.QuantizedModule` (``from_qat_module``).

    Args:
        module: the root module.
        inplace: convert ``module`` itself (else a deep copy).
        mapping: extra ``{qat class: quantized class}`` entries for custom modules.
    """
    if not inplace:
        module = deepcopy(module)
    convert_dict = copy(_convert_dicts()[1])
    if mapping is not None:
        convert_dict.update(mapping)
    qat_types = tuple(convert_dict.keys())

    def is_qat(mod):
        return isinstance(mod, qat_types)

    for key, submodule, _ in list(module._flatten(with_key=True, with_parent=True,
                                                  predicate=is_qat)):
        new_mod = convert_dict[type(submodule)].from_qat_module(submodule)
        set_expand_structure(module, key, new_mod)
    return module


def quantize_qat(module: Module, inplace: bool = True, qconfig: QConfig = ema_fakequant_qconfig,
                 mapping: dict = None):
    r"""Replace every quantable float module under ``module`` (the outermost ones, and not
    those with ``quantize_disabled``) by its :class:`~mge.module.qat.QATModule`
    (``from_float_module``), then set ``qconfig`` on all of them.

    Args:
        module: the root module.
        inplace: convert ``module`` itself (else a deep copy).
        qconfig: the :class:`~.QConfig` to set. Default: :data:`~.ema_fakequant_qconfig`.
        mapping: extra ``{float class: qat class}`` entries for custom modules.

    Returns:
        the converted module.
    """
    if not inplace:
        module = deepcopy(module)
    convert_dict = copy(_convert_dicts()[0])
    if mapping is not None:
        convert_dict.update(mapping)
    quantable = tuple(convert_dict.keys())

    def is_quantable(mod):
        return isinstance(mod, quantable)

    for key, submodule, parent in list(module._flatten(with_key=True, with_parent=True,
                                                       predicate=is_quantable)):
        if is_quantable(parent) or submodule.quantize_disabled:
            continue
        new_mod = convert_dict[type(submodule)].from_float_module(submodule)
        set_expand_structure(module, key, new_mod)
    propagate_qconfig(module, qconfig)
    return module


def reset_qconfig(module: Module, qconfig: QConfig, inplace: bool = True):
    r"""Make new observers and fake quantizers from ``qconfig`` for every QAT module under
    ``module``, each started from the qparams of the one it replaces (``set_qparams``).

    Args:
        module: the root module.
        qconfig: the new :class:`~.QConfig`.
        inplace: change ``module`` itself (else a deep copy).
    """
    if not inplace:
        module = deepcopy(module)

    def safe_call(func, qparams):
        inst = func() if func is not None else None
        if inst is not None and getattr(inst, "set_qparams", None) is not None:
            inst.set_qparams(qparams)
        return inst

    for m in list(module._flatten(predicate=lambda mod: isinstance(mod, _qat_base()))):
        if m.with_weight:
            weight_params = m.get_weight_qparams()
            m.weight_observer = safe_call(qconfig.weight_observer, weight_params)
            m.weight_fake_quant = safe_call(qconfig.weight_fake_quant, weight_params)
        if m.with_act:
            act_params = m.get_activation_qparams()
            m.act_observer = safe_call(qconfig.act_observer, act_params)
            m.act_fake_quant = safe_call(qconfig.act_fake_quant, act_params)
    return module


def _propagate(module, func_str, *args, **kwargs):
    def fn(mod):
        if isinstance(mod, _qat_base()):
            getattr(mod, func_str)(*args, **kwargs)

    module.apply(fn)


def propagate_qconfig(module: Module, qconfig: QConfig):
    r"""Call ``set_qconfig(qconfig)`` on every QAT module under ``module`` (itself included).

    Args:
        module: the root module.
        qconfig: the :class:`~.QConfig` to set.
    """
    _propagate(module, "set_qconfig", qconfig)


def hook_qat_module(module: Module, func: Callable):
    r"""Register ``func`` as a forward hook of every QAT module under ``module``; returns the
    hook handles."""
    return [sub.register_forward_hook(func)
            for sub in list(module._flatten(predicate=lambda m: isinstance(m, _qat_base())))]


def apply_easy_quant(module: Module, data: Tensor, start: float = 0.8, stop: float = 1.2,
                     num: int = 40):
    r"""EasyQuant (https://arxiv.org/abs/2006.16669): for every QAT module (with
    :data:`~.easyquant_qconfig`'s passive observers), search the weight scale and then the
    activation scale in ``[start, stop] * scale`` (``num`` points) that maximises the cosine
    similarity of the fake-quantized output with the float output on ``data``.

    Args:
        module: the root module.
        data: the input batch of the search.
        start: lower bound of the search interval (times the current scale).
        stop: upper bound of the search interval.
        num: number of scales tried.
    """
    batch_size = data.shape[0]

    def get_cosine(x, y):
        axis = tuple(range(1, len(x.shape)))
        up = (x * y).sum(axis=axis)
        down = norm(x, axis=axis) * norm(y, axis=axis)
        return (up / down).mean(axis=0)

    def search(mod, inputs, outputs, where):
        mod._forward_hooks.clear()
        normal_in = [_[:batch_size] for _ in inputs]
        fakequant_in = [_[batch_size:] for _ in inputs]
        disable_fake_quant(mod)
        normal_out = mod(*normal_in)
        enable_fake_quant(mod)
        ob = getattr(mod, where)
        if ob is None:
            return None
        orig_scale = ob.orig_scale
        cosine = optimal = 0
        for scale in np.linspace(start * orig_scale, stop * orig_scale, num):
            ob.scale = scale
            fakequant_out = mod(*fakequant_in)
            dis = get_cosine(normal_out, fakequant_out)
            if dis > cosine:
                cosine = dis
                optimal = scale
        if optimal == 0:
            logger.warning("EasyQuant finds no better scale")
        else:
            ob.scale = optimal
        fakequant_out = outputs[batch_size:]
        return concat([normal_out, fakequant_out])

    data = concat([data, data])
    hook_qat_module(module, partial(search, where="weight_observer"))
    module(data)
    hook_qat_module(module, partial(search, where="act_observer"))
    module(data)
    return module


def disable_fake_quant(module: Module):
    r"""Turn off the fake quantizers of every QAT module under ``module``."""
    _propagate(module, "set_fake_quant", False)


def disable_observer(module: Module):
    r"""Turn off the observers of every QAT module under ``module``."""
    _propagate(module, "set_observer", False)


def enable_fake_quant(module: Module):
    r"""Turn on the fake quantizers of every QAT module under ``module``."""
    _propagate(module, "set_fake_quant", True)


def enable_observer(module: Module):
    r"""Turn on the observers of every QAT module under ``module``."""
    _propagate(module, "set_observer", True)
