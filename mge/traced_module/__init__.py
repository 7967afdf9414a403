"""``mge.traced_module``: record a Module's forward as a graph of expressions (MegEngine 1.13's
``megengine.traced_module``), inspect and modify the graph, and run it."""
from . import expr, node, pytree
from .module_tracer import register_as_builtin, wrap
from .traced_module import InternalGraph, TracedModule, TracedModuleBuilder, trace_module

__all__ = ["register_as_builtin", "trace_module", "wrap", "TracedModule", "InternalGraph",
           "TracedModuleBuilder", "enable_expr_checker", "set_cpp_apply_module_trace"]

_checker = [False]


def enable_expr_checker():
    """Ask for each expression to be checked while tracing (mge records by running the real
    calls, so the recorded results are the executed ones; this switch is kept for MegEngine's
    API and records the wish)."""
    _checker[0] = True


def set_cpp_apply_module_trace(flag):
    """MegEngine's switch between its C++ and Python apply hooks; mge has only one (no-op)."""
    return None
