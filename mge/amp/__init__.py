"""Automatic mixed precision (MegEngine's ``megengine.amp``).

Under :class:`autocast`, matrix products and convolutions compute in ``low_prec_dtype`` (float16)
and layer normalisation, softmax and the like in ``high_prec_dtype`` (float32); batch
normalisation takes float16 data and float32 parameters and statistics (as MegEngine).  The casting is done by
the ``dtype_promote`` transformation plugin; this package only sets its switches.
:class:`GradScaler` scales the loss so that small float16 gradients do not underflow.

    >>> import mge, mge.functional as F
    >>> a = mge.tensor([[1.0, 2.0]]); b = mge.tensor([[3.0], [4.0]])
    >>> with mge.amp.autocast():
    ...     F.matmul(a, b).dtype
    dtype('float16')

:func:`convert_module_format` and :func:`convert_tensor_format` mark 4-d and 5-d tensors as
``"nhwc"`` (a label in mge: tensors keep their logical layout).

The switches are module properties, as in MegEngine: ``mge.amp.enabled``,
``mge.amp.low_prec_dtype`` and ``mge.amp.high_prec_dtype`` can be read and set.
"""
import sys
import types

from . import autocast as _autocast_mod
from .autocast import autocast
from .convert_format import convert_module_format, convert_tensor_format
from .grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "convert_module_format", "convert_tensor_format", "enabled",
           "low_prec_dtype", "high_prec_dtype"]

# MegEngine's private switch functions, importable from mge.amp as before the package split.
_set_amp_dtype_autocast = _autocast_mod._set_amp_dtype_autocast
_get_amp_dtype_autocast = _autocast_mod._get_amp_dtype_autocast
_set_amp_low_prec_dtype = _autocast_mod._set_amp_low_prec_dtype
_get_amp_low_prec_dtype = _autocast_mod._get_amp_low_prec_dtype
_set_amp_high_prec_dtype = _autocast_mod._set_amp_high_prec_dtype
_get_amp_high_prec_dtype = _autocast_mod._get_amp_high_prec_dtype


class _AmpModule(types.ModuleType):
    # Module-level properties (MegEngine uses ``mprop`` for the same effect).
    @property
    def enabled(self):
        """Whether AMP autocast is on (settable, as ``mge.amp.enabled = True``)."""
        return _autocast_mod._enabled

    @enabled.setter
    def enabled(self, value):
        _autocast_mod._set_enabled(value)

    @property
    def low_prec_dtype(self):
        """The low-precision dtype name (default ``"float16"``); settable."""
        return _autocast_mod._get_amp_low_prec_dtype()

    @low_prec_dtype.setter
    def low_prec_dtype(self, dtype):
        _autocast_mod._set_amp_low_prec_dtype(dtype)

    @property
    def high_prec_dtype(self):
        """The high-precision dtype name (default ``"float32"``); settable."""
        return _autocast_mod._get_amp_high_prec_dtype()

    @high_prec_dtype.setter
    def high_prec_dtype(self, dtype):
        _autocast_mod._set_amp_high_prec_dtype(dtype)


sys.modules[__name__].__class__ = _AmpModule
