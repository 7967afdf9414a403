"""MegEngine's module layout over mge: mge.core.ops.builtin through core2.apply (vs numpy), the
core2 names, mge.core.tensor.utils and .dtype (quantized conversions), _trace_option, logger."""
import logging
import pickle

import io

import numpy as np
import pytest

import mge
from mge.core._imperative_rt import CompNode, Logger
from mge.core._imperative_rt import core2
from mge.core._imperative_rt.core2 import apply
from mge.core._imperative_rt.ops import get_global_rng_seed, set_global_rng_seed
from mge.core.ops import builtin
from mge.core.tensor import dtype as D
from mge.core.tensor import utils

RNG = np.random.default_rng(7)


def _t(a):
    return mge.tensor(np.asarray(a, dtype=np.float32))


def test_elemwise_modes_and_equality():
    for key, mode in vars(builtin.Elemwise.Mode).items():
        if isinstance(mode, builtin.Elemwise.Mode):
            assert key == mode and mode == key.lower()
            assert builtin.Elemwise(mode=key) == builtin.Elemwise(mode=mode)
    a = builtin.Elemwise(builtin.Elemwise.Mode.ADD)
    assert a == builtin.Elemwise(mode="add") and hash(a) == hash(builtin.Elemwise("Add"))
    assert a != builtin.Elemwise(mode="mul")
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(ValueError):
        builtin.Elemwise(mode="nope")


@pytest.mark.parametrize("mode,fn,n", [
    ("ADD", np.add, 2), ("MUL", np.multiply, 2), ("NEGATE", np.negative, 1),
    ("EXP", np.exp, 1), ("MAX", np.maximum, 2), ("TRUE_DIV", np.divide, 2),
    ("FUSE_MUL_ADD3", lambda a, b, c: a * b + c, 3), ("LOG_SUM_EXP", np.logaddexp, 2),
    ("FUSE_ADD_RELU", lambda a, b: np.maximum(a + b, 0), 2),
])
def test_elemwise_apply_vs_numpy(mode, fn, n):
    xs = [RNG.standard_normal((3, 4)).astype(np.float32) + 2 for _ in range(n)]
    (y,) = apply(builtin.Elemwise(mode=mode), *[_t(x) for x in xs])
    np.testing.assert_allclose(y.numpy(), fn(*xs), rtol=1e-5, atol=1e-6)


def test_elemwise_unsupported_mode_raises_at_apply():
    op = builtin.Elemwise(mode="ERFINV")
    with pytest.raises(NotImplementedError):
        apply(op, _t([0.5]))


def test_reduce_matches_megengine_shapes():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (s,) = apply(builtin.Reduce(mode="sum"), _t(x))
    assert s.shape == () and np.isclose(s.item(), x.sum(), rtol=1e-5)
    (s,) = apply(builtin.Reduce(mode="sum", axis=1), _t(x))
    np.testing.assert_allclose(s.numpy(), x.sum(1, keepdims=True), rtol=1e-5)
    (s,) = apply(builtin.Reduce(mode="max", axis=0, keepdim=False), _t(x))
    np.testing.assert_allclose(s.numpy(), x.max(0))
    (s,) = apply(builtin.Reduce(mode="PRODUCT"), _t(x), mge.tensor([2, 1]))
    np.testing.assert_allclose(s.numpy(), x.prod(1, keepdims=True), rtol=1e-5)
    assert builtin.Reduce(mode="sum").mode == builtin.Reduce.Mode.SUM


def test_shape_ops():
    x = _t(np.arange(6).reshape(2, 3))
    (shp,) = apply(builtin.GetVarShape(), x)
    assert shp.dtype == np.int32 and shp.numpy().tolist() == [2, 3]
    (d1,) = apply(builtin.GetVarShape(axis=1), x)
    assert d1.numpy().tolist() == [3]
    (r,) = apply(builtin.Reshape(), x, mge.tensor([3, 2]))
    assert r.shape == (3, 2)
    (r,) = apply(builtin.Reshape(shape=[6]), x)
    assert r.shape == (6,)
    (b,) = apply(builtin.Broadcast(), _t([1.0, 2.0, 3.0]), mge.tensor([2, 3]))
    np.testing.assert_array_equal(b.numpy(), np.broadcast_to([1, 2, 3], (2, 3)))
    (t,) = apply(builtin.Dimshuffle(pattern=[1, 0]), x)
    np.testing.assert_array_equal(t.numpy(), x.numpy().T)
    (a,) = apply(builtin.AddAxis(axis=[0]), x)
    assert a.shape == (1, 2, 3)
    (c,) = apply(builtin.Concat(axis=1), x, x)
    assert c.shape == (2, 6)
    (c,) = apply(builtin.TypeCvt(dtype="int32"), x)
    assert c.dtype == np.int32
    (i,) = apply(builtin.Identity(), x)
    np.testing.assert_array_equal(i.numpy(), x.numpy())


def test_indexing_ops():
    xn = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = _t(xn)
    (y,) = apply(builtin.Subtensor(items=[(0, True, False, False, False)]), x, mge.tensor(1))
    np.testing.assert_array_equal(y.numpy(), xn[1:])
    (y,) = apply(builtin.Subtensor(items=[(1, False, False, False, True)]), x, mge.tensor(2))
    np.testing.assert_array_equal(y.numpy(), xn[:, 2])
    idx = mge.tensor([0, 2])
    (y,) = apply(builtin.IndexingMultiAxisVec(items=[(1, False, False, False, True)]), x, idx)
    np.testing.assert_array_equal(y.numpy(), xn[:, [0, 2]])
    v = _t(np.ones((3, 2)))
    (y,) = apply(builtin.IndexingSetMultiAxisVec(items=[(1, False, False, False, True)]), x, v, idx)
    ref = xn.copy()
    ref[:, [0, 2]] = 1
    np.testing.assert_array_equal(y.numpy(), ref)
    (y,) = apply(builtin.IncrSubtensor(items=[(0, True, True, False, False)]), x,
                 _t(np.ones((1, 4))), mge.tensor(0), mge.tensor(1))
    ref = xn.copy()
    ref[0:1] += 1
    np.testing.assert_array_equal(y.numpy(), ref)
    np.testing.assert_array_equal(x.numpy(), xn)  # inputs unchanged


def test_matmul_and_conv():
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4)).astype(np.float32)
    (c,) = apply(builtin.MatrixMul(transposeB=True), _t(a), _t(b))
    np.testing.assert_allclose(c.numpy(), a @ b.T, rtol=1e-5)
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    (y,) = apply(builtin.Convolution(pad_h=1, pad_w=1), _t(x), _t(w))
    ref = mge.functional.conv2d(_t(x), _t(w), padding=1).numpy()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)
    s = builtin.Convolution.Strategy
    assert builtin.Convolution(strategy=s.PROFILE | s.REPRODUCIBLE).strategy == 6


def test_rng_ops_follow_seed():
    set_global_rng_seed(5)
    assert get_global_rng_seed() == 5
    (u1,) = apply(builtin.UniformRNG(seed=5, dtype="float32"), mge.tensor([4, 3]))
    set_global_rng_seed(5)
    (u2,) = apply(builtin.UniformRNG(seed=5, dtype="float32"), mge.tensor([4, 3]))
    assert u1.shape == (4, 3)
    np.testing.assert_array_equal(u1.numpy(), u2.numpy())
    (g,) = apply(builtin.GaussianRNG(mean=1.0, std=0.0), mge.tensor([3]))
    np.testing.assert_allclose(g.numpy(), 1.0)


def test_grad_through_builtin_ops():
    from mge.core.autodiff.grad import Grad
    x = _t([1.0, 2.0, 3.0])
    got = []
    with Grad() as grad:
        grad.wrt(x, callback=got.append)
        (y,) = apply(builtin.Elemwise(mode="MUL"), x, x)
        (s,) = apply(builtin.Reduce(mode="sum"), y)
        grad(s, mge.tensor(1.0))
    np.testing.assert_allclose(got[0].numpy(), [2.0, 4.0, 6.0])


def test_core2_names():
    assert core2.Tensor is mge.Tensor
    assert issubclass(core2.AsyncError, Exception) and issubclass(core2.TraceError, Exception)
    old = core2.get_option("async_level")
    core2.set_option("async_level", 0)
    assert mge.core.get_option("async_level") == 0
    core2.set_option("async_level", old)
    core2.sync()
    core2.full_sync()
    core2._set_drop_flag(False)
    assert core2._get_drop_flag() is False
    x = mge.tensor([1.0])
    ref = core2.TensorWeakRef(x)
    assert ref() is x
    assert core2.make_shape_tuple(mge.tensor([2, 3])) == (2, 3)
    key = core2.GradKey("k")
    assert key.name == "k"
    assert isinstance(CompNode("xpux"), CompNode) and isinstance(x.device, CompNode)


def test_utils():
    assert utils.isscalar(mge.tensor(1.0)) and not utils.isscalar(mge.tensor([1.0]))
    assert utils.isscalar(3.0)
    t = utils.astensor1d([1, mge.tensor(2), 3])
    assert t.numpy().tolist() == [1, 2, 3]
    a = utils.astensor1d(np.array([4, 5]), dtype="int32")
    assert a.dtype == np.int32 and a.numpy().tolist() == [4, 5]
    x = mge.tensor([7.0])
    assert utils.setscalar(x).shape == ()
    assert utils.make_shape_tuple([2, 3]) == (2, 3)
    assert utils._normalize_axis(3, [-1, 0]) == [0, 2]
    assert utils.result_type(mge.tensor([1], dtype="int16"), np.float32) == np.float32


def test_subgraph_fn_custom_grad():
    @utils.subgraph_fn("Square", dtype="float32", device=None, nr_inputs=1, custom_grad=True)
    def square(inputs, f, c):
        (x,) = inputs
        y = f("*", x, x)
        (dy,) = yield (y,)
        yield (f("*", f("*", dy, x), c(2.0)),)

    x = _t([1.0, 3.0])
    gm = mge.autodiff.GradManager().attach(x)
    with gm:
        (y,) = square(x)
        np.testing.assert_allclose(y.numpy(), [1.0, 9.0])
        gm.backward(y.sum())
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 6.0])


def test_quantized_dtypes_round_trip():
    arr = RNG.uniform(-3, 3, size=(50,)).astype(np.float32)
    for make, to, frm, lo, hi in [
        (lambda: D.qint8(0.05), D.convert_to_qint8, D.convert_from_qint8, -128, 127),
        (lambda: D.quint8(0.05, 128), D.convert_to_quint8, D.convert_from_quint8, 0, 255),
        (lambda: D.qint32(0.001), D.convert_to_qint32, D.convert_from_qint32, -2 ** 31, 2 ** 31 - 1),
        (lambda: D.qint4(0.5), D.convert_to_qint4, D.convert_from_qint4, -8, 7),
        (lambda: D.quint4(0.5, 8), D.convert_to_quint4, D.convert_from_quint4, 0, 15),
    ]:
        dt = make()
        assert D.is_quantize(dt) and not D.is_quantize(np.float32)
        q = to(arr, dt)
        assert q.dtype == dt and q.min() >= lo and q.max() <= hi
        back = frm(q)
        scale = D.get_scale(dt)
        inside = (arr / scale > lo + 1) & (arr / scale < hi - 1)
        np.testing.assert_allclose(back[inside], arr[inside], atol=scale / 2 + 1e-6)
    assert D.get_zero_point(D.quint8(0.1, 3)) == 3
    assert D.is_dtype_equal(D.qint8(0.5), D.qint8(0.5))
    assert not D.is_dtype_equal(D.qint8(0.5), D.qint8(0.25))
    with pytest.raises(ValueError):
        D.quint8(0.1, 300)
    with pytest.raises(ValueError):
        D.convert_to_qint8(arr, D.quint8(0.1, 3))
    meta = D.QuantDtypeMeta("q", "QuantizedS8", "int8", -128, 127)
    assert meta.is_unsigned is False and D.get_dtype_bit("int8") == 8


def test_quantized_tensor_keeps_dtype():
    dt = D.qint8(0.1)
    t = mge.tensor(D.convert_to_qint8(np.array([0.3, -0.2], np.float32), dt))
    assert D.get_scale(t.dtype) == pytest.approx(0.1)
    np.testing.assert_allclose(D.convert_from_qint8(t.numpy()), [0.3, -0.2], atol=1e-6)


def test_missing_lowbit_types_raise_clearly_where_used():
    from mge.core.tensor.dtype import intb1, intb2, intb4  # the names import (MegEngine code does)
    for t, bits in ((intb1, 1), (intb2, 2), (intb4, 4)):
        with pytest.raises(NotImplementedError, match=f"{bits}-bit odd-valued numpy type"):
            np.array([1, -1], dtype=t)
        with pytest.raises(NotImplementedError, match="C\\+\\+ extension"):
            mge.tensor([1, -1], dtype=t)
    with pytest.raises(NotImplementedError):
        np.ones(2).astype(intb1)


def test_graph_modules_build_graphs():
    import mge.core.tensor.megbrain_graph as G  # mge's computing graphs (guides/graphs)
    import mge.core._imperative_rt as rt
    assert rt.ComputingGraph is G.Graph
    v = rt.make_const(G.Graph(), [1.0, 2.0], None, None)
    assert isinstance(v, rt.VarNode) and isinstance(v.owner, rt.OperatorNode)
    with pytest.raises(NotImplementedError, match="MegBrain"):
        rt.SymbolVar


def test_operator_node_config_holds_values():
    from mge.core._imperative_rt import CompNode, OperatorNodeConfig
    c = OperatorNodeConfig()
    assert c.name is None and c.dtype is None and c.comp_node_arr == ()
    with pytest.raises(ValueError, match="invalid number of comp_node"):
        c.comp_node
    c.name, c.dtype, c.comp_node = "x", "float32", "cpu0"
    assert c.dtype == np.float32 and c.comp_node == CompNode("cpu0") and len(c.comp_node_arr) == 1
    c.comp_node_arr = ["cpu0", "cpu1"]
    assert len(c.comp_node_arr) == 2


def test_mesh_indexing_ops():
    from mge.core._imperative_rt.core2 import apply
    from mge.core.ops import builtin
    x = np.arange(25, dtype=np.int32).reshape(5, 5)
    d = np.arange(6, dtype=np.int32).reshape(3, 2)
    rows, cols = np.arange(0, 5, 2), np.array([1, 3])
    items = [(0, True, True, True, False), (1, False, False, False, True)]
    args = [mge.tensor(0), mge.tensor(5), mge.tensor(2), mge.tensor(cols)]
    (y,) = apply(builtin.MeshIndexing(items), mge.tensor(x), *args)
    np.testing.assert_array_equal(y.numpy(), x[np.ix_(rows, cols)])
    (y,) = apply(builtin.SetMeshIndexing(items), mge.tensor(x), mge.tensor(d), *args)
    ref = x.copy()
    ref[np.ix_(rows, cols)] = d
    np.testing.assert_array_equal(y.numpy(), ref)
    (y,) = apply(builtin.IncrMeshIndexing(items), mge.tensor(x), mge.tensor(d), *args)
    ref = x.copy()
    ref[np.ix_(rows, cols)] += d
    np.testing.assert_array_equal(y.numpy(), ref)
    # batched: one index vector per entry of axis 0
    xb = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    i1 = np.array([[0, 2], [0, 2]])
    i2 = np.array([[0, 1, 2], [1, 2, 3]])
    bitems = [(1, False, False, False, True), (2, False, False, False, True)]
    (y,) = apply(builtin.BatchedMeshIndexing(bitems), mge.tensor(xb), mge.tensor(i1),
                 mge.tensor(i2))
    ref = np.stack([xb[b][np.ix_(i1[b], i2[b])] for b in range(2)])
    np.testing.assert_array_equal(y.numpy(), ref)
    db = np.arange(12, dtype=np.int32).reshape(2, 2, 3)
    (y,) = apply(builtin.BatchedIncrMeshIndexing(bitems), mge.tensor(xb), mge.tensor(db),
                 mge.tensor(i1), mge.tensor(i2))
    ref = xb.copy()
    for b in range(2):
        ref[b][np.ix_(i1[b], i2[b])] += db[b]
    np.testing.assert_array_equal(y.numpy(), ref)


def test_trace_option():
    from mge.core import _trace_option as T
    old = T.set_symbolic_shape(True)
    assert T.use_symbolic_shape() is True
    assert T.set_symbolic_shape(old) is True
    assert T.use_xla_backend() is False


def test_logger():
    from mge import logger
    lg = logger.get_logger("mge.test_compat")
    assert logger.get_logger("mge.test_compat") is lg and not lg.propagate
    old = logger.set_log_level(logging.WARNING)
    assert lg.level == logging.WARNING
    logger.set_log_level(old)
    orig = Logger().set_log_level(Logger.LogLevel.Debug)
    assert Logger().set_log_level(Logger.LogLevel.Debug) == Logger.LogLevel.Debug
    Logger().set_log_level(orig)
    prev = logger.set_mgb_log_level(logging.ERROR)
    assert logger._imperative_rt_logger.set_log_level(prev) == Logger.LogLevel.Error


def test_megbrain_graph_modules_import_and_work():
    """``megbrain_graph``, ``comp_graph_tools``, ``network_node`` and ``network`` import and
    build graphs; an mge tensor is no graph var (tests/test_megbrain_graph.py and
    tests/test_network.py test them)."""
    import mge.core.tensor.megbrain_graph as G
    import mge.utils.comp_graph_tools as cgtools
    from mge.jit.dump import ModelFileError
    from mge.utils import network, network_node

    x = mge.tensor([1.0])
    assert not isinstance(x, network_node.VarNode) and not isinstance(x, G.VarNode)
    assert cgtools.get_oprs_seq([]) == [] and network.Network().output_vars == []
    with pytest.raises(ModelFileError):
        G.load_graph(io.BytesIO(b"not a model"))
    assert network.set_symbolic_shape(network.set_symbolic_shape(False)) is False


def test_graph_inference_runs_a_model_dumped_by_trace():
    import io

    import mge.utils.comp_graph_tools as cgtools
    from mge.jit import trace

    @trace(symbolic=True, capture_as_const=True)
    def f(a, b):
        return a * 2 + b

    rng = np.random.default_rng(0)
    a, b = rng.random((2, 3)).astype("float32"), rng.random((2, 3)).astype("float32")
    f(mge.tensor(a), mge.tensor(b))
    buf = io.BytesIO()
    f.dump(buf)
    buf.seek(0)
    inf = cgtools.GraphInference(buf)
    got = inf.run(inp_dict={"arg_0": a, "arg_1": b})
    assert list(got) == ["ADD"]  # an output the user did not name: its op's name (MegEngine)
    np.testing.assert_allclose(got["ADD"], a * 2 + b, rtol=1e-6)
    np.testing.assert_allclose(inf.run(a, b)["ADD"], a * 2 + b, rtol=1e-6)
    with pytest.raises(AssertionError, match="expects inputs"):
        inf.run(a)


def test_op_errors_are_runtime_errors_as_in_megengine():
    import mge.functional as F
    a = mge.tensor(np.ones((3, 2), np.float32))
    with pytest.raises(RuntimeError) as e:
        F.reshape(a, (2, 2))
    assert isinstance(e.value, ValueError) and "Reshape" in str(e.value)
    with pytest.raises(RuntimeError):
        F.matmul(a, a)
    with pytest.raises(RuntimeError):
        mge.tensor([1.0, 2.0]) + mge.tensor([1.0, 2.0, 3.0])


def test_multistream_events():
    from mge._multistream import record_event, wait_event
    x = mge.tensor(np.arange(4, dtype=np.float32), device="xpux:1")
    y = x * 2
    e = record_event("xpux:1")
    assert e.device == mge.tensor([], device="xpux:1").device
    wait_event("xpux:0", e)
    z = mge.tensor(np.ones(4, np.float32), device="xpux:0") + y.to("xpux:0")
    np.testing.assert_array_equal(z.numpy(), [1, 3, 5, 7])


def test_builtin_lamb_update_is_the_lamb_optimizers_step():
    from mge.core._imperative_rt.core2 import apply as core2_apply
    from mge.core.ops.builtin import LAMBUpdate
    from mge.optimizer import LAMB
    rng = np.random.RandomState(3)
    w0 = rng.uniform(size=(8, 5)).astype("float32")
    g = rng.uniform(size=(8, 5)).astype("float32")
    p = mge.Parameter(w0)
    opt = LAMB([p], lr=1e-3, weight_decay=0.4)
    p.grad = mge.tensor(g)
    opt.step()  # the first step
    zeros = np.zeros_like(w0)
    m, v, new = core2_apply(LAMBUpdate(0.9, 0.999, 1, 1e-3, 0.4, 1e-8, True, False),
                            mge.tensor(zeros), mge.tensor(zeros), mge.tensor(w0), mge.tensor(g))
    np.testing.assert_array_equal(new.numpy(), p.numpy())
    np.testing.assert_allclose(m.numpy(), 0.1 * g, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), 0.001 * g * g, rtol=1e-5)


def test_custom_ops_import_and_refuse_to_build_or_load(tmp_path, monkeypatch):
    # MegEngine's custom ops are C++ libraries built against its runtime: mge has none to load
    from mge.core.ops import custom
    from mge.utils import custom_op_tools
    assert custom._get_custom_op_list() == [] and custom.__all__ == ["load"]
    src = tmp_path / "op.cpp"
    src.write_text("// a custom op\n")
    monkeypatch.setenv("MGE_CUSTOM_OP_DIR", str(tmp_path / "root"))
    assert custom_op_tools._get_build_dir("op") == str(tmp_path / "root" / "op")
    assert custom_op_tools._get_default_build_root().endswith("mge_custom_op")
    with pytest.raises(NotImplementedError, match="C\\+\\+ runtime"):
        custom_op_tools.build_and_load("op", [str(src)])
    with pytest.raises(ValueError, match="not found"):
        custom_op_tools.build("op", str(tmp_path / "missing.cpp"))
    with pytest.raises(NotImplementedError, match="cannot be loaded"):
        custom.load(str(tmp_path / "libop.so"))
    with pytest.raises(NotImplementedError):
        custom._gen_custom_op_maker("ElemAdd")(smooth=0.1)
