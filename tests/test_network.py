"""mge.utils.network.Network and mge.utils.network_node: load a traced model, query and edit it,
dump it again, run the result (GraphInference, mge.jit.load)."""
import io

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.utils.network_node as N
from mge.core.tensor import megbrain_graph as G
from mge.jit import trace
from mge.utils.comp_graph_tools import GraphInference
from mge.utils.network import Network, as_oprnode, as_varnode

rng = np.random.RandomState(7)


def _model(fn, *args, arg_names=None, output_names=None, **kw):
    traced = trace(fn, symbolic=True, capture_as_const=True)
    traced(*[mge.tensor(a) for a in args])
    buf = io.BytesIO()
    traced.dump(buf, arg_names=arg_names, output_names=output_names, **kw)
    buf.seek(0)
    return buf


def _dump(net, **kw):
    buf = io.BytesIO()
    net.dump(buf, **kw)
    buf.seek(0)
    return buf


def test_load_query_and_run_unchanged():
    a, b = rng.rand(3).astype("float32"), rng.rand(3).astype("float32")
    net = Network.load(_model(lambda x, y: (x + y) * 2, a, b, arg_names=["a", "b"],
                              output_names=["o"]))
    assert [v.name for v in net.input_vars] == ["a", "b"]
    assert [v.name for v in net.output_vars] == ["o"]
    assert net.data_providers_filter.as_count() == 2
    assert net.params_filter.as_count() == 1
    assert isinstance(net.get_opr_by_name("a"), N.Host2DeviceCopy)
    va = net.get_var_by_name("a")
    (reader,) = net.opr_filter.has_input(va)
    assert isinstance(reader, N.Elemwise) and reader.params["mode"] == "ADD"
    assert as_oprnode(reader.outputs[0]) is reader and as_varnode(reader) is reader.outputs[0]
    assert net.opr_filter.type(N.Elemwise).as_count() == 2
    assert net.var_filter.name("O").as_unique() is net.output_vars[0]  # case-insensitive glob
    res = GraphInference(_dump(net)).run(a, b)
    np.testing.assert_equal(res["o"], (a + b) * 2)


def test_replace_vars_with_new_operators():
    a, b = np.array([1, 2], "int32"), np.array([3, 4], "int32")
    net = Network.load(_model(lambda x, y: (x + y) * 2, a, b, arg_names=["a", "b"],
                              output_names=["o"]))
    va, vb = net.get_var_by_name("a"), net.get_var_by_name("b")
    new = F.relu(F.mul(va, vb))
    assert isinstance(new, N.VarNode) and new.owner is None
    (add,) = net.opr_filter.has_input(va)
    net.replace_vars({add.outputs[0]: new})
    res = GraphInference(_dump(net)).run(a, b)
    np.testing.assert_equal(res["o"], a * b * 2)


def test_replace_oprs():
    a, b = np.array([1, 2], "int32"), np.array([3, 4], "int32")
    net = Network.load(_model(lambda x, y: (x + y) * 2, a, b, arg_names=["a", "b"],
                              output_names=["o"]))
    va, vb = net.get_var_by_name("a"), net.get_var_by_name("b")
    (out,) = net.add_dep_oprs((va - vb) * 5)
    old = net.opr_filter.has_input(va).as_unique()
    net.replace_oprs({old: out.owner})
    assert old.outputs[0].owner is out.owner
    res = GraphInference(_dump(net)).run(a, b)
    np.testing.assert_equal(res["o"], (a - b) * 5 * 2)


def test_inputs_constants_and_outputs():
    a, b = np.array([1.0, 2.0], "float32"), np.array([3.0, 4.0], "float32")
    net = Network.load(_model(lambda x, y: x * y + 1, a, b, arg_names=["a", "b"],
                              output_names=["o"]))
    c = net.make_input_node((2,), np.float32, name="c")
    k = net.make_const(np.array([10.0, 20.0]), name="k")
    assert k.dtype == np.float32  # float64 data becomes float32
    net.replace_vars({net.get_var_by_name("b"): k})
    extra = net.output_vars[0] + c
    extra.name = "o2"
    net.add_output(extra)
    res = GraphInference(_dump(net)).run(inp_dict={"a": a, "c": a})  # b is a constant now
    np.testing.assert_equal(res["o"], a * [10, 20] + 1)
    np.testing.assert_equal(res["o2"], a * [10, 20] + 1 + a)
    net.remove_output(net.output_vars[0])
    res = GraphInference(_dump(net)).run(inp_dict={"a": a, "c": a})
    assert list(res) == ["o2"]
    # the constant can be changed in place
    net.params_filter.name("k").as_unique().set_value([1.0, 1.0])
    res = GraphInference(_dump(net)).run(inp_dict={"a": a, "c": b})
    np.testing.assert_equal(res["o2"], a + 1 + b)


def test_unused_inputs_stay_model_inputs():
    a, b = np.array([1.0, 2.0], "float32"), np.array([3.0, 4.0], "float32")
    net = Network.load(_model(lambda x, y: x * 2, a, b, arg_names=["a", "b"]))
    assert [v.name for v in net.input_vars] == ["a", "b"]
    # an output the user did not name is named after its op, as in MegEngine
    assert [v.name for v in net.output_vars] == ["MUL"]
    g = GraphInference(_dump(net))
    res = g.run(inp_dict={"a": a, "b": b})
    np.testing.assert_equal(res["MUL"], a * 2)
    with pytest.raises(AssertionError, match="expects inputs"):
        g.run(inp_dict={"a": a})


def test_metadata_and_user_info():
    x = np.array([1, 2], "int32")
    buf = _model(lambda v: v * 2, x, user_info="hello", optimize_for_inference=False)
    net = Network.load(buf)
    assert net.metadata == {"user_info": "hello", "graph_modified": False,
                            "optimized_for_inference": False}
    info = {"t": mge.tensor([1.0]), "cls": M.Module}
    net2 = Network.load(_dump(net, user_info=info, enable_nchw4=True))
    meta = net2.metadata
    assert meta["graph_modified"] is True and meta["optimized_for_inference"] is True
    assert meta["enable_nchw4"] is True and meta["enable_fuse_grain"] is True
    assert meta["user_info"]["cls"] is M.Module
    np.testing.assert_equal(meta["user_info"]["t"].numpy(), [1.0])
    assert Network.load(_model(lambda v: v * 2, x, enable_metadata=False)).metadata is None
    # mge.jit.load never unpickles: a pickled user_info is not its user_info
    assert mge.jit.load(_dump(net, user_info=info)).user_info is None


def test_query_a_conv_model_with_names():
    class Model(M.Module):
        def __init__(self):
            super().__init__()
            self.c1 = M.Conv2d(1, 2, 3)
            self.c2 = M.Conv2d(2, 2, 3)

        def forward(self, x):
            return self.c2(F.relu(self.c1(x)))

    m = Model()
    x = rng.rand(1, 1, 8, 8).astype("float32")
    expect = m(mge.tensor(x)).numpy()
    net = Network.load(_model(m, x, arg_names=["data"], output_names=["o"], keep_opr_name=True))
    assert net.opr_filter.type(N.ConvolutionForward).as_count() == 2
    assert net.params_filter.as_count() == 4
    assert N.str_to_mge_class("ConvolutionForward") is N.ConvolutionForward
    assert N.str_to_mge_class("NoSuchOperator") is N.ReadOnlyOpNode
    np.testing.assert_allclose(GraphInference(_dump(net)).run(x)["o"], expect, rtol=1e-6)


def test_reset_batch_size_and_rename():
    x = rng.rand(3, 2).astype("float32")
    net = Network.load(_model(lambda v: F.exp(v), x, arg_names=["a"], output_names=["y"]))
    net.reset_batch_size(1)
    net.modify_opr_names("net")
    net2 = Network.load(_dump(net, optimize_for_inference=False))
    dp = net2.data_providers_filter.as_unique()
    assert dp.shape == (1, 2) and dp.name == "net.a"
    res = GraphInference(_dump(net2)).run(x[:1])
    np.testing.assert_allclose(res["y"], np.exp(x[:1]), rtol=1e-6)


def test_float16_inference_option():
    x = rng.rand(2).astype("float32")
    net = Network.load(_model(lambda v: F.exp(v), x))
    ret = G.load_graph(_dump(net, enable_io16xc32=True))
    (out,) = ret.output_vars_list
    assert out.owner.inputs[0].dtype == np.float16


def test_varnodes_of_an_empty_network():
    net = Network()
    x = net.make_const(np.array([1.0, 2.0, 3.0], "float32"))
    y = x * 2 + 1
    y[1] = 0
    out = G.OutputNode(y.var)
    out.graph.compile(out.outputs).execute()
    np.testing.assert_equal(out.get_value().numpy(), [3.0, 0.0, 7.0])
    assert y.shape == (3,) and y.partial_shape == (3,)
    assert y.astype("int32").dtype == np.int32
    np.testing.assert_equal(N.VarNode(y.var).numpy(), [3.0, 0.0, 7.0])
