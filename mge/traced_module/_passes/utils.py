"""Helpers of the graph passes: registries and the values of constant nodes."""
import copy

from ..expr import is_constant, is_getattr
from ..node import Node, TensorNode

__all__ = ["register_obj", "get_const_value"]


def register_obj(objs, _dict):
    """A decorator that enters the decorated object in ``_dict`` under each key of ``objs``
    (one key or a list of keys)."""
    keys = objs if isinstance(objs, list) else [objs]

    def _register(obj):
        for k in keys:
            _dict[k] = obj
        return obj

    return _register


def get_const_value(expr, fall_back=None):
    """A copy of the value a ``Constant`` expression (or a tensor ``GetAttr``) gives; ``expr``
    may be a node (its producer is used).  Anything else gives ``fall_back``."""
    if isinstance(expr, Node):
        expr = expr.expr
    if is_getattr(expr) and isinstance(expr.outputs[0], TensorNode):
        owner = expr.inputs[0].owner
        assert owner is not None, f"{expr}: its module node has no module"
        return copy.deepcopy(expr.interpret(owner)[0])
    if is_constant(expr):
        return copy.deepcopy(expr.interpret()[0])
    return fall_back
