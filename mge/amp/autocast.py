"""``autocast``: the context manager and decorator that switches AMP on.

The casting itself is done by the ``dtype_promote`` transformation plugin; this module only sets
its switches (MegEngine keeps them in ``core.tensor.amp``).
"""
import functools

import numpy as np

from ..core import get_plugin

__all__ = ["autocast"]

# Whether autocast is on: read and written through ``mge.amp.enabled``.
_enabled = False


def _state():
    # The dtype_promote plugin owns the switches; a disabled plugin is a clear error here.
    return get_plugin("dtype_promote").amp


def _set_amp_dtype_autocast(flag):
    """Whether dtype promotion converts op inputs to the AMP dtypes (MegEngine's switch)."""
    _state().autocast = bool(flag)


def _get_amp_dtype_autocast():
    return _state().autocast


def _set_amp_low_prec_dtype(dtype):
    _state().low_prec_dtype = np.dtype(dtype)


def _get_amp_low_prec_dtype():
    return _state().low_prec_dtype.name


def _set_amp_high_prec_dtype(dtype):
    _state().high_prec_dtype = np.dtype(dtype)


def _get_amp_high_prec_dtype():
    return _state().high_prec_dtype.name


def _set_enabled(flag):
    global _enabled
    _enabled = bool(flag)
    _set_amp_dtype_autocast(flag)


class autocast:
    """Context manager and decorator that turns AMP autocast on.

    Args:
        enabled: whether autocast mode is enabled.
        low_prec_dtype: dtype for speed-critical ops (matmul, conv). Default: float16.
        high_prec_dtype: dtype for precision-critical ops. Default: float32.

    Example::

        >>> import mge, mge.functional as F
        >>> a = mge.tensor([[1.0, 2.0]]); b = mge.tensor([[3.0], [4.0]])
        >>> with mge.amp.autocast():
        ...     F.matmul(a, b).dtype
        dtype('float16')
    """

    def __init__(self, enabled=True, low_prec_dtype="float16", high_prec_dtype="float32"):
        self.enabled = enabled
        self.low_prec_dtype = low_prec_dtype
        self.high_prec_dtype = high_prec_dtype
        self._saved = []

    def __enter__(self):
        global _enabled
        if self.enabled:
            self._saved.append((_enabled, _get_amp_dtype_autocast(), _get_amp_low_prec_dtype(),
                                _get_amp_high_prec_dtype()))
            _enabled = True
            _set_amp_dtype_autocast(True)
            _set_amp_low_prec_dtype(self.low_prec_dtype)
            _set_amp_high_prec_dtype(self.high_prec_dtype)
        return self

    def __exit__(self, *exc):
        global _enabled
        if self.enabled:
            enabled, flag, low, high = self._saved.pop()
            _enabled = enabled
            _set_amp_dtype_autocast(flag)
            _set_amp_low_prec_dtype(low)
            _set_amp_high_prec_dtype(high)

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return wrapper
