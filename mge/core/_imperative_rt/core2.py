"""``_imperative_rt.core2``: the Python face of MegEngine's runtime (``tensor.cpp``), over mge.

``apply(op, *inputs)`` runs an op -- one of :mod:`mge.core.ops.builtin` (MegEngine's op classes) or
one of mge's own (``mge.core.ops``) -- and returns a tuple of tensors.  ``Tensor`` is mge's tensor;
``AsyncError``/``TraceError`` are mge's errors; options, ``sync``/``full_sync``/``close`` act on
mge's channel; ``GradKey`` is the grad plugin's.
"""
import weakref

from ..._core.channel import get_channel
from ..._core.errors import AsyncError, TraceError  # noqa: F401
from ..._core.device import as_device
from ...tensor import Tensor
from ..ops.builtin import apply
from .. import _trace_option

__all__ = ["apply", "Tensor", "AsyncError", "TraceError", "GradKey", "set_option", "get_option",
           "sync", "full_sync", "close", "TensorWeakRef", "make_shape_tuple", "Const",
           "get_device", "_set_swap_flag", "_get_swap_flag", "_set_drop_flag", "_get_drop_flag",
           "set_cpp_use_symbolic_shape", "create_complex", "_get_convert_inputs",
           "_set_convert_inputs", "_set_async_level", "_get_async_level", "config_async_error"]


def set_option(name, value):
    """Set the channel option ``name`` (``async_level``, ``enable_drop``, ...)."""
    get_channel().set_option(name, value)


def get_option(name):
    """The value of the channel option ``name``."""
    return get_channel().get_option(name)


def sync():
    """Wait until the ops issued so far have run; raises an ``AsyncError`` of one that failed."""
    get_channel().sync()


def full_sync():
    """``sync`` and wait for the device work too."""
    get_channel().full_sync()


def close():
    """Finish every pending op (the channel stays usable)."""
    get_channel().sync()


def _set_swap_flag(flag):
    """Allow (``True``) or forbid tensor swapping (channel option ``enable_swap``)."""
    set_option("enable_swap", int(bool(flag)))


def _get_swap_flag():
    """Whether tensor swapping is enabled."""
    return bool(get_option("enable_swap"))


def _set_drop_flag(flag):
    """Allow (``True``) or forbid tensor dropping (channel option ``enable_drop``)."""
    set_option("enable_drop", int(bool(flag)))


def _get_drop_flag():
    """Whether tensor dropping is enabled."""
    return bool(get_option("enable_drop"))


def _set_async_level(level):
    """Set the channel option ``async_level`` (0, 1 or 2)."""
    set_option("async_level", int(level))


def _get_async_level():
    """The channel option ``async_level``."""
    return get_option("async_level")


def config_async_error(level):
    """MegEngine's switch for where asynchronous errors are raised; mge raises them at the next
    sync point as ``AsyncError`` (``async_level`` 0 raises at the op).  Sets ``async_level``."""
    set_option("async_level", 0 if level else 2)


_convert_inputs = [True]


def _get_convert_inputs():
    """Whether ``apply`` converts Python values among its inputs (always, in mge)."""
    return _convert_inputs[0]


def _set_convert_inputs(flag):
    """Kept for MegEngine's signature: mge's ``apply`` always converts; returns the old flag."""
    old = _convert_inputs[0]
    _convert_inputs[0] = bool(flag)
    return old


def set_cpp_use_symbolic_shape(fn):
    """MegEngine passes the symbolic-shape switch to C++; mge reads :mod:`_trace_option`."""
    del fn


def GradKey(name=None):
    """A grad plugin ``GradKey`` (``mge.core.get_plugin("grad").GradKey``)."""
    from .. import get_plugin
    return get_plugin("grad").GradKey(name)


class TensorWeakRef:
    """A weak reference to a tensor: ``ref()`` is the tensor or ``None`` once it is gone."""

    def __init__(self, tensor):
        self._ref = weakref.ref(tensor)

    def __call__(self):
        return self._ref()

    def _use_cnt(self):
        """How many references the tensor has (0 once it is gone)."""
        import sys
        t = self._ref()
        return 0 if t is None else sys.getrefcount(t) - 2


def make_shape_tuple(shape):
    """A shape (tuple, list, numpy array or tensor) as a tuple of ints."""
    if isinstance(shape, Tensor):
        return tuple(int(s) for s in shape.numpy().reshape(-1))
    if hasattr(shape, "__len__") and not isinstance(shape, (str, bytes)):
        import numpy as np
        return tuple(int(s) for s in np.asarray(shape).reshape(-1))
    return (int(shape),)


def Const(value, dtype=None, device=None):
    """A constant tensor of ``value``."""
    return Tensor(value, dtype=dtype, device=device, is_const=True)


def get_device(*args):
    """The device of the first tensor among ``args`` (nested sequences searched), or the default."""
    for a in args:
        if isinstance(a, Tensor):
            return a.device
        if isinstance(a, (list, tuple)):
            d = get_device(*a)
            if d is not None:
                return d
    return as_device(None)


def create_complex(real, imag):
    """MegEngine's complex tensors: mge has no complex dtype, so this raises ``TypeError``."""
    raise TypeError("mge tensors hold bool, integer or float data; complex tensors are not "
                    "supported (docs/differences.rst)")


_ = _trace_option
