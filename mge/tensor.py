"""``mge.tensor``: the Tensor class and its alias ``tensor``.

The class itself lives in ``mge/_core/tensor.py`` (compiled, with a pure-Python twin).  This module
adds the members of MegEngine 1.13's Python ``Tensor`` that code written for MegEngine touches but
the runtime does not need: ``_tuple_shape``, ``_isscalar``, ``_dev_tensor``, ``format``,
``qparams``, ``set_value``, ``reset_zero``, ``requires_grad``, ``__dlpack__`` and a few dunders.
They are defined once here and set on the class, so the compiled and the pure class get the same.
"""
import math
import warnings

import numpy as np

from ._core import _accel

_impl = _accel.load("mge._core.tensor")
Tensor = _impl.Tensor
Parameter = _impl.Parameter
tensor = Tensor

__all__ = ["Tensor", "tensor", "Parameter"]

#: the memory formats MegEngine names; mge stores every tensor in its logical layout
_FORMATS = ("default", "nchw", "nhwc")


def _tuple_shape(self):
    """The shape as a tuple of ints (MegEngine's ``shape`` may be a tensor under symbolic shape;
    ``_tuple_shape`` never is).  mge never has symbolic shapes, so it is ``shape``."""
    return self.shape


def _isscalar(self):
    """Whether the tensor is 0-d (MegEngine's scalar flag)."""
    return len(self.shape) == 0


def _dev_tensor(self):
    """The device value behind this tensor, as MegEngine's ``DeviceTensorND``: an object with
    ``shape``, ``dtype``, ``comp_node`` and ``numpy()``, holding this tensor's current value."""
    from .core._imperative_rt.common import DeviceTensorND
    return DeviceTensorND(self)


def _get_format(self):
    """The memory format: ``"default"`` unless set.  mge keeps every tensor in its logical
    (NCHW) layout; the format is a label carried by the tensor object and, for ``"nhwc"``, from
    op to op (``mge/core/_format.py``; see docs/differences.rst)."""
    return self.__dict__.get("_format", "default")


def _set_format(self, fmt):
    fmt = str(fmt).lower()
    if fmt not in _FORMATS:
        raise ValueError(f"unknown tensor format {fmt!r}; expected one of {_FORMATS}")
    if fmt == "default":
        self.__dict__.pop("_format", None)
        return
    if fmt == "nhwc":
        from .core._format import ensure_installed
        ensure_installed()  # ops on this tensor carry the label from now on
    self.__dict__["_format"] = fmt


def _as_format(self, fmt):
    """Set the memory format label (MegEngine's ``_as_format``)."""
    _set_format(self, fmt)


def _get_qparams(self):
    """The quantization parameters (``QParams``) of this tensor.

    Set by quantization code; by default they are read from a quantized dtype (``qint8(s)`` etc.:
    its scale and zero point) or empty (``QParams(mode=SYMMERTIC, dtype_meta=None, ...)``)."""
    q = self.__dict__.get("_qparams")
    if q is None:
        from .core.tensor.qparams import qparams_of_dtype
        q = qparams_of_dtype(self.dtype)
        self.__dict__["_qparams"] = q
    return q


def _set_qparams(self, value):
    self.__dict__["_qparams"] = value


def set_value(self, value):
    """Deprecated since MegEngine 1.0: ``x[...] = value``.  Makes this tensor hold ``value``."""
    warnings.warn("Call to deprecated method set_value. (please use ``tensor_name[...] = value``)"
                  " -- Deprecated since version 1.0.", DeprecationWarning, stacklevel=2)
    self._reset(value)


def reset_zero(self):
    """Deprecated since MegEngine 1.0: ``x *= 0``.  Sets every element to zero."""
    warnings.warn("Call to deprecated method reset_zero. (use ``*= 0`` instead) -- Deprecated "
                  "since version 1.0.", DeprecationWarning, stacklevel=2)
    self._reset(self * 0)


def _requires_grad(self):
    raise AttributeError("requires_grad is reserved for future use")


def _requires_grad_set(self, value):
    raise AttributeError("requires_grad is reserved for future use")


def _requires_grad_del(self):
    raise AttributeError("requires_grad is reserved for future use")


def __dlpack__(self, stream=None):
    """Export the value as a DLPack capsule (a host copy: the consumer owns its memory)."""
    if stream is not None and not isinstance(stream, int):
        raise TypeError("stream must be ``int`` or ``none``")
    return np.array(self.numpy(), copy=True).__dlpack__()


def __dlpack_device__(self):
    """``(device type, id)`` of the exported value: the host CPU (``kDLCPU``, 0)."""
    return (1, 0)


def __ceil__(self):
    """``math.ceil(x)`` of a one-element tensor."""
    return math.ceil(self.item())


def __floor__(self):
    """``math.floor(x)`` of a one-element tensor."""
    return math.floor(self.item())


def __trunc__(self):
    """``math.trunc(x)`` of a one-element tensor."""
    return math.trunc(self.item())


def __getnewargs__(self):
    """MegEngine 1.13's constructor arguments of a copy: ``(value, dtype, device's logical
    name)``."""
    return (self.numpy(), self.dtype, self.device.logical_name)


def __getstate__(self):
    """MegEngine's pickled state: ``{"qparams": ...}`` when quantization parameters are set."""
    state = {}
    q = self.__dict__.get("_qparams")
    if q is not None:
        state["qparams"] = q
    return state


def __setstate__(self, state):
    state = dict(state)
    if "data" in state:  # MegEngine's pickles from before its fast core
        data, device, dtype = state.pop("data"), state.pop("device"), state.pop("dtype")
        from .serialization import _map_locations
        if _map_locations:
            device = _map_locations[-1](device)
        if getattr(self, "_info", None) is None:  # made by __new__ alone: unpickled
            type(self).__init__(self, data, dtype=dtype, device=device)
        else:
            self._reset(Tensor(data, dtype=dtype, device=device))
    if "qdict" in state:
        warnings.warn("Tensor's 'qdict' state is depreciated. Use 'qparams' instead")
        state.pop("qdict")
    elif "qparams" in state:
        self.__dict__["_qparams"] = state.pop("qparams")
    self.__dict__.update(state)


def _broadcast(self, *args):
    """``F.broadcast_to(self, shape)``, the shape given as MegEngine's ``_broadcast`` takes it:
    ints, a sequence, or a 1-D integer tensor (``x._broadcast(F.concat([x.shape, x.shape]))``)."""
    from .functional import broadcast_to
    if len(args) == 1 and isinstance(args[0], (list, tuple, Tensor, np.ndarray)):
        args = args[0]
    return broadcast_to(self, args)


_MEMBERS = {
    "_broadcast": _broadcast,
    "__getnewargs__": __getnewargs__,
    "__getstate__": __getstate__,
    "__setstate__": __setstate__,
    "_tuple_shape": property(_tuple_shape, doc=_tuple_shape.__doc__),
    "_isscalar": _isscalar,
    "_dev_tensor": _dev_tensor,
    "format": property(_get_format, _set_format, doc=_get_format.__doc__),
    "_set_format": _set_format,
    "_as_format": _as_format,
    "qparams": property(_get_qparams, _set_qparams, doc=_get_qparams.__doc__),
    "_qparams": property(lambda self: self.__dict__.get("_qparams"), _set_qparams,
                         doc="The quantization parameters if set, else None."),
    "set_value": set_value,
    "reset_zero": reset_zero,
    "requires_grad": property(_requires_grad, _requires_grad_set, _requires_grad_del,
                              doc="Reserved by MegEngine for future use: reading it raises."),
    "__dlpack__": __dlpack__,
    "__dlpack_device__": __dlpack_device__,
    "__ceil__": __ceil__,
    "__floor__": __floor__,
    "__trunc__": __trunc__,
}
for _name, _member in _MEMBERS.items():
    setattr(Tensor, _name, _member)
del _name, _member
