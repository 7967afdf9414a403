"""``mge.functional.vision`` against float64 numpy references written here (per-pixel loops on
small inputs), plus MegEngine 1.13's argument checks and the F / F.nn / F.tensor exports."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mge
import mge.functional as F
from mge.autodiff import GradManager

RNG = np.random.default_rng(0)


def _img(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=tol, atol=tol)


# -- references ------------------------------------------------------------------------------------

def ref_coord_linear(o, i, k):
    if i == 1:
        return 0, 0, 1.0, 0.0
    a = (k + 0.5) * i / o - 0.5
    b = int(np.floor(a))
    a -= b
    if b < 0:
        b, a = 0, 0.0
    elif b + 1 >= i:
        b, a = i - 2, 1.0
    return b, b + 1, 1 - a, a


def ref_resize(x, oh, ow, mode):
    n, c, ih, iw = x.shape
    y = np.zeros((n, c, oh, ow))
    for r, q in itertools.product(range(oh), range(ow)):
        if mode == "nearest":
            y[:, :, r, q] = x[:, :, min(int(r * ih / oh), ih - 1), min(int(q * iw / ow), iw - 1)]
        elif mode == "linear":
            h0, h1, wh0, wh1 = ref_coord_linear(oh, ih, r)
            w0, w1, ww0, ww1 = ref_coord_linear(ow, iw, q)
            y[:, :, r, q] = (x[:, :, h0, w0] * wh0 * ww0 + x[:, :, h0, w1] * wh0 * ww1
                             + x[:, :, h1, w0] * wh1 * ww0 + x[:, :, h1, w1] * wh1 * ww1)
        else:  # cubic, A = -0.75, replicated border
            def coeffs(t):
                A = -0.75
                k = lambda d: ((A + 2) * d - (A + 3)) * d * d + 1 if d <= 1 else \
                    ((A * d - 5 * A) * d + 8 * A) * d - 4 * A  # noqa: E731
                return [k(1 + t), k(t), k(1 - t), k(2 - t)]
            ah, aw = (r + 0.5) * ih / oh - 0.5, (q + 0.5) * iw / ow - 0.5
            bh, bw = int(np.floor(ah)), int(np.floor(aw))
            ch, cw = coeffs(ah - bh), coeffs(aw - bw)
            for i, j in itertools.product(range(4), range(4)):
                y[:, :, r, q] += (x[:, :, min(max(bh - 1 + i, 0), ih - 1),
                                    min(max(bw - 1 + j, 0), iw - 1)] * ch[i] * cw[j])
    return y


def border(p, n, mode):
    if 0 <= p < n:
        return p
    if mode == "replicate":
        return min(max(p, 0), n - 1)
    if mode == "wrap":
        return p % n
    if mode == "constant":
        return -1
    if n == 1:
        return 0
    d = 1 if mode == "reflect_101" else 0
    while not 0 <= p < n:
        p = -p - 1 + d if p < 0 else n - 1 - (p - n) - d
    return p


def ref_sample(plane, ax, ay, mode, fill):
    """Bilinear sample of ``plane`` (``(C, H, W)``) at column ``ax``, row ``ay``."""
    h, w = plane.shape[1:]
    x0, y0 = int(np.floor(ax)), int(np.floor(ay))
    u, v = ax - x0, ay - y0
    out = 0.0
    for dy, dx, wt in ((0, 0, (1 - v) * (1 - u)), (0, 1, (1 - v) * u), (1, 0, v * (1 - u)),
                       (1, 1, v * u)):
        r, c = border(y0 + dy, h, mode), border(x0 + dx, w, mode)
        out = out + wt * (plane[:, r, c] if r >= 0 and c >= 0 else fill)
    return out


def ref_warp(x, m, oh, ow, mode, fill, idx=None):
    idx = range(len(m)) if idx is None else idx
    y = np.zeros((len(m), x.shape[1], oh, ow))
    for k, b in enumerate(idx):
        for r, q in itertools.product(range(oh), range(ow)):
            d = m[k, 2] @ [q, r, 1] if m.shape[1] == 3 else 1.0
            y[k, :, r, q] = ref_sample(x[b].astype(np.float64), m[k, 0] @ [q, r, 1] / d,
                                       m[k, 1] @ [q, r, 1] / d, mode, fill)
    return y


# -- interpolate -----------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None, derandomize=True)
@given(ih=st.integers(1, 6), iw=st.integers(1, 6), oh=st.integers(1, 9), ow=st.integers(1, 9),
       mode=st.sampled_from(["bilinear", "nearest", "bicubic"]))
def test_interpolate_matches_reference(ih, iw, oh, ow, mode):
    x = _img(2, 2, ih, iw)
    y = F.vision.interpolate(mge.tensor(x), size=(oh, ow), mode=mode)
    assert y.dtype == np.float32 and y.shape == (2, 2, oh, ow)
    _close(y.numpy(), ref_resize(x.astype(np.float64), oh, ow,
                                 {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)))


def test_interpolate_megengine_example_and_scale_factor():
    x = mge.tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2))
    out = F.vision.interpolate(x, [4, 4], align_corners=False)
    _close(out.numpy(), [[[[1., 1.25, 1.75, 2.], [1.5, 1.75, 2.25, 2.5],
                           [2.5, 2.75, 3.25, 3.5], [3., 3.25, 3.75, 4.]]]])
    _close(F.vision.interpolate(x, scale_factor=2.).numpy(), out.numpy())
    assert F.vision.interpolate(mge.tensor(_img(1, 1, 5, 7)), scale_factor=(1.5, 0.5)).shape == \
        (1, 1, 7, 3)


@pytest.mark.parametrize("oh, ow", [(7, 9), (3, 2)])
def test_interpolate_align_corners(oh, ow):
    x = _img(2, 3, 4, 5, seed=1)
    y = F.vision.interpolate(mge.tensor(x), size=(oh, ow), align_corners=True).numpy()
    ys, xs = np.linspace(0, 3, oh), np.linspace(0, 4, ow)
    ref = np.zeros((2, 3, oh, ow))
    for r, q in itertools.product(range(oh), range(ow)):
        ref[:, :, r, q] = [[ref_sample(x[n].astype(np.float64), xs[q], ys[r], "replicate", 0)[c]
                            for c in range(3)] for n in range(2)]
    _close(y, ref)
    assert y[..., 0, 0].tolist() == x[..., 0, 0].tolist()


def test_interpolate_linear_mode():
    x = _img(2, 3, 6)
    y = F.vision.interpolate(mge.tensor(x), size=10, mode="linear")
    assert y.shape == (2, 3, 10)
    _close(y.numpy(), ref_resize(x[..., None].astype(np.float64), 10, 1, "linear")[..., 0])
    assert F.vision.interpolate(mge.tensor(x), scale_factor=2, mode="linear").shape == (2, 3, 12)


@pytest.mark.parametrize("align", [False, True])
def test_interpolate_trilinear(align):
    x = _img(1, 2, 3, 4, 2)
    y = F.vision.interpolate(mge.tensor(x), size=(5, 3, 4), mode="trilinear", align_corners=align)

    def axis(o, i):
        m = np.zeros((o, i))
        for k in range(o):
            s = k * (i - 1) / (o - 1) if align else max((k + 0.5) * i / o - 0.5, 0)
            a = min(int(np.floor(s)), i - 1)
            m[k, a] += 1 - (s - a)
            m[k, min(a + 1, i - 1)] += s - a
        return m
    ref = np.einsum("ai,bj,ck,nmijk->nmabc", axis(5, 3), axis(3, 4), axis(4, 2), x)
    _close(y.numpy(), ref)


def test_interpolate_argument_errors():
    x = mge.tensor(_img(1, 1, 2, 2))
    with pytest.raises(ValueError, match="unsupported interpolate mode: area"):
        F.vision.interpolate(x, 4, mode="area")
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.vision.interpolate(x, 4, mode="nearest", align_corners=True)
    with pytest.raises(ValueError, match="scale_factor must not be None when size is None"):
        F.vision.interpolate(x)
    with pytest.raises(ValueError, match="scale_factor must be None when size is provided"):
        F.vision.interpolate(x, 4, scale_factor=2)
    with pytest.raises(ValueError, match="under linear mode, size can only be single value"):
        F.vision.interpolate(mge.tensor(_img(1, 1, 2)), (4, 4), mode="linear")
    with pytest.raises(AssertionError, match="must have 5 dimensions"):
        F.vision.interpolate(x, 4, mode="trilinear")


def test_interpolate_gradient_through_grad_manager():
    x = mge.Parameter(_img(1, 2, 3, 4))
    gm = GradManager().attach([x])
    with gm:
        y = F.vision.interpolate(x, size=(5, 7))
        gm.backward((y * y).sum())
    # d/dx sum(y^2) = A^T (2 y)
    ah = np.array([[ref_coord_linear(5, 3, r)[2] if i == ref_coord_linear(5, 3, r)[0] else
                    ref_coord_linear(5, 3, r)[3] if i == ref_coord_linear(5, 3, r)[1] else 0
                    for i in range(3)] for r in range(5)])
    aw = np.array([[ref_coord_linear(7, 4, r)[2] if i == ref_coord_linear(7, 4, r)[0] else
                    ref_coord_linear(7, 4, r)[3] if i == ref_coord_linear(7, 4, r)[1] else 0
                    for i in range(4)] for r in range(7)])
    _close(x.grad.numpy(), np.einsum("oi,ncop,pj->ncij", ah, 2 * y.numpy(), aw), 1e-4)


# -- warps and remap -------------------------------------------------------------------------------

def _mat(n, seed, rows=3):
    rng = np.random.default_rng(seed)
    m = np.tile(np.eye(3), (n, 1, 1))
    m[:, :2] += rng.uniform(-0.3, 0.3, (n, 2, 3))
    m[:, 2, :2] = rng.uniform(-0.03, 0.03, (n, 2))
    return m[:, :rows].astype(np.float32)


@pytest.mark.parametrize("bmode", ["replicate", "constant", "reflect", "reflect_101", "wrap"])
def test_warp_perspective_matches_reference(bmode):
    x, m = _img(2, 3, 5, 6), _mat(2, 1)
    y = F.vision.warp_perspective(mge.tensor(x), mge.tensor(m), (4, 7), border_mode=bmode,
                                  border_val=1.5)
    assert y.shape == (2, 3, 4, 7) and y.dtype == np.float32
    _close(y.numpy(), ref_warp(x, m.astype(np.float64), 4, 7, bmode, 1.5), 1e-4)


def test_warp_perspective_mat_idx_and_example():
    x, m = _img(2, 1, 5, 6), _mat(3, 2)
    y = F.vision.warp_perspective(mge.tensor(x), mge.tensor(m), (3, 3), mat_idx=[1, 0, 1])
    assert y.shape == (3, 1, 3, 3)
    _close(y.numpy(), ref_warp(x, m.astype(np.float64), 3, 3, "replicate", 0, [1, 0, 1]), 1e-4)
    x = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    M = mge.tensor(np.array([[1., 0., 1.], [0., 1., 1.], [0., 0., 1.]],
                            dtype=np.float32).reshape(1, 3, 3))
    assert F.vision.warp_perspective(x, M, (2, 2)).numpy().tolist() == [[[[5., 6.], [9., 10.]]]]
    assert F.nn.warp_perspective is F.vision.warp_perspective is F.warp_perspective


def test_warp_affine_nchw_and_nhwc():
    x, m = _img(2, 3, 5, 6, seed=3), _mat(2, 4, rows=2)
    y = F.vision.warp_affine(mge.tensor(x), mge.tensor(m), (4, 5), border_mode="constant",
                             format="NCHW")
    _close(y.numpy(), ref_warp(x, m.astype(np.float64), 4, 5, "constant", 0.0), 1e-4)
    # NHWC: coordinates on MegEngine's 1/32 grid, so within 1/32 of the exact warp's values
    yh = F.vision.warp_affine(mge.tensor(x.transpose(0, 2, 3, 1)), mge.tensor(m), (4, 5),
                              border_mode="constant")
    assert yh.shape == (2, 4, 5, 3)
    assert np.abs(yh.numpy().transpose(0, 3, 1, 2) - y.numpy()).max() < 0.2
    t = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1))
    M = mge.tensor([[[1., 0., 1.], [0., 1., 1.]]])
    assert F.warp_affine(t, M, (2, 2)).numpy().reshape(-1).tolist() == [5., 6., 9., 10.]


@pytest.mark.parametrize("bmode", ["replicate", "constant", "reflect", "reflect_101", "wrap"])
@pytest.mark.parametrize("imode", ["linear", "nearest"])
def test_remap_matches_reference(bmode, imode):
    x = _img(2, 2, 4, 5, seed=5)
    mp = np.random.default_rng(6).uniform(-2, 7, (2, 3, 4, 2)).astype(np.float32)
    y = F.vision.remap(mge.tensor(x), mge.tensor(mp), border_mode=bmode, scalar=2.0,
                       interp_mode=imode)
    ref = np.zeros((2, 2, 3, 4))
    for n, r, q in itertools.product(range(2), range(3), range(4)):
        ax, ay = mp[n, r, q].astype(np.float64)
        if imode == "linear":
            ref[n, :, r, q] = ref_sample(x[n].astype(np.float64), ax, ay, bmode, 2.0)
        else:
            rr, cc = border(int(np.rint(ay)), 4, bmode), border(int(np.rint(ax)), 5, bmode)
            ref[n, :, r, q] = x[n, :, rr, cc] if rr >= 0 and cc >= 0 else 2.0
    _close(y.numpy(), ref, 1e-4)


def test_remap_example():
    inp = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    mp = mge.tensor(np.array([[[1., 0.], [0., 1.]], [[0., 1.], [0., 1.]]],
                             dtype=np.float32).reshape(1, 2, 2, 2))
    assert F.vision.remap(inp, mp).numpy().tolist() == [[[[1., 4.], [4., 4.]]]]
    assert F.nn.remap is F.remap


# -- RoI ops ---------------------------------------------------------------------------------------

def _rois(k, n, seed):
    rng = np.random.default_rng(seed)
    lo = rng.uniform(0, 6, (k, 2))
    return np.concatenate([rng.integers(0, n, (k, 1)), lo, lo + rng.uniform(1, 8, (k, 2))],
                          1).astype(np.float32)


@pytest.mark.parametrize("mode", ["average", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_roi_align_matches_reference(mode, aligned):
    x, rois = _img(2, 3, 10, 12, seed=7), _rois(5, 2, 8)
    y = F.vision.roi_align(mge.tensor(x), mge.tensor(rois), (2, 3), mode=mode,
                           spatial_scale=0.8, sample_points=(2, 3), aligned=aligned)
    off = 0.5 if aligned else 0.0
    ref = np.zeros((5, 3, 2, 3))
    for k, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        sx, sy, ex, ey = x1 * 0.8 - off, y1 * 0.8 - off, x2 * 0.8 - off, y2 * 0.8 - off
        bh, bw = max(ey - sy, 0) / 2, max(ex - sx, 0) / 3
        for ph, pw in itertools.product(range(2), range(3)):
            vals = [ref_sample(x[int(b)].astype(np.float64), sx + bw * (pw + (j + 0.5) / 3),
                               sy + bh * (ph + (i + 0.5) / 2), "constant", 0.0)
                    for i in range(2) for j in range(3)]
            ref[k, :, ph, pw] = np.mean(vals, 0) if mode == "average" else np.max(vals, 0)
    _close(y.numpy(), ref, 1e-4)


@pytest.mark.parametrize("mode", ["max", "average"])
def test_roi_pooling_matches_reference(mode):
    x, rois = _img(2, 2, 9, 11, seed=9), _rois(4, 2, 10)
    y = F.vision.roi_pooling(mge.tensor(x), mge.tensor(rois), (3, 2), mode=mode, scale=0.9)
    ref = np.zeros((4, 2, 3, 2))
    for k, (b, *box) in enumerate(rois):
        sw, sh, ew, eh = [int(np.floor(v * np.float32(0.9) + 0.5)) for v in box]
        rw, rh = max(ew - sw + 1, 1), max(eh - sh + 1, 1)
        for ph, pw in itertools.product(range(3), range(2)):
            h0 = min(max(int(np.floor(ph * rh / 3)) + sh, 0), 9)
            h1 = min(max(int(np.ceil((ph + 1) * rh / 3)) + sh, 0), 9)
            w0 = min(max(int(np.floor(pw * rw / 2)) + sw, 0), 11)
            w1 = min(max(int(np.ceil((pw + 1) * rw / 2)) + sw, 0), 11)
            win = x[int(b), :, h0:h1, w0:w1].reshape(2, -1)
            if win.size:
                ref[k, :, ph, pw] = win.max(1) if mode == "max" else win.mean(1)
    _close(y.numpy(), ref)
    assert F.vision.roi_pooling(mge.tensor(x), mge.tensor(rois), 2).shape == (4, 2, 2, 2)


def test_roi_argument_errors():
    x, rois = mge.tensor(_img(1, 1, 4, 4)), mge.tensor(_rois(1, 1, 0))
    with pytest.raises(AssertionError, match="only max/average mode is supported"):
        F.vision.roi_align(x, rois, 2, mode="sum")
    with pytest.raises(AssertionError, match="only max/average mode is supported"):
        F.vision.roi_pooling(x, rois, 2, mode="sum")


# -- NMS -------------------------------------------------------------------------------------------

def ref_nms(boxes, scores, thresh, max_output=None):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = []
    for i in order:
        ok = True
        for j in keep:
            xx1, yy1 = max(boxes[i, 0], boxes[j, 0]), max(boxes[i, 1], boxes[j, 1])
            xx2, yy2 = min(boxes[i, 2], boxes[j, 2]), min(boxes[i, 3], boxes[j, 3])
            inter = max(xx2 - xx1, 0) * max(yy2 - yy1, 0)
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) > thresh:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep[:max_output]


@pytest.mark.parametrize("thresh, max_output", [(0.3, None), (0.6, None), (0.5, 4)])
def test_nms_matches_reference(thresh, max_output):
    rng = np.random.default_rng(11)
    b = np.zeros((40, 4), np.float32)
    b[:, :2] = rng.random((40, 2)) * 20
    b[:, 2:] = b[:, :2] + rng.random((40, 2)) * 20 + 1
    s = rng.permutation(40).astype(np.float32) / 40
    keep = F.vision.nms(mge.tensor(b), mge.tensor(s), thresh, max_output=max_output)
    assert keep.dtype == np.int32
    assert keep.numpy().tolist() == ref_nms(b.astype(np.float64), s, thresh, max_output)


def test_nms_empty_and_errors():
    e = F.vision.nms(mge.tensor(np.zeros((0, 4), np.float32)), mge.tensor(np.zeros(0, np.float32)),
                     0.5)
    assert e.numpy().tolist() == []
    with pytest.raises(AssertionError, match=r"the expected shape of boxes is \(N, 4\)"):
        F.vision.nms(mge.tensor(np.zeros((3, 5))), mge.tensor(np.zeros(3)), 0.5)
    with pytest.raises(AssertionError, match="number of boxes and scores are not matched"):
        F.vision.nms(mge.tensor(np.zeros((3, 4))), mge.tensor(np.zeros(2)), 0.5)


# -- colour and correlation ------------------------------------------------------------------------

def test_cvt_color_float():
    x = np.random.default_rng(12).random((2, 3, 4, 3)).astype(np.float32)
    t = mge.tensor(x)
    _close(F.vision.cvt_color(t, "RGB2GRAY").numpy(), x @ [[0.299], [0.587], [0.114]])
    _close(F.vision.cvt_color(t, "BGR2GRAY").numpy(), x @ [[0.114], [0.587], [0.299]])
    _close(F.vision.cvt_color(t, "rgb2bgr").numpy(), x[..., ::-1])
    _close(F.vision.cvt_color(t[..., :1], "GRAY2RGB").numpy(), np.repeat(x[..., :1], 3, -1))
    yuv = F.vision.cvt_color(t, "RGB2YUV").numpy()
    y = x @ [0.114, 0.587, 0.299]
    _close(yuv, np.stack([y, (x[..., 0] - y) * 0.492 + 0.5, (x[..., 2] - y) * 0.877 + 0.5], -1))
    ex = mge.tensor(np.array([[[[-0.58675045, 1.7526233, 0.10702174]]]], np.float32))
    _close(F.vision.cvt_color(ex, mode="RGB2GRAY").numpy(), [[[[0.86555195]]]])


def test_cvt_color_uint8():
    x = np.random.default_rng(13).integers(0, 256, (1, 3, 5, 4)).astype(np.uint8)
    t = mge.tensor(x)
    g = F.vision.cvt_color(t[..., :3], "RGB2GRAY").numpy()
    assert g.dtype == np.uint8
    v = x.astype(np.int64)
    assert g[..., 0].tolist() == ((v[..., 0] * 4899 + v[..., 1] * 9617 + v[..., 2] * 1868 + 8192)
                                  >> 14).tolist()
    assert F.vision.cvt_color(t, "RGBA2BGR").numpy().tolist() == x[..., 2::-1].tolist()
    assert F.vision.cvt_color(t, "RGBA2RGB").numpy().tolist() == x[..., :3].tolist()
    with pytest.raises(AssertionError, match="unspport mode for cvt_color"):
        F.vision.cvt_color(t, "RGB2LAB")
    with pytest.raises(NotImplementedError, match="NV21"):
        F.vision.cvt_color(t, "YUV2RGB_NV21")


@pytest.mark.parametrize("k, d, s1, s2, p, mul", [(1, 1, 1, 1, 0, True), (3, 2, 2, 1, 2, True),
                                                   (1, 2, 1, 2, 2, False)])
def test_correlation_matches_reference(k, d, s1, s2, p, mul):
    a, b = _img(2, 2, 7, 8, seed=14), _img(2, 2, 7, 8, seed=15)
    y = F.vision.correlation(mge.tensor(a), mge.tensor(b), kernel_size=k, max_displacement=d,
                             stride1=s1, stride2=s2, pad_size=p, is_multiply=mul).numpy()
    ap = np.pad(a, ((0, 0), (0, 0), (p, p), (p, p))).astype(np.float64)
    bp = np.pad(b, ((0, 0), (0, 0), (p, p), (p, p))).astype(np.float64)
    kr, rad = (k - 1) // 2, d // s2
    border_ = d + kr
    oh = int(np.ceil((7 + 2 * p - 2 * border_) / s1))
    ow = int(np.ceil((8 + 2 * p - 2 * border_) / s1))
    gw = 2 * rad + 1
    ref = np.zeros((2, gw * gw, oh, ow))
    for ch, i, j in itertools.product(range(gw * gw), range(oh), range(ow)):
        dy, dx = (ch // gw - rad) * s2, (ch % gw - rad) * s2
        y1, x1 = i * s1 + border_, j * s1 + border_
        p1 = ap[:, :, y1 - kr:y1 + kr + 1, x1 - kr:x1 + kr + 1]
        p2 = bp[:, :, y1 + dy - kr:y1 + dy + kr + 1, x1 + dx - kr:x1 + dx + kr + 1]
        v = p1 * p2 if mul else np.abs(p1 - p2)
        ref[:, ch, i, j] = v.sum((1, 2, 3)) / (k * k * 2)
    assert y.shape == ref.shape
    _close(y, ref)


def test_nvof_raises():
    with pytest.raises(NotImplementedError, match="NVIDIA"):
        F.vision.nvof(mge.tensor(np.zeros((1, 2, 4, 4, 4), np.uint8)))


# -- exports ---------------------------------------------------------------------------------------

def test_exports():
    for name in F.vision.__all__:
        assert callable(getattr(F.vision, name)) and getattr(F.nn, name) is getattr(F.vision, name)
        assert getattr(F.vision, name).__doc__
    assert F.remap is F.vision.remap and F.warp_affine is F.vision.warp_affine
    assert F.tensor.cumsum(mge.tensor([[1, 2], [3, 4]]), 1).numpy().tolist() == [[1, 3], [3, 7]]
    logits = mge.tensor([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.1, 0.2, 0.7]])
    top1, top2 = F.topk_accuracy(logits, mge.tensor([1, 1, 2]), topk=(1, 2))
    assert top1.item() == pytest.approx(2 / 3) and top2.item() == pytest.approx(1.0)
    assert F.metric.topk_accuracy is F.topk_accuracy is F.nn.topk_accuracy


def test_empty_inputs():
    x = mge.tensor(_img(2, 3, 6, 6))
    none = mge.tensor(np.zeros((0, 5), np.float32))
    assert F.vision.roi_align(x, none, 2).shape == (0, 3, 2, 2)
    assert F.vision.roi_pooling(x, none, 2).numpy().shape == (0, 3, 2, 2)
    m = mge.tensor(np.zeros((0, 3, 3), np.float32))
    assert F.vision.warp_perspective(x, m, (3, 3), mat_idx=np.zeros(0, np.int32)).numpy().shape \
        == (0, 3, 3, 3)
    assert F.vision.remap(x, mge.tensor(np.zeros((2, 0, 3, 2), np.float32))).numpy().shape == \
        (2, 3, 0, 3)


# -- an input on another device than the default one ----------------------------------------------
# The functional layer's own tensors (interpolate's align_corners matrix, nms's index range) and
# host operands must go on the input's device: on the default one they met the input in one op
# ("the inputs are on different devices").

OTHER = "cpu1"


@pytest.fixture
def default_cpu0():
    old = mge.get_default_device()
    mge.set_default_device("cpu0")
    yield
    mge.set_default_device(old)


def _on(d, a):
    return mge.tensor(a, dtype=np.asarray(a).dtype, device=d)


def _interp_grad(d, x, **kw):
    t = _on(d, x)
    gm = GradManager().attach([t])
    with gm:
        y = F.vision.interpolate(t, **kw)
        dy = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
        gm.backward((y * _on(d, dy)).sum())
    assert y.device == t.device and t.grad.device == t.device
    return y.numpy(), t.grad.numpy()


@pytest.mark.parametrize("mode, shape, size", [("bilinear", (2, 3, 4, 5), (7, 9)),
                                               ("bilinear", (1, 2, 3, 4), (5, 3)),
                                               ("linear", (2, 3, 6), 10)])
def test_interpolate_align_corners_on_a_non_default_device(default_cpu0, mode, shape, size):
    x = _img(*shape, seed=3)
    got = _interp_grad(OTHER, x, size=size, mode=mode, align_corners=True)
    ref = _interp_grad("cpu0", x, size=size, mode=mode, align_corners=True)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_vision_ops_take_host_operands_onto_the_inputs_device(default_cpu0):
    x, m3 = _img(2, 3, 6, 6, seed=4), _mat(2, 1)
    rois = np.array([[0, 0, 0, 4, 4], [1, 1, 0.5, 5, 3]], np.float32)
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    map_xy = np.random.default_rng(2).uniform(0, 5, (2, 4, 3, 2)).astype(np.float32)

    def run(d, host):
        # ``host(a)``: ``a`` as the caller passes it -- a numpy array, or a tensor on ``d``
        t = _on(d, x)
        return [
            F.vision.warp_perspective(t, host(m3), (4, 5)),
            F.vision.warp_perspective(t, _on(d, m3), (4, 5), mat_idx=host(np.int32([1, 0]))),
            F.vision.warp_perspective(host(x), _on(d, m3), (4, 5)),
            F.vision.warp_affine(t, host(m3[:, :2]), (4, 5), format="NCHW"),
            F.vision.remap(t, host(map_xy)),
            F.vision.roi_align(t, host(rois), (2, 2)),
            F.vision.roi_pooling(t, host(rois), (2, 2)),
            F.vision.roi_pooling(host(x), _on(d, rois), (2, 2)),
            F.vision.correlation(t, host(x)),
            F.vision.nms(_on(d, boxes), host(scores), 0.5),
            F.vision.nms(_on(d, boxes), _on(d, scores), 0.5, max_output=2),
        ]
    ref = [y.numpy() for y in run("cpu0", lambda a: _on("cpu0", a))]
    for host in (np.asarray, lambda a: _on(OTHER, a)):
        got = run(OTHER, host)
        assert all(y.device == mge.device.as_device(OTHER) for y in got), [y.device for y in got]
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g.numpy(), r)
