"""``mge.core._trace_option``: MegEngine's switches ``use_symbolic_shape`` and ``use_xla_backend``.

MegEngine can make ``Tensor.shape`` return a tensor (symbolic shape, for graphs whose shapes vary).
mge's shapes are always tuples of ints, known eagerly or waited for, so the switch is kept as a
flag that code may read and set, and does not change ``Tensor.shape`` (``docs/differences.rst``).
mge has no XLA backend: ``set_use_xla_backend(True)`` raises ``NotImplementedError``.
"""
import os

__all__ = ["use_symbolic_shape", "set_symbolic_shape", "use_xla_backend", "set_use_xla_backend",
           "set_cpp_use_symbolic_shape"]


def set_cpp_use_symbolic_shape(fn):
    """MegEngine hands ``use_symbolic_shape`` to its C++ runtime here; mge's runtime reads this
    module's flag, so there is nothing to hand over."""
    del fn

_use_symbolic_shape = bool(os.environ.get("MEGENGINE_USE_SYMBOLIC_SHAPE"))


def use_symbolic_shape() -> bool:
    """Whether symbolic shapes were asked for (mge's ``shape`` is a tuple either way)."""
    return _use_symbolic_shape


def set_symbolic_shape(option: bool) -> bool:
    """Set the symbolic-shape flag; returns the previous value."""
    global _use_symbolic_shape
    old = _use_symbolic_shape
    _use_symbolic_shape = bool(option)
    return old


def use_xla_backend() -> bool:
    """Always ``False``: mge has no XLA backend."""
    return False


def set_use_xla_backend(option: bool) -> bool:
    """``False`` is accepted (returns ``False``); ``True`` raises ``NotImplementedError``."""
    if option:
        raise NotImplementedError("mge has no XLA backend")
    return False
