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


def test_tensors_finalized_while_tracing_are_not_recorded():
    # The garbage collector may finalize old tensors in the middle of a recording (Tensor's
    # methods are patched then): their __del__ is no call of the traced code.
    import gc

    class Collecting(M.Module):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def forward(self, x):
            assert gc.collect() > 0  # finalizes the cycles made below, while recording
            return self.net(x)

    np.random.seed(0)
    m = Collecting()
    m.eval()
    x = mge.tensor(np.random.randn(1, 3, 4, 4).astype("float32"))
    gc.disable()  # (so that the cycles below are still there when forward collects)
    try:
        for _ in range(20):
            a = mge.tensor(np.ones(3, "float32"))
            a.cycle = [a]  # freed only by the collector
        del a
        tm = trace_module(m, x)
    finally:
        gc.enable()
    assert "__del__" not in repr(tm.graph)
    assert len(tm.graph._exprs) == 2  # getattr(self, "net"), net(x)


def test_expr_checker_replays_without_changing_the_state():
    from mge.traced_module import enable_expr_checker
    from mge.traced_module import traced_module as tm_impl
    m, x, _ = _setup()
    twin, _, _ = _setup()
    twin.load_state_dict(m.state_dict())
    m.train()
    twin.train()
    saved = tm_impl.CHECK_EXPRS
    enable_expr_checker()
    try:
        trace_module(m, x)  # runs m once, then replays the graph and puts the state back
    finally:
        tm_impl.CHECK_EXPRS = saved
    twin(x)  # one real forward: the statistics the traced module must be left with
    np.testing.assert_array_equal(m.b0.bn1.running_var.numpy(), twin.b0.bn1.running_var.numpy())
    assert not np.array_equal(m.b0.bn1.running_var.numpy(), np.ones((1, 3, 1, 1)))
