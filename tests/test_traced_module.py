"""mge.traced_module: tracing, graph queries, modification, flatten, pickling."""
import pickle

import numpy as np

import mge
import mge.functional as F
import mge.module as M
from mge.traced_module import TracedModule, trace_module
from mge.traced_module.expr import CallFunction, CallMethod, GetAttr
from mge.traced_module.node import ModuleNode


class Block(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 3, 3, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(3)

    def forward(self, x):
        return F.relu(self.bn1(self.conv1(x))) + 1


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.b0 = Block()
        self.b1 = Block()

    def forward(self, x):
        return self.b1(self.b0(x))


def _setup():
    np.random.seed(0)
    m = Net()
    m.eval()
    x = mge.tensor(np.random.randn(1, 3, 4, 4).astype("float32"))
    return m, x, m(x)


def test_trace_and_run():
    m, x, y = _setup()
    tm = trace_module(m, x)
    assert isinstance(tm, TracedModule) and isinstance(tm.b0, TracedModule)
    np.testing.assert_allclose(tm(x).numpy(), y.numpy(), atol=1e-6)
    assert F.relu.__module__.startswith("mge.functional")  # patches restored


def test_graph_queries():
    m, x, _ = _setup()
    tm = trace_module(m, x)
    g = tm.b0.graph
    assert isinstance(g.get_function_by_type(F.relu).as_unique(), CallFunction)
    assert isinstance(g.get_method_by_type("__add__").as_unique(), CallMethod)
    node = g.get_module_by_type(M.Conv2d).as_unique()
    assert isinstance(node, ModuleNode) and isinstance(node.expr, GetAttr)
    assert "nn.relu" in repr(g)


def test_insert_replace_compile():
    m, x, y = _setup()
    tm = trace_module(m, x)
    g = tm.graph
    out = g.outputs[0]
    with g.insert_exprs():
        neg = F.neg(out)
    g.replace_node({out: neg})
    g.compile()
    np.testing.assert_allclose(tm(x).numpy(), -y.numpy(), atol=1e-6)


def test_flatten_and_pickle():
    m, x, y = _setup()
    tm = trace_module(m, x)
    flat = tm.flatten()
    assert len(flat.graph._exprs) == 12
    np.testing.assert_allclose(flat(x).numpy(), y.numpy(), atol=1e-6)
    tm2 = pickle.loads(pickle.dumps(tm))
    np.testing.assert_allclose(tm2(x).numpy(), y.numpy(), atol=1e-6)
