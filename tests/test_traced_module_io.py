"""mge.traced_module: pickling with loaders, qualnames, QAT tracing, recorded shapes and
tensor constructors, module containers."""
import pickle

import numpy as np

import mge
import mge.module as M
import mge.traced_module as tm
import mge.traced_module.serialization as S
from mge.core.ops import builtin
from mge.traced_module.expr import Apply, CallFunction, CallMethod
from mge.traced_module.node import TensorNode
from mge.traced_module.utils import _convert_kwargs_to_args, get_subattr


class Block(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(2, 2, 1)
        self.relus = [M.ReLU(), M.ReLU()]

    def forward(self, x):
        x = self.conv(x)
        for r in self.relus:
            x = r(x)
        return x * 2


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.b = Block()

    def forward(self, x):
        return self.b(x) + 1


def _x():
    return mge.Tensor(np.random.RandomState(3).normal(size=(1, 2, 3, 3)).astype("float32"))


def test_pickle_roundtrip_ids_and_users():
    x = _x()
    t = tm.trace_module(Net(), x)
    back = pickle.loads(pickle.dumps(t))
    np.testing.assert_array_equal(back(x).numpy(), t(x).numpy())
    ids = [n._id for n in back.graph.nodes()]
    assert sorted(ids) == list(range(back.graph._total_ids[0]))
    eids = [e._id for e in back.graph.exprs()]
    assert sorted(eids) == list(range(back.graph._total_ids[1]))
    for n in back.graph.nodes(False):
        assert all(n in e.inputs for e in n.users)


def test_tensor_method_loader_inserts_exprs():
    class AddOne(M.Module):
        def forward(self, x):
            return x + 1

    x = mge.Tensor([1.0, 2.0])
    t = tm.trace_module(AddOne(), x)
    saved = S.TENSORMETHOD_LOADER
    S.TENSORMETHOD_LOADER = {}
    try:
        @S.register_tensor_method_loader("__add__")
        def double_the_input(expr):
            inp = expr.inputs[0]
            mul = CallMethod(inp, "__mul__")
            out = TensorNode(mul, shape=inp.shape, dtype=inp.dtype)
            mul.set_args_kwargs(inp, 2)
            mul.return_val = (out,)
            args = list(expr.args)
            args[0] = out
            expr.set_args_kwargs(*args)

        back = pickle.loads(pickle.dumps(t))
    finally:
        S.TENSORMETHOD_LOADER = saved
    assert [e.method for e in back.graph._exprs] == ["__mul__", "__add__"]
    np.testing.assert_array_equal(back(x).numpy(), (x * 2 + 1).numpy())


def test_qualnames_and_get_subattr():
    x = _x()
    net = Net()
    t = tm.trace_module(net, x)
    q = {n.qualname for n in t.graph.nodes()}
    assert {"Net", "Net.[x]", "Net.b", "Net.b.[out]", "Net.b.conv", "Net.b.conv.[out]",
            "Net.b.relus.0", "Net.b.[method_mul]"} <= q
    assert get_subattr(t, "b.relus.1") is t.b.relus.__dict__["1"]
    assert isinstance(t.b.relus, tm.TracedModule)


def test_convert_kwargs_to_args():
    def f(a, b=2, *, c, d=4):
        pass
    assert _convert_kwargs_to_args(f, (1,), {"c": 3}) == ((1, 2), {"c": 3, "d": 4})


def test_shape_and_tensor_constructor_are_recorded():
    class S_(M.Module):
        def forward(self, x):
            s = builtin.apply(builtin.Elemwise(mode="ADD"), x.shape, mge.Tensor(1))[0]
            y = mge.Tensor(x)
            y += 1
            return s, y

    t = tm.trace_module(S_(), mge.Tensor([1.0, 2.0]))
    e = t.graph._exprs
    assert isinstance(e[0], Apply) and isinstance(e[0].opdef, builtin.GetVarShape)
    assert any(isinstance(x, CallFunction) and x.func is mge.Tensor for x in e)
    for _ in range(2):  # a recorded constructor: the in-place add does not accumulate
        s, y = t(mge.Tensor([1.0, 2.0, 3.0]))
        np.testing.assert_array_equal(s.numpy(), [4])
        np.testing.assert_array_equal(y.numpy(), [2.0, 3.0, 4.0])


def test_qat_module_keeps_qparams():
    import mge.module.qat as QM
    import mge.quantization as Q

    class MyObserver(Q.MinMaxObserver):
        pass

    from functools import partial
    qconfig = Q.QConfig(weight_observer=partial(MyObserver, dtype="qint8_narrow"),
                        act_observer=partial(MyObserver, dtype="qint8"),
                        weight_fake_quant=None, act_fake_quant=None)
    net = Q.quantize_qat(M.Sequential(M.ConvBnRelu2d(2, 2, 1)), qconfig=qconfig)
    Q.enable_observer(net)
    net.eval()
    x = _x()
    net(x)
    Q.disable_observer(net)
    t = tm.trace_module(net, x)
    traced_qat = get_subattr(t, "0")
    assert isinstance(net[0], QM.ConvBnRelu2d)
    want = net[0].act_fake_quant.get_qparams()   # the user observer was swapped for these
    got = traced_qat.act_fake_quant.get_qparams()
    np.testing.assert_array_equal(want.scale.numpy(), got.scale.numpy())
    np.testing.assert_allclose(t(x).numpy(), net(x).numpy(), rtol=1e-6, atol=1e-6)
    flat = t.flatten()
    assert any(isinstance(n.owner, tm.TracedModule) for n in
               flat.graph.get_module_by_type(M.Module).as_list())
