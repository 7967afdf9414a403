"""``mge.core.autodiff.grad``: MegEngine's ``Grad`` (one recording: ``wrt``, ``__call__``, a context
manager) and ``Function``, as mge's ``GradManager`` uses them (the ``grad`` plugin does the work)."""
from ...autodiff.function import Function
from ...autodiff.grad_manager import _Grad

__all__ = ["Grad", "Function", "get_grad_managers", "GradKey"]


def __getattr__(name):
    # the grad plugin is loaded after mge's modules: its GradKey class is looked up on use
    if name == "GradKey":
        from .._imperative_rt.core2 import _grad_module
        return _grad_module().GradKey
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Grad(_Grad):
    """One recording of operations for reverse-mode differentiation.

    ``with Grad() as grad: grad.wrt(x, callback=f); y = ...; grad(y, dy)`` calls ``f(dx)``.
    ``Grad(name=None)``; ``wrt(*tensors, callback=None)`` returns the ``Grad``.
    """

    def __call__(self, ys, dys):
        """Backward from ``ys`` with output gradients ``dys`` (tensors or sequences of them)."""
        if not isinstance(ys, (list, tuple)):
            ys = [ys]
        if not isinstance(dys, (list, tuple)):
            dys = [dys]
        return super().__call__(list(ys), list(dys))


def get_grad_managers():
    """The ``GradManager`` objects recording now (mge keeps none outside ``GradManager``)."""
    return []
