"""The stable API for plugin authors and runtime users.

A transformation plugin subclasses :class:`Transformation`, gives itself a ``name`` and a
``position`` (``"before:NAME"`` / ``"after:NAME"`` of a built-in segment) and implements
``apply(self, op, inputs, next)``; it is registered as an entry point of the group
``mge.transformations``.  See ``docs/guides/plugins.rst``.
"""
from .._core import _accel
from .._core.channel import get_channel
from .._core.errors import AsyncError, TraceError, UnusableTensorError
from .._core.autodiff.registry import def_backward
from .._core.device import Device, register_device_kind
from .._core.device.cpu import def_kernel
from .._core.ops.base import OpDef, TensorDesc
from .._core.ops.base import def_infer as _def_infer
from .._core.plugins import (
    disable_transformation, enable_transformation, get_plugin, plugin_errors, plugins,
    register_transformation, transformations,
)
_t = _accel.load("mge._core.transformation")
SEGMENTS, Transformation = _t.SEGMENTS, _t.Transformation
from .. import _core

#: ``apply(op, *inputs)``: run one of mge's ops through the transformation stack (the hot entry
#: of mge's own API).  MegEngine's op classes (``mge.core.ops.builtin``) are applied with
#: ``mge.core._imperative_rt.core2.apply``, MegEngine's entry point, which translates them.
apply = _accel.load("mge._core.dispatch").apply

__all__ = [
    "Transformation", "apply", "transformations", "disable_transformation",
    "enable_transformation", "register_transformation", "get_plugin", "plugins", "plugin_errors",
    "get_option", "set_option", "AsyncError", "TraceError", "UnusableTensorError", "SEGMENTS",
    "OpDef", "TensorDesc", "def_infer", "def_kernel", "def_backward", "compiled_modules", "ops",
    "Device", "register_device_kind",
]

from . import ops  # noqa: E402  (mge's op classes, and ``ops.builtin``: MegEngine's)




def def_infer(cls):
    """Decorator: register ``fn(op, descs) -> [TensorDesc, ...]`` as the shape/dtype rule of
    ``cls``; ``descs`` are ``TensorDesc`` objects (``.shape``, ``None`` while unknown, and
    ``.dtype``), one per input.  The rule raises ``ValueError``/``TypeError`` for bad inputs."""
    def deco(fn):
        def rule(op, descs):
            return fn(op, [TensorDesc(d[0], d[1]) for d in descs])
        rule.__name__ = getattr(fn, "__name__", "rule")
        _def_infer(cls)(rule)
        return fn
    return deco


def get_option(name):
    """The value of the channel option ``name`` (see ``mge.config``); ``KeyError`` if unknown."""
    return get_channel().get_option(name)


def set_option(name, value):
    """Set the channel option ``name``; ``KeyError`` naming the valid options if unknown."""
    get_channel().set_option(name, value)


def compiled_modules():
    """Which hot modules run compiled and which as pure Python: ``{module: "compiled"|"pure"}``."""
    return dict(_accel.MODES)
