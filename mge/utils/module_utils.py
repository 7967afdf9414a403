"""Helpers that reach into a module by a dotted key (MegEngine's ``megengine.utils.module_utils``).

Keys are those of :meth:`~mge.module.Module.named_children` / ``named_modules`` /
``named_parameters``: attribute names, with list/tuple indices and dict keys for containers
(``"blocks.0.conv"``, ``"heads.cls"``).
"""
import contextlib

from ..module.module import Module, _access_structure
from ..tensor import Tensor

__all__ = ["get_expand_structure", "set_expand_structure", "set_module_mode_safe"]


def get_expand_structure(obj: Module, key: str):
    """The object at dotted ``key`` under ``obj`` (lists and dicts on the way are followed)."""
    return _access_structure(obj, key)


def set_expand_structure(obj: Module, key: str, value):
    """Put ``value`` at dotted ``key`` under ``obj``: an attribute of a module (or tensor), an
    item of a list or dict (a :class:`~mge.module.Sequential`'s layers are attributes)."""

    def put(parent, last, cur):
        if isinstance(parent, (Tensor, Module)):
            # A Sequential's layers are attributes named by their keys too.
            setattr(parent, last, value)
        elif isinstance(parent, tuple):
            raise TypeError(f"set_expand_structure: {key!r} is inside a tuple, which cannot be "
                            "changed in place")
        else:
            parent[last] = value

    _access_structure(obj, key, callback=put)


@contextlib.contextmanager
def set_module_mode_safe(module: Module, training: bool = False):
    """Put every module under ``module`` in ``training`` mode for the ``with`` block, then give
    each its own mode back."""
    saved = {}
    for m in module.modules():
        saved[m] = m.training
        m.train(training, recursive=False)
    try:
        yield module
    finally:
        for m in module.modules():
            if m in saved:
                m.training = saved[m]
