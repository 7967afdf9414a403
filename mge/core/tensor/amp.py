"""``megengine.core.tensor.amp``: MegEngine's low-level AMP switches, over :mod:`mge.amp`'s.

MegEngine keeps the autocast state here (``_enabled``, the ``_get/_set_amp_*`` functions) and
``megengine.amp`` reads it; in mge the state lives in ``mge.amp.autocast`` and this module shows
the same state: ``_enabled`` is always ``mge.amp.enabled``, and ``enabled``, ``low_prec_dtype``
and ``high_prec_dtype`` are settable module properties, as in MegEngine.
"""
import sys
import types

from ...amp import _autocast_mod as _autocast

_set_amp_dtype_autocast = _autocast._set_amp_dtype_autocast
_get_amp_dtype_autocast = _autocast._get_amp_dtype_autocast
_set_amp_low_prec_dtype = _autocast._set_amp_low_prec_dtype
_get_amp_low_prec_dtype = _autocast._get_amp_low_prec_dtype
_set_amp_high_prec_dtype = _autocast._set_amp_high_prec_dtype
_get_amp_high_prec_dtype = _autocast._get_amp_high_prec_dtype

__all__ = ["enabled", "high_prec_dtype", "low_prec_dtype"]


class _AmpStateModule(types.ModuleType):
    @property
    def _enabled(self):
        # (a module global in MegEngine, read by its tests: here a view of mge.amp's state)
        return _autocast._enabled

    @property
    def enabled(self):
        """Whether AMP autocast is on (settable)."""
        return _autocast._enabled

    @enabled.setter
    def enabled(self, value):
        _autocast._set_enabled(value)

    @property
    def low_prec_dtype(self):
        """The low-precision dtype name (default ``"float16"``); settable."""
        return _autocast._get_amp_low_prec_dtype()

    @low_prec_dtype.setter
    def low_prec_dtype(self, dtype):
        _autocast._set_amp_low_prec_dtype(dtype)

    @property
    def high_prec_dtype(self):
        """The high-precision dtype name (default ``"float32"``); settable."""
        return _autocast._get_amp_high_prec_dtype()

    @high_prec_dtype.setter
    def high_prec_dtype(self, dtype):
        _autocast._set_amp_high_prec_dtype(dtype)


sys.modules[__name__].__class__ = _AmpStateModule
