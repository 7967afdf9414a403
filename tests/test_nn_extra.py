"""Sliding windows, the locally connected, region-restricted and deformable convolutions, the
deformable PS-ROI pooling, the CTC loss and their modules, against float64 numpy references
written here (loops over the small index spaces, independent of the kernels), and their gradients
against central differences (``gradcheck.check_grads``, through GradManager).
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F
import mge.module as M
from mge.jit import trace
from gradcheck import check_grads


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _t(a):
    return mge.Tensor(a, dtype=a.dtype)


def _out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# -- references ---------------------------------------------------------------------------------

def ref_sliding_window(x, k, p, s, d):
    n, c, h, w = x.shape
    oh, ow = _out(h, k[0], s[0], p[0], d[0]), _out(w, k[1], s[1], p[1], d[1])
    out = np.zeros((n, c, oh, ow) + tuple(k), x.dtype)
    for i, j, a, b in itertools.product(range(oh), range(ow), range(k[0]), range(k[1])):
        ih, iw = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + b * d[1]
        if 0 <= ih < h and 0 <= iw < w:
            out[:, :, i, j, a, b] = x[:, :, ih, iw]
    return out


def ref_sliding_window_transpose(y, size, k, p, s, d):
    n, c, oh, ow = y.shape[:4]
    out = np.zeros((n, c) + tuple(size))
    for i, j, a, b in itertools.product(range(oh), range(ow), range(k[0]), range(k[1])):
        ih, iw = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + b * d[1]
        if 0 <= ih < size[0] and 0 <= iw < size[1]:
            out[:, :, ih, iw] += y[:, :, i, j, a, b]
    return out


def ref_local_conv(x, w, s, p, d):
    g, oh, ow, icg, kh, kw, ocg = w.shape
    cols = ref_sliding_window(x, (kh, kw), p, s, d)            # (N, C, OH, OW, KH, KW)
    n = x.shape[0]
    cols = cols.reshape(n, g, icg, oh, ow, kh, kw)
    out = np.einsum("ngcpqab,gpqcabo->ngopq", cols, w)
    return out.reshape(n, g * ocg, oh, ow)


def ref_rrconv(x, w, rin, rout, s, p, d):
    g, og, cg, kh, kw = w.shape
    n, c, h, wd = x.shape
    oh, ow = _out(h, kh, s[0], p[0], d[0]), _out(wd, kw, s[1], p[1], d[1])
    out = np.zeros((n, g * og, oh, ow))
    for b, i, j, a, e in itertools.product(range(n), range(oh), range(ow), range(kh), range(kw)):
        ih, iw = i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + e * d[1]
        if 0 <= ih < h and 0 <= iw < wd and rin[b, ih, iw] == rout[b, i, j]:
            for gi in range(g):
                out[b, gi * og:(gi + 1) * og, i, j] += w[gi, :, :, a, e] @ x[b, gi * cg:(gi + 1) * cg, ih, iw]
    return out


def _bilinear(img, hh, ww):
    """MegEngine's dmcn_bilinear: zero for corners outside the image."""
    h, w = img.shape
    if not (hh > -1 and ww > -1 and hh < h and ww < w):
        return 0.0
    y0, x0 = int(np.floor(hh)), int(np.floor(ww))
    ly, lx = hh - y0, ww - x0
    val = 0.0
    for yy, xx, wt in ((y0, x0, (1 - ly) * (1 - lx)), (y0, x0 + 1, (1 - ly) * lx),
                       (y0 + 1, x0, ly * (1 - lx)), (y0 + 1, x0 + 1, ly * lx)):
        if 0 <= yy < h and 0 <= xx < w:
            val += wt * img[yy, xx]
    return val


def ref_deformable_conv(x, w, offset, mask, s, p, d):
    if w.ndim == 4:
        w = w[None]
    g, og, cg, kh, kw = w.shape
    n, c, h, wd = x.shape
    oh, ow = offset.shape[2:]
    dg = offset.shape[1] // (2 * kh * kw)
    cdg = c // dg
    out = np.zeros((n, g * og, oh, ow))
    for b, ci, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        gi, dgi = ci // cg, ci // cdg
        for a, e in itertools.product(range(kh), range(kw)):
            k = a * kw + e
            hh = i * s[0] - p[0] + a * d[0] + offset[b, (dgi * kh * kw + k) * 2, i, j]
            ww = j * s[1] - p[1] + e * d[1] + offset[b, (dgi * kh * kw + k) * 2 + 1, i, j]
            v = _bilinear(x[b, ci], hh, ww) * mask[b, dgi * kh * kw + k, i, j]
            out[b, gi * og:(gi + 1) * og, i, j] += v * w[gi, :, ci % cg, a, e]
    return out


def _c_round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def ref_psroi(x, rois, trans, no_trans, part, ph_, pw_, spp, scale, std):
    _, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, ph_, pw_))
    ncls = 1 if no_trans else trans.shape[1] // 2
    flat = trans.reshape(-1)
    for r, ci, i, j in itertools.product(range(rois.shape[0]), range(c), range(ph_), range(pw_)):
        bi = int(rois[r, 0])
        wl, hl = _c_round(rois[r, 1]) * scale - 0.5, _c_round(rois[r, 2]) * scale - 0.5
        wr, hr = (_c_round(rois[r, 3]) + 1) * scale - 0.5, (_c_round(rois[r, 4]) + 1) * scale - 0.5
        rw, rh = max(wr - wl, 0.1), max(hr - hl, 0.1)
        bw, bh = rw / pw_, rh / ph_
        cls = ci // (c // ncls)
        ws, hs = j * bw + wl, i * bh + hl
        if not no_trans:
            pa, pb = int(np.floor(i / ph_ * part)), int(np.floor(j / pw_ * part))
            tx = flat[(((r * ncls + cls) * 2) * part + pa) * part + pb] * std
            ty = flat[(((r * ncls + cls) * 2 + 1) * part + pa) * part + pb] * std
            ws, hs = ws + tx * rw, hs + ty * rh
        total, count = 0.0, 0
        for a, e in itertools.product(range(spp), range(spp)):
            ww, hh = ws + e * bw / spp, hs + a * bh / spp
            if ww < -0.5 or ww > w - 0.5 or hh < -0.5 or hh > h - 0.5:
                continue
            ww, hh = min(max(ww, 0), w - 1), min(max(hh, 0), h - 1)
            x0, x1, y0, y1 = int(np.floor(ww)), int(np.ceil(ww)), int(np.floor(hh)), int(np.ceil(hh))
            dx, dy = ww - x0, hh - y0
            img = x[bi, ci]
            total += ((1 - dx) * (1 - dy) * img[y0, x0] + (1 - dx) * dy * img[y1, x0]
                      + dx * (1 - dy) * img[y0, x1] + dx * dy * img[y1, x1])
            count += 1
        out[r, ci, i, j] = total / count if count else 0.0
    return out


def ref_ctc(probs, plen, labels, llen, blank):
    """Brute force: the sum over every alignment of length T that collapses to the label."""
    t_max, n, c = probs.shape
    losses = []
    for b in range(n):
        target = tuple(labels[b][:llen[b]])
        total = 0.0
        for path in itertools.product(range(c), repeat=int(plen[b])):
            collapsed = [k for i, k in enumerate(path) if k != blank and (i == 0 or path[i - 1] != k)]
            if tuple(collapsed) == target:
                total += np.prod([probs[t, b, k] for t, k in enumerate(path)])
        losses.append(-np.log(total))
    return np.array(losses)


# -- sliding windows ------------------------------------------------------------------------------

geometry = st.tuples(
    st.tuples(st.integers(1, 3), st.integers(1, 3)),   # window
    st.tuples(st.integers(0, 2), st.integers(0, 2)),   # padding
    st.tuples(st.integers(1, 3), st.integers(1, 3)),   # stride
    st.tuples(st.integers(1, 2), st.integers(1, 2)),   # dilation
    st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(3, 7), st.integers(3, 7)),
)


@settings(max_examples=40, deadline=None)
@given(geometry)
def test_sliding_window_matches_reference(geo):
    k, p, s, d, shape = geo
    if min(_out(shape[2], k[0], s[0], p[0], d[0]), _out(shape[3], k[1], s[1], p[1], d[1])) < 1:
        return
    x = _x(*shape, seed=sum(shape)).astype(np.float32)
    got = F.sliding_window(_t(x), k, p, s, d)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), ref_sliding_window(x, k, p, s, d))
    y = _x(*got.shape, seed=1)
    back = F.sliding_window_transpose(_t(y), shape[2:], k, p, s, d).numpy()
    np.testing.assert_allclose(back, ref_sliding_window_transpose(y, shape[2:], k, p, s, d),
                               rtol=1e-12, atol=1e-12)
    # adjoint: <sw(x), y> == <x, swt(y)>
    np.testing.assert_allclose(np.sum(got.numpy() * y), np.sum(x * back), rtol=1e-5)


def test_sliding_window_megengine_example():
    inp = mge.tensor(np.arange(30).reshape(1, 1, 5, 6))
    out = M.SlidingWindow(kernel_size=3, padding=1, stride=2, dilation=2)(inp).numpy()
    assert out.dtype == np.int32 and out.shape == (1, 1, 2, 2, 3, 3)
    np.testing.assert_array_equal(out[0, 0, 0, 1], [[0, 0, 0], [7, 9, 11], [19, 21, 23]])
    np.testing.assert_array_equal(out[0, 0, 1, 0], [[0, 7, 9], [0, 19, 21], [0, 0, 0]])


def test_sliding_window_transpose_checks_sizes():
    with pytest.raises(AssertionError, match="input dimension of sliding_window_transpose should be 6"):
        F.sliding_window_transpose(_t(_x(1, 1, 3, 3)), (5, 5), 3)
    with pytest.raises(AssertionError, match="the input shape and output size do not match"):
        F.sliding_window_transpose(_t(_x(1, 1, 2, 3, 3, 3)), (5, 5), 3)


def test_sliding_window_grads_and_module():
    x = _x(1, 2, 4, 5, seed=3)
    check_grads(lambda t: F.sliding_window(t, (2, 3), (1, 0), (2, 1), (1, 2)), x, order=2)
    m = M.SlidingWindowTranspose((4, 5), (2, 3), (1, 0), (2, 1), (1, 2))
    y = F.sliding_window(_t(x), (2, 3), (1, 0), (2, 1), (1, 2)).numpy()
    check_grads(lambda t: m(t), y)
    assert m.output_size == (4, 5) and not list(m.parameters())


# -- local / region-restricted convolution --------------------------------------------------------

@pytest.mark.parametrize("groups, s, p, d", [(1, (1, 1), (0, 0), (1, 1)), (2, (2, 1), (1, 2), (1, 2))])
def test_local_conv2d(groups, s, p, d):
    x = _x(2, 4, 5, 6, seed=1)
    kh, kw = 3, 2
    oh, ow = _out(5, kh, s[0], p[0], d[0]), _out(6, kw, s[1], p[1], d[1])
    w = _x(groups, oh, ow, 4 // groups, kh, kw, 6 // groups, seed=2)
    b = _x(1, 6, 1, 1, seed=3)
    got = F.local_conv2d(_t(x), _t(w), _t(b), s, p, d).numpy()
    np.testing.assert_allclose(got, ref_local_conv(x, w, s, p, d) + b, rtol=1e-10, atol=1e-10)
    xs = x[:1, :, :3, :4]
    ws = _x(groups, _out(3, kh, s[0], p[0], d[0]), _out(4, kw, s[1], p[1], d[1]), 4 // groups,
            kh, kw, 2, seed=4)
    check_grads(lambda a, c: F.local_conv2d(a, c, None, s, p, d), xs, ws)


def test_local_conv2d_checks_the_weight():
    with pytest.raises(ValueError, match="output positions"):
        F.local_conv2d(_t(_x(1, 2, 5, 5)), _t(_x(1, 2, 2, 2, 3, 3, 1)))
    with pytest.raises(AssertionError):
        F.local_conv2d(_t(_x(1, 2, 5, 5)), _t(_x(1, 3, 3, 2, 3, 3, 1)), conv_mode="convolution")


def test_region_restricted_conv():
    rng = np.random.default_rng(5)
    x, w = _x(2, 4, 5, 6, seed=1), _x(2, 3, 2, 3, 2, seed=2)
    s, p, d = (1, 2), (1, 1), (1, 2)
    oh, ow = _out(5, 3, s[0], p[0], d[0]), _out(6, 2, s[1], p[1], d[1])
    rin = rng.integers(0, 3, (2, 5, 6)).astype(np.int32)
    rout = rng.integers(0, 3, (2, oh, ow)).astype(np.int32)
    got = F.region_restricted_conv(_t(x), _t(w), _t(rin), _t(rout), None, s, p, d, groups=2)
    np.testing.assert_allclose(got.numpy(), ref_rrconv(x, w, rin, rout, s, p, d), rtol=1e-10,
                               atol=1e-10)
    got8 = F.region_restricted_conv(_t(x), _t(w), _t(rin.astype(np.uint8)),
                                    _t(rout.astype(np.uint8)), None, s, p, d, groups=2)
    np.testing.assert_allclose(got8.numpy(), got.numpy())
    xs, ws = x[:1, :, :3, :4], w[:, :1, :, :2, :2]
    r_in, r_out = rin[:1, :3, :4], rout[:1, :2, :3]
    check_grads(lambda a, c: F.region_restricted_conv(a, c, _t(r_in), _t(r_out), None, 1, 0, 1,
                                                      groups=2), xs, ws)


def test_region_restricted_conv_module():
    mge.random.seed(0)
    m = M.RegionRestrictedConv(4, 6, 3, groups=2, padding=1)
    assert m.weight.shape == (2, 3, 2, 3, 3) and m.bias.shape == (1, 6, 1, 1)
    assert abs(float(m.weight.numpy().std()) - np.sqrt(1 / 36)) < 0.05
    x = mge.tensor(_x(1, 4, 4, 4).astype(np.float32))
    r = mge.tensor(np.zeros((1, 4, 4), np.int32))
    assert m(x, r, r).shape == (1, 6, 4, 4)
    with pytest.raises(AssertionError, match="groups > 0"):
        F.region_restricted_conv(x, m.weight, r, r, groups=0)


# -- deformable convolution ----------------------------------------------------------------------

@pytest.mark.parametrize("groups, dg, s, p, d", [(1, 1, (1, 1), (0, 0), (1, 1)),
                                                  (2, 2, (2, 1), (1, 1), (1, 2))])
def test_deformable_conv2d(groups, dg, s, p, d):
    rng = np.random.default_rng(groups)
    x = _x(2, 4, 5, 6, seed=1)
    w = _x(5, 4, 3, 2, seed=2) if groups == 1 else _x(groups, 3, 4 // groups, 3, 2, seed=2)
    oh, ow = _out(5, 3, s[0], p[0], d[0]), _out(6, 2, s[1], p[1], d[1])
    offset = rng.standard_normal((2, dg * 2 * 6, oh, ow)) * 2
    mask = rng.uniform(0, 1, (2, dg * 6, oh, ow))
    got = F.deformable_conv2d(_t(x), _t(w), _t(offset), _t(mask), None, s, p, d, groups)
    np.testing.assert_allclose(got.numpy(), ref_deformable_conv(x, w, offset, mask, s, p, d),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("symbolic", [False, True])
def test_deformable_conv2d_traces_with_offsets_as_an_input(symbolic):
    rng = np.random.default_rng(3)
    x, w = _x(1, 2, 4, 4, seed=1), _x(2, 2, 2, 2, seed=2)
    mask = _t(rng.uniform(0, 1, (1, 4, 3, 3)))
    traced = trace(F.deformable_conv2d, symbolic=symbolic)
    for _ in range(3):  # other offsets each call: other corners
        offset = _t(rng.uniform(-2, 2, (1, 8, 3, 3)) * 3)
        np.testing.assert_array_equal(traced(_t(x), _t(w), offset, mask).numpy(),
                                      F.deformable_conv2d(_t(x), _t(w), offset, mask).numpy())


def test_deformable_conv2d_grads_and_module():
    rng = np.random.default_rng(9)
    x, w = _x(1, 2, 4, 4, seed=1), _x(2, 2, 2, 2, seed=2)
    offset = rng.uniform(-1.5, 1.5, (1, 8, 3, 3)) + 0.25  # away from the integer grid
    mask = rng.uniform(0, 1, (1, 4, 3, 3))
    check_grads(lambda a, b, c, e: F.deformable_conv2d(a, b, c, e), x, w, offset, mask)
    mge.random.seed(1)
    m = M.DeformableConv2d(2, 4, 2, groups=2)
    assert m.weight.shape == (2, 2, 1, 2, 2) and m.bias.shape == (1, 4, 1, 1)
    out = m(mge.tensor(x.astype(np.float32)), mge.tensor(offset.astype(np.float32)),
            mge.tensor(mask.astype(np.float32)))
    assert out.dtype == np.float32 and out.shape == (1, 4, 3, 3)


# -- deformable PS-ROI pooling ---------------------------------------------------------------------

ROIS = np.array([[0, 1, 2, 6, 7], [1, 0, 0, 7, 8], [1, 3.4, 2.6, 5.5, 4.5], [0, -3, -2, 9, 12]])


@pytest.mark.parametrize("no_trans, part", [(False, 3), (False, 2), (True, 3)])
def test_deformable_psroi_pooling(no_trans, part):
    x = _x(2, 3, 9, 8, seed=4)
    trans = _x(4, 2, 3, 3, seed=5)
    got = F.deformable_psroi_pooling(_t(x), _t(ROIS), _t(trans), no_trans, part, 3, 3, 2, 0.5, 0.1)
    np.testing.assert_allclose(got.numpy(), ref_psroi(x, ROIS, trans, no_trans, part, 3, 3, 2,
                                                      0.5, 0.1), rtol=1e-6, atol=1e-6)


def test_deformable_psroi_pooling_grads_and_module():
    x, trans = _x(1, 2, 5, 5, seed=6), _x(2, 2, 2, 2, seed=7)
    rois = np.array([[0, 0, 1, 3, 4], [0, 1.2, 0.3, 4.4, 2.7]])
    check_grads(lambda a, t: F.deformable_psroi_pooling(a, _t(rois), t, False, 2, 2, 2, 2, 1.0,
                                                        0.1), x, trans)
    m = M.DeformablePSROIPooling(True, 2, 2, 2, 2, 1.0)
    assert m.trans_std == 0.1 and not list(m.parameters())
    out = m(mge.tensor(x.astype(np.float32)), mge.tensor(rois.astype(np.float32)),
            mge.tensor(trans.astype(np.float32)))
    assert out.shape == (2, 2, 2, 2)
    with pytest.raises(AssertionError, match="invalid trans shape"):
        F.deformable_psroi_pooling(_t(x), _t(rois), _t(_x(2, 4, 2, 2)), False, 2, 2, 2, 2, 1.0)


# -- CTC loss --------------------------------------------------------------------------------------

def _probs(t, n, c, seed):
    z = np.exp(_x(t, n, c, seed=seed))
    return z / z.sum(-1, keepdims=True)


@pytest.mark.parametrize("blank", [0, 2])
def test_ctc_loss_against_brute_force(blank):
    probs = _probs(5, 3, 3, seed=blank).astype(np.float32)
    plen = np.array([5, 4, 3], np.int32)
    other = [k for k in range(3) if k != blank]
    labels = np.array([[other[0], other[0]], [other[1], other[0]], [other[1], other[1]]], np.int32)
    llen = np.array([2, 2, 1], np.int32)
    ref = ref_ctc(probs.astype(np.float64), plen, labels, llen, blank)
    none = F.nn.ctc_loss(_t(probs), _t(plen), _t(labels), _t(llen), blank=blank, reduction="none")
    assert none.dtype == np.float32 and none.shape == (3,)
    np.testing.assert_allclose(none.numpy(), ref, rtol=1e-5)
    mean = F.nn.ctc_loss(_t(probs), _t(plen), _t(labels), _t(llen), blank=blank)
    np.testing.assert_allclose(mean.numpy(), np.mean(ref / llen), rtol=1e-5)
    total = F.nn.ctc_loss(_t(probs), _t(plen), _t(labels), _t(llen), blank, "sum")
    np.testing.assert_allclose(total.numpy(), ref.sum(), rtol=1e-5)
    # concatenated labels
    cat = np.concatenate([labels[i, :llen[i]] for i in range(3)])
    flat = F.nn.ctc_loss(_t(probs), _t(plen), _t(cat), _t(llen), blank=blank, reduction="none")
    np.testing.assert_allclose(flat.numpy(), none.numpy(), rtol=1e-6)


def test_ctc_loss_megengine_example():
    pred = mge.tensor([[[0.0614, 0.9386], [0.8812, 0.1188]], [[0.699, 0.301], [0.2572, 0.7428]]])
    out = F.nn.ctc_loss(pred, mge.tensor([2, 2]), mge.tensor([1, 1]), mge.tensor([1, 1]))
    np.testing.assert_allclose(out.numpy(), 0.1504417, rtol=1e-5)


def test_ctc_loss_gradient():
    probs = _probs(4, 2, 3, seed=8)
    plen, labels, llen = np.array([4, 3]), np.array([[1, 2], [1, 1]]), np.array([2, 1])

    def fn(p):
        # pred is cast to float32 by ctc_loss; difference in float64 around the float32 point
        return F.nn.ctc_loss(p, _t(plen), _t(labels), _t(llen), reduction="sum")

    p32 = mge.Tensor(probs.astype(np.float32))
    gm = mge.autodiff.GradManager().attach([p32])
    with gm:
        gm.backward(fn(p32))
    eps, grad = 1e-3, np.zeros_like(probs)
    base = probs.astype(np.float32).astype(np.float64)
    for idx in np.ndindex(*probs.shape):
        vals = []
        for sign in (1, -1):
            q = base.copy()
            q[idx] += sign * eps
            vals.append(ref_ctc(q, plen, labels, llen, 0).sum())
        grad[idx] = (vals[0] - vals[1]) / (2 * eps)
    np.testing.assert_allclose(p32.grad.numpy(), grad, rtol=2e-3, atol=2e-4)


def test_ctc_loss_messages():
    probs = mge.tensor(_probs(3, 2, 3, seed=1).astype(np.float32))
    lab, ll = mge.tensor(np.array([[1], [2]])), mge.tensor(np.array([1, 1]))
    with pytest.raises(AssertionError, match="pred_lengths must be equal to batch_size 2"):
        F.nn.ctc_loss(probs, mge.tensor([3]), lab, ll)
    with pytest.raises(AssertionError, match="blank must be in label range"):
        F.nn.ctc_loss(probs, mge.tensor([3, 3]), lab, ll, blank=3)
    with pytest.raises(AssertionError, match="pred_lengths must be in range"):
        F.nn.ctc_loss(probs, mge.tensor([4, 3]), lab, ll)
    with pytest.raises(AssertionError, match="label size must be equal to sum"):
        F.nn.ctc_loss(probs, mge.tensor([3, 3]), mge.tensor([1, 2, 1]), ll)
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.nn.ctc_loss(probs, mge.tensor([3, 3]), lab, ll, reduction="avg")


@pytest.mark.parametrize("symbolic", [False, True])
def test_deformable_psroi_pooling_traces_with_rois_as_an_input(symbolic):
    # rois and trans are inputs of the traced graph (no host read): new values on later calls
    x, trans = _x(1, 2, 6, 6, seed=8), _x(2, 2, 2, 2, seed=9)

    def f(a, b, t):
        return F.deformable_psroi_pooling(a, b, t, False, 2, 2, 2, 2, 1.0, 0.1)

    traced = trace(f, symbolic=symbolic)
    r1 = np.array([[0, 0, 1, 3, 4], [0, 1.2, 0.3, 4.4, 2.7]], "float32")
    r2 = np.array([[0, 2, 2, 5, 5], [0, 0.5, 1.5, 3.5, 4.5]], "float32")
    for rois in (r1, r2, r1):
        np.testing.assert_array_equal(traced(_t(x), _t(rois), _t(trans)).numpy(),
                                      f(_t(x), _t(rois), _t(trans)).numpy())
