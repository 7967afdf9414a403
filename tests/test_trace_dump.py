"""trace.dump and mge.jit.load: model files round trip bit for bit; bad files give clear errors.

The format is ``mge/jit/dump.py``'s (a zip of ``graph.json`` and ``constants/<n>.npy``); the
command line is ``python -m mge.jit.run`` (``mge/jit/run.py``).
"""
import io
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.core import TraceError, apply
from mge.jit import trace
from mge.jit.dump import FORMAT_VERSION, LoadedModel, ModelFileError, load, save

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _rand(*shape, dtype="float32"):
    return np.random.randn(*shape).astype(dtype)


def _dumped(traced, **kwargs):
    buf = io.BytesIO()
    traced.dump(buf, **kwargs)
    return buf.getvalue()


def _same(a, b):
    """Equal structure, tensors bit-identical."""
    if isinstance(a, mge.Tensor):
        assert isinstance(b, mge.Tensor), type(b)
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert type(a) is type(b), (type(a), type(b))
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)


def _round_trip(fn, *args, **dump_kwargs):
    """Trace fn, call it twice (record, replay), dump, load, compare on the same inputs."""
    traced = trace(fn, symbolic=True, capture_as_const=True)
    recorded = traced(*args)
    replayed = traced(*args)
    model = load(io.BytesIO(_dumped(traced, **dump_kwargs)))
    got = model(*args)
    _same(recorded, got)
    _same(replayed, got)
    got2 = model(*[a.numpy() for a in args])  # numpy inputs, and a second call
    _same(recorded, got2)
    return traced, model, recorded


# -- round trips -----------------------------------------------------------------------------------
def test_mlp_inference():
    net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
    x = mge.tensor(_rand(5, 8))
    _, model, out = _round_trip(lambda x: F.softmax(net(x), axis=1), x)
    assert isinstance(model, LoadedModel) and isinstance(out, mge.Tensor)
    # other inputs of the same shape: the same as the eager net
    x2 = _rand(5, 8)
    np.testing.assert_array_equal(model(x2).numpy(), F.softmax(net(mge.tensor(x2)), axis=1).numpy())


class _ConvNet(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(3, 8, 3, padding=1)
        self.bn1 = M.BatchNorm2d(8)
        self.conv2 = M.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(8)
        self.fc = M.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.avg_pool2d(x, 2)
        return self.fc(F.flatten(x, 1))


def test_conv_net_batchnorm_eval_pooling():
    net = _ConvNet()
    # non-trivial running statistics, then inference mode
    for _ in range(2):
        net(mge.tensor(_rand(4, 3, 16, 16)))
    net.eval()
    x = mge.tensor(_rand(2, 3, 16, 16))
    _, model, out = _round_trip(lambda x: F.softmax(net(x), axis=1), x)
    np.testing.assert_array_equal(out.numpy(), F.softmax(net(x), axis=1).numpy())
    assert model.num_ops > 10


def test_shape_and_indexing_ops():
    w = mge.tensor(_rand(4, 6))
    idx = mge.tensor(np.array([2, 0, 3], dtype="int32"))

    def fn(x, y):
        a = F.concat([x, y * 0.5], axis=1)               # (4, 6)
        b = a.reshape(2, 12)[:, 1:10:3]                  # basic indexing
        c = F.transpose(a, (1, 0))[None, ..., -1]        # new axis, ellipsis, negative int
        d = a[idx]                                       # advanced indexing by a constant
        e = F.stack([x.sum(axis=1), F.max(y, axis=1)], axis=0)
        f = F.where(a > 0, a, a * w)                     # a captured parameter
        g = F.broadcast_to(F.expand_dims(x.mean(axis=0), 0), (3, 3))
        h = F.argmax(a, axis=1).astype("float32") - F.clip(a, -0.5, 0.5).sum()
        return b, c, d, e, f, g, h

    x, y = mge.tensor(_rand(4, 3)), mge.tensor(_rand(4, 3))
    _round_trip(fn, x, y)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_special_values_and_dtypes():
    def fn(x, n):
        return (x * float("inf"), x * -0.0, F.log(x - 10), (n * 3) // 2, x > 0.5, x.astype("float16"))

    x = mge.tensor(np.abs(_rand(3, 4)))
    n = mge.tensor(np.arange(6, dtype="int32").reshape(2, 3))
    _, _, out = _round_trip(fn, x, n)
    assert out[4].dtype == np.bool_ and out[5].dtype == np.float16


def test_64_bit_inputs():
    traced = trace(lambda a, b: (a * 2, b + 1), capture_as_const=True)
    a = mge.tensor(np.arange(3, dtype="int64"), dtype="int64")
    b = mge.tensor(np.linspace(0, 1, 4), dtype="float64")
    expect = traced(a, b)
    model = load(io.BytesIO(_dumped(traced)))
    assert [i.dtype for i in model.inputs] == [np.int64, np.float64]
    _same(expect, model(a.numpy(), b.numpy()))


def test_outputs_structures_and_names():
    net = M.Linear(3, 2)
    x, y = mge.tensor(_rand(4, 3)), mge.tensor(np.float32(2.0))

    traced, model, _ = _round_trip(lambda x, y: [net(x), (x * y, x.sum())], x, y)
    assert [s.name for s in model.inputs] == ["arg_0", "arg_1"]
    assert model.output_names == ("output_0", "output_1", "output_2")
    assert model.inputs[0].shape == (4, 3) and model.inputs[1].shape == ()
    out = model(x, y)
    assert isinstance(out, list) and isinstance(out[1], tuple)

    m2 = load(io.BytesIO(_dumped(traced, arg_names=["data", None],
                                 output_names=["pred", "scaled", "total"])))
    assert [s.name for s in m2.inputs] == ["data", "arg_1"]
    assert m2.output_names == ("pred", "scaled", "total")
    flat = m2.run(data=x, arg_1=y)
    assert list(flat) == ["pred", "scaled", "total"]
    np.testing.assert_array_equal(flat["total"].numpy(), x.sum().numpy())
    with pytest.raises(ValueError, match="arg_names"):
        traced.dump(io.BytesIO(), arg_names=["a"])
    with pytest.raises(ValueError, match="output_names"):
        traced.dump(io.BytesIO(), output_names=["a", "b"])
    with pytest.raises(ValueError, match="twice"):
        traced.dump(io.BytesIO(), output_names=["a", "a", "b"])


def test_dict_outputs_and_passthrough():
    net = M.Linear(3, 2)

    def fn(x):
        # an argument and a parameter returned as they are, and computed values
        return {"logits": net(x), "x": x, "weight": net.weight, "n": F.argmax(x, axis=1)}

    traced, model, _ = _round_trip(fn, mge.tensor(_rand(2, 3)))
    assert set(model.output_names) == {"logits", "x", "weight", "n"}
    out = model(np.ones((2, 3), "float32"))
    assert isinstance(out, dict) and set(out) == {"logits", "x", "weight", "n"}
    np.testing.assert_array_equal(out["weight"].numpy(), net.weight.numpy())
    with pytest.raises(TypeError, match="dict format"):
        traced.dump(io.BytesIO(), output_names=["a", "b", "c", "d"])


def test_keyword_inputs_and_input_checks():
    traced = trace(lambda a, b: a * 2 - b, capture_as_const=True)
    a, b = mge.tensor(_rand(2, 2)), mge.tensor(_rand(2, 2))
    expect = traced(a, b)
    model = load(io.BytesIO(_dumped(traced, arg_names=["a", "b"])))
    for got in (model(a=a, b=b), model(b=b.numpy(), a=a.numpy()), model(a, b=b)):
        np.testing.assert_array_equal(got.numpy(), expect.numpy())
    np.testing.assert_array_equal(model(a.numpy().astype("float64"), b).numpy(), expect.numpy())
    with pytest.raises(ValueError, match="missing model input.*b"):
        model(a)
    with pytest.raises(ValueError, match="no input 'c'.*a, b"):
        model(a, b, c=a)
    with pytest.raises(ValueError, match="'a' is given twice"):
        model(a, a=a, b=b)
    with pytest.raises(ValueError, match="takes 2 inputs"):
        model(a, b, a)
    with pytest.raises(ValueError, match=r"'b' must be of shape \(2, 2\).*float32; got shape \(3,\)"):
        model(a, np.zeros(3, "float32"))
    with pytest.raises(ValueError, match="dtype float32; got shape .*int32"):
        model(a, np.zeros((2, 2), "int32"))


def test_traced_keyword_arguments_named_by_keyword():
    traced = trace(lambda x, *, scale: x * scale, capture_as_const=True)
    x, s = mge.tensor(_rand(3)), mge.tensor(np.float32(3.0))
    expect = traced(x, scale=s)
    model = load(io.BytesIO(_dumped(traced)))
    assert [i.name for i in model.inputs] == ["arg_0", "scale"]
    np.testing.assert_array_equal(model(x, scale=s).numpy(), expect.numpy())


def test_file_object_and_paths(tmp_path):
    traced = trace(lambda x: F.relu(x) + 1, capture_as_const=True)
    x = mge.tensor(_rand(3, 3))
    expect = traced(x).numpy()
    path = tmp_path / "model.mge"
    traced.dump(str(path))
    with open(path, "rb") as f:
        m1 = load(f)
    m2 = load(path)  # a pathlib.Path
    with open(tmp_path / "m2.mge", "wb") as f:
        traced.dump(f)
    m3 = load(str(tmp_path / "m2.mge"))
    for m in (m1, m2, m3):
        np.testing.assert_array_equal(m(x).numpy(), expect)
    assert (tmp_path / "m2.mge").read_bytes() == path.read_bytes()


def test_append_user_info_and_metadata(tmp_path):
    traced = trace(lambda x: x * 3, capture_as_const=True)
    traced(mge.tensor(_rand(2)))
    path = tmp_path / "m.mge"
    info = {"name": "triple", "sizes": (1, 2.5, None), "flags": [True, False], "nan": float("nan")}
    traced.dump(path, user_info=info)
    got = load(path).user_info
    assert got["name"] == "triple" and got["sizes"] == (1, 2.5, None) and got["flags"] == [True, False]
    assert np.isnan(got["nan"])
    traced.dump(path, user_info=info, enable_metadata=False)
    assert load(path).user_info is None
    with pytest.raises(TypeError, match="user_info"):
        traced.dump(io.BytesIO(), user_info=object())
    # append: a second model after the first; the reader takes the last one
    traced2 = trace(lambda x: x - 1, capture_as_const=True)
    traced2(mge.tensor(_rand(2)))
    traced2.dump(path, append=True, user_info="second")
    assert load(path).user_info == "second"
    assert load(path)(np.ones(2, "float32")).numpy().tolist() == [0.0, 0.0]


def test_megengine_options_accepted():
    traced = trace(lambda x: x + 1, capture_as_const=True)
    traced(mge.tensor(_rand(2)))
    data = _dumped(traced, keep_var_name=2, keep_opr_name=True, keep_param_name=True,
                   keep_opr_priority=True, no_change_graph=True, optimize_for_inference=True,
                   strip_info_file=None, append_json=True, input_data="#rand(0,1)", repeat=2,
                   silent=True, no_assert=True, maxerr=1e-3, dump_format="FBS_V2",
                   model_version=2, enable_nchw44=True, enable_io16xc32=True)
    assert load(io.BytesIO(data))(np.zeros(2, "float32")).numpy().tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        traced.dump(io.BytesIO(), no_such_option=1)


def test_dump_preconditions():
    plain = trace(lambda x: x + 1)
    plain(mge.tensor([1.0]))
    with pytest.raises(ValueError, match="capture_as_const=True"):
        plain.dump(io.BytesIO())
    never = trace(lambda x: x + 1, capture_as_const=True)
    with pytest.raises(ValueError, match="has not been called yet"):
        never.dump(io.BytesIO())
    nothing = trace(lambda x: None, capture_as_const=True)
    nothing(mge.tensor([1.0]))
    with pytest.raises(ValueError, match="without return values"):
        nothing.dump(io.BytesIO())
    with pytest.raises(ValueError) as info:  # MegEngine's words
        nothing.dump(io.BytesIO())
    assert str(info.value) == ("the traced function without return values cannot be dumped, the "
                               "traced function should return List[Tensor] or Dict[str, Tensor]")


def test_training_mode_batch_norm_is_not_dumped():
    # as MegEngine's trace.dump: a BatchNorm that updates its statistics is a RuntimeError
    bn = M.BatchNorm2d(3)
    traced = trace(lambda x: bn(x).sum(), symbolic=True, capture_as_const=True)
    x = mge.tensor(np.random.default_rng(0).random((2, 3, 4, 4)).astype("float32"))
    traced(x)
    with pytest.raises(RuntimeError, match="BatchNorm in training mode.*model.eval"):
        traced.dump(io.BytesIO())
    bn.eval()
    inference = trace(lambda x: bn(x).sum(), symbolic=True, capture_as_const=True)
    inference(x)
    inference.dump(io.BytesIO())


def test_loaded_model_not_inside_a_trace():
    t = trace(lambda x: x * 2, capture_as_const=True)
    x = mge.tensor(_rand(2))
    t(x)
    model = load(io.BytesIO(_dumped(t)))

    @trace
    def outer(x):
        return model(x)

    with pytest.raises(TraceError, match="loaded model"):
        outer(x)


def test_only_needed_ops_are_saved():
    net = M.Linear(4, 4)
    x = mge.tensor(_rand(2, 4))

    def fn(x):
        unused = F.exp(net(x)).sum()  # noqa: F841  (dead: not an output)
        return x + 1

    traced = trace(fn, capture_as_const=True)
    traced(x)
    data = _dumped(traced)
    graph = json.loads(zipfile.ZipFile(io.BytesIO(data)).read("graph.json"))
    assert [op["type"].split(":")[1] for op in graph["ops"]] == ["Elemwise"]
    assert len(graph["constants"]) == 1  # the 1, not the Linear's parameters


def test_training_step_dumps_its_forward():
    from mge.autodiff import GradManager
    from mge.optimizer import SGD
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    gm = GradManager().attach(net.parameters())
    opt = SGD(net.parameters(), lr=0.1)

    @trace(capture_as_const=True)
    def step(x, y):
        with gm:
            loss = F.nn.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x, y = mge.tensor(_rand(6, 4)), mge.tensor(np.array([0, 1, 1, 0, 1, 0], "int32"))
    first = step(x, y)
    model = load(io.BytesIO(_dumped(step)))
    # the loss of the recorded parameters, without the backward and update ops
    np.testing.assert_array_equal(model(x, y).numpy(), first.numpy())
    assert model.num_ops < len(step.recording.ops) // 2
    assert not any("Update" in repr(entry[0]) for entry in model._program.plan)


def test_without_host_trace_dumps():
    traced = trace(lambda x: F.relu(x) * 2, capture_as_const=True, without_host=True)
    x = mge.tensor(_rand(3))
    traced(x)
    out = traced(x)
    np.testing.assert_array_equal(load(io.BytesIO(_dumped(traced)))(x).numpy(), out.numpy())


# -- the file format and bad files -----------------------------------------------------------------
@pytest.fixture
def model_bytes():
    net = M.Sequential(M.Linear(3, 4), M.ReLU())
    traced = trace(lambda x: net(x) * 2, capture_as_const=True)
    traced(mge.tensor(_rand(2, 3)))
    return _dumped(traced)


def _rewrite(data, graph=None, drop=(), replace=None):
    """The archive with graph.json replaced (a dict) and members dropped or replaced."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            if name in drop:
                continue
            body = src.read(name)
            if name == "graph.json" and graph is not None:
                body = json.dumps(graph).encode()
            if replace and name in replace:
                body = replace[name]
            z.writestr(name, body)
    return out.getvalue()


def _graph(data):
    return json.loads(zipfile.ZipFile(io.BytesIO(data)).read("graph.json"))


def test_format_layout(model_bytes):
    z = zipfile.ZipFile(io.BytesIO(model_bytes))
    names = z.namelist()
    assert names[0] == "graph.json" and all(n.startswith("constants/") for n in names[1:])
    g = _graph(model_bytes)
    assert g["format"] == "mge-model" and g["version"] == FORMAT_VERSION == 1
    assert g["inputs"] == [{"name": "arg_0", "var": 0, "shape": [2, 3], "dtype": "float32"}]
    assert g["outputs"][0]["name"] == "output_0" and g["output_tree"] == {"tensor": 0}
    assert g["vars"][0] == [[2, 3], "float32", "xpux:0"]
    types = [op["type"] for op in g["ops"]]
    assert types[0] == "mge._core.ops.matmul:MatrixMul"
    assert g["ops"][0]["params"] == {"transposeA": False, "transposeB": True,
                                     "compute_mode": "default"}
    for c in g["constants"]:
        value = np.load(io.BytesIO(z.read(c["entry"])), allow_pickle=False)
        assert list(value.shape) == g["vars"][c["var"]][0]


def test_parameter_encoding_round_trips():
    from mge.jit.dump import _Decoder, _encode
    values = (1, 1.0, True, None, "s", -0.0, float("inf"), float("-inf"), 1e-300, 0.1,
              (1, (2, 3)), [4, 5], {"k": (1,)}, np.dtype("int16"), slice(1, None, -2), Ellipsis,
              mge.get_default_device())
    text = json.dumps(_encode(values, "test"), allow_nan=False)
    back = _Decoder().value(json.loads(text))
    assert back == values
    assert [type(v) for v in back] == [type(v) for v in values]
    assert str(back[5]) == "-0.0"
    nan = _Decoder().value(json.loads(json.dumps(_encode(float("nan"), "t"))))
    assert np.isnan(nan)


@pytest.mark.parametrize("case", ["not_zip", "empty", "truncated", "bad_json", "no_graph",
                                  "wrong_format", "newer", "bad_version", "missing_constant",
                                  "corrupt_constant", "bad_var", "use_before_def",
                                  "wrong_shape", "bad_param", "unknown_field", "bad_dtype",
                                  "npz_member_pickle"])
def test_bad_files(model_bytes, case, tmp_path):
    g = _graph(model_bytes)
    const = g["constants"][0]["entry"]
    if case == "not_zip":
        data, match = b"\x08\x01MegEngine model" * 10, "not an mge model file.*not a zip"
    elif case == "empty":
        data, match = b"", "is empty"
    elif case == "truncated":
        data, match = model_bytes[: len(model_bytes) // 2], "truncated or corrupt"
    elif case == "bad_json":
        data, match = _rewrite(model_bytes, replace={"graph.json": b"{not json"}), "not valid JSON"
    elif case == "no_graph":
        data, match = _rewrite(model_bytes, drop={"graph.json"}), "no 'graph.json'"
    elif case == "wrong_format":
        g["format"] = "onnx"
        data, match = _rewrite(model_bytes, g), "not an mge model file"
    elif case == "newer":
        g["version"] = FORMAT_VERSION + 1
        g["producer"] = "mge 9.0"
        data, match = _rewrite(model_bytes, g), "format version 2, newer.*upgrade mge"
    elif case == "bad_version":
        g["version"] = "1"
        data, match = _rewrite(model_bytes, g), "bad format version"
    elif case == "missing_constant":
        data, match = _rewrite(model_bytes, drop={const}), f"no '{const}'"
    elif case == "corrupt_constant":
        data, match = _rewrite(model_bytes, replace={const: b"\x93NUMPY garbage"}), "not a valid .npy"
    elif case == "bad_var":
        g["ops"][0]["inputs"][0] = 999
        data, match = _rewrite(model_bytes, g), "999 is not a var"
    elif case == "use_before_def":
        g["ops"] = g["ops"][1:]
        data, match = _rewrite(model_bytes, g), "reads var .* before"
    elif case == "wrong_shape":
        out = g["ops"][0]["outputs"][0]
        g["vars"][out][0] = [7, 7]
        data, match = _rewrite(model_bytes, g), r"computes .* where the file says \[?\(7, 7\)"
    elif case == "bad_param":
        g["ops"][0]["params"]["transposeA"] = {"weird": 1}
        data, match = _rewrite(model_bytes, g), "unknown value tag 'weird'"
    elif case == "unknown_field":
        g["ops"][0]["params"]["no_such"] = 1
        data, match = _rewrite(model_bytes, g), "parameters do not build the op"
    elif case == "bad_dtype":
        g["vars"][0][1] = "object"
        data, match = _rewrite(model_bytes, g), "dtype 'object'"
    elif case == "npz_member_pickle":
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        data, match = _rewrite(model_bytes, replace={const: buf.getvalue()}), "not a valid .npy"
    path = tmp_path / "bad.mge"
    path.write_bytes(data)
    with pytest.raises(ModelFileError, match=match) as info:
        load(path)
    assert "bad.mge" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ModelFileError, match=match):
        load(io.BytesIO(data))


def test_corrupt_bytes_inside_a_member(model_bytes):
    # a flipped byte in a stored constant: zip's CRC catches it
    g = _graph(model_bytes)
    z = zipfile.ZipFile(io.BytesIO(model_bytes))
    info = z.getinfo(g["constants"][0]["entry"])
    data = bytearray(model_bytes)
    pos = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size - 1
    data[pos] ^= 0xFF
    with pytest.raises(ModelFileError, match="corrupt"):
        load(io.BytesIO(bytes(data)))


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="cannot be read"):
        load(tmp_path / "nope.mge")


@pytest.mark.parametrize("op_type", ["os:system", "builtins:eval", "numpy:ndarray",
                                     "test_trace_dump:_outside_op_class", "mge.jit.program:TracedProgram",
                                     "mge.tensor:Tensor", "mge:__loader__", "mge._core.ops.base:OpDef",
                                     "mge.no_such_module:Op", "mge._core.ops.elemwise:NoSuchOp",
                                     "mge._core.ops.elemwise:Elemwise.__init__"])
def test_non_mge_op_classes_refused(model_bytes, op_type):
    g = _graph(model_bytes)
    g["ops"][0]["type"] = op_type
    imported = set(sys.modules)
    with pytest.raises(ModelFileError, match="op type"):
        load(io.BytesIO(_rewrite(model_bytes, g)))
    assert not {m for m in set(sys.modules) - imported if not m.startswith("mge.")}


def _outside_op_class():
    from mge._core.device.cpu.table import def_kernel
    from mge._core.ops.base import OpDef, TensorDesc, def_infer

    class Twice(OpDef):
        """An op defined outside the mge package."""
        _fields = ()

    @def_infer(Twice)
    def _infer(op, descs):
        return [TensorDesc(descs[0][0], descs[0][1])]

    @def_kernel(Twice)
    def _kernel(op, a):
        return (a * 2,)

    return Twice


def test_non_mge_op_not_saved():
    Twice = _outside_op_class()
    traced = trace(lambda x: apply(Twice(), x)[0] + 1, capture_as_const=True)
    out = traced(mge.tensor([1.0, 2.0]))
    assert out.numpy().tolist() == [3.0, 5.0]
    with pytest.raises(TypeError, match="only op classes of the mge package"):
        traced.dump(io.BytesIO())


def test_save_directly_and_device_override(model_bytes):
    traced = trace(lambda x: x * 2, capture_as_const=True)
    x = mge.tensor(_rand(3))
    traced(x)
    buf = io.BytesIO()
    save(traced.recording, buf, ["inp"], ["out"])
    model = load(io.BytesIO(buf.getvalue()), device="cpu0")
    assert model.inputs[0].name == "inp" and str(model.inputs[0].device) == "cpu0:0"
    np.testing.assert_array_equal(model(inp=x.numpy()).numpy(), x.numpy() * 2)
    assert "inp" in repr(model)


# -- the command line ------------------------------------------------------------------------------
def _cli(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "mge.jit.run", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli(tmp_path):
    net = M.Sequential(M.Linear(4, 3), M.ReLU())
    traced = trace(lambda x, y: {"prob": F.softmax(net(x), axis=1), "y2": y * 2},
                   capture_as_const=True)
    x, y = _rand(5, 4), _rand(2)
    traced(mge.tensor(x), mge.tensor(y))
    model_path = tmp_path / "net.mge"
    traced.dump(model_path, arg_names=["x", "y"])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "bad.npy", _rand(3, 4))
    expect = load(model_path).run(x, y)

    r = _cli(model_path, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
             "--output", tmp_path / "out.npz")
    assert r.returncode == 0, r.stderr
    assert "prob: shape (5, 3), float32" in r.stdout and "y2: shape (2,), float32" in r.stdout
    saved = np.load(tmp_path / "out.npz")
    assert sorted(saved.files) == ["prob", "y2"]
    for k in expect:
        np.testing.assert_array_equal(saved[k], expect[k].numpy())

    r = _cli(model_path, "--info")
    assert r.returncode == 0 and "input  x: shape (5, 4), float32" in r.stdout

    r = _cli(model_path, "--input", f"z={tmp_path / 'x.npy'}")
    assert r.returncode == 2 and "no input 'z'" in r.stderr and "x, y" in r.stderr
    r = _cli(model_path, "--input", f"x={tmp_path / 'bad.npy'}", "--input", f"y={tmp_path / 'y.npy'}")
    assert r.returncode == 2 and "must be of shape (5, 4)" in r.stderr
    r = _cli(model_path, "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 2 and "missing --input for y" in r.stderr
    r = _cli(model_path, "--input", f"x={tmp_path / 'nofile.npy'}")
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = _cli(tmp_path / "x.npy", "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 1 and "not an mge model file" in r.stderr
    r = _cli("--help")
    assert r.returncode == 0 and "--input" in r.stdout and "--output" in r.stdout


def test_dump_returns_what_it_wrote(tmp_path):
    # MegEngine's CompGraphDumpResult fields: op count, bytes, constants' bytes, hash, names
    import hashlib

    from mge.jit import trace
    w = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))

    @trace(capture_as_const=True)
    def f(x):
        return mge.functional.matmul(x, w) + 1

    f(mge.tensor(np.ones((4, 2), "float32")))
    path = tmp_path / "m.mge"
    info = f.dump(str(path), arg_names=["data"], output_names=["y"])
    data = path.read_bytes()
    assert info.nr_opr == 2 + 1 + 2  # ops, the input, the constants (MegBrain's count)
    assert info.tot_bytes == len(data)
    assert info.content_hash == hashlib.sha256(data).hexdigest()
    assert info.inputs == ["data"] and info.outputs == ["y"] and len(info.params) == 2
    assert 0 < info.tensor_value_bytes < info.tot_bytes
