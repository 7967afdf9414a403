"""``mge.core.autodiff``: MegEngine's low-level autodiff names (:mod:`.grad`)."""
from . import grad  # noqa: F401

__all__ = ["grad"]
