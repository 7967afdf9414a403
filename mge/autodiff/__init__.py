"""``mge.autodiff``: gradients by reverse-mode automatic differentiation (MegEngine's module).

:class:`GradManager` computes the gradients of attached tensors; :class:`Function` defines a block
of operations with its own backward.  Both run on the ``grad`` transformation plugin
(``mge.core.get_plugin("grad")``).  See the guide ``docs/guides/autodiff.rst``.
"""
from .function import Function
from .grad_manager import GradManager, GradManagerGroup

__all__ = ["GradManager", "GradManagerGroup", "Function"]
