"""The quantized ops on a real GPU: ``Tensor.astype`` to and from quantized dtypes,
``mge.functional.quantized``'s convolutions and ``ElemwiseMultiType``, the quantized modules and a
network quantized from QAT, on gpu0 against cpu0 -- bit for bit (``kernels/quantized.py``'s
``DIFFERENCES``: the integer sums are exact on both devices and every float step is the CPU's
operation in its precision; only the transcendental ``ElemwiseMultiType`` modes, not used here, may
differ by a quantum).  The shapes are large enough that many blocks, tiles and K-tiles run at once
(a race in the integer GEMM's barriers would show here, not in the host build's serial phases).

Every test is marked ``gpu`` and is skipped, with the reason, where mge cannot put tensors on gpu0
(as ``tests/test_cuda_gpu.py``).  ``MGE_GPU_TEST_DEVICE=cpu0`` runs them with cpu0 in gpu0's place:
a check of the tests themselves on a machine without a GPU.
"""
import copy

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.module.quantized as QM
from mge.core.tensor import dtype as D
from mge.functional import quantized as Q
from mge.quantization.quantize import quantize, quantize_qat

from cuda_gpu_fixtures import DEV, _gpu_or_skip, _sync_after  # noqa: F401 (autouse fixtures)

pytestmark = pytest.mark.gpu

F32 = np.float32


def on(dev, a):
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=dev)


def qvals(rng, shape, dt, lo=None, hi=None):
    """Storage values of the quantized dtype ``dt`` (its whole range by default), as an array of
    ``dt``."""
    info = np.iinfo(np.dtype(dt.str))
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, shape).astype(np.dtype(dt.str)).astype(dt)


def assert_same(fn):
    """``fn(device)`` (a list of tensors) on gpu0 equals cpu0's, bit for bit, dtypes (with their
    quantization) and shapes included."""
    gpu = fn(DEV)
    for t in gpu:
        assert t.device == DEV, f"a result of an op on {DEV} is on {t.device}"
    cpu = fn("cpu0")
    assert len(gpu) == len(cpu)
    for g, c in zip(gpu, cpu):
        assert g.dtype == c.dtype and g.dtype.metadata == c.dtype.metadata
        gv, cv = g.numpy(), c.numpy()
        assert gv.shape == cv.shape
        np.testing.assert_array_equal(gv, cv)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's casts of NaN and infinities
@pytest.mark.parametrize("dst", [D.qint8(0.05), D.quint8(0.07, 120), D.qint32(0.001),
                                 D.quint4(0.3, 3)], ids=lambda d: d.metadata["mgb_dtype"]["name"])
def test_astype_to_and_from_quantized_dtypes(dst):
    r = np.random.default_rng(0)
    v = np.concatenate([r.standard_normal(100000) * 8, np.arange(-20, 20) * 0.025,
                        [np.nan, np.inf, -np.inf, 1e9, 0.49999997]])
    with np.errstate(over="ignore"):
        x32, x16 = v.astype(F32), v.astype(np.float16)

    def fn(d):
        q, h = on(d, x32).astype(dst), on(d, x16).astype(dst)
        return [q, h, q.astype("float32"), q.astype("float16"), q.astype(D.qint8(0.11)),
                h.astype(D.quint8(0.2, 7))]
    assert_same(fn)


@pytest.mark.parametrize("kw", [
    dict(padding=1, nonlinear_mode="relu", dtype=D.qint8(0.3)),
    dict(stride=2, padding=(1, 2), dilation=(2, 1), groups=4, conv_mode="convolution",
         dtype=D.quint8(0.2, 100)),
    dict(groups=64, padding=1, dtype=D.qint8(0.25)),  # depthwise
    dict(dtype=None),
    dict(padding=1, dtype="float32"),
], ids=["relu", "grouped", "depthwise", "qint32", "float"])
def test_conv_bias_activation(kw):
    r = np.random.default_rng(1)
    x = qvals(r, (4, 64, 30, 29), D.quint8(0.05, 128))
    groups = kw.get("groups", 1)
    w = qvals(r, (128, 64 // groups, 3, 3), D.qint8(0.02))
    b = r.integers(-20000, 20000, (1, 128, 1, 1)).astype(np.int32).astype(
        D.qint32(float(np.float32(0.05) * np.float32(0.02))))
    assert_same(lambda d: [Q.conv_bias_activation(on(d, x), on(d, w), on(d, b), **kw)])


def test_pointwise_batch_and_transposed_convs():
    r = np.random.default_rng(2)
    x = qvals(r, (8, 48, 17, 16), D.qint8(0.1))
    w1 = qvals(r, (96, 48, 1, 1), D.qint8(0.03))
    wb = qvals(r, (8, 20, 48, 3, 3), D.qint8(0.03))
    wt = qvals(r, (48, 24, 4, 4), D.qint8(0.03))
    b = r.integers(-500, 500, (1, 20, 1, 1)).astype(np.int32).astype(
        D.qint32(float(np.float32(0.1) * np.float32(0.03))))

    def fn(d):
        return [Q.conv_bias_activation(on(d, x), on(d, w1), None, dtype=D.qint8(0.5)),
                Q.batch_conv_bias_activation(on(d, x), on(d, wb), on(d, b), dtype=D.qint8(0.4),
                                             padding=1, nonlinear_mode="relu"),
                Q.conv_transpose2d(on(d, x), on(d, wt), dtype=D.quint8(0.3, 128), stride=2,
                                   padding=1, output_padding=1),
                Q.conv_transpose2d(on(d, x), on(d, wt), dilation=2)]
    assert_same(fn)


@pytest.mark.parametrize("mode", ["qadd", "qmul", "qfuse_add_relu", "qmax", "qabs",
                                  "qfuse_mul_add3", "qh_swish", "qtrue_div", "qprelu"])
def test_elemwise_multi_type(mode):
    from mge._core.ops.quantized import float_mode
    r = np.random.default_rng(3)
    a = qvals(r, (64, 300), D.qint8(0.1))
    b = qvals(r, (300,), D.quint8(0.07, 128), 1, 255)
    c = qvals(r, (64, 1), D.qint8(0.2))
    n = float_mode(mode)[1]

    def fn(d):
        ins = [on(d, v) for v in (a, b, c)[:n]]
        return [Q._elemwise_multi_type(*ins, mode=mode, dtype=D.qint8(0.2)),
                Q._elemwise_multi_type(*ins, mode=mode)]
    assert_same(fn)


def _moved(module, d):
    m = copy.deepcopy(module)
    for t in list(m.parameters()) + list(m.buffers()):
        t._reset(t.to(d))
    return m


def _module_same(module, *inputs):
    outs = {}
    for d in ("cpu0", DEV):
        m = _moved(module, d)
        y = m(*[on(d, a) for a in inputs])
        assert y.device == d
        outs[d] = y.numpy()
    assert outs[DEV].dtype == outs["cpu0"].dtype
    np.testing.assert_array_equal(outs[DEV], outs["cpu0"])


@pytest.mark.parametrize("relu", [False, True])
def test_quantized_linear_and_batch_matmul(relu):
    r = np.random.default_rng(4)
    lin = (QM.LinearRelu if relu else QM.Linear)(dtype=D.qint8(0.4))
    lin.weight = mge.Parameter(qvals(r, (300, 513), D.qint8(0.02), -127, 127),
                               dtype=D.qint8(0.02))
    lin.bias = mge.Parameter(r.standard_normal(300).astype(F32))
    lin.eval()
    _module_same(lin, qvals(r, (129, 513), D.qint8(0.1)))
    m = QM.BatchMatMulActivation(16, 64, 80, nonlinear_mode="relu" if relu else "identity",
                                 dtype=D.qint8(0.3))
    m.weight = mge.Parameter(qvals(r, (16, 80, 64, 1, 1), D.qint8(0.02), -127, 127),
                             dtype=D.qint8(0.02))
    m.bias = mge.Parameter(r.standard_normal((1, 80, 1, 1)).astype(F32))
    m.eval()
    _module_same(m, qvals(r, (16, 64, 7), D.qint8(0.05)))


class _Net(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.ConvBnRelu2d(3, 16, 3, padding=1)
        self.conv2 = M.Conv2d(16, 16, 3, groups=2, padding=1, padding_mode="reflect")
        self.conv3 = M.ConvRelu2d(16, 16, 1)
        self.add = M.Elemwise("fuse_add_relu")
        self.convt = M.ConvTranspose2d(16, 8, 3, stride=2, bias=False)
        self.lin = M.LinearRelu(8 * 33 * 33, 10)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.quant(x)
        y = self.conv(x)
        y = self.convt(self.add(self.conv2(y), self.conv3(y)))
        return self.dequant(self.lin(F.flatten(y, 1)))


def test_a_network_quantized_from_qat():
    mge.random.seed(11)
    rng = np.random.RandomState(11)
    net = _Net()
    quantize_qat(net)
    for _ in range(2):
        net(mge.Tensor(rng.randn(4, 3, 16, 16).astype(F32)))
    quantize(net)
    net.eval()
    _module_same(net, rng.randn(4, 3, 16, 16).astype(F32))
