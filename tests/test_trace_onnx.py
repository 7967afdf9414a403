"""ONNX export of traced functions: every export passes the onnx checker and runs in onnxruntime
with the traced results.

``mge.jit.export_onnx`` and ``trace.dump(file, format="onnx")`` (``mge/jit/onnx_export.py``).
The tests need the extra ``mge[onnx]`` (onnx, onnxruntime); without it they are skipped with the
reason, except under ``CI`` (which installs the extra), where that is a failure.  Each case traces
a function with ``capture_as_const=True``, exports it, checks the model (``full_check``: shape
inference agrees with the recorded shapes), runs it in onnxruntime and compares with what the
traced call returned: exactly where the op is exact, within float32 rounding otherwise.
"""
import importlib.util
import io
import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.core import TraceError, apply
from mge.jit import OnnxExportError, export_onnx, trace
from mge._core.ops.elemwise import Elemwise

GUIDE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "guides" / "trace_onnx.rst"
MISSING = [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
RTOL, ATOL = 2e-5, 2e-6  # float32 rounding: ONNX kernels sum and round in their own order


@pytest.fixture(scope="module")
def ort():
    """onnxruntime; the tests that use it skip without the onnx extra (fail under CI)."""
    if MISSING:
        message = f"ONNX export needs {', '.join(MISSING)}: pip install -e '.[onnx]'"
        if os.environ.get("CI"):  # CI installs the extra: there a missing one is a failure
            pytest.fail(message)
        pytest.skip(message)
    import onnxruntime
    return onnxruntime


def _rng(seed=0):
    return np.random.default_rng(seed)


def _traced(fn):
    return trace(fn, symbolic=True, capture_as_const=True)


def _flat(result):
    if isinstance(result, mge.Tensor):
        return [result.numpy()]
    if isinstance(result, dict):
        return [t.numpy() for t in result.values()]
    return [t.numpy() for t in result]


def _run_onnx(ort, model, feeds):
    import onnx
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


def _compare(ort, fn, *inputs, exact=False, opset=17, rtol=RTOL, atol=ATOL):
    """Trace ``fn`` on ``inputs`` (arrays), export it, run it in onnxruntime, compare."""
    traced = _traced(fn)
    expected = _flat(traced(*[mge.tensor(x) for x in inputs]))
    model = export_onnx(traced, None, opset=opset)
    got = _run_onnx(ort, model, inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        if exact:
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return model


# -- whole models ----------------------------------------------------------------------------------
class _MLP(M.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = M.Linear(8, 16)
        self.fc2 = M.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class _ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 8, 3, padding=1)
        self.bn1 = M.BatchNorm2d(8)
        self.conv2 = M.Conv2d(8, 8, 3, stride=1, padding=1, groups=2)
        self.bn2 = M.BatchNorm2d(8)
        self.fc = M.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return F.softmax(self.fc(F.flatten(x, 1)), axis=1)


def _with_statistics(net, rng):
    # running statistics away from 0/1, so inference-mode batch norm has something to do
    for bn in (m for m in net.modules() if isinstance(m, M.BatchNorm2d)):
        c = bn.running_mean.shape[1]
        bn.running_mean[...] = rng.standard_normal((1, c, 1, 1)).astype("float32")
        bn.running_var[...] = rng.uniform(0.5, 2, (1, c, 1, 1)).astype("float32")
        bn.weight[...] = rng.uniform(0.5, 1.5, bn.weight.shape).astype("float32")
        bn.bias[...] = rng.standard_normal(bn.bias.shape).astype("float32")
    return net


def test_mlp(ort):
    mge.random.seed(0)
    net = _MLP()
    x = _rng().standard_normal((5, 8)).astype("float32")
    model = _compare(ort, net, x)
    # the weights are initializers with their values; the graph takes the traced shape
    assert len(model.graph.initializer) >= 4
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [5, 8]


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_conv_net_eval(ort, opset):
    mge.random.seed(1)
    net = _with_statistics(_ConvNet(), _rng(1))
    net.eval()
    x = _rng(2).standard_normal((2, 3, 8, 8)).astype("float32")
    model = _compare(ort, net, x, opset=opset, rtol=1e-4, atol=1e-6)
    assert model.opset_import[0].version == opset
    kinds = {n.op_type for n in model.graph.node}
    assert {"Conv", "BatchNormalization", "MaxPool", "AveragePool", "Softmax"} <= kinds


# -- op families one by one ------------------------------------------------------------------------
def _unit(rng, shape):
    return rng.uniform(-0.9, 0.9, shape).astype("float32")


def _pos(rng, shape):
    return rng.uniform(0.1, 3, shape).astype("float32")


def _normal(rng, shape):
    return (rng.standard_normal(shape) * 2).astype("float32")


_S = (3, 4)
# mode -> input maker (one per input); the domain each mode is defined on
_UNARY_MODES = {
    "neg": _normal, "abs": _normal, "exp": _normal, "log": _pos, "sqrt": _pos, "sign": _normal,
    "sin": _normal, "cos": _normal, "tan": _unit, "asin": _unit, "acos": _unit, "atan": _normal,
    "sinh": _normal, "cosh": _normal, "tanh": _normal, "asinh": _normal,
    "acosh": lambda r, s: _pos(r, s) + 1, "atanh": _unit, "sigmoid": _normal,
    "softplus": _normal, "erf": _normal, "expm1": _unit, "log1p": _pos, "rsqrt": _pos,
    "square": _normal, "ceil": _normal, "floor": _normal, "round": _normal, "relu": _normal,
    "relu6": lambda r, s: _normal(r, s) * 4, "hsigmoid": lambda r, s: _normal(r, s) * 2,
    "hswish": lambda r, s: _normal(r, s) * 2, "gelu": _normal, "silu": _normal,
    "logsigmoid": _normal,
}
_BINARY_MODES = {
    "add": (_normal, _normal), "sub": (_normal, _normal), "mul": (_normal, _normal),
    "true_div": (_normal, _pos), "pow": (_pos, _normal), "max": (_normal, _normal),
    "min": (_normal, _normal), "mod": (_normal, _pos), "floor_div": (_normal, _pos),
    "logaddexp": (_normal, _normal), "fuse_add_relu": (_normal, _normal),
    "switch_gt0": (_normal, _normal),
}
_COMPARE_MODES = ["lt", "leq", "gt", "geq", "eq", "neq"]
# exact in both runtimes: no rounding, or the same correctly rounded operation
_EXACT_MODES = {"neg", "abs", "sign", "square", "ceil", "floor", "round", "relu", "relu6", "add",
                "sub", "mul", "max", "min", "switch_gt0", "fuse_add_relu"}


@pytest.mark.parametrize("mode", sorted(_UNARY_MODES))
def test_elemwise_unary(ort, mode):
    x = _UNARY_MODES[mode](_rng(3), _S)
    if mode in ("round", "floor", "ceil"):
        x[0, :3] = [0.5, -1.5, 2.0]  # halves: MegEngine rounds them away from zero
    _compare(ort, lambda a: apply(Elemwise(mode), a)[0], x, exact=mode in _EXACT_MODES,
             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", sorted(_BINARY_MODES))
def test_elemwise_binary(ort, mode):
    rng = _rng(4)
    a, b = (make(rng, _S) for make in _BINARY_MODES[mode])
    b[0] = b[0, :1]  # broadcasting rows stays with the recorded (3, 4)
    _compare(ort, lambda x, y: apply(Elemwise(mode), x, y)[0], a, b,
             exact=mode in _EXACT_MODES, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", _COMPARE_MODES)
def test_elemwise_compare(ort, mode):
    rng = _rng(5)
    a = rng.integers(-2, 3, _S).astype("float32")
    b = rng.integers(-2, 3, (1, 4)).astype("float32")  # broadcast, with ties
    _compare(ort, lambda x, y: apply(Elemwise(mode), x, y)[0], a, b, exact=True)


@pytest.mark.parametrize("mode", ["and", "or", "xor", "not"])
def test_elemwise_logic(ort, mode):
    rng = _rng(6)
    a, b = rng.integers(0, 2, _S).astype(bool), rng.integers(0, 2, _S).astype(bool)
    fn = ((lambda x, y: apply(Elemwise(mode), x, y)[0]) if mode != "not"
          else (lambda x, y: apply(Elemwise(mode), x)[0]))
    _compare(ort, fn, a, b, exact=True)


def test_elemwise_integer_arithmetic(ort):
    # floor division and modulo of integers follow numpy (floor, sign of the divisor)
    rng = _rng(7)
    a = rng.integers(-20, 20, (4, 5)).astype("int32")
    b = np.array([3, -3, 7, -7, 1], "int32")

    def fn(x, y):
        return x // y, x % y, x * y - x, abs(x), -x, F.maximum(x, y)
    _compare(ort, fn, a, b, exact=True)


def test_elemwise_nan_inf_and_clip(ort):
    x = np.array([[np.nan, np.inf, -np.inf, 0.5], [1.5, -2.0, 0.1, 3.0]], "float32")

    def fn(a):
        return F.isnan(a), F.isinf(a), F.clip(a, -1.0, 1.0), F.where(F.isnan(a), F.zeros_like(a), a)
    _compare(ort, fn, x, exact=True)


@pytest.mark.parametrize("case", ["clip", "where", "pow_scalar", "leaky_relu", "prelu_like",
                                  "normalize", "var"])
def test_composites(ort, case):
    x = _normal(_rng(8), (2, 3, 4))
    fns = {
        "clip": lambda a: F.clip(a, -0.5, 0.7),
        "where": lambda a: F.where(a > 0.3, a, -a * 2),
        "pow_scalar": lambda a: abs(a) ** 2.5,
        "leaky_relu": lambda a: F.leaky_relu(a, 0.1),
        "prelu_like": lambda a: F.maximum(a, 0) + 0.2 * F.minimum(a, 0),
        "normalize": lambda a: F.normalize(a, axis=1),
        "var": lambda a: F.var(a, axis=2),
    }
    _compare(ort, fns[case], x, exact=case in ("clip", "where"))


@pytest.mark.parametrize("axis", [1, -1, (1, 2)])
def test_softmax_log_softmax(ort, axis):
    x = _normal(_rng(9), (2, 3, 5))
    _compare(ort, lambda a: (F.softmax(a, axis=axis), F.logsoftmax(a, axis=axis)), x,
             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (-1, True),
                                           ((0, 2), False), ((0, 2), True)])
def test_reductions(ort, mode, axis, keepdims):
    x = _rng(10).uniform(0.5, 1.5, (3, 4, 5)).astype("float32")
    fn = getattr(F, mode)
    _compare(ort, lambda a: fn(a, axis=axis, keepdims=keepdims), x,
             exact=mode in ("max", "min"), rtol=1e-5)


def test_reductions_of_integers_and_args(ort):
    x = _rng(11).integers(-5, 5, (3, 4)).astype("int32")
    fns = lambda a: (F.sum(a, axis=1), F.mean(a, axis=0), F.argmax(a, axis=1),  # noqa: E731
                     F.argmin(a), F.cumsum(a, axis=1))
    _compare(ort, fns, x, exact=True)


@pytest.mark.parametrize("case", ["reshape", "flatten", "transpose", "broadcast", "concat",
                                  "stack", "split", "expand_squeeze", "tile", "repeat", "pad",
                                  "pad_reflect", "pad_edge"])
def test_shape_ops(ort, case):
    x = _normal(_rng(12), (2, 3, 4))
    fns = {
        "reshape": lambda a: a.reshape(4, -1),
        "flatten": lambda a: (F.flatten(a), F.flatten(a, 1)),
        "transpose": lambda a: (F.transpose(a, (2, 0, 1)), a.T if a.ndim == 2 else a),
        "broadcast": lambda a: F.broadcast_to(a[:, :1], (2, 3, 4)),
        "concat": lambda a: F.concat([a, a * 2], axis=1),
        "stack": lambda a: F.stack([a, a + 1, a - 1], axis=-1),
        "split": lambda a: tuple(F.split(a, [1, 3], axis=2)),
        "expand_squeeze": lambda a: F.squeeze(F.expand_dims(a, (0, 2)), 0),
        "tile": lambda a: F.tile(a, (2, 1, 3)),
        "repeat": lambda a: F.repeat(a, 2, axis=1),
        "pad": lambda a: F.pad(a, ((0, 0), (1, 2), (2, 1)), constant_value=0.5),
        "pad_reflect": lambda a: F.pad(a, ((0, 0), (1, 1), (2, 1)), mode="reflect"),
        "pad_edge": lambda a: F.pad(a, ((1, 0), (0, 1), (2, 2)), mode="edge"),
    }
    _compare(ort, fns[case], x, exact=True)


@pytest.mark.parametrize("index", [
    (0,), (slice(1, 3),), (slice(None, None, 2), -1), (Ellipsis, 1), (None, 1, slice(None, 2)),
    (slice(None, None, -1),), (1, slice(3, 0, -2), slice(None)), (slice(-2, None), None, 0),
])
def test_subtensor(ort, index):
    x = _normal(_rng(13), (3, 4, 5))
    _compare(ort, lambda a: a[index], x, exact=True)


def test_advanced_indexing_gather_and_embedding(ort):
    mge.random.seed(2)
    emb = M.Embedding(10, 4)
    x = _normal(_rng(14), (3, 5))
    idx = np.array([[1, 2], [9, 0]], "int32")
    cols = np.array([4, 0, 0, 2], "int32")
    g = np.array([[0, 2], [1, 1], [4, 3]], "int32")

    def fn(a, i, c, gi):
        return emb(i), a[:, c], F.gather(a, 1, gi)
    _compare(ort, fn, x, idx, cols, g, exact=True)


def test_cross_entropy_eval(ort):
    # log_softmax, then the label's entry (IndexingOneHot), then the mean
    logits = _normal(_rng(15), (6, 5))
    labels = np.array([0, 4, 2, 2, 1, 3], "int32")
    _compare(ort, lambda a, b: F.nn.cross_entropy(a, b), logits, labels, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "float16", "bool", "int64"])
def test_casts(ort, dtype):
    x = (_normal(_rng(16), (3, 4)) * 3).astype("float32")
    _compare(ort, lambda a: (a.astype(dtype), a.astype("int32").astype("float32")), x,
             exact=True)


def test_creation_ops(ort):
    x = _normal(_rng(17), (3, 3))

    def fn(a):
        return (a + F.zeros((3,)), F.ones_like(a), a * F.eye(3), F.arange(3) + a, F.full((2,), 7),
                F.linspace(0, 1, 3) * a)
    _compare(ort, fn, x, exact=True)


@pytest.mark.parametrize("case", ["2d", "2d_ta", "2d_tb", "2d_tab", "batched", "batched_tb",
                                  "broadcast_batch", "vector", "linear_3d"])
def test_matmul(ort, case):
    rng = _rng(18)
    a, b = _normal(rng, (2, 3, 4)), _normal(rng, (2, 4, 5))
    m, n = _normal(rng, (3, 4)), _normal(rng, (4, 6))
    w = _normal(rng, (6, 4))
    fns = {
        "2d": (lambda x, y: F.matmul(x, y), m, n),
        "2d_ta": (lambda x, y: F.matmul(x, y, transpose_a=True), m.T.copy(), n),
        "2d_tb": (lambda x, y: F.matmul(x, y, transpose_b=True), m, n.T.copy()),
        "2d_tab": (lambda x, y: F.matmul(x, y, transpose_a=True, transpose_b=True), m.T.copy(),
                   n.T.copy()),
        "batched": (lambda x, y: F.matmul(x, y), a, b),
        "batched_tb": (lambda x, y: F.matmul(x, y, transpose_b=True), a, a),
        "broadcast_batch": (lambda x, y: F.matmul(x, y), a, n[:, :5].copy()),
        "vector": (lambda x, y: (F.matmul(x, y), F.matmul(y[:, 0], y[:, 1])), m, n),
        "linear_3d": (lambda x, y: F.linear(x, y), a, w),
    }
    fn, *inputs = fns[case]
    _compare(ort, fn, *inputs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride,padding,dilation,groups,bias", [
    (1, 0, 1, 1, True), (2, 1, 1, 1, False), (1, 2, 2, 1, True), (1, 1, 1, 2, True),
    (2, 1, 1, 4, False), ((2, 1), (0, 1), (1, 2), 1, True),
])
def test_conv2d(ort, stride, padding, dilation, groups, bias):
    rng = _rng(19)
    x = _normal(rng, (2, 4, 9, 8))
    w = _normal(rng, (8, 4 // groups, 3, 3))
    if groups > 1:
        w = w.reshape(groups, 8 // groups, 4 // groups, 3, 3)
    b = _normal(rng, (1, 8, 1, 1))

    def fn(a, wt, bi):
        return F.conv2d(a, wt, bi if bias else None, stride=stride, padding=padding,
                        dilation=dilation, groups=groups)
    _compare(ort, fn, x, w, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride,padding,groups", [(2, 1, 1), (1, 0, 1), (2, 0, 2)])
def test_conv_transpose2d(ort, stride, padding, groups):
    rng = _rng(20)
    x = _normal(rng, (2, 4, 5, 5))
    w = _normal(rng, (4, 6 // groups, 3, 3))
    if groups > 1:
        w = w.reshape(groups, 4 // groups, 6 // groups, 3, 3)
    _compare(ort, lambda a, wt: F.conv_transpose2d(a, wt, stride=stride, padding=padding,
                                                   groups=groups), x, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["max", "max_pad", "max_stride", "avg", "avg_pad_include",
                                  "avg_pad_exclude", "adaptive_avg", "adaptive_max",
                                  "adaptive_global"])
def test_pooling(ort, case):
    x = _normal(_rng(21), (2, 3, 9, 7))
    fns = {
        "max": lambda a: F.max_pool2d(a, 2),
        "max_pad": lambda a: F.max_pool2d(a, 3, stride=2, padding=1),
        "max_stride": lambda a: F.max_pool2d(a, (3, 2), stride=(1, 2)),
        "avg": lambda a: F.avg_pool2d(a, 3),
        "avg_pad_include": lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, mode="average"),
        "avg_pad_exclude": lambda a: F.avg_pool2d(a, 3, stride=2, padding=1,
                                                  mode="average_count_exclude_padding"),
        "adaptive_avg": lambda a: F.adaptive_avg_pool2d(a, (3, 2)),
        "adaptive_max": lambda a: F.adaptive_max_pool2d(a, (4, 3)),
        "adaptive_global": lambda a: F.adaptive_avg_pool2d(a, 1),
    }
    _compare(ort, fns[case], x, exact=case.startswith(("max", "adaptive_max")), rtol=1e-5)


def test_batch_norm_and_layer_norm_eval(ort):
    rng = _rng(22)
    bn = _with_statistics(M.BatchNorm2d(3), rng)
    bn1 = M.BatchNorm1d(4)
    ln = M.LayerNorm((5,))
    ln.weight[...] = rng.uniform(0.5, 1.5, (5,)).astype("float32")
    for m in (bn, bn1, ln):
        m.eval()
    x, y = _normal(rng, (2, 3, 4, 5)), _normal(rng, (6, 4))

    def fn(a, b):
        return bn(a), bn1(b), ln(a), F.nn.layer_norm(a, (4, 5), affine=False)
    _compare(ort, fn, x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [13, 17])
def test_activations_functional(ort, opset):
    x = _normal(_rng(23), (4, 6))

    def fn(a):
        return (F.relu(a), F.sigmoid(a), F.tanh(a), F.gelu(a), F.leaky_relu(a, 0.05),
                F.softplus(a), F.hswish(a), F.silu(a), F.relu6(a * 4), F.hsigmoid(a),
                F.logsigmoid(a))
    model = _compare(ort, fn, x, opset=opset, rtol=1e-5, atol=1e-6)
    # HardSwish is opset 14's: before it, x * HardSigmoid(x)
    assert ("HardSwish" in {n.op_type for n in model.graph.node}) == (opset >= 14)


# -- names, files, options -------------------------------------------------------------------------
def test_dump_format_onnx_names_and_user_info(ort, tmp_path):
    import onnx
    x = _normal(_rng(24), (2, 3))

    @trace(symbolic=True, capture_as_const=True)
    def fn(a, *, scale):
        return {"prob": F.softmax(a * scale, axis=1), "logit": a * scale}

    out = fn(mge.tensor(x), scale=mge.tensor(np.full((1, 3), 2, "float32")))
    path = tmp_path / "model.onnx"
    fn.dump(str(path), arg_names=["image"], format="onnx", opset=18,
            user_info={"labels": ["a", "b", "c"]})
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["image", "scale"]
    names = [o.name for o in model.graph.output]
    assert sorted(names) == ["logit", "prob"]  # a dict's keys name its tensors
    assert model.opset_import[0].version == 18
    props = {p.key: p.value for p in model.metadata_props}
    assert json.loads(props["mge.user_info"]) == {"labels": ["a", "b", "c"]}
    got = dict(zip(names, _run_onnx(ort, model, [x, np.full((1, 3), 2, "float32")])))
    np.testing.assert_allclose(got["prob"], out["prob"].numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got["logit"], out["logit"].numpy())


def test_output_names_file_object_and_passthrough(ort):
    import onnx
    x = _normal(_rng(25), (2, 2))
    fn = _traced(lambda a: (a, a + 1))  # an input returned as it is: an Identity node
    fn(mge.tensor(x))
    buf = io.BytesIO()
    fn.dump(buf, arg_names=["x"], output_names=["same", "plus"], format="onnx")
    model = onnx.load_from_string(buf.getvalue())
    got = _run_onnx(ort, model, [x])
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], x + 1)
    with pytest.raises(ValueError, match="'x' names both an input and an output"):
        export_onnx(fn, None, arg_names=["x"], output_names=["x", "y"])


def test_dead_code_is_left_out(ort):
    def fn(a):
        unused = F.exp(a) * 3  # noqa: F841  (recorded, not needed by the output)
        return a + 1
    model = _compare(ort, fn, _normal(_rng(26), (3,)), exact=True)
    assert "Exp" not in {n.op_type for n in model.graph.node}


def test_unmappable_op_names_the_op(ort, tmp_path):
    fn = _traced(lambda a: a + mge.random.uniform(size=(3,)))
    fn(mge.tensor(np.zeros(3, "float32")))
    path = tmp_path / "no.onnx"
    with pytest.raises(OnnxExportError) as info:
        fn.dump(str(path), format="onnx")
    message = str(info.value)
    assert "op #0" in message and "UniformRNG(" in message and "seed=" in message
    assert "has no ONNX mapping" in message
    assert isinstance(info.value, TraceError) and isinstance(info.value, NotImplementedError)
    assert not path.exists()  # nothing written


def test_training_batch_norm_asks_for_eval(ort):
    bn = M.BatchNorm2d(2)  # training mode: batch statistics
    fn = _traced(lambda a: bn(a))
    fn(mge.tensor(_normal(_rng(27), (2, 2, 3, 3))))
    with pytest.raises(OnnxExportError, match=r"op #\d+ .*BatchNorm\(fwd_mode='training'.*eval"):
        export_onnx(fn, None)


def test_unsupported_parameters_are_named(ort):
    fn = _traced(lambda a: F.argmax(a, axis=(0, 1)))
    fn(mge.tensor(_normal(_rng(28), (2, 3, 4))))
    with pytest.raises(OnnxExportError, match=r"op #0 of the recording, Argmax\(axis=\(0, 1\)"):
        export_onnx(fn, None)
    ln = M.LayerNorm((4,))
    fn = _traced(lambda a: ln(a))
    fn(mge.tensor(_normal(_rng(28), (2, 3, 4))))
    with pytest.raises(OnnxExportError, match="LayerNormalization needs opset 17"):
        export_onnx(fn, None, opset=13)


def test_without_capture_as_const_is_dumps_error(ort):
    fn = trace(lambda a: a * 2, symbolic=True)
    fn(mge.tensor(np.ones(2, "float32")))
    message = "you must specify capture_as_const=True at __init__ to use dump"
    with pytest.raises(ValueError, match=message):
        fn.dump(io.BytesIO(), format="onnx")
    with pytest.raises(ValueError, match=message):
        export_onnx(fn, None)


def test_bad_format_opset_and_append(ort):
    fn = _traced(lambda a: a * 2)
    with pytest.raises(ValueError, match="has not been called yet"):
        export_onnx(fn, None)
    fn(mge.tensor(np.ones(2, "float32")))
    with pytest.raises(ValueError, match="unknown format 'tflite'"):
        fn.dump(io.BytesIO(), format="tflite")
    with pytest.raises(ValueError, match="opset must be an int from 13"):
        fn.dump(io.BytesIO(), format="onnx", opset=7)
    with pytest.raises(ValueError, match="append=True is for mge model files"):
        fn.dump(io.BytesIO(), format="onnx", append=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'opset'"):
        fn.dump(io.BytesIO(), opset=17)  # an ONNX option without format="onnx"
    buf = io.BytesIO()
    fn.dump(buf, format="mge")  # the default format, named
    assert mge.jit.load(io.BytesIO(buf.getvalue()))(np.ones(2, "float32")).numpy().tolist() == [
        2.0, 2.0]


def test_import_and_error_without_onnx():
    # a Python where onnx cannot be imported: mge and mge.jit import; exporting says what to
    # install
    code = "\n".join([
        "import sys",
        "sys.modules['onnx'] = None",
        "sys.modules['onnxruntime'] = None",
        "import numpy as np, mge, mge.jit",
        "f = mge.jit.trace(lambda a: a + 1, symbolic=True, capture_as_const=True)",
        "f(mge.tensor(np.ones(2, 'float32')))",
        "try:",
        "    mge.jit.export_onnx(f, None)",
        "except ImportError as e:",
        "    print('ImportError:', e)",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert 'ImportError: ONNX export needs the onnx package: pip install "mge[onnx]"' in \
        done.stdout


def test_dump_still_writes_mge_models():
    # format="mge" is the default: trace.dump's own model files are untouched by ONNX export
    fn = _traced(lambda a: F.relu(a) * 3)
    x = np.array([-1.0, 2.0], "float32")
    fn(mge.tensor(x))
    buf = io.BytesIO()
    fn.dump(buf)
    np.testing.assert_array_equal(mge.jit.load(io.BytesIO(buf.getvalue()))(x).numpy(),
                                  [0.0, 6.0])


def test_onnx_pool_count_include_pad_semantics(ort):
    # the two average modes differ only at the padded border: both match their ONNX form
    x = np.ones((1, 1, 3, 3), "float32")
    fn = _traced(lambda a: (F.avg_pool2d(a, 3, 1, 1, mode="average"),
                            F.avg_pool2d(a, 3, 1, 1, mode="average_count_exclude_padding")))
    inc, exc = _flat(fn(mge.tensor(x)))
    assert math.isclose(inc[0, 0, 0, 0], 4 / 9, rel_tol=1e-6) and exc[0, 0, 0, 0] == 1.0
    got = _run_onnx(ort, export_onnx(fn, None), [x])
    np.testing.assert_allclose(got[0], inc, rtol=1e-6)
    np.testing.assert_allclose(got[1], exc, rtol=1e-6)


def _guide_blocks():
    # the ``.. code-block:: python`` bodies of the guide page
    lines, blocks, i = GUIDE.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() == ".. code-block:: python":
            body, i = [], i + 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)))
        else:
            i += 1
    return blocks


def test_guide_example_runs(ort, capsys):
    blocks = _guide_blocks()
    assert blocks
    for code in blocks:
        exec(compile(code, str(GUIDE), "exec"), {"__name__": "guide_example"})
    assert "Conv" in capsys.readouterr().out
