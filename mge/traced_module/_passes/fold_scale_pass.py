"""Backward folding of constant scales into convolution weights."""
from collections import OrderedDict, defaultdict
from copy import deepcopy

from ... import functional as F
from ... import module as M
from ...core.ops.builtin import GetVarShape
from ...logger import get_logger
from ...tensor import Parameter, Tensor
from ..expr import (is_apply_def, is_call_function, is_call_module, is_call_tensor_method,
                    is_constant, is_getattr)
from ..utils import assign_attr, get_subattr
from .matcher import PatternMatcher
from .pass_base import BackwardPass, register_pass
from .pattern import is_const, is_op, is_var
from .utils import get_const_value

__all__ = ["BackwardFoldScale"]

logger = get_logger(__name__)

# operations a positive scalar scale commutes with (a scale through an add also scales the
# add's constant; ``relu``-like ones only commute with a positive scale)
_SCALE_TRANSPARENT = [
    "__add__", F.reshape, "reshape", F.transpose, "transpose", F.min, "min", F.max, "max",
    F.max_pool2d, M.MaxPool2d, F.avg_pool2d, M.AvgPool2d, F.adaptive_avg_pool2d,
    M.AdaptiveAvgPool2d, F.adaptive_max_pool2d, M.AdaptiveMaxPool2d, F.expand_dims, F.concat,
    "__getitem__",
]


def _scalar_like(v):
    return not isinstance(v, Tensor) or tuple(v.shape) in ((1,), ())


def _as_number(v):
    if isinstance(v, Tensor):
        return v.numpy().reshape(-1)[0].item()
    return v


@register_pass("BackwardFoldScale")
class BackwardFoldScale(BackwardPass):
    r"""Move constant scalar multiplications back into the weights of the convolutions that
    feed them::

        x = conv(x, w, b); x = relu(x); y = (x + 3) * 3
        ->  x = conv(x, w * 3, b * 3); x = relu(x); y = x + 9

    A scale passes through adds (their constants are scaled), reshapes, transposes, pooling,
    min/max, concat, indexing, and (when positive) relu/leaky_relu.  A tensor whose users need
    different scales, or whose producer is anything else, stops it (nothing is folded then).
    """

    name = "BackwardFoldScale"
    required_pass = ["AttrToConstant", "NormElemWise"]
    run_once = True

    def __init__(self):
        super().__init__()
        self.scale_message = OrderedDict()
        self.used_names = defaultdict(int)

    def _patterns(self):
        var = is_var().check_users(False)
        mul = var * is_const() | var * "*" | is_op(F.neg)
        add = var + is_const() | var + "*"
        return var, mul, add

    def run_transform(self, expr):
        """Apply the scale found for ``expr`` by :meth:`before_visit_graph`."""
        if expr not in self.scale_message:
            return expr
        _, mul, add = self._patterns()
        conv = is_op(F.conv2d) | is_op(M.Conv2d)
        matcher = PatternMatcher()
        if not matcher.match(conv | add | mul, expr):
            return expr
        matched = matcher.matched_exprs
        if conv in matched:
            return self.fold_conv_mul(expr)
        if mul in matched:
            return self.fold_mul(expr)
        if add in matched:
            return self.fold_add_mul(expr)
        return expr

    def fold_add_mul(self, expr):
        """``x + c`` under a scale ``s`` becomes ``x + c * s``."""
        scale = self.scale_message[expr]
        if scale is None:
            return expr
        const = expr.const_val[0][-1] if len(expr.inputs) == 1 else \
            get_const_value(expr.inputs[1])
        const = const * scale
        graph = expr.top_graph
        with graph.insert_exprs():
            out = expr.inputs[0] + const
        graph.replace_node({expr.outputs[0]: out})
        graph.compile()
        out.name = expr.outputs[0].name
        return out.expr

    def fold_mul(self, expr):
        """A multiplication whose scale went backward is removed."""
        if self.scale_message[expr] is None:
            return expr
        graph = expr.top_graph
        graph.replace_node({expr.outputs[0]: expr.inputs[0]})
        graph.compile()
        return expr

    def fold_conv_mul(self, expr):
        """Scale a convolution's weight and bias."""
        scale = self.scale_message[expr]
        if scale is None:
            return expr
        graph = expr.top_graph
        if is_call_function(expr, F.conv2d):
            args = expr.named_args
            weight = get_const_value(args["weight"], args["weight"])
            bias = get_const_value(args["bias"], args["bias"])
            args["weight"] = weight * scale
            args["bias"] = None if bias is None else bias * scale
            with graph.insert_exprs():
                out = F.conv2d(**args)
            graph.replace_node({expr.outputs[0]: out})
            graph.compile()
            out.name = expr.outputs[0].name
            return out.expr
        mnode = expr.inputs[0]
        attr_name = mnode.expr.name
        shared = len(mnode.users) > 1
        conv = mnode.owner
        if shared:
            self.used_names[mnode.qualname] += 1
            attr_name = f"{attr_name}_{self.used_names[mnode.qualname]}"
            logger.warning(f"{mnode.qualname} is used {len(mnode.users)} times and its name "
                           f"will be reset to {graph.qualname}.{attr_name}")
            conv = deepcopy(conv)
            conv._name = None
        conv.weight = Parameter(conv.weight * scale)
        if conv.bias is not None:
            conv.bias = Parameter(conv.bias * scale)
        if shared:
            self_node = mnode.expr.inputs[0]
            assign_attr(conv, self_node.owner, attr_name)
            with graph.insert_exprs(mnode.expr):
                new_node = get_subattr(self_node, attr_name)
            expr.replace_inputs({mnode: new_node})
        return expr

    def _reset(self, expr, scale_message, skip):
        """Mark ``expr`` and the users after it (up to convolutions) as not to be folded."""
        seen = set()
        todo = [expr]
        while todo:
            e = todo.pop()
            if e in skip or e in seen:
                continue
            seen.add(e)
            scale_message[e] = None
            if is_call_function(e, F.conv2d) or is_call_module(e, M.Conv2d):
                continue
            for out in e.outputs:
                for user in out.users:
                    if user in scale_message:
                        todo.append(user)

    def before_visit_graph(self, graph):
        """Walk ``graph`` from its outputs and find, for each expression, the constant scale
        its users apply to it (``None``: none, or not one that can move backward)."""
        var, mul, _ = self._patterns()
        relu = is_op(F.relu) | is_op(M.ReLU) | is_op(F.leaky_relu) | is_op(M.LeakyReLU)
        # only convolutions with constant parameters can absorb a scale
        conv = (is_op(F.conv2d)(var, is_const(), is_const()) | is_op(F.conv2d)(var, is_const())
                | is_op(M.Conv2d))
        pattern = mul | relu | conv
        for op in _SCALE_TRANSPARENT:
            pattern |= is_op(op)
        matcher = PatternMatcher()
        scale_message, conv_scales = OrderedDict(), OrderedDict()
        skip = self._skip_exprs(graph)
        for expr in reversed(graph._exprs):
            if expr in skip:
                continue
            if len(expr.outputs) > 1 or not matcher.match(pattern, expr):
                self._reset(expr, scale_message, skip)
                if is_call_function(expr, F.conv2d):
                    for user in expr.outputs[0].users:
                        self._reset(user, scale_message, skip)
                continue
            matched = matcher.matched_exprs
            const = None
            if mul in matched:
                if is_call_function(expr, F.neg):
                    const = -1
                elif len(expr.inputs) == 1:
                    const = expr.const_val[0][-1]
                else:
                    const = get_const_value(expr.inputs[1])
                if not _scalar_like(const):
                    self._reset(expr, scale_message, skip)
                    continue
                const = _as_number(const)
            users = [scale_message.get(e) for e in expr.outputs[0].users if e not in skip]
            if not users:
                scale_message[expr] = const
                continue
            if any(c is None or c != users[0] for c in users):
                self._reset(expr, scale_message, skip)
                scale_message[expr] = const
                continue
            const = users[0] * (1 if const is None else const)
            if relu in matched and const < 0:
                self._reset(expr, scale_message, skip)
                continue
            if conv in matched:
                self._reset(expr, scale_message, skip)
                conv_scales[expr] = const
                continue
            scale_message[expr] = const
        self.scale_message.update(scale_message)
        self.scale_message.update(conv_scales)

    def _skip_exprs(self, graph):
        """Expressions on constants and shapes only (no scale flows through them)."""
        skip = set()
        for expr in graph._exprs:
            if is_apply_def(expr, GetVarShape) or is_getattr(expr) or is_constant(expr):
                skip.add(expr)
            elif is_call_tensor_method(expr, "__getitem__") and expr.inputs and \
                    expr.inputs[0].expr in skip:
                skip.add(expr)
            elif expr.inputs and all(n.expr in skip for n in expr.inputs):
                skip.add(expr)
        return skip
