"""dtype_promote: MegEngine's dtype rules for mixed inputs, and AMP autocast.

The entry point of the plugin.  The rules live in ``mge_plugins.dtype_rules``, a hot module that
runs compiled when built (``MGE_PUREPYTHON=1`` selects the pure-Python twin); see its docstring
for what they do.
"""
from mge._core import _accel

_rules = _accel.load("mge_plugins.dtype_rules")

DTypePromoteTransformation = _rules.DTypePromoteTransformation
AmpState = _rules.AmpState
amp = _rules.amp
common_dtype = _rules.common_dtype

__all__ = ["DTypePromoteTransformation", "AmpState", "amp", "common_dtype"]
