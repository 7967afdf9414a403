"""The channel: the one door through which tensors are created, computed, read and freed.

This is the interface of MegEngine's interpreter channel (seed ``003``): ``put``, ``apply_op``,
``del_``, ``get_value``, ``get_shape``, ``get_dtype``, ``get_device``, ``sync``, ``close``,
``set_option``/``get_option``.  This implementation runs every command at once on the caller's
thread; the asynchronous worker replaces the bodies, not the interface.
"""
import numpy as np

from .. import _accel
from ..ops.base import INFER, KERNELS
from .options import Options

_accel.guard(__name__)
TensorInfo = _accel.load("mge._core.channel.handles").TensorInfo

__all__ = ["Channel", "get_channel", "UnusableTensorError"]


class UnusableTensorError(RuntimeError):
    """Raised when an op uses a tensor whose producer failed."""


def _readonly(value):
    if type(value) is not np.ndarray:
        return np.asarray(value)  # a numpy scalar: a fresh 0-d array, nothing shared
    view = value.view()
    view.flags.writeable = False
    return view


class Channel:
    """Executes ops on devices and owns every tensor's storage."""

    def __init__(self):
        self.options = Options()
        self.closed = False

    # -- creating and freeing -------------------------------------------------------------
    def put(self, value, device, no_cache=False):
        """A new tensor holding ``value`` (a host array the channel now owns) on ``device``."""
        self._check_open()
        return TensorInfo(value.shape, value.dtype, device, value)

    def del_(self, info):
        """The user dropped ``info``: its storage may be freed."""
        info.value = None
        info.producer = None

    # -- computing --------------------------------------------------------------------------
    def apply_op(self, op, inputs):
        """Run ``op`` on the input infos; returns the output infos."""
        if self.closed:
            raise RuntimeError("the channel is closed")
        descs = []
        values = []
        for i in inputs:
            if i.error is not None:
                raise UnusableTensorError("an input tensor is unusable due to previous error")
            descs.append((i.shape, i.dtype))
            values.append(i.value)
        cls = type(op)
        out_descs = INFER[cls](op, descs)
        device = op.device if op.sets_device or not inputs else inputs[0].device
        try:
            kernel = KERNELS[device.kind][cls]
        except KeyError:
            raise NotImplementedError(f"{op.name} has no kernel for device {device}") from None
        outs = kernel(op, *values)
        result = []
        for desc, value in zip(out_descs, outs):
            dtype = desc[1]
            if value.dtype != dtype:
                value = value.astype(dtype)
            result.append(TensorInfo(value.shape, dtype, device, value))
        return result

    # -- reading ----------------------------------------------------------------------------
    def get_value(self, info):
        """The value as a read-only host array (waits for it)."""
        self._check_usable(info)
        return _readonly(info.value)

    def get_shape(self, info):
        self._check_usable(info)
        return info.shape

    def get_dtype(self, info):
        return info.dtype

    def get_device(self, info):
        return info.device

    # -- control ----------------------------------------------------------------------------
    def sync(self):
        """Wait until every command issued so far has run."""

    def close(self):
        """Stop the channel; idempotent."""
        self.closed = True

    def set_option(self, name, value):
        self.options.set(name, value)

    def get_option(self, name):
        return self.options.get(name)

    def _check_open(self):
        if self.closed:
            raise RuntimeError("the channel is closed")

    def _check_usable(self, info):
        if info.error is not None:
            raise UnusableTensorError("an input tensor is unusable due to previous error")


_channel = None


def get_channel():
    """The process's channel, created on first use."""
    global _channel
    if _channel is None:
        _channel = Channel()
    return _channel
