"""The quantized ops of ``kernels/quantized.py`` on the CUDA device (``cudahost0``: the device's
code over the host backend), through the public API, against ``cpu0`` bit for bit:
``Tensor.astype`` to and from quantized dtypes, ``mge.functional.quantized``
(``conv_bias_activation``, ``batch_conv_bias_activation``, ``conv_transpose2d``,
``_elemwise_multi_type``), the modules of ``mge.module.quantized`` (``Linear``, ``LinearRelu``,
``Elemwise``, ``BatchMatMulActivation``, ``Conv2d``/``ConvRelu2d`` with a padding mode,
``ConvTranspose2d``, ``Concat``, the stubs) and a network quantized from QAT -- each checked to
have run on the device (``ran``), the outputs' quantized dtypes kept, the network traced too,
and errors raised as on the CPU at async levels 0 and 2.

Without g++ the tests are skipped with the reason, except under ``CI``.  Host compute is off, so
every op runs the device's kernels.
"""
import copy

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.module.quantized as QM
from mge._core.ops.quantized import QuantizedTypeCvt, float_mode, qspec
from mge.core import AsyncError
from mge.core.tensor import dtype as D
from mge.functional import quantized as Q
from mge.jit import trace
from mge.quantization.quantize import quantize, quantize_qat

from cuda_device_fixtures import DEV, at, both, cuda, level, on  # noqa: F401 (fixtures by name)

F32 = np.float32


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def qvals(rng, shape, dt, lo=None, hi=None):
    """Storage values of the quantized dtype ``dt`` (its whole range by default), as an array of
    ``dt`` (the metadata travels with it)."""
    info = np.iinfo(np.dtype(dt.str))
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, shape).astype(np.dtype(dt.str)).astype(dt)


def _same(got, ref):
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def _meta(t):
    return t.dtype.metadata["mgb_dtype"] if t.dtype.metadata else None


# -- conversions ----------------------------------------------------------------------------------

DSTS = [D.qint8(0.05), D.quint8(0.07, 120), D.qint32(0.001), D.qint4(0.5), D.quint4(0.3, 3)]
_RE = [D.qint8(0.11), D.quint8(0.2, 7)]  # the requantizations' targets


@pytest.fixture(scope="module")
def conversions(cuda):
    """The device with every conversion kernel of the astype test loaded (one host build)."""
    from mge._core.device.cuda.kernels import quantized as qk
    from mge._core.device.cuda.kernels.launch import Layout
    ops = []
    for dst in DSTS:
        q = qspec(dst)
        ops += [(QuantizedTypeCvt(q, None), d) for d in (F32, np.float16)]
        ops += [(QuantizedTypeCvt(np.dtype(d), q), dst) for d in ("float32", "float16")]
        ops += [(QuantizedTypeCvt(qspec(t), q), dst) for t in _RE]
    kernels = []
    for op, d in ops:
        ins = [Layout((3,), d)]
        plan = qk.PLANS[QuantizedTypeCvt](op, ins, [Layout((3,), op.out_dtype)])
        kernels += plan.kernels
    cuda.load_kernels(kernels)
    return cuda


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's casts of NaN and infinities
@pytest.mark.parametrize("dst", DSTS, ids=lambda d: d.metadata["mgb_dtype"]["name"])
def test_astype_quantizes_and_dequantizes_as_the_cpu(conversions, dst):
    r = np.random.default_rng(0)
    v = np.concatenate([r.standard_normal(500) * 8, np.arange(-20, 20) * 0.025,
                        [np.nan, np.inf, -np.inf, 1e9]])
    with np.errstate(over="ignore"):
        x32, x16 = v.astype(F32), v.astype(np.float16)

    def fn(d):
        q = on(d, x32).astype(dst)
        h = on(d, x16).astype(dst)
        return [q, h, q.astype("float32"), q.astype("float16"), q.astype(_RE[0]),
                h.astype(_RE[1])]
    names = ran(conversions, lambda: [t.numpy() for t in fn(DEV)])
    assert names == {"QuantizedTypeCvt"}, names
    got, ref = both(fn)
    _same(got, ref)
    outs = at(DEV, lambda: fn(DEV))
    assert _meta(outs[0]) == dst.metadata["mgb_dtype"] and outs[0].device == DEV


# -- functional.quantized -------------------------------------------------------------------------

CONVS = [
    dict(),
    dict(stride=2, padding=1, nonlinear_mode="relu", dtype=D.qint8(0.3)),
    dict(padding=(1, 2), dilation=(2, 1), groups=2, conv_mode="convolution",
         dtype=D.quint8(0.2, 100)),
    dict(groups=4, padding=1, dtype=D.qint8(0.25), nonlinear_mode="relu"),  # depthwise
    dict(dtype="float32"),
]


@pytest.mark.parametrize("kw", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_conv_bias_activation_equals_the_cpu(cuda, kw):
    r = np.random.default_rng(1)
    xdt, wdt = D.quint8(0.05, 128), D.qint8(0.02)
    x = qvals(r, (2, 4, 9, 8), xdt)
    groups = kw.get("groups", 1)
    w = qvals(r, (8, 4 // groups, 3, 3), wdt)
    bdt = D.qint32(float(np.float32(0.05) * np.float32(0.02)))
    b = r.integers(-2000, 2000, (1, 8, 1, 1)).astype(np.int32).astype(bdt)

    def fn(d):
        return [Q.conv_bias_activation(on(d, x), on(d, w), on(d, b), **kw)]
    assert "ConvBias" in ran(cuda, lambda: fn(DEV)[0].numpy())
    got, ref = both(fn)
    _same(got, ref)


def test_batch_conv_and_transposed_conv_equal_the_cpu(cuda):
    r = np.random.default_rng(2)
    xdt, wdt = D.qint8(0.1), D.qint8(0.03)
    x = qvals(r, (3, 4, 6, 5), xdt)
    w = qvals(r, (3, 5, 4, 3, 3), wdt)
    b = r.integers(-500, 500, (1, 5, 1, 1)).astype(np.int32).astype(
        D.qint32(float(np.float32(0.1) * np.float32(0.03))))
    wt = qvals(r, (4, 3, 3, 3), wdt)

    def fn(d):
        return [Q.batch_conv_bias_activation(on(d, x), on(d, w), on(d, b), dtype=D.qint8(0.4),
                                             padding=1, nonlinear_mode="relu"),
                Q.conv_transpose2d(on(d, x), on(d, wt), dtype=D.quint8(0.3, 128), stride=2,
                                   padding=1, output_padding=1),
                Q.conv_transpose2d(on(d, x), on(d, wt), dilation=2)]
    names = ran(cuda, lambda: [t.numpy() for t in fn(DEV)])
    assert {"BatchConvBias", "QuantizedConvolutionBackwardData"} <= names
    got, ref = both(fn)
    _same(got, ref)


@pytest.mark.parametrize("mode", ["qadd", "qmul", "qfuse_add_relu", "qmax", "qsub", "qabs",
                                  "qfuse_mul_add3", "qh_swish", "qtrue_div"])
def test_elemwise_multi_type_equals_the_cpu(cuda, mode):
    r = np.random.default_rng(3)
    a = qvals(r, (3, 5), D.qint8(0.1))
    b = qvals(r, (5,), D.quint8(0.07, 128), 1, 255)
    c = qvals(r, (3, 1), D.qint8(0.2))
    n = float_mode(mode)[1]

    def fn(d):
        ins = [on(d, v) for v in (a, b, c)[:n]]
        return [Q._elemwise_multi_type(*ins, mode=mode, dtype=D.qint8(0.2)),
                Q._elemwise_multi_type(*ins, mode=mode)]
    assert "ElemwiseMultiType" in ran(cuda, lambda: fn(DEV)[0].numpy())
    got, ref = both(fn)
    _same(got, ref)


# -- modules --------------------------------------------------------------------------------------

def _moved(module, d):
    """A copy of ``module`` whose parameters and buffers live on device ``d``."""
    m = copy.deepcopy(module)
    for t in list(m.parameters()) + list(m.buffers()):
        t._reset(t.to(d))
    return m


def _on_both(dev, module, *inputs):
    """``module`` on cpu0 and a copy on cudahost0 (the ``CudaDevice`` ``dev``) applied to
    ``inputs`` (numpy arrays): (the names of the ops cudahost0 ran, its outputs, cpu0's)."""
    dev_module = _moved(module, DEV)
    got = {}
    names = ran(dev, lambda: got.setdefault("r", at(DEV, lambda: [
        dev_module(*[on(DEV, a) for a in inputs]).numpy()])))
    ref = at("cpu0", lambda: [module(*[on("cpu0", a) for a in inputs]).numpy()])
    return names, got["r"], ref


@pytest.mark.parametrize("relu", [False, True])
def test_quantized_linear_equals_the_cpu(cuda, relu):
    r = np.random.default_rng(4)
    lin = (QM.LinearRelu if relu else QM.Linear)(dtype=D.qint8(0.4))
    lin.weight = mge.Parameter(qvals(r, (6, 40), D.qint8(0.02), -127, 127), dtype=D.qint8(0.02))
    lin.bias = mge.Parameter(r.standard_normal(6).astype(F32))
    lin.eval()
    x = qvals(r, (7, 40), D.qint8(0.1))
    names, got, ref = _on_both(cuda, lin, x)
    assert {"QuantizedMatrixMul", "QuantizedElemwise", "QuantizedTypeCvt"} <= names, names
    _same(got, ref)
    lin.output_dtype = None  # the qint32 accumulator
    _, got, ref = _on_both(cuda, lin, x)
    _same(got, ref)


def test_quantized_elemwise_and_batch_matmul_modules_equal_the_cpu(cuda):
    r = np.random.default_rng(5)
    add = QM.Elemwise("fuse_add_relu", D.quint8(0.1, 128))
    add.eval()
    a, b = qvals(r, (4, 6), D.qint8(0.05)), qvals(r, (4, 6), D.qint8(0.08))
    names, got, ref = _on_both(cuda, add, a, b)
    assert "ElemwiseMultiType" in names
    _same(got, ref)
    m = QM.BatchMatMulActivation(3, 4, 5, nonlinear_mode="relu", dtype=D.qint8(0.3))
    m.weight = mge.Parameter(qvals(r, (3, 5, 4, 1, 1), D.qint8(0.02), -127, 127),
                             dtype=D.qint8(0.02))
    m.bias = mge.Parameter(r.standard_normal((1, 5, 1, 1)).astype(F32))
    m.eval()
    names, got, ref = _on_both(cuda, m, qvals(r, (3, 4, 2), D.qint8(0.05)))
    assert "BatchConvBias" in names
    _same(got, ref)


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.ConvBnRelu2d(3, 8, 3, padding=1)
        self.conv2 = M.Conv2d(8, 8, 3, groups=2, padding=1, padding_mode="reflect")
        self.conv3 = M.ConvRelu2d(8, 8, 1)
        self.add = M.Elemwise("fuse_add_relu")
        self.cat = M.Concat()
        self.convt = M.ConvTranspose2d(16, 3, 3, stride=2, bias=False)
        self.lin = M.LinearRelu(243, 10)
        self.lin2 = M.Linear(10, 6)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        y = self.conv(x)
        y = self.add(self.conv2(y), self.conv3(y))
        y = self.convt(self.cat([y, y], 1))
        y = self.lin2(self.lin(F.flatten(y, 1)))
        return self.dequant(y)


def test_a_network_quantized_from_qat_equals_the_cpu(cuda):
    mge.random.seed(11)
    rng = np.random.RandomState(11)
    net = _Net()
    quantize_qat(net)
    for _ in range(2):
        net(mge.Tensor(rng.randn(2, 3, 4, 4).astype(F32)))
    quantize(net)
    net.eval()
    x = rng.randn(2, 3, 4, 4).astype(F32)
    names, got, ref = _on_both(cuda, net, x)
    assert {"ConvBias", "QuantizedConvolutionBackwardData", "QuantizedMatrixMul",
            "QuantizedElemwise", "ElemwiseMultiType", "QuantizedTypeCvt"} <= names, names
    assert got[0].dtype == F32 and np.abs(got[0]).max() > 0
    _same(got, ref)
    # traced (op-by-op replays on this device) as eagerly
    dev_net = _moved(net, DEV)
    for symbolic in (False, True):
        f = trace(dev_net, symbolic=symbolic, capture_as_const=True)
        for _ in range(2):
            out = at(DEV, lambda: f(on(DEV, x)))
            assert out.device == DEV
            np.testing.assert_array_equal(out.numpy(), got[0])


# -- errors ---------------------------------------------------------------------------------------

def _raises(fn, exc):
    """The message of ``exc`` raised by ``fn()`` (an ``AsyncError`` wrapping it counts)."""
    try:
        fn().numpy()
    except AsyncError as e:
        cause = e.__cause__ or getattr(e, "error", None)
        assert isinstance(cause, exc), repr(e)
        return str(cause)
    except exc as e:
        return str(e)
    raise AssertionError(f"{exc.__name__} not raised")


def test_shape_errors_are_the_cpu_devices(cuda, level):
    r = np.random.default_rng(6)
    x = qvals(r, (1, 3, 5, 5), D.qint8(0.1))
    w = qvals(r, (4, 2, 3, 3), D.qint8(0.2))

    def conv(d):
        return at(d, lambda: Q.conv_bias_activation(on(d, x), on(d, w), None))
    msgs = [_raises(lambda: conv(d), ValueError) for d in (DEV, "cpu0")]
    assert msgs[0] == msgs[1] and "ConvBias" in msgs[0] and "(1, 3, 5, 5)" in msgs[0]
