"""mge.traced_module.optimize and its passes: each optimized module computes what the
unoptimized one does (within float32 rounding), and the folded operations are gone."""
import pickle

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.traced_module as tm
from mge.traced_module._passes.matcher import PatternMatcher
from mge.traced_module._passes.pass_base import (BackwardPass, PassContext,
                                                 get_registered_pass, register_pass)
from mge.traced_module._passes.pattern import is_const, is_op, is_var
from mge.traced_module.expr import CallMethod

RTOL, ATOL = 2e-5, 2e-5


def _rng():
    return np.random.RandomState(1234)


def _randomize_bn(bn, rng):
    c = bn.num_features
    bn.running_mean[...] = mge.Tensor(rng.normal(size=(1, c, 1, 1)).astype("float32"))
    bn.running_var[...] = mge.Tensor(rng.uniform(0.5, 2.0, size=(1, c, 1, 1)).astype("float32"))
    if bn.weight is not None:
        bn.weight[...] = mge.Tensor(rng.normal(size=bn.weight.shape).astype("float32"))
        bn.bias[...] = mge.Tensor(rng.normal(size=bn.bias.shape).astype("float32"))


class MyConv(M.Conv2d):
    """A user subclass: traced into, so the flattened graph calls F.conv2d."""


class MyBN(M.BatchNorm2d):
    """A user subclass: traced into, so the flattened graph calls F.batch_norm."""


class Block(M.Module):
    def __init__(self, conv_cls=M.Conv2d, bn_cls=M.BatchNorm2d, bias=True, rng=None):
        super().__init__()
        self.conv = conv_cls(3, 4, 3, padding=1, bias=bias)
        self.bn = bn_cls(4)
        self.conv2 = conv_cls(3, 4, 1, bias=bias)
        self.bn2 = bn_cls(4)
        self.scale = mge.Tensor([2.0, 0.5])
        _randomize_bn(self.bn, rng)
        _randomize_bn(self.bn2, rng)

    def forward(self, x):
        a = F.relu(self.bn(self.conv(x))) * self.scale[0]
        b = F.relu(self.bn2(self.conv2(x))) * self.scale[1]
        y = F.add(a + b, 3)
        y = self.scale[0] + y
        return F.relu(y) * 3


class Net(M.Module):
    def __init__(self, **kw):
        super().__init__()
        rng = _rng()
        self.b0 = Block(rng=rng, **kw)
        self.b1 = Block(rng=rng, **kw)

    def forward(self, x):
        return F.reshape(self.b0(x) + self.b1(x), (-1,)) * 2


def _input():
    return mge.Tensor(_rng().normal(size=(2, 3, 8, 8)).astype("float32"))


def _traced(**kw):
    net = Net(**kw)
    net.eval()
    x = _input()
    return net, x, tm.trace_module(net, x).flatten()


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("conv_cls,bn_cls,bias", [
    (M.Conv2d, M.BatchNorm2d, True), (MyConv, MyBN, True), (M.Conv2d, M.BatchNorm2d, False),
    (MyConv, M.BatchNorm2d, False)])
def test_fuse_conv_bn_numerics(conv_cls, bn_cls, bias):
    net, x, traced = _traced(conv_cls=conv_cls, bn_cls=bn_cls, bias=bias)
    want = net(x)
    opt = tm.optimize(traced, "FuseConvBn")
    _close(opt(x), want)
    g = opt.graph
    assert not g.get_function_by_type(F.batch_norm).as_list()
    assert not g.get_module_by_type(M.BatchNorm2d).as_list()
    # the input module is not changed
    assert traced.graph.get_function_by_type(F.batch_norm).as_list() or \
        traced.graph.get_module_by_type(M.BatchNorm2d).as_list()
    _close(traced(x), want)


def test_backward_fold_scale_numerics():
    net, x, traced = _traced()
    want = net(x)
    opt = tm.optimize(traced, ["BackwardFoldScale", "FuseAddMul"])
    _close(opt(x), want)
    assert not opt.graph.get_method_by_type("__mul__").as_list()
    # the constant adds folded into one per block
    adds = [e for e in opt.graph.get_method_by_type("__add__").as_list()
            if len(e.inputs) == 1 or type(e.inputs[1].expr).__name__ == "Constant"]
    assert len(adds) == 2


def test_fuse_add_mul_chain():
    class Chain(M.Module):
        def forward(self, x):
            x = x + 1
            x = 2 + x
            x = x * 4
            x = x * 0.25
            x = x - 0.5
            return x / 2

    m = Chain()
    x = mge.Tensor(_rng().normal(size=(5,)).astype("float32"))
    opt = tm.optimize(tm.trace_module(m, x), "FuseAddMul")
    _close(opt(x), m(x))
    exprs = [e for e in opt.graph._exprs if isinstance(e, CallMethod)]
    # (x + 3) * 4 * 0.25 -> x + 3; - 0.5 -> + 2.5 (folded); / 2 -> * 0.5
    assert [e.method for e in exprs] == ["__add__", "__mul__"]
    assert exprs[0].const_val[0][1] == pytest.approx(2.5)


def test_norm_elemwise_sub_div():
    class SubDiv(M.Module):
        def forward(self, x, y):
            return (1 - x) / 4 + F.sub(x, 2) * F.div(3, y) - y

    m = SubDiv()
    rng = _rng()
    x = mge.Tensor(rng.normal(size=(4,)).astype("float32"))
    y = mge.Tensor(rng.uniform(1, 2, size=(4,)).astype("float32"))
    traced = tm.trace_module(m, x, y)
    opt = get_registered_pass("NormElemWise")()(tm.optimize(traced, []), PassContext())
    _close(opt(x, y), m(x, y))
    names = {getattr(e, "method", None) for e in opt.graph._exprs}
    assert not names & {"__sub__", "__rsub__", "__truediv__", "__rtruediv__"}
    assert not opt.graph.get_function_by_type(F.sub).as_list()


def test_training_mode_bn_is_not_folded():
    net, x, _ = _traced()
    net.train()
    traced = tm.trace_module(net, x).flatten()
    opt = tm.optimize(traced, "FuseConvBn")
    assert len(opt.graph.get_module_by_type(M.BatchNorm2d).as_list()) == 4


def test_attr_to_constant_and_fold_constant():
    class C(M.Module):
        def __init__(self):
            super().__init__()
            self.w = mge.Tensor([1.0, 2.0, 3.0])

        def forward(self, x):
            return x * (self.w * 2 + 1)

    m = C()
    x = mge.Tensor([1.0, 1.0, 2.0])
    traced = tm.trace_module(m, x)
    opt = get_registered_pass("FlodConstant")()(tm.optimize(traced, []))
    _close(opt(x), m(x))
    assert [type(e).__name__ for e in opt.graph._exprs] == ["Constant", "CallMethod"]
    assert get_registered_pass("FoldConstant") is get_registered_pass("FlodConstant")


def test_optimize_unknown_pass():
    net, x, traced = _traced()
    with pytest.raises(AssertionError, match="NoSuchPass"):
        tm.optimize(traced, ["NoSuchPass"])


def test_register_pass_and_matcher():
    @register_pass("TestNegNeg")
    class NegNeg(BackwardPass):
        name = "TestNegNeg"

        def run_transform(self, expr):
            pat = is_op(F.neg)(is_op(F.neg)(is_var()))
            matcher = PatternMatcher()
            if not matcher.match(pat, expr):
                return expr
            inner = expr.inputs[0].expr
            graph = expr.top_graph
            graph.replace_node({expr.outputs[0]: inner.inputs[0]})
            graph.compile()
            return inner.inputs[0].expr or expr

    class N(M.Module):
        def forward(self, x):
            return F.neg(F.neg(x)) + 1

    m = N()
    x = mge.Tensor([1.0, -2.0])
    traced = tm.trace_module(m, x)
    out = get_registered_pass("TestNegNeg")()(traced)
    assert not out.graph.get_function_by_type(F.neg).as_list()
    _close(out(x), m(x))
    matcher = PatternMatcher()
    add = out.graph.get_method_by_type("__add__").as_unique()
    assert matcher.match(is_var() + "*", add)
    assert not matcher.match(is_var() + is_const(), add)


def test_disabled_pass_context():
    net, x, traced = _traced()
    ctx = PassContext(disabled_pass="AttrToConstant")
    out = get_registered_pass("FuseConvBn")()(traced, ctx)  # skipped (its requirement is off)
    assert out.graph.get_module_by_type(M.BatchNorm2d).as_list()


def test_optimized_module_pickles():
    net, x, traced = _traced()
    opt = tm.optimize(traced, ["FuseConvBn", "FuseAddMul"])
    back = pickle.loads(pickle.dumps(opt))
    _close(back(x), net(x))


def test_fuse_conv_bn_keeps_padding_mode_and_groups():
    class G(M.Module):
        def __init__(self):
            super().__init__()
            self.conv = M.Conv2d(4, 4, 3, padding=1, groups=2, padding_mode="reflect")
            self.bn = M.BatchNorm2d(4)
            _randomize_bn(self.bn, _rng())

        def forward(self, x):
            return self.bn(self.conv(x))

    m = G()
    m.eval()
    x = mge.Tensor(_rng().normal(size=(1, 4, 6, 6)).astype("float32"))
    opt = tm.optimize(tm.trace_module(m, x), "FuseConvBn")
    _close(opt(x), m(x))
    conv = opt.graph.get_module_by_type(M.Conv2d).as_unique().owner
    assert conv.padding_mode == "reflect" and conv.groups == 2


def test_fix_input_shape():
    class Sh(M.Module):
        def forward(self, x):
            return x.reshape(-1) * 0 + mge.Tensor(x.shape).astype("float32").sum()

    m = Sh()
    x = mge.Tensor(np.ones((2, 3), "float32"))
    traced = tm.trace_module(m, x)
    from mge.core.ops import builtin
    from mge.traced_module.expr import is_apply_def
    assert any(is_apply_def(e, builtin.GetVarShape) for e in traced.graph._exprs)
    fixed = get_registered_pass("FixInputShape")()(traced)
    assert not any(is_apply_def(e, builtin.GetVarShape) for e in fixed.graph._exprs)
    _close(fixed(x), m(x))
