"""Fusion passes: folding chains of constant add/mul/pow, and batch normalisation into the
convolution before it."""
import operator
from collections import defaultdict

from ... import functional as F
from ... import module as M
from ...logger import get_logger
from ...tensor import Parameter, Tensor
from ...utils.bn_fusion import fold_weight_bias
from ..expr import is_call_function
from ..utils import assign_attr, get_subattr
from .matcher import PatternMatcher
from .pass_base import BackwardPass, register_pass
from .pattern import is_const, is_op, is_var
from .utils import get_const_value

__all__ = ["FuseAddMul", "FuseConvBn"]

logger = get_logger(__name__)


def _scalar_like(v):
    return not isinstance(v, Tensor) or tuple(v.shape) in ((1,), ())


@register_pass("FuseAddMul")
class FuseAddMul(BackwardPass):
    """Fold two adjacent constant adds (or muls, or pows) into one::

        x = x + 1; x = 2 + x; x = x * 4; x = x * 0.25   ->   x = x + 3

    Only scalar (or one-element) constants are folded; a fold that gives the identity
    (``+ 0``, ``* 1``, ``** 1``) removes the operation."""

    name = "FuseAddMul"
    required_pass = ["NormElemWise"]
    run_once = False

    def __init__(self):
        super().__init__()

        def chain(op_0, op_1):
            x = is_var().check_users(False)
            if op_0 not in (operator.add, operator.mul):
                op_0 = is_op(op_0)
            if op_1 not in (operator.add, operator.mul):
                op_1 = is_op(op_1)
            first = op_0(x, is_const()) | op_0(x, "*")
            return op_1(first, is_const()) | op_1(first, "*")

        self.pattern_dict = {
            chain(operator.add, operator.add): self.fold_add,
            chain(F.pow, F.pow): self.fold_pow,
        }
        for a in (F.neg, operator.mul):
            for b in (F.neg, operator.mul):
                self.pattern_dict[chain(a, b)] = self.fold_mul

    def run_transform(self, expr):
        """Fold ``expr`` with the add/mul/pow before it when both have constants."""
        matcher = PatternMatcher()
        for pattern, fold in self.pattern_dict.items():
            if matcher.match(pattern, expr):
                return fold(expr)
        return expr

    def _fold(self, expr, combine, op):
        c0 = self.get_const_value(expr)
        c1 = self.get_const_value(expr.inputs[0].expr)
        if not (_scalar_like(c0) and _scalar_like(c1)):
            return expr
        inp = expr.inputs[0].expr.inputs[0]
        const = combine(c0, c1)
        graph = expr.top_graph
        identity = 0 if op is operator.add else 1
        if isinstance(const, Tensor):
            is_identity = bool((const == identity).numpy().all())
        else:
            is_identity = const == identity
        if is_identity:
            graph.replace_node({expr.outputs[0]: inp})
            graph.compile()
            return expr
        with graph.insert_exprs():
            out = op(inp, const)
        graph.replace_node({expr.outputs[0]: out})
        graph.compile()
        return out.expr

    def fold_add(self, expr):
        """``(x + a) + b`` -> ``x + (a + b)``."""
        return self._fold(expr, operator.add, operator.add)

    def fold_mul(self, expr):
        """``(x * a) * b`` -> ``x * (a * b)`` (a negation is a ``* -1``)."""
        return self._fold(expr, operator.mul, operator.mul)

    def fold_pow(self, expr):
        """``(x ** a) ** b`` -> ``x ** (a * b)``."""
        return self._fold(expr, operator.mul, F.pow)

    def get_const_value(self, expr):
        """The constant operand of an add/mul/pow expression (``-1`` for a negation)."""
        if is_call_function(expr, F.neg):
            return -1
        if len(expr.inputs) == 2:
            value = get_const_value(expr.inputs[1].expr, None)
            assert value is not None, f"{expr}: its second operand is no constant"
            return value
        return expr.const_val[0][-1]


@register_pass("FuseConvBn")
class FuseConvBn(BackwardPass):
    r"""Fold a batch normalisation (``M.BatchNorm2d`` or ``F.batch_norm`` with constant
    statistics) that follows a convolution (``M.Conv2d`` or ``F.conv2d``) into the
    convolution's weight and bias.  A fused ``Conv2d`` module replaces the old one (under a
    new attribute name when the old one is used more than once)."""

    name = "FuseConvBn"
    required_pass = ["AttrToConstant"]
    run_once = True

    def __init__(self):
        super().__init__()
        self.used_name = defaultdict(int)

    def run_transform(self, expr):
        """Fold a batch normalisation ``expr`` into the convolution before it."""
        conv_m = is_op(M.Conv2d)
        conv_f = is_op(F.conv2d)
        conv = conv_m | conv_f
        bn_f = is_op(F.batch_norm)
        consts = [is_const() for _ in range(4)]
        bn = (bn_f(conv, *consts[:2]) | bn_f(conv, *consts[:3]) | bn_f(conv, *consts)
              | is_op(M.BatchNorm2d)(conv))
        matcher = PatternMatcher()
        if not matcher.match(bn, expr):
            return expr
        matched = matcher.matched_exprs
        bn_expr = matched[bn]
        # batch statistics (training mode) cannot be folded into constants
        if is_call_function(bn_expr):
            if bn_expr.named_args.get("training"):
                return expr
        elif bn_expr.inputs[0].owner.training:
            return expr
        if conv_m in matched:
            return self.fold_convm_bn(matched[conv_m], bn_expr)
        return self.fold_convf_bn(matched[conv_f], bn_expr)

    def fold_convm_bn(self, conv, bn):
        """Fuse into a ``Conv2d`` module call: a new module with the folded parameters."""
        mnode, inp = conv.inputs[:2]
        self_node = mnode.expr.inputs[0]
        attr_name = mnode.expr.name
        graph = conv.top_graph
        if len(mnode.users) > 1:
            self.used_name[mnode.qualname] += 1
            attr_name = f"{attr_name}_{self.used_name[mnode.qualname]}"
            logger.warning(f"{mnode.qualname} is used {len(mnode.users)} times and its name "
                           f"will be reset to {graph.qualname}.{attr_name}")
        old = mnode.owner
        mean, var, gamma, beta, eps = self.get_bn_params(bn)
        weight, bias = fold_weight_bias(old.weight, old.bias, gamma, beta, mean, var, eps)
        new = M.Conv2d(in_channels=old.in_channels, out_channels=old.out_channels,
                       kernel_size=old.kernel_size, stride=old.stride, padding=old.padding,
                       dilation=old.dilation, groups=old.groups, bias=True,
                       conv_mode=old.conv_mode, compute_mode=old.compute_mode,
                       padding_mode=getattr(old, "padding_mode", "zeros"), name=old.name)
        new.weight = Parameter(weight)
        new.bias = Parameter(bias)
        new.training = old.training
        assign_attr(new, self_node.owner, attr_name)
        with graph.insert_exprs(mnode.expr):
            out = get_subattr(self_node, attr_name)(inp)
        graph.replace_node({bn.outputs[0]: out})
        graph.compile()
        out.name = conv.outputs[0].name
        return out.expr

    def fold_convf_bn(self, conv, bn):
        """Fuse into an ``F.conv2d`` call: the same call with folded constant parameters."""
        args = conv.named_args
        weight = get_const_value(args["weight"], args["weight"])
        bias = get_const_value(args["bias"], args["bias"])
        if not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
            return bn  # a dynamic weight or bias: nothing to fold into
        mean, var, gamma, beta, eps = self.get_bn_params(bn)
        args["weight"], args["bias"] = fold_weight_bias(weight, bias, gamma, beta, mean, var,
                                                        eps)
        graph = conv.top_graph
        with graph.insert_exprs():
            out = F.conv2d(**args)
        graph.replace_node({bn.outputs[0]: out})
        graph.compile()
        out.name = conv.outputs[0].name
        return out.expr

    def get_bn_params(self, bn):
        """``(mean, var, gamma, beta, eps)`` of a batch-norm expression."""
        if is_call_function(bn):
            a = bn.named_args

            def const(k):
                return get_const_value(a[k], a[k])
            return (const("running_mean"), const("running_var"), const("weight"),
                    const("bias"), a["eps"])
        m = bn.inputs[0].owner
        return m.running_mean, m.running_var, m.weight, m.bias, m.eps
