"""The quantized inference ops (``mge._core.ops.quantized``) against numpy references, and the
quantized modules eager vs ``trace`` (symbolic and not) vs ``trace.dump`` + ``jit.load``.

The references are plain numpy: integer values multiplied and summed in int64, MegEngine's
``TypeCvt`` written out in float32 (dequantize, divide by the output scale, round halves away
from zero, clip); the ``TypeCvt`` op is also checked against the same conversion written with
``Elemwise`` ops (mge's former ``astype``), bit for bit.
"""
import io
import json
import zipfile

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.module.quantized as QM
from mge._core.ops import quantized as QO
from mge.core.tensor import dtype as D
from mge.functional import quantized as Q
from mge.jit import trace
from mge.jit.naming import opr_name
from mge.quantization.quantize import quantize, quantize_qat

F32 = np.float32
RANGES = {"QuantizedS8": (-128, 127), "Quantized8Asymm": (0, 255), "QuantizedS32": (-2 ** 31, 2 ** 31 - 1)}


def qtensor(rng, shape, dt, lo=-128, hi=127):
    return mge.Tensor(rng.randint(lo, hi + 1, size=shape).astype(dt), dtype=dt)


def spec(dt):
    m = dt.metadata["mgb_dtype"]
    return m["name"], float(m["scale"]), m.get("zero_point")


def ints(t):
    """Integer values (zero point removed) of a quantized tensor, int64."""
    name, _, zp = spec(t.dtype)
    return t.numpy().astype(np.int64) - (zp or 0)


def np_round(x):
    return (np.sign(x) * np.floor(np.abs(x) + x.dtype.type(0.5))).astype(x.dtype)


def np_typecvt(values, src, dst):
    """MegEngine's TypeCvt in numpy: ``values`` the storage values, ``src``/``dst`` quantized
    dtypes (or a plain dtype for ``dst`` / None for ``src``)."""
    v = np.asarray(values)
    if src is not None:
        name, s, zp = spec(src)
        v = v.astype(F32)
        if zp is not None:
            v = v - F32(zp)
        v = v * F32(s)
    if not (dst.metadata and "mgb_dtype" in dst.metadata):
        return v.astype(dst)
    if v.dtype.kind != "f":
        v = v.astype(F32)
    t = v.dtype.type
    name, s, zp = spec(dst)
    q = np_round(v / t(s))
    if zp is not None:
        q = q + t(zp)
    lo, hi = RANGES[name]
    q = np.where(q < t(lo), t(lo), np.where(q > t(hi), t(hi), q)).astype(q.dtype)
    return q.astype(np.dtype(dst.str))


def composed_typecvt(x, dtype):
    """mge's former astype of quantized dtypes: the same conversion with Elemwise ops."""
    from mge._core.ops.elemwise import TypeCvt
    from mge.core import apply

    smeta = x.dtype.metadata.get("mgb_dtype") if x.dtype.metadata else None
    dmeta = dtype.metadata.get("mgb_dtype") if dtype.metadata else None
    v = x
    if smeta is not None:
        v = apply(TypeCvt(np.dtype("float32")), x)[0]
        if "zero_point" in smeta:
            v = v - float(smeta["zero_point"])
        v = v * float(smeta["scale"])
    if dmeta is None:
        return v if v.dtype == dtype else apply(TypeCvt(dtype), v)[0]
    if v.dtype.kind != "f":
        v = apply(TypeCvt(np.dtype("float32")), v)[0]
    q = F.round(v / float(dmeta["scale"]))
    if "zero_point" in dmeta:
        q = q + float(dmeta["zero_point"])
    q = F.clip(q, *RANGES[dmeta["name"]])
    return apply(TypeCvt(np.dtype(dtype.str)), q)[0]


def conv_ref(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, flip=False):
    """Integer 2D cross-correlation by direct summation (int64)."""
    if w.ndim == 5:
        w = w.reshape((-1,) + w.shape[2:])
    if flip:
        w = w[..., ::-1, ::-1]
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oc, oh, ow), np.int64)
    ocg = oc // groups
    for o in range(oc):
        g = o // ocg
        for i in range(oh):
            for j in range(ow):
                win = xp[:, g * cg:(g + 1) * cg,
                         i * stride[0]:i * stride[0] + dilation[0] * (kh - 1) + 1:dilation[0],
                         j * stride[1]:j * stride[1] + dilation[1] * (kw - 1) + 1:dilation[1]]
                out[:, o, i, j] = (win * w[o]).sum(axis=(1, 2, 3))
    return out


def acc_dtype(x, w):
    return D.qint32(F32(spec(x.dtype)[1]) * F32(spec(w.dtype)[1]))


def from_acc(acc, accdt, dtype, relu=False):
    if relu:
        acc = np.maximum(acc, 0)
    acc = np.clip(acc, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    if dtype is None or spec(dtype) == spec(accdt):
        return acc
    return np_typecvt(acc, accdt, dtype)


# -- TypeCvt -------------------------------------------------------------------------------------

_VALUES = np.concatenate([
    np.random.RandomState(3).randn(400).astype(F32) * 10,
    np.arange(-20, 20).astype(F32) * F32(0.05) + F32(0.025),  # halves
    np.array([0.49999997, -0.49999997, 1e9, -1e9, 0.0], F32)])


@pytest.mark.parametrize("dst", [D.qint8(0.05), D.quint8(0.07, 120), D.qint32(0.001),
                                 D.qint8(1.0)])
@pytest.mark.parametrize("src", ["float32", "float16", "int32"])
def test_typecvt_to_quantized_matches_the_elemwise_composition_and_numpy(src, dst):
    vals = _VALUES if src != "int32" else np.arange(-300, 300, 7)
    if src == "float16":
        vals = vals[np.abs(vals) < 1000]
    if spec(dst)[0] == "QuantizedS32":  # float32(2**31 - 1) is 2**31: no saturating values
        vals = vals[np.abs(vals) < 1e5]
    x = mge.Tensor(vals.astype(src), dtype=src)
    got = x.astype(dst)
    assert got.dtype == dst and got.dtype.metadata == dst.metadata
    np.testing.assert_array_equal(got.numpy(), composed_typecvt(x, dst).numpy())
    np.testing.assert_array_equal(got.numpy(), np_typecvt(vals.astype(src), None, dst))


@pytest.mark.parametrize("dst", ["float32", "int32", D.qint8(0.11), D.quint8(0.03, 7),
                                 D.qint32(0.0001)])
def test_typecvt_from_quantized(dst):
    dst = np.dtype(dst) if isinstance(dst, str) else dst
    for src in (D.qint8(0.05), D.quint8(0.2, 100)):
        x = mge.Tensor(_VALUES).astype(src)
        got = x.astype(dst)
        assert got.dtype == dst and got.dtype.metadata == dst.metadata
        np.testing.assert_array_equal(got.numpy(), composed_typecvt(x, dst).numpy())
        np.testing.assert_array_equal(got.numpy(), np_typecvt(x.numpy(), src, dst))


def test_typecvt_is_one_op_that_compares_by_scale():
    a = QO.QuantizedTypeCvt(D.qint8(0.1))
    b = QO.QuantizedTypeCvt(D.qint8(0.2))
    assert a != b and a == QO.QuantizedTypeCvt(D.qint8(0.1))  # numpy's dtypes would be equal
    assert a.dtype == ("QuantizedS8", 0.1, None) and opr_name(a) == "TypeCvt"
    assert QO.qdtype(QO.qspec(D.quint8(0.5, 3))).metadata == D.quint8(0.5, 3).metadata


# -- convolutions --------------------------------------------------------------------------------

_CONVS = [
    dict(dtype=D.qint8(0.3)),
    dict(dtype=D.qint8(0.3), stride=2, padding=1, nonlinear_mode="relu"),
    dict(dtype=D.quint8(0.2, 100), dilation=(2, 1), padding=(2, 1)),
    dict(dtype=None),
    dict(dtype=D.qint32(0.001), conv_mode="convolution"),
    dict(dtype=D.qint8(0.1), bias="other"),
    dict(dtype=D.qint8(0.25), padding=1, inp="u8"),
    dict(dtype=D.qint8(0.2), groups=2, weight="group"),
    dict(dtype=D.qint8(0.2), bias=None),
    dict(dtype="float32", padding=1),
]


@pytest.mark.parametrize("case", range(len(_CONVS)))
def test_conv_bias_activation_matches_the_integer_reference(case):
    kw = dict(_CONVS[case])
    rng = np.random.RandomState(case)
    x = (qtensor(rng, (2, 4, 7, 6), D.quint8(0.03, 128), 0, 255) if kw.pop("inp", None)
         else qtensor(rng, (2, 4, 7, 6), D.qint8(0.05)))
    group = kw.pop("weight", None) == "group"
    w = (qtensor(rng, (2, 3, 2, 3, 3), D.qint8(0.015)) if group
         else qtensor(rng, (6, 4, 3, 3), D.qint8(0.02)))
    accdt = acc_dtype(x, w)
    which = kw.pop("bias", "acc")
    b = None if which is None else qtensor(
        rng, (1, 6, 1, 1), accdt if which == "acc" else D.qint32(0.0003), -5000, 5000)
    dtype = kw["dtype"] = np.dtype(kw["dtype"]) if isinstance(kw["dtype"], str) else kw["dtype"]
    out = Q.conv_bias_activation(x, w, b, **kw)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    acc = conv_ref(ints(x), ints(w), pair(kw.get("stride", 1)), pair(kw.get("padding", 0)),
                   pair(kw.get("dilation", 1)), kw.get("groups", 1),
                   kw.get("conv_mode") == "convolution")
    if b is not None:
        bi = ints(b).astype(np.float64)
        if spec(b.dtype) != spec(accdt):
            bi = np.round(bi * spec(b.dtype)[1] / F32(spec(accdt)[1]))
        acc = acc + bi.astype(np.int64).reshape(1, -1, 1, 1)
    relu = kw.get("nonlinear_mode") == "relu"
    if dtype is not None and not dtype.metadata:
        want = np_typecvt(from_acc(acc, accdt, None, relu), accdt, dtype)
    else:
        want = from_acc(acc, accdt, dtype, relu)
    want_dt = accdt if dtype is None else dtype
    assert out.dtype == want_dt and out.dtype.metadata == want_dt.metadata
    np.testing.assert_array_equal(out.numpy(), want)


def test_batch_conv_and_conv_transpose_match_the_integer_reference():
    rng = np.random.RandomState(7)
    x = qtensor(rng, (3, 4, 5, 5), D.qint8(0.04))
    w = qtensor(rng, (3, 5, 4, 3, 3), D.qint8(0.02))
    accdt = acc_dtype(x, w)
    b = qtensor(rng, (1, 5, 1, 1), accdt, -3000, 3000)
    for kw in (dict(padding=1), dict(stride=2, nonlinear_mode="relu")):
        out = Q.batch_conv_bias_activation(x, w, b, dtype=D.qint8(0.2), **kw)
        s, p = (kw.get("stride", 1),) * 2, (kw.get("padding", 0),) * 2
        acc = np.concatenate([conv_ref(ints(x)[i:i + 1], ints(w)[i], s, p) for i in range(3)])
        acc = acc + ints(b).reshape(1, -1, 1, 1)
        want = from_acc(acc, accdt, D.qint8(0.2), kw.get("nonlinear_mode") == "relu")
        np.testing.assert_array_equal(out.numpy(), want)

    xt = qtensor(rng, (2, 4, 5, 4), D.qint8(0.05))
    wt = qtensor(rng, (4, 3, 3, 2), D.qint8(0.03))
    out = Q.conv_transpose2d(xt, wt, dtype=D.qint8(0.1), stride=2, padding=1, output_padding=1,
                             dilation=(1, 2))
    xi, wi = ints(xt), ints(wt)
    (sh, sw), (ph, pw), (dh, dw), (oph, opw) = (2, 2), (1, 1), (1, 2), (1, 1)
    full = np.zeros((2, 3, 4 * sh + dh * 2 + 1 + oph + ph, 3 * sw + dw * 1 + 1 + opw + pw),
                    np.int64)
    for i in range(5):
        for j in range(4):
            for a in range(3):
                for c in range(2):
                    full[:, :, i * sh + a * dh, j * sw + c * dw] += xi[:, :, i, j] @ wi[:, :, a, c]
    oh, ow = 4 * sh - 2 * ph + dh * 2 + oph + 1, 3 * sw - 2 * pw + dw * 1 + opw + 1
    acc = full[:, :, ph:ph + oh, pw:pw + ow]
    assert out.shape == (2, 3, oh, ow) == (2, 3, 10, 8)
    np.testing.assert_array_equal(out.numpy(), from_acc(acc, acc_dtype(xt, wt), D.qint8(0.1)))
    with pytest.raises(NotImplementedError):
        Q.conv_transpose2d(xt, wt, dtype=D.qint8(0.1), groups=2)


# -- elementwise, linear -------------------------------------------------------------------------

@pytest.mark.parametrize("mode,fn", [("add", np.add), ("fuse_add_relu", lambda a, b: np.maximum(a + b, 0)),
                                     ("mul", np.multiply), ("max", np.maximum)])
def test_elemwise_multi_type_dequantizes_computes_in_float32_and_quantizes(mode, fn):
    rng = np.random.RandomState(1)
    a = qtensor(rng, (3, 5), D.qint8(0.1))
    b = qtensor(rng, (3, 5), D.quint8(0.07, 128), 0, 255)
    q = QM.Elemwise(mode, D.qint8(0.2))
    q.eval()
    out = q(a, b)
    fa, fb = np_typecvt(a.numpy(), a.dtype, np.dtype(F32)), np_typecvt(b.numpy(), b.dtype, np.dtype(F32))
    np.testing.assert_array_equal(out.numpy(), np_typecvt(fn(fa, fb).astype(F32), None, D.qint8(0.2)))
    assert out.dtype.metadata == D.qint8(0.2).metadata
    f = Q._elemwise_multi_type(a, b, mode="q" + mode)  # no dtype: the float result
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f.numpy(), fn(fa, fb).astype(F32))
    with pytest.raises(NotImplementedError):
        Q._elemwise_multi_type(a, b, mode=mode)


@pytest.mark.parametrize("relu", [False, True])
def test_quantized_linear_matches_the_integer_reference(relu):
    rng = np.random.RandomState(2)
    lin = (QM.LinearRelu if relu else QM.Linear)(dtype=D.qint8(0.4))
    lin.weight = mge.Parameter(rng.randint(-127, 128, (6, 5)).astype(D.qint8(0.02)),
                               dtype=D.qint8(0.02))
    lin.bias = mge.Parameter(rng.randn(6).astype(F32))
    lin.eval()
    x = qtensor(rng, (4, 5), D.qint8(0.1))
    out = lin(x)
    accdt = acc_dtype(x, lin.weight)
    acc = ints(x) @ ints(lin.weight).T
    acc = acc + np_typecvt(lin.bias.numpy(), None, accdt).astype(np.int64)
    np.testing.assert_array_equal(out.numpy(), from_acc(acc, accdt, D.qint8(0.4), relu))
    lin.output_dtype = None
    assert lin(x).dtype.metadata == accdt.metadata


def test_errors_name_the_op_and_the_dtypes():
    rng = np.random.RandomState(0)
    w = qtensor(rng, (6, 4, 3, 3), D.qint8(0.02))
    with pytest.raises(TypeError, match="conv_bias_activation: inp"):
        Q.conv_bias_activation(mge.Tensor(np.ones((1, 4, 5, 5), F32)), w, None)
    with pytest.raises(ValueError, match="ConvBias.*channels"):
        Q.conv_bias_activation(qtensor(rng, (1, 3, 5, 5), D.qint8(0.1)), w, None)
    op = QO.ConvBias((1, 1), (0, 0), (1, 1), 1, "identity", "cross_correlation", "default",
                     None, QO.qspec(D.qint8(0.5)), QO.qspec(w.dtype), None)
    with pytest.raises(TypeError, match="ConvBias: inp has the quantization"):
        mge.core.apply(op, qtensor(rng, (1, 4, 5, 5), D.qint8(0.1)), w)
    with pytest.raises(NotImplementedError, match="nonlinear_mode"):
        Q.conv_bias_activation(qtensor(rng, (1, 4, 5, 5), D.qint8(0.1)), w, None,
                               nonlinear_mode="sigmoid")


# -- modules: eager, traced, dumped ----------------------------------------------------------------

class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.ConvBnRelu2d(3, 4, 3, padding=1)
        self.conv2 = M.Conv2d(4, 4, 3, groups=2, padding=1, padding_mode="reflect")
        self.add = M.Elemwise("fuse_add_relu")
        self.convt = M.ConvTranspose2d(4, 3, 3, stride=2, bias=False)
        self.lin = M.LinearRelu(243, 5)
        self.lin2 = M.Linear(5, 6)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        y = self.conv2(self.conv(x))
        y = self.convt(self.add(y, y))
        y = self.lin2(self.lin(F.flatten(y, 1)))
        return self.dequant(y)


@pytest.fixture(scope="module")
def qnet():
    mge.random.seed(11)
    rng = np.random.RandomState(11)
    net = _Net()
    quantize_qat(net)
    for _ in range(2):
        net(mge.Tensor(rng.randn(2, 3, 4, 4).astype(F32)))
    quantize(net)
    net.eval()
    xs = [rng.randn(2, 3, 4, 4).astype(F32) for _ in range(4)]
    return net, xs, [net(mge.Tensor(x)).numpy() for x in xs]


@pytest.mark.parametrize("symbolic", [False, True])
def test_traced_quantized_module_follows_its_inputs(qnet, symbolic):
    net, xs, eager = qnet
    assert len({a.tobytes() for a in eager}) == len(eager)  # the outputs depend on the input
    f = trace(net, symbolic=symbolic, capture_as_const=True)
    for x, want in zip(xs, eager):
        np.testing.assert_array_equal(f(mge.Tensor(x)).numpy(), want)
    for x, want in zip(xs[::-1], eager[::-1]):
        np.testing.assert_array_equal(f(mge.Tensor(x)).numpy(), want)


@pytest.mark.parametrize("symbolic", [False, True])
def test_dumped_quantized_model_reproduces_the_traced_outputs(qnet, symbolic):
    net, xs, eager = qnet
    f = trace(net, symbolic=symbolic, capture_as_const=True)
    f(mge.Tensor(xs[0]))
    buf = io.BytesIO()
    f.dump(buf, arg_names=("x",))
    graph = json.loads(zipfile.ZipFile(io.BytesIO(buf.getvalue())).read("graph.json"))
    types = {o["type"] for o in graph["ops"]}
    for cls in ("ConvBias", "QuantizedConvolutionBackwardData", "QuantizedMatrixMul",
                "QuantizedElemwise", "ElemwiseMultiType", "QuantizedTypeCvt"):
        assert f"mge._core.ops.quantized:{cls}" in types
    model = mge.jit.load(io.BytesIO(buf.getvalue()))
    for x, want in zip(xs[1:], eager[1:]):
        out = model(mge.Tensor(x))
        out = list(out.values())[0] if isinstance(out, dict) else out
        out = out[0] if isinstance(out, (list, tuple)) else out
        np.testing.assert_array_equal(out.numpy(), want)


def test_batch_matmul_activation_traced():
    rng = np.random.RandomState(4)
    m = QM.BatchMatMulActivation(3, 4, 5, nonlinear_mode="relu", dtype=D.qint8(0.3))
    m.weight = mge.Parameter(rng.randint(-127, 128, (3, 5, 4, 1, 1)).astype(D.qint8(0.02)),
                             dtype=D.qint8(0.02))
    m.bias = mge.Parameter(rng.randn(1, 5, 1, 1).astype(F32))
    m.eval()
    xs = [qtensor(rng, (3, 4, 2), D.qint8(0.05)) for _ in range(3)]
    eager = [m(x).numpy() for x in xs]
    accdt = acc_dtype(xs[0], m.weight)
    b = np_typecvt(m.bias.numpy(), None, accdt).astype(np.int64).reshape(1, 5, 1)
    for x, e in zip(xs, eager):
        acc = np.einsum("bok,bkn->bon", ints(m.weight)[..., 0, 0], ints(x)) + b
        np.testing.assert_array_equal(e, from_acc(acc, accdt, D.qint8(0.3), True))
    f = trace(m, symbolic=True)
    for x, e in zip(xs, eager):
        np.testing.assert_array_equal(f(x).numpy(), e)


def test_op_names_are_megengine_s():
    assert opr_name(QO.ElemwiseMultiType("qadd", None, (None, None))) == "QADD"
    assert opr_name(QO.QuantizedElemwise("add", ("QuantizedS32", 0.5, None))) == "ADD"
    assert opr_name(QO.QuantizedMatrixMul(False, True, "default", ("QuantizedS8", 0.1, None),
                                          ("QuantizedS8", 0.2, None))) == "MatrixMul"
    op = QO.QuantizedConvolutionBackwardData((1, 1), (0, 0), (0, 0), (1, 1), 1,
                                             "cross_correlation", "default", None,
                                             ("QuantizedS8", 0.1, None), ("QuantizedS8", 0.2, None))
    assert opr_name(op) == "ConvolutionBackwardData"
