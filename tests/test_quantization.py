"""mge.quantization, mge.module.qat and mge.module.quantized against float64 numpy references.

Fake quantization is checked against MegEngine's kernel formulas (forward, the straight-through
gradient of ``FakeQuant``, the scale gradients of ``TQT`` and ``LSQ``); the real gradients (the
QAT modules with fake quantization off, the batch-norm folding) against central differences; the
quantized modules against an integer reference (int accumulation, rounding halves away from zero).
"""
from functools import partial

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
import mge.module.qat as QAT
import mge.module.quantized as Q
import mge.quantization as quant
from mge.autodiff import GradManager
from mge.core.tensor import dtype as D
from mge.quantization import (
    LSQ, TQT, ExponentialMovingAverageObserver, FakeQuantize, HistogramObserver,
    MinMaxObserver, PassiveObserver, QConfig, QuantMode, SyncMinMaxObserver, create_qparams,
    fake_quant_tensor,
)
from mge.quantization.utils import fake_quant_bias, lsq_forward, tqt_forward

from gradcheck import check_grads

MINMAX = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(MinMaxObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)


def rnd(x):
    """C's round: halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def grads_of(fn, *arrays):
    ts = [mge.tensor(a, dtype="float32") for a in arrays]
    gm = GradManager().attach(ts)
    with gm:
        y = fn(*ts)
        gm.backward(y, F.ones_like(y))
    return y, [t.grad for t in ts]


# -- fake quantization --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [QuantMode.SYMMERTIC, QuantMode.ASYMMERTIC])
def test_fake_quant_tensor_forward_and_ste_gradient(mode):
    rng = np.random.default_rng(0)
    x = rng.uniform(-300, 300, size=(2, 3, 4, 5)).astype(np.float32)
    x[0, 0, 0, :2] = [2.0, -6.0]  # halves of the grid: away from zero
    scale, zp = 4.0, 3.0
    qp = create_qparams(mode, "qint8", mge.tensor(scale), mge.tensor(zp))
    y, (gx,) = grads_of(lambda t: fake_quant_tensor(t, qp), x)
    z = zp if mode == QuantMode.ASYMMERTIC else 0.0
    q = rnd(x.astype(np.float64) / scale) + z
    ref = (np.clip(q, -128, 127) - z) * scale
    np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(gx.numpy(), ((q >= -128) & (q <= 127)).astype(np.float32))


def test_fake_quant_nan_and_per_channel_scale():
    qp = create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(np.full((1, 3, 1), 0.5)))
    assert np.isnan(fake_quant_tensor(F.full((2, 3, 4), np.nan), qp).numpy()).all()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    y = fake_quant_tensor(mge.tensor(x), qp).numpy()
    np.testing.assert_allclose(y, np.clip(rnd(x / 0.5), -128, 127) * 0.5, atol=1e-6)


def test_tqt_forward_and_gradients_follow_megengine():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, size=(2, 3, 4)).astype(np.float32)
    s = np.array([-0.4], np.float32)
    y, (gx, gs) = grads_of(lambda a, b: tqt_forward(-127, 127, a, b), x, s)
    t = 2.0 ** s.astype(np.float64)
    scaled = x / t
    rounded = np.clip(rnd(scaled), -127, 127)
    clip = (scaled < -127.5) | (scaled > 127.5)
    np.testing.assert_allclose(y.numpy(), rounded * t, rtol=1e-5)
    np.testing.assert_array_equal(gx.numpy(), (~clip).astype(np.float32))
    gs_ref = np.sum(np.where(clip, rounded, rounded - scaled)) * t * np.log(2)
    np.testing.assert_allclose(gs.numpy(), gs_ref, rtol=1e-4)
    assert gs.shape == (1,)


def test_lsq_forward_and_gradients_follow_megengine():
    rng = np.random.default_rng(2)
    x = rng.uniform(-6, 6, size=(3, 7)).astype(np.float32)
    s, zp, g = np.float32(0.04), np.float32(1.0), np.float32(2.0)
    y, (gx, gs) = grads_of(
        lambda a, b: lsq_forward(-127, 127, a, b, mge.tensor([zp]), mge.tensor([g])),
        x, np.array([s]))
    v = x.astype(np.float64) / s + zp
    ref = (rnd(np.clip(v, -127, 127)) - zp) * s
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    small, big = v < -127, v > 127
    np.testing.assert_array_equal(gx.numpy(), (~(small | big)).astype(np.float32))
    gs_ref = np.sum(np.where(small, -127, np.where(big, 127, rnd(v) - v)) * g)
    np.testing.assert_allclose(gs.numpy(), [gs_ref], rtol=1e-4, atol=1e-4)


def test_fake_quant_modules_enable_disable_and_qparams():
    fq = FakeQuantize("qint8")
    qp = create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.25))
    x = mge.tensor([0.1, 0.2, 100.0])
    np.testing.assert_allclose(fq(x, qp).numpy(), [0.0, 0.25, 31.75])
    fq.disable()
    np.testing.assert_allclose(fq(x, qp).numpy(), x.numpy())
    with pytest.raises(ValueError):
        FakeQuantize("qint9")
    tqt = TQT("qint8")
    tqt.set_qparams(create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.125)))
    np.testing.assert_allclose(tqt.scale.numpy(), -3.0)
    assert D.get_scale(tqt.get_quantized_dtype()) == pytest.approx(0.125)
    lsq = LSQ("qint8")
    lsq.set_qparams(create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.5)))
    np.testing.assert_allclose(lsq.step_size.numpy(), 0.5 - 1e-5, rtol=1e-6)
    np.testing.assert_allclose(lsq.get_qparams().scale.numpy(), 0.5, rtol=1e-6)
    np.testing.assert_allclose(lsq(mge.tensor([0.74, 0.76])).numpy(), [0.5, 1.0], rtol=1e-5)


def test_fake_quant_bias_uses_input_times_weight_scale():
    inp, w = mge.tensor([1.0]), mge.tensor([1.0])
    inp.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.5)))
    w.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8_narrow", mge.tensor(0.1)))
    b = fake_quant_bias(mge.tensor([0.123, -0.077]), inp, w)
    np.testing.assert_allclose(b.numpy(), rnd(np.array([0.123, -0.077]) / 0.05) * 0.05,
                               atol=1e-7)
    assert b.qparams.dtype_meta.name == "qint32"
    plain = mge.tensor([1.0])
    assert fake_quant_bias(mge.tensor([0.3]), plain, w).numpy()[0] == np.float32(0.3)


# -- observers ----------------------------------------------------------------------------------
def test_min_max_observer_qparams_both_modes():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 5)), rng.normal(size=(3,)) * 3 + 1
    sym = MinMaxObserver()
    sym(mge.tensor(a, dtype="float32"))
    sym(mge.tensor(b, dtype="float32"))
    lo, hi = min(a.min(), b.min(), 0), max(a.max(), b.max(), 0)
    qp = sym.get_qparams()
    np.testing.assert_allclose(qp.scale.numpy(), max(-lo, hi) / 127.5, rtol=1e-6)
    asym = MinMaxObserver(mode=QuantMode.ASYMMERTIC, dtype="quint8")
    asym(mge.tensor(b, dtype="float32"))
    lo, hi = min(b.min(), 0), max(b.max(), 0)
    qp = asym.get_qparams()
    scale = (hi - lo) / 255
    np.testing.assert_allclose(qp.scale.numpy(), scale, rtol=1e-5)
    np.testing.assert_allclose(qp.zero_point.numpy(), 0 - rnd(lo / scale))
    asym.eval()
    asym(mge.tensor([100.0]))  # disabled in eval mode
    np.testing.assert_allclose(asym.max_val.numpy(), b.max(), rtol=1e-6)
    sync = SyncMinMaxObserver()
    sync(mge.tensor(a, dtype="float32"))
    np.testing.assert_allclose(sync.min_val.numpy(), a.min(), rtol=1e-6)


def test_ema_observer():
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(6,)) for _ in range(3)]
    m = ExponentialMovingAverageObserver(momentum=0.7)
    lo = hi = None
    for x in xs:
        m(mge.tensor(x, dtype="float32"))
        lo = x.min() if lo is None else 0.7 * lo + 0.3 * x.min()
        hi = x.max() if hi is None else 0.7 * hi + 0.3 * x.max()
    np.testing.assert_allclose(m.min_val.numpy(), lo, rtol=1e-5)
    np.testing.assert_allclose(m.max_val.numpy(), hi, rtol=1e-5)


def _reference_histogram_search(hist, lo, hi, bins, dst_nbins):
    # MegEngine's loop (per source bin), in float64.
    bin_width = (hi - lo) / bins

    def err(start, end):
        dst_w = bin_width * (end - start + 1) / dst_nbins
        norm = 0.0
        for i in range(bins):
            b = (i - start) * bin_width
            e = b + bin_width
            db = min(dst_nbins - 1, max(0.0, np.floor(b / dst_w)))
            de = min(dst_nbins - 1, max(0.0, np.floor(e / dst_w)))
            c = db * dst_w + dst_w / 2
            dens = hist[i] / bin_width
            if db == de:
                norm += dens * ((e - c) ** 3 - (b - c) ** 3) / 3
            else:
                norm += dens * ((dst_w / 2) ** 3 - (b - c) ** 3) / 3
                norm += (de - db - 1) * dens * ((dst_w / 2) ** 3 - (-dst_w / 2) ** 3) / 3
                c2 = de * dst_w + dst_w / 2
                norm += dens * ((e - c2) ** 3 - (-dst_w / 2) ** 3) / 3
        return norm

    total, csum = hist.sum(), np.cumsum(hist)
    alpha, beta, start, end, best = 0.0, 1.0, 0, bins - 1, float("inf")
    while alpha < beta:
        na, nb = alpha + 1e-5, beta - 1e-5
        left, right = start, end
        while left < end and csum[left] < na * total:
            left += 1
        while right > start and csum[right] > nb * total:
            right -= 1
        ns, ne = start, end
        if left - start > end - right:
            ns, alpha = left, na
        else:
            ne, beta = right, nb
        if ns == start and ne == end:
            continue
        n = err(ns, ne)
        if n > best:
            break
        best, start, end = n, ns, ne
    return lo + bin_width * start, lo + bin_width * (end + 1)


def test_histogram_observer_range_and_search():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=500), [12.0]]).astype(np.float32)
    m = HistogramObserver(bins=64, upsample_rate=4, dtype="qint4")
    m(mge.tensor(x[:300]))
    m(mge.tensor(x[300:]))
    assert m.min_val.numpy() <= x.min() and m.max_val.numpy() >= x.max()
    np.testing.assert_allclose(m.histogram.numpy().sum(), x.size, rtol=1e-5)
    lo, hi = _reference_histogram_search(m.histogram.numpy().astype(np.float64),
                                         float(m.min_val.numpy()), float(m.max_val.numpy()),
                                         64, 16)
    new_min, new_max = m._non_linear_param_search()
    np.testing.assert_allclose([new_min.numpy(), new_max.numpy()], [lo, hi], rtol=1e-5)
    assert new_max.numpy() < 12.0  # the outlier is cut off
    assert m.get_qparams().scale.numpy() > 0


def test_passive_observer():
    m = PassiveObserver("qint8")
    qp = create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.5))
    m.set_qparams(qp)
    assert m.orig_scale == 0.5 and m.get_qparams() == qp
    m.scale = 0.25
    assert m.scale.numpy() == 0.25 and qp.scale.numpy() == 0.5
    with pytest.raises(AssertionError):
        m.scale = -1.0


# -- QAT modules --------------------------------------------------------------------------------
def _init_observers(mod, w_range, a_range):
    if mod.with_weight:
        mod.weight_observer.min_val[...] = mge.tensor(w_range[0])
        mod.weight_observer.max_val[...] = mge.tensor(w_range[1])
    if mod.with_act:
        mod.act_observer.min_val[...] = mge.tensor(a_range[0])
        mod.act_observer.max_val[...] = mge.tensor(a_range[1])


def _fq(x, scale, qmin, qmax):
    return np.clip(rnd(x / scale), qmin, qmax) * scale


def test_qat_linear_matches_numpy_fake_quant():
    rng = np.random.default_rng(6)
    lin = QAT.Linear(5, 4)
    lin.eval()
    quant.propagate_qconfig(lin, MINMAX)
    quant.disable_observer(lin)
    _init_observers(lin, (-2.0, 1.5), (-8.0, 6.0))
    w = rng.normal(size=(4, 5)).astype(np.float32)
    b = rng.normal(size=(4,)).astype(np.float32)
    lin.weight[...] = mge.tensor(w)
    lin.bias[...] = mge.tensor(b)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    in_scale = np.float32(0.05)
    xq = mge.tensor(_fq(x, in_scale, -128, 127).astype(np.float32))
    xq.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(in_scale)))
    w_scale, a_scale = np.float32(2.0 / 127), np.float32(8.0 / 127.5)
    wq = _fq(w.astype(np.float64), w_scale, -127, 127)
    bq = rnd(b / (in_scale * w_scale)) * (in_scale * w_scale)
    ref = _fq(xq.numpy().astype(np.float64) @ wq.T + bq, a_scale, -128, 127)
    np.testing.assert_allclose(lin(xq).numpy(), ref, atol=a_scale * 1e-3)
    assert lin.get_activation_dtype().metadata["mgb_dtype"]["scale"] == pytest.approx(a_scale)


def _float_convbn():
    mge.random.seed(7)
    net = M.ConvBn2d(2, 3, 3, padding=1, groups=1)
    net.bn.running_mean[...] = mge.tensor(np.array([0.1, -0.2, 0.3]).reshape(1, 3, 1, 1))
    net.bn.running_var[...] = mge.tensor(np.array([0.5, 2.0, 1.5]).reshape(1, 3, 1, 1))
    net.bn.weight[...] = mge.tensor(np.array([1.5, 0.5, -1.0]).reshape(1, 3, 1, 1))
    net.bn.bias[...] = mge.tensor(np.array([0.2, 0.0, -0.1]).reshape(1, 3, 1, 1))
    net.conv.bias[...] = mge.tensor(np.array([0.3, -0.3, 0.1]).reshape(1, 3, 1, 1))
    return net


def test_qat_convbn_without_fake_quant_equals_float_and_its_gradient_is_real():
    fnet = _float_convbn()
    fnet.eval()
    qnet = QAT.ConvBn2d.from_float_module(fnet)
    qnet.eval()
    quant.disable_fake_quant(qnet)
    x = np.random.default_rng(8).normal(size=(2, 2, 5, 5))
    np.testing.assert_allclose(qnet(mge.tensor(x, dtype="float32")).numpy(),
                               fnet(mge.tensor(x, dtype="float32")).numpy(), atol=1e-5)
    for mod in (qnet.conv, qnet.bn):
        for p in mod.parameters():
            p[...] = p.astype("float64")
    for name in ("running_mean", "running_var"):
        setattr(qnet.bn, name, getattr(qnet.bn, name).astype("float64"))
    quant.disable_observer(qnet)
    check_grads(lambda t: qnet(t), x, rtol=1e-5, atol=1e-7)


def test_qat_convbn_training_updates_statistics_like_batch_norm():
    fnet, qnet_src = _float_convbn(), _float_convbn()
    qnet = QAT.ConvBn2d.from_float_module(qnet_src)
    quant.propagate_qconfig(qnet, MINMAX)
    quant.disable_fake_quant(qnet)
    x = mge.tensor(np.random.default_rng(9).normal(size=(4, 2, 5, 5)), dtype="float32")
    np.testing.assert_allclose(qnet(x).numpy(), fnet(x).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(qnet.bn.running_var.numpy(), fnet.bn.running_var.numpy(),
                               rtol=1e-5)


def test_qat_linear_bn_and_elemwise_and_concat():
    mge.random.seed(10)
    fl = M.LinearBn1d(4, 3)
    fl.eval()
    ql = QAT.LinearBn1d.from_float_module(fl)
    ql.eval()
    quant.disable_fake_quant(ql)
    x = mge.tensor(np.random.default_rng(11).normal(size=(5, 4)), dtype="float32")
    np.testing.assert_allclose(ql(x).numpy(), fl(x).numpy(), atol=1e-5)
    e = QAT.Elemwise("fuse_add_relu")
    quant.propagate_qconfig(e, MINMAX)
    y = e(mge.tensor([1.0, -3.0]), mge.tensor([0.5, 0.5]))
    np.testing.assert_allclose(y.numpy(), [1.5, 0.0], atol=2e-2)
    c = QAT.Concat()
    quant.propagate_qconfig(c, MINMAX)
    assert c([mge.tensor([1.0]), mge.tensor([2.0])]).shape == (2,)


# -- conversion and quantized modules -------------------------------------------------------------
class Tiny(M.Module):
    def __init__(self):
        super().__init__()
        self.quant = M.QuantStub()
        self.conv = M.ConvBnRelu2d(2, 4, 3, padding=1)
        self.fc = M.Linear(4 * 4 * 4, 3)
        self.dequant = M.DequantStub()

    def forward(self, x):
        x = self.conv(self.quant(x))
        return self.dequant(self.fc(F.flatten(x, 1)))


def _int_conv(x, w, pad):
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, oc, h, wd))
    for i in range(h):
        for j in range(wd):
            out[:, :, i, j] = np.einsum("nckl,ockl->no", xp[:, :, i:i + kh, j:j + kw], w)
    return out


def test_quantize_qat_then_quantize_matches_integer_reference():
    mge.random.seed(12)
    net = Tiny()
    quant.quantize_qat(net, qconfig=quant.min_max_fakequant_qconfig)
    assert isinstance(net.conv, QAT.ConvBnRelu2d) and isinstance(net.quant, QAT.QuantStub)
    rng = np.random.default_rng(13)
    data = mge.tensor(rng.normal(size=(4, 2, 4, 4)), dtype="float32")
    net.train()
    net(data)  # observe
    net.eval()
    qat_out = net(data).numpy()
    quant.quantize(net)
    net.eval()  # new quantized modules start in training mode, as in MegEngine
    assert isinstance(net.conv, Q.ConvBnRelu2d) and isinstance(net.fc, Q.Linear)
    q_out = net(data).numpy()
    # integer reference from the quantized parameters
    s_in = D.get_scale(net.quant.output_dtype)
    xi = np.clip(rnd(data.numpy().astype(np.float64) / s_in), -128, 127)
    cw = net.conv.weight
    s_w = D.get_scale(cw.dtype)
    acc_s = np.float32(s_in) * np.float32(s_w)
    acc = _int_conv(xi, cw.numpy().astype(np.float64), 1)
    acc += rnd(net.conv.bias.numpy().astype(np.float64) / acc_s).reshape(1, -1, 1, 1)
    s_c = D.get_scale(net.conv.output_dtype)
    hi = np.clip(rnd(np.maximum(acc, 0) * np.float64(np.float32(acc_s)) / s_c), -128, 127)
    fw = net.fc.weight
    s_fw = D.get_scale(fw.dtype)
    acc_s2 = np.float32(s_c) * np.float32(s_fw)
    acc2 = hi.reshape(4, -1) @ fw.numpy().astype(np.float64).T
    acc2 += rnd(net.fc.bias.numpy().astype(np.float64) / acc_s2)
    s_o = D.get_scale(net.fc.output_dtype)
    ref = np.clip(rnd(acc2 * np.float64(np.float32(acc_s2)) / s_o), -128, 127) * s_o
    np.testing.assert_allclose(q_out, ref, rtol=0, atol=s_o * 1.01)
    assert np.mean(np.isclose(q_out, ref, atol=1e-5)) > 0.9
    np.testing.assert_allclose(q_out, qat_out, atol=3 * s_o)
    net.train()
    with pytest.raises(ValueError):
        net.fc(mge.tensor(np.zeros((1, 64)), dtype=D.qint8(0.1)))


def test_conv_bias_activation_and_conv_transpose2d():
    rng = np.random.default_rng(14)
    s_in, s_w, s_out = np.float32(0.5), np.float32(0.25), np.float32(0.7)
    xi = rng.integers(-20, 20, size=(2, 4, 5, 6))
    wi = rng.integers(-20, 20, size=(6, 2, 3, 3))
    bi = rng.integers(-50, 50, size=(1, 6, 1, 1))
    x = mge.tensor(xi.astype(np.int8).astype(D.qint8(s_in)), dtype=D.qint8(s_in))
    w = mge.tensor(wi.astype(np.int8).astype(D.qint8(s_w)), dtype=D.qint8(s_w))
    b = mge.tensor(bi.astype(np.int32).astype(D.qint32(s_in * s_w)),
                   dtype=D.qint32(s_in * s_w))
    out = F.quantized.conv_bias_activation(x, w, b, D.qint8(s_out), padding=1, groups=2,
                                           nonlinear_mode="relu")
    acc = np.concatenate([_int_conv(xi[:, 2 * g:2 * g + 2].astype(np.float64),
                                    wi[3 * g:3 * g + 3].astype(np.float64), 1)
                          for g in range(2)], axis=1) + bi
    ref = np.clip(rnd(np.maximum(acc, 0) * np.float64(np.float32(s_in * s_w)) / s_out),
                  -128, 127)
    np.testing.assert_array_equal(out.numpy(), ref)
    assert D.get_scale(out.dtype) == pytest.approx(s_out)
    wt = mge.tensor(wi[:4].astype(np.int8).astype(D.qint8(s_w)), dtype=D.qint8(s_w))
    y = F.quantized.conv_transpose2d(x, wt, dtype=D.qint8(s_out), stride=2)
    xf = x.astype("float32")
    ref_t = F.conv_transpose2d(xf, wt.astype("float32"), stride=2).numpy().astype(np.float64)
    np.testing.assert_array_equal(y.numpy(), np.clip(rnd(ref_t / s_out), -128, 127))
    with pytest.raises(NotImplementedError):
        F.quantized.conv_transpose2d(x, wt, bias=b, dtype=D.qint8(s_out))


def test_quantized_elemwise_and_stubs():
    s1, s2, so = np.float32(0.1), np.float32(0.2), np.float32(0.15)
    a = mge.tensor([1.23, -0.4, 2.0]).astype(D.qint8(s1))
    b = mge.tensor([0.6, 0.2, -3.0]).astype(D.qint8(s2))
    e = Q.Elemwise("add", D.qint8(so))
    e.eval()
    ref = rnd((a.numpy() * s1 + b.numpy() * s2).astype(np.float32) / so)
    np.testing.assert_array_equal(e(a, b).numpy(), ref)
    d = Q.DequantStub()
    d.eval()
    np.testing.assert_allclose(d(a).numpy(), a.numpy() * s1, rtol=1e-6)


def test_reset_qconfig_enable_disable_and_tqt_training():
    mge.random.seed(15)
    net = M.Sequential(M.QuantStub(), M.Linear(3, 2), M.DequantStub())
    quant.quantize_qat(net, qconfig=quant.ema_fakequant_qconfig)
    x = mge.tensor(np.random.default_rng(16).normal(size=(8, 3)), dtype="float32")
    net(x)
    quant.disable_fake_quant(net)
    assert not net[1].act_fake_quant.enabled
    quant.enable_fake_quant(net)
    quant.disable_observer(net)
    assert not net[1].weight_observer.enabled
    quant.enable_observer(net)
    scale = net[1].get_activation_qparams().scale.numpy()
    quant.reset_qconfig(net, quant.tqt_qconfig)
    assert isinstance(net[1].act_fake_quant, TQT) and net[1].act_observer is None
    np.testing.assert_allclose(2 ** net[1].act_fake_quant.scale.numpy(), scale, rtol=1e-5)
    params = list(net.parameters())
    gm = GradManager().attach(params)
    with gm:
        gm.backward((net(x) ** 2).sum())
    assert net[1].act_fake_quant.scale.grad is not None
    assert np.abs(net[1].weight.grad.numpy()).sum() > 0


def test_apply_easy_quant_keeps_or_improves_scales():
    mge.random.seed(17)
    net = M.Sequential(M.QuantStub(), M.Linear(4, 4), M.DequantStub())
    quant.quantize_qat(net, qconfig=quant.calibration_qconfig)
    x = mge.tensor(np.random.default_rng(18).normal(size=(16, 4)), dtype="float32")
    net(x)
    net.eval()
    quant.reset_qconfig(net, quant.easyquant_qconfig)
    orig = net[1].weight_observer.orig_scale
    quant.apply_easy_quant(net, x, 0.9, 1.1, 5)
    new = net[1].weight_observer.scale.numpy()
    assert 0.9 * orig - 1e-6 <= new <= 1.1 * orig + 1e-6


def test_repr_and_exports():
    net = M.Sequential(M.Linear(2, 2))
    quant.quantize_qat(net)
    assert repr(net[0]).startswith("QAT.Linear(")
    quant.quantize(net)
    assert repr(net[0]) == "Quantized.Linear()"
    for name in quant.__all__:
        assert getattr(quant, name).__doc__, name
    for mod in (QAT, Q):
        for name in mod.__all__:
            assert getattr(mod, name).__doc__, name


def test_bn_fusion_folds_in_eval_and_keeps_bn_in_training():
    from mge.utils.bn_fusion import fuse_conv_bn_relu_module, fuse_linear_bn_relu_module

    mge.random.seed(19)
    conv, bn, relu = M.Conv2d(2, 3, 3, padding=1), M.BatchNorm2d(3), M.ReLU()
    bn.running_mean[...] = mge.tensor(np.array([0.1, -0.2, 0.3]).reshape(1, 3, 1, 1))
    bn.running_var[...] = mge.tensor(np.array([0.5, 2.0, 1.5]).reshape(1, 3, 1, 1))
    for m in (conv, bn):
        m.eval()
    fused = fuse_conv_bn_relu_module(conv, bn, relu)
    assert type(fused) is M.ConvRelu2d
    x = np.random.default_rng(20).normal(size=(2, 2, 4, 4)).astype(np.float32)
    ref = np.maximum(bn(conv(mge.tensor(x))).numpy(), 0)
    np.testing.assert_allclose(fused(mge.tensor(x)).numpy(), ref, atol=1e-5)
    lin, bn1 = M.Linear(4, 3), M.BatchNorm1d(3)
    assert type(fuse_linear_bn_relu_module(lin, bn1, None)) is M.LinearBn1d


def test_matmul_of_qint8_answers_qint32_with_the_product_of_scales():
    from mge.core.tensor import dtype as qd
    rng = np.random.RandomState(5)
    da, db = qd.qint8(np.float32(0.37)), qd.qint8(np.float32(0.11))
    a = mge.tensor(qd.convert_to_qint8(rng.uniform(-20, 20, (3, 12)), da))
    b = mge.tensor(qd.convert_to_qint8(rng.uniform(-20, 20, (5, 12)), db))
    r = F.matmul(a, b, transpose_b=True)
    assert qd.get_scale(r.dtype) == pytest.approx(float(np.float32(0.37) * np.float32(0.11)))
    ints = a.numpy().astype(np.int64) @ b.numpy().astype(np.int64).T
    np.testing.assert_array_equal(r.numpy().astype(np.int64), ints)
