"""``mge.traced_module``: record a Module's forward as a graph of expressions (MegEngine 1.13's
``megengine.traced_module``), inspect and modify the graph, and run it."""
from . import compat, expr, node, pytree, serialization
from ._passes import optimize
from .pytree import register_supported_type
from .module_tracer import register_as_builtin, wrap
from .traced_module import InternalGraph, TracedModule, TracedModuleBuilder, trace_module

__all__ = ["register_as_builtin", "trace_module", "wrap", "TracedModule", "InternalGraph",
           "TracedModuleBuilder", "enable_expr_checker", "set_cpp_apply_module_trace", "optimize",
           "register_supported_type"]

def enable_expr_checker():
    """Check every later ``trace_module``: its graph is replayed on the traced inputs and the
    results must equal the module's own (an ``AssertionError`` names the output that differs).
    MegEngine checks expression by expression while tracing; mge's recording runs the real calls,
    so it checks the replay of the whole graph."""
    from . import traced_module as _tm
    _tm.CHECK_EXPRS = True


def set_cpp_apply_module_trace(flag):
    """MegEngine's switch between its C++ and Python apply hooks; mge has only one (no-op)."""
    return None
