"""Loaders that upgrade TracedModules pickled by older versions (MegEngine's
``traced_module.compat``): each checks the version an expression was dumped with."""
import numpy as np

from .expr import CallMethod
from .node import TensorNode
from .serialization import register_functional_loader

__all__ = []


def _version(v):
    parts = []
    for p in str(v).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _dumped_before(expr, version):
    v = getattr(expr, "version", None)
    return v is None or _version(v) <= _version(version)


@register_functional_loader(("megengine.functional.elemwise", "square"))
def square_func_loader(expr):
    """Up to 1.11.1 ``square`` of an integer tensor gave float32; the result of a newer
    ``square`` (the input's dtype) is cast to float32 so the loaded graph computes the same."""
    if not _dumped_before(expr, "1.11.1"):
        return
    inp = expr.inputs[0]
    if inp.dtype is None or np.dtype(inp.dtype) == np.float32:
        return
    orig = expr.outputs[0]
    out = TensorNode(expr, shape=orig.shape, dtype=inp.dtype)
    expr.return_val = (out,)
    cast = CallMethod(out, "astype")
    cast.set_args_kwargs(out, "float32")
    orig.expr = cast
    cast.return_val = (orig,)
