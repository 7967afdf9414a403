"""MegBrain-style graphs (mge.core.tensor.megbrain_graph, mge.utils.comp_graph_tools): building
with mge's functions and ops, running, errors, dump/load in mge's model format."""
import io

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core.ops.builtin import Elemwise
from mge.core.tensor import megbrain_graph as G
from mge.jit import trace
from mge.utils import comp_graph_tools as cgtools

rng = np.random.RandomState(20261201)


def _rand(*shape):
    return rng.standard_normal(shape).astype("float32")


def _run(var):
    out = G.OutputNode(var)
    g = out.graph.compile(out.outputs[0])
    g.execute()
    return out.get_value().numpy()


def test_build_with_functions_matches_numpy():
    g = G.Graph()
    a, b = _rand(2, 3), _rand(3)
    va, vb = g.make_const(a), g.make_const(b)
    y = F.relu(va * 2 + vb) - F.exp(vb)
    assert isinstance(y, G.VarNode)
    assert y.shape == (2, 3) and y.dtype == np.float32 and y.ndim == 2
    assert y.op.type == "Elemwise" and y.op.params["mode"] == "SUB"
    ref = np.maximum(a * 2 + b, 0) - np.exp(b)
    np.testing.assert_allclose(_run(y), ref, rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)
    s = (va.sum(axis=1, keepdims=True) / 3).reshape(2)
    assert s.shape == (2,)
    np.testing.assert_allclose(s.numpy(), a.sum(1) / 3, rtol=1e-5)
    np.testing.assert_allclose(va[1, 1:].numpy(), a[1, 1:])
    m = F.matmul(va, g.make_const(_rand(3, 4)))
    assert m.shape == (2, 4) and m.op.type == "MatrixMul"


def test_dtype_promotion_and_numbers():
    g = G.Graph()
    i = g.make_const(np.array([1, 2, 3], "int32"))
    f = g.make_const(np.array([0.5, 0.5, 0.5], "float32"))
    assert (i + f).dtype == np.float32
    assert (i + 1).dtype == np.int32
    assert (i / 2).dtype == np.float32
    np.testing.assert_allclose((i + f).numpy(), [1.5, 2.5, 3.5])
    assert (i > 1).dtype == np.bool_


def test_shape_error_names_op_and_shapes():
    g = G.Graph()
    with pytest.raises(ValueError, match=r"Elemwise.add cannot take inputs \(\(2, 3\) float32, "
                                         r"\(4,\) float32\)"):
        g.make_const(_rand(2, 3)) + g.make_const(_rand(4))


def test_devices_compare_by_the_device_they_name():
    # "xpux" is the default device (cpu0 here): vars on both meet in one op
    g = G.Graph()
    a, b = _rand(3), _rand(3)
    out = g.make_const(a, device="xpux") * g.make_const(b, device="cpu0:0")
    np.testing.assert_array_equal(_run(out), a * b)


def test_input_output_nodes_run_repeatedly():
    g = G.Graph()
    px = G.InputNode(device="xpux", dtype="float32", graph=g)
    neg = G.apply_normal_varnode(Elemwise(Elemwise.Mode.NEGATE), px.outputs[0])[0]
    assert neg.shape is None  # the input's shape is not known until run
    out = G.OutputNode(neg)
    attr = G.AttrOutputNode(px.outputs[0])
    f = g.compile(out.outputs[0], attr.outputs[0])
    for shape in [(2,), (3, 4)]:
        x = _rand(*shape)
        f.execute()
        px.set_value(mge.tensor(x)._dev_tensor())
        np.testing.assert_equal(out.get_value().numpy(), -x)
        assert attr.get_value().shape == shape
        assert attr.get_value().dtype == np.float32
        f.wait()


def test_callbacks_and_their_errors():
    g = G.Graph()
    x = _rand(5)
    v, _ = G.input_callback(lambda: mge.tensor(x), device="xpux", dtype="float32", graph=g)
    got = []
    done = G.output_callback(lambda d: got.append(d.numpy()), F.abs(v))
    g.compile(done)()
    np.testing.assert_equal(got[0], np.abs(x))

    def fail():
        raise RuntimeError("no data today")

    g2 = G.Graph()
    w, _ = G.input_callback(fail, device="xpux", dtype="float32", graph=g2)
    out = G.OutputNode(w * 2)
    g2.compile(out.outputs[0]).execute()
    with pytest.raises(RuntimeError, match="no data today"):
        out.get_value()


def test_missing_values_are_errors():
    g = G.Graph()
    px = G.InputNode(device="xpux", dtype="float32", shape=(2,), graph=g)
    out = G.OutputNode(px.outputs[0] + 1)
    g.compile(out.outputs[0]).execute()
    with pytest.raises(RuntimeError, match="no value was set"):
        out.get_value()
    h = g.make_h2d(dtype="float32", device="xpux", shape=(2,), name="data")
    with pytest.raises(RuntimeError, match="Host2DeviceCopy 'data' has no value"):
        (h * 2).numpy()
    with pytest.raises(RuntimeError, match="no value"):
        G.OutputNode(h).get_value()


def test_dump_and_load_a_built_graph():
    g = G.Graph()
    x = g.make_h2d(dtype="float32", device="xpux", shape=(3,), name="x")
    w = g.make_const(np.array([1.0, 2.0, 3.0], "float32"), name="w")
    y = F.sigmoid(x * w)
    data, info = G.dump_graph({"y": y})
    assert info.inputs == ["x"] and info.outputs == ["y"] and info.nr_opr == 4
    ret = G.load_graph(io.BytesIO(data))
    (out,) = ret.output_vars_list
    assert out.name == "y" and ret.output_vars_dict["y"] is out
    assert [o.type for o in cgtools.get_oprs_seq([out], prune_immtensor=False)] == [
        "Host2DeviceCopy", "ImmutableTensor", "Elemwise", "Elemwise"]
    a = _rand(3)
    ref = 1 / (1 + np.exp(-a * np.array([1, 2, 3], "float32")))
    res = cgtools.GraphInference(io.BytesIO(data)).run(a)
    np.testing.assert_allclose(res["y"], ref, rtol=1e-6)
    # the same file runs as a compiled program too
    model = mge.jit.load(io.BytesIO(data))
    np.testing.assert_allclose(model(a).numpy(), ref, rtol=1e-6)


def test_load_trace_dump_names_and_types():
    conv = mge.module.Conv2d(2, 3, 3)

    @trace(symbolic=True, capture_as_const=True)
    def fwd(data):
        return F.relu(conv(data))

    x = _rand(1, 2, 5, 5)
    expect = fwd(mge.tensor(x)).numpy()
    buf = io.BytesIO()
    fwd.dump(buf, arg_names=["data"], output_names=["out"], keep_opr_name=True)
    buf.seek(0)
    ret = G.load_graph(buf)
    (out,) = ret.output_vars_list
    assert out.name == "out"
    types = {v.owner.type for v in cgtools.get_dep_vars(out)}
    assert {"Host2DeviceCopy", "ImmutableTensor", "ConvolutionForward", "Elemwise"} <= types
    (inp,) = cgtools.get_dep_vars(out, "Host2DeviceCopy")
    assert inp.name == "data" and inp.shape == (1, 2, 5, 5)
    assert ret.metadata["graph_modified"] is False
    buf.seek(0)
    np.testing.assert_equal(cgtools.GraphInference(buf).run(x)["out"], expect)


def test_replace_vars_and_oprs():
    g = G.Graph()
    a = G.InputNode(device="xpux", dtype="float32", graph=g)
    c = g.make_const(2.0)
    aa = G.apply_normal_varnode(Elemwise("add"), a.outputs[0], a.outputs[0])[0]
    r = G.apply_normal_varnode(Elemwise("mul"), aa, c)[0]
    (new,) = cgtools.replace_vars([r._node], {c._node: aa._node})
    out = G.OutputNode(G.VarNode(new))
    f = g.compile(out.outputs[0])
    f.execute()
    a.set_value(mge.tensor([3.0])._dev_tensor())
    np.testing.assert_equal(out.get_value().numpy(), [36.0])
    sq = G.apply_normal_varnode(Elemwise("mul"), a.outputs[0], a.outputs[0])[0]
    (new2,) = cgtools.replace_oprs([r._node], {aa.op._node: sq.op._node})
    out2 = G.OutputNode(G.VarNode(new2))
    f = g.compile(out2.outputs[0])
    f.execute()
    a.set_value(mge.tensor([3.0])._dev_tensor())
    np.testing.assert_equal(out2.get_value().numpy(), [18.0])
    with pytest.raises(AssertionError, match="nope"):
        cgtools.find_vars_by_name([r], ["nope"])


def test_embed_inputs_and_traversal():
    g = G.Graph()
    x = g.make_h2d(dtype="float32", device="xpux", shape=(2,), name="x")
    y = (x + 1) * 3
    (emb,), consts = cgtools.embed_inputs([y], [np.array([1.0, 2.0], "float32")])
    assert list(consts) == ["x"]
    np.testing.assert_equal(G.VarNode(emb).numpy(), [6.0, 9.0])
    map_oprs, map_vars, var2oprs, *_ = cgtools.graph_traversal([y])
    add = y.op.inputs[0].op
    assert var2oprs[x.id] == [(add.id, 0)]
    assert map_vars[x.id] is x._node and map_oprs[add.id] is add._node
    assert cgtools.get_owner_opr_type(y) == "Elemwise"


def test_optimize_for_inference_options():
    g = G.Graph()
    x = g.make_h2d(dtype="float32", device="xpux", shape=(2,), name="x")
    (y,), code = G.optimize_for_inference([F.exp(x)], enable_io16xc32=True)
    assert y.op.inputs[0].dtype == np.float16 and y.dtype == np.float16
    opts = G.deserialize_infer_option(code)
    assert opts == {"enable_io16xc32": True, "enable_fuse_grain": True}
    _, code = G.optimize_for_inference([x], enable_nchw4=True, enable_fuse_grain=False)
    assert G.deserialize_infer_option(code) == {"enable_nchw4": True}
    with pytest.raises(ValueError, match="unknown options"):
        G.optimize_for_inference([x], enable_magic=True)


def test_indexing_with_vars_and_unknown_shapes():
    g = G.Graph()
    a = np.arange(12, dtype="float32").reshape(3, 4)
    va = g.make_const(a)
    idx = g.make_const(np.array([2, 0], "int32"))
    np.testing.assert_equal(va[idx].numpy(), a[[2, 0]])
    np.testing.assert_equal(va[idx, 1:].numpy(), a[[2, 0], 1:])
    picked = va[va > 5]  # a bool mask: the length is known when run
    assert picked.shape is None
    np.testing.assert_equal(picked.numpy(), a[a > 5])
    with pytest.raises(IndexError, match="ellipsis"):
        picked[...]
    # shapes and numbers given as constant vars are read from their values
    np.testing.assert_equal(F.reshape(va, g.make_const([4, 3])).numpy(), a.reshape(4, 3))


def test_trace_dump_float16_option():
    @trace(symbolic=True, capture_as_const=True)
    def f(x):
        return F.exp(x) + 1

    x = np.array([0.5, 1.5], "float32")
    f(mge.tensor(x))
    buf = io.BytesIO()
    f.dump(buf, enable_io16xc32=True)  # optimize_for_inference is True by default
    buf.seek(0)
    ret = G.load_graph(buf)
    (out,) = ret.output_vars_list
    assert out.dtype == np.float16
    assert ret.metadata["optimized_for_inference"] is True
    assert "enable_io16xc32" in ret.metadata["optimize_options"]
    buf.seek(0)
    got = mge.jit.load(buf)(x).numpy()
    np.testing.assert_allclose(got, np.exp(x.astype("float16")) + 1, rtol=1e-3)
    # without optimize_for_inference the option changes nothing (as in MegEngine)
    plain = io.BytesIO()
    f.dump(plain, optimize_for_inference=False, enable_io16xc32=True)
    plain.seek(0)
    assert G.load_graph(plain).output_vars_list[0].dtype == np.float32


def test_quantized_dtypes_survive_dump_and_load():
    import mge.core.tensor.dtype as qd

    @trace(symbolic=True, capture_as_const=True)
    def f(x):
        return x.astype(qd.quint8(0.5, 3))

    x = (rng.rand(2, 3) * 50).astype("float32")
    want = f(mge.tensor(x))
    buf = io.BytesIO()
    f.dump(buf, output_names=["q"])
    buf.seek(0)
    got = mge.jit.load(buf)(x)
    assert got.dtype.metadata == want.dtype.metadata
    np.testing.assert_equal(got.numpy(), want.numpy())
    buf.seek(0)
    (out,) = G.load_graph(buf).output_vars_list
    assert out.dtype.metadata["mgb_dtype"] == {"name": "Quantized8Asymm", "scale": 0.5,
                                               "zero_point": 3}
