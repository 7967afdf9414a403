"""Passes on constants: attributes to constants, constant folding, fixed input shapes and
the normalisation of add/sub/mul/div into add-only or mul-only chains."""
from ... import functional as F
from ...core.ops.builtin import GetVarShape
from ...tensor import Tensor
from ..expr import Constant, is_apply_def, is_constant, is_getattr
from ..node import NodeMixin, TensorNode
from .matcher import PatternMatcher
from .pass_base import BackwardPass, ForwardPass, register_pass
from .pattern import is_op
from .utils import get_const_value

__all__ = ["AttrToConstant", "FixInputShape", "FlodConstant", "NormElemWise"]


def _as_const_node(value):
    node = Constant.make(value)
    NodeMixin.wrap(value, node)
    return node


def _replace_with_const(expr, value, insert_after):
    graph = expr.top_graph
    old = expr.outputs[0]
    with graph.insert_exprs(insert_after):
        node = _as_const_node(value)
    graph.replace_node({old: node})
    graph.compile()
    node.name = old.name
    return node.expr


@register_pass("AttrToConstant")
class AttrToConstant(BackwardPass):
    r"""Turn each tensor :class:`~.GetAttr` into a :class:`~.Constant` holding a copy of the
    attribute's value."""

    name = "AttrToConstant"
    run_once = True

    def run_transform(self, expr):
        """A tensor ``GetAttr`` becomes a ``Constant`` of a copy of its value."""
        if not (is_getattr(expr) and isinstance(expr.outputs[0], TensorNode)):
            return expr
        return _replace_with_const(expr, get_const_value(expr), expr)


@register_pass("FixInputShape")
class FixInputShape(BackwardPass):
    r"""Replace ``GetVarShape`` of a tensor by a constant of the shape seen while tracing."""

    name = "FixInputShape"
    run_once = True

    def run_transform(self, expr):
        """A ``GetVarShape`` becomes a constant of the traced shape."""
        if not is_apply_def(expr, GetVarShape):
            return expr
        shape = Tensor(expr.inputs[0].shape, dtype="int32")
        return _replace_with_const(expr, shape, expr)


@register_pass(["FlodConstant", "FoldConstant"])
class FlodConstant(ForwardPass):
    r"""Constant folding: an expression whose inputs are all constants becomes the constant
    it computes.  (MegEngine's name; also registered as ``FoldConstant``.)"""

    name = "FlodConstant"
    required_pass = ["AttrToConstant"]
    run_once = False

    def run_transform(self, expr):
        """An expression of constants only becomes the constant it gives."""
        if not expr.inputs or len(expr.outputs) != 1 or \
                any(n.expr is None or not is_constant(n.expr) for n in expr.inputs):
            return expr
        value = expr.interpret(*[get_const_value(n.expr) for n in expr.inputs])[0]
        if not isinstance(value, Tensor):
            return expr
        return _replace_with_const(expr, value, expr)


_ADD = ("__add__", "__iadd__", "__radd__")
_SUB = ("__sub__", "__isub__", "__rsub__")
_MUL = ("__mul__", "__imul__", "__rmul__")
_DIV = ("__truediv__", "__itruediv__", "__rtruediv__")


@register_pass("NormElemWise")
class NormElemWise(BackwardPass):
    r"""Rewrite add/sub and mul/div (functions and Tensor methods) with a constant operand
    into add or mul with the variable first::

        b = 1 - a      ->  b = F.neg(a) + 1
        c = 2 * b      ->  c = b * 2
        d = 1 / c      ->  d = F.pow(c, -1) * 1
    """

    name = "NormElemWise"
    required_pass = ["FlodConstant"]
    run_once = False

    def __init__(self):
        super().__init__()
        pattern = is_op(F.add)
        for op in (F.sub, F.mul, F.div) + _ADD + _SUB + _MUL + _DIV:
            pattern |= is_op(op)
        self.pattern = pattern

    def run_transform(self, expr):
        """Rewrite one add/sub/mul/div with a constant operand."""
        matcher = PatternMatcher()
        if not matcher.match(self.pattern, expr):
            return expr
        target = matcher.matched_patterns[0].target
        is_func = not isinstance(target, str)
        swapped = False  # the variable is the second operand of a non-commutative op
        left = right = None
        if len(expr.inputs) == 1 and target not in ("__add__", "__mul__"):
            left = expr.inputs[0]
            for v in expr.named_args.values():
                if not isinstance(v, TensorNode):
                    right = v
                    break
            if target in ("__rsub__", "__rtruediv__"):
                swapped = True
            if is_func and target in (F.sub, F.div) and left is not expr.named_args["x"]:
                swapped = True
        elif len(expr.inputs) == 2 and (target not in ("__add__", "__mul__")
                                        or is_constant(expr.inputs[0].expr)):
            left, right = expr.inputs
            if target in ("__rsub__", "__rtruediv__"):
                left, right = right, left
            if is_func and target in (F.sub, F.div) and left is not expr.named_args["x"]:
                left, right = right, left
            if is_constant(left.expr):
                left, right = right, left
                swapped = True
        if left is None:
            return expr
        if isinstance(right, TensorNode):
            right = get_const_value(right.expr, right)
        kind = ("mul" if target in _MUL or target is F.mul else
                "add" if target in _ADD or target is F.add else
                "sub" if target in _SUB or target is F.sub else "div")
        graph = expr.top_graph

        def each(v, f):
            return [f(x) for x in v] if isinstance(v, (list, tuple)) else f(v)

        # a constant operand is negated / inverted here, not recorded
        if kind == "sub" and not swapped and not isinstance(right, TensorNode):
            right, kind = each(right, lambda v: -1 * v), "add"
        if kind == "div" and not swapped and not isinstance(right, TensorNode):
            right, kind = each(right, lambda v: 1 / v), "mul"
        with graph.insert_exprs():
            if kind == "mul":
                out = left * right
            elif kind == "add":
                out = left + right
            elif kind == "sub":
                out = each(left, F.neg) + right if swapped else left + each(right, F.neg)
            else:
                out = (each(left, lambda v: F.pow(v, -1)) * right if swapped
                       else left * each(right, lambda v: F.pow(v, -1)))
        graph.replace_node({expr.outputs[0]: out})
        graph.compile()
        return out.expr
