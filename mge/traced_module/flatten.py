"""``TracedModule.flatten``: retrace a TracedModule with its TracedModule submodules inlined."""
import numpy as np

from . import module_tracer as mt

__all__ = ["flatten_module"]


def flatten_module(tm):
    """A TracedModule whose graph inlines every TracedModule submodule (built-ins stay calls)."""
    from mge.tensor import Tensor
    from .traced_module import trace_module
    g = tm.graph
    inputs = [Tensor(np.zeros(n.shape, dtype=n.dtype or "float32")) for n in g.inputs[1:]]
    mt._state.inline = True
    try:
        return trace_module(tm, *inputs)
    finally:
        mt._state.inline = False
