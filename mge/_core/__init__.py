"""The runtime: ops, dispatch, the transformation stack, the channel and devices.

Public code should import from ``mge`` and ``mge.core``; this package is the implementation.
"""
from . import ops  # noqa: F401  (fills the rule tables)
