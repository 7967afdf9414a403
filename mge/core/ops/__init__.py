"""``mge.core.ops``: mge's op classes (everything of ``mge._core.ops``) and ``builtin``, MegEngine's
op classes with their names and parameters (see :mod:`mge.core.ops.builtin`)."""
from ..._core.ops import *  # noqa: F401,F403
from . import builtin  # noqa: F401
