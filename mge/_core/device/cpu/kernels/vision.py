"""CPU kernels of the image ops (``mge/_core/ops/vision.py``).

The sampling ops (warps, remap, RoI align) share one representation: for each output position,
``K`` taps (a source index into the flattened ``H*W`` plane, a weight, a validity flag, and the
weight's derivatives with respect to the sampling coordinates).  The forward pass gathers, the
data gradient scatters with ``np.bincount`` and the coordinate gradient contracts the derivatives,
all vectorized over batch, channels and positions.  Resizes are separable: one small
interpolation matrix per axis, applied with ``einsum``.
"""
import numpy as np

from ....ops.vision import (
    Correlation, CvtColor, NMSKeep, Remap, Resize, Resize3D, ROIAlign, ROIPooling,
    VisionBackward, WarpAffine, WarpPerspective,
)
from ..table import def_kernel


def _out(a, like):
    return np.ascontiguousarray(a.astype(like.dtype, copy=False))


# -- separable resize ------------------------------------------------------------------------------

def _resize_matrix(imode, o, i):
    """``(o, i)`` matrix of MegEngine's 1-D resize (``get_nearest_linear_coord`` and friends)."""
    a = np.zeros((o, i))
    rows = np.arange(o)
    scale = np.float32(o) / np.float32(i)
    if imode == "nearest":
        src = np.minimum((rows.astype(np.float32) / scale).astype(np.int64), i - 1)
        a[rows, src] = 1.0
        return a
    alpha = (rows + 0.5) / float(scale) - 0.5
    base = np.floor(alpha).astype(np.int64)
    alpha = alpha - base
    if imode == "cubic":
        x = alpha
        A = -0.75
        c0 = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A
        c1 = ((A + 2) * x - (A + 3)) * x * x + 1
        c2 = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1
        coeffs = (c0, c1, c2, 1 - c0 - c1 - c2)
        for k in range(4):
            np.add.at(a, (rows, np.clip(base - 1 + k, 0, i - 1)), coeffs[k])
        return a
    if i == 1:
        a[:, 0] = 1.0
        return a
    low = base < 0
    high = base + 1 >= i
    base = np.where(low, 0, np.where(high, i - 2, base))
    alpha = np.where(low, 0.0, np.where(high, 1.0, alpha))
    np.add.at(a, (rows, base), 1 - alpha)
    np.add.at(a, (rows, base + 1), alpha)
    return a


def _linear3d_matrix(o, i, align):
    a = np.zeros((o, i))
    rows = np.arange(o)
    if align:
        src = rows * ((i - 1) / (o - 1) if o > 1 else 0.0)
    else:
        src = np.maximum((rows + 0.5) * (i / o) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), i - 1)
    i1 = np.minimum(i0 + 1, i - 1)
    lam = src - i0
    np.add.at(a, (rows, i0), 1 - lam)
    np.add.at(a, (rows, i1), lam)
    return a


def _resize_mats(op, shape):
    if op.imode == "area":
        raise NotImplementedError("Resize: the 'area' interpolation mode is not implemented in mge")
    h, w = (shape[1], shape[2]) if op.format == "NHWC" else (shape[2], shape[3])
    return _resize_matrix(op.imode, op.size[0], h), _resize_matrix(op.imode, op.size[1], w)


@def_kernel(Resize)
def _cpu_resize(op, x):
    ah, aw = _resize_mats(op, x.shape)
    xc = x.transpose(0, 3, 1, 2) if op.format == "NHWC" else x
    y = np.einsum("oi,ncij,pj->ncop", ah, xc.astype(np.float64), aw)
    if op.format == "NHWC":
        y = y.transpose(0, 2, 3, 1)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return (_out(y, x),)


def _resize_backward(op, x, g):
    ah, aw = _resize_mats(op, x.shape)
    gc = g.transpose(0, 3, 1, 2) if op.format == "NHWC" else g
    dx = np.einsum("oi,ncop,pj->ncij", ah, gc.astype(np.float64), aw)
    if op.format == "NHWC":
        dx = dx.transpose(0, 2, 3, 1)
    return _out(dx, g)


def _resize3d_mats(op, shape):
    return [_linear3d_matrix(o, i, op.align_corners) for o, i in zip(op.size, shape[2:])]


@def_kernel(Resize3D)
def _cpu_resize3d(op, x):
    ad, ah, aw = _resize3d_mats(op, x.shape)
    y = np.einsum("ai,bj,ck,nmijk->nmabc", ad, ah, aw, x.astype(np.float64))
    return (_out(y, x),)


def _resize3d_backward(op, x, g):
    ad, ah, aw = _resize3d_mats(op, x.shape)
    return _out(np.einsum("ai,bj,ck,nmabc->nmijk", ad, ah, aw, g.astype(np.float64)), g)


# -- taps: bilinear / nearest sampling -------------------------------------------------------------

def _border(p, n, mode):
    """MegEngine's ``border_interpolate``: ``(index, valid)`` for integer positions ``p``."""
    inside = (p >= 0) & (p < n)
    if mode in ("constant", "transparent", "isolated"):
        return np.where(inside, p, 0), inside
    if mode == "replicate":
        return np.clip(p, 0, n - 1), np.ones(p.shape, bool)
    if mode == "wrap":
        return np.mod(p, n), np.ones(p.shape, bool)
    if n == 1:
        return np.zeros_like(p), np.ones(p.shape, bool)
    if mode == "reflect":
        m = np.mod(p, 2 * n)
        return np.where(m >= n, 2 * n - 1 - m, m), np.ones(p.shape, bool)
    m = np.mod(p, 2 * n - 2)  # reflect_101
    return np.where(m >= n, 2 * n - 2 - m, m), np.ones(p.shape, bool)


class _Taps:
    """``K`` taps per output position; arrays are ``(No, K, P)``."""

    def __init__(self, idx, w, valid, dwx=None, dwy=None, fill=0.0):
        self.idx, self.w, self.valid, self.dwx, self.dwy, self.fill = idx, w, valid, dwx, dwy, fill


def _bilinear_taps(ax, ay, h, w, mode, fill=0.0):
    """Taps of bilinear sampling at ``(ax, ay)`` (``(No, P)``, x = column)."""
    fx, fy = np.floor(ax), np.floor(ay)
    u, v = ax - fx, ay - fy  # alpha_w, alpha_h
    x0, y0 = fx.astype(np.int64), fy.astype(np.int64)
    idx, valid = [], []
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        r, rv = _border(y0 + dy, h, mode)
        c, cv = _border(x0 + dx, w, mode)
        idx.append(r * w + c)
        valid.append(rv & cv)
    wts = [(1 - v) * (1 - u), (1 - v) * u, v * (1 - u), v * u]
    dwx = [-(1 - v), 1 - v, -v, v]
    dwy = [-(1 - u), -u, 1 - u, u]
    st = lambda xs: np.stack(xs, axis=1)  # noqa: E731
    return _Taps(st(idx), st(wts), st(valid), st(dwx), st(dwy), fill)


def _nearest_taps(ax, ay, h, w, mode, fill=0.0):
    r, rv = _border(np.rint(ay).astype(np.int64), h, mode)
    c, cv = _border(np.rint(ax).astype(np.int64), w, mode)
    z = np.zeros(ax.shape)[:, None]
    return _Taps((r * w + c)[:, None], np.ones_like(z), (rv & cv)[:, None], z, z, fill)


def _values(x, b, t):
    """``(No, C, K, P)`` tap values of ``x`` (``(N, C, H*W)``); invalid taps read ``fill``."""
    no, k, p = t.idx.shape
    v = x[b]
    vals = np.take_along_axis(v, t.idx.reshape(no, 1, k * p), axis=2).reshape(
        no, v.shape[1], k, p)
    return np.where(t.valid[:, None], vals, t.fill)


def _gather(x, b, t):
    return np.einsum("nckp,nkp->ncp", _values(x, b, t), t.w)


def _scatter(shape, b, t, g):
    """The data gradient: ``g`` (``(No, C, P)``) sent back through the taps to ``shape``."""
    n, c, hw = shape
    contrib = g[:, :, None, :] * (t.w * t.valid)[:, None]
    flat = (b[:, None, None, None] * c + np.arange(c)[None, :, None, None]) * hw + t.idx[:, None]
    out = np.bincount(flat.ravel(), weights=contrib.ravel(), minlength=n * c * hw)
    return out.reshape(shape)


def _coord_grads(x, b, t, g):
    """``(gx, gy)`` (``(No, P)``): gradients of the sampling coordinates."""
    vals = _values(x, b, t)
    gv = g[:, :, None, :] * vals
    return np.einsum("nckp,nkp->np", gv, t.dwx), np.einsum("nckp,nkp->np", gv, t.dwy)


def _nchw(op, x):
    return x.transpose(0, 3, 1, 2) if op.format == "NHWC" else x


def _from_nchw(op, y):
    return y.transpose(0, 2, 3, 1) if op.format == "NHWC" else y


# -- warps -----------------------------------------------------------------------------------------

def _cv_path(op):
    """MegEngine's CPU runs NHWC warps through its OpenCV-derived kernel,
    which samples at coordinates quantized to 1/32 pixel; mge quantizes the same way there."""
    return op.format == "NHWC"


def _cv_coords(op, m, gx, gy, ax, ay):
    tab = 32  # INTER_TAB_SIZE
    if isinstance(op, WarpAffine):
        ab = 1024  # AB_SCALE
        rd = ab // 2 if op.imode == "nearest" else ab // tab // 2
        qx = np.rint((m[:, 0, 1:2] * gy + m[:, 0, 2:3]) * ab) + rd + np.rint(m[:, 0, 0:1] * gx * ab)
        qy = np.rint((m[:, 1, 1:2] * gy + m[:, 1, 2:3]) * ab) + rd + np.rint(m[:, 1, 0:1] * gx * ab)
        if op.imode == "nearest":
            return np.floor(qx / ab), np.floor(qy / ab)
        return np.floor(qx / (ab // tab)) / tab, np.floor(qy / (ab // tab)) / tab
    big = float(np.iinfo(np.int32).max)
    with np.errstate(invalid="ignore", over="ignore"):
        qx = np.rint(np.clip(np.nan_to_num(ax * tab), -big, big))
        qy = np.rint(np.clip(np.nan_to_num(ay * tab), -big, big))
    if op.imode == "nearest":
        return np.floor(ax), np.floor(ay)
    return qx / tab, qy / tab


def _warp_setup(op, x, mat, mat_idx=None):
    if op.imode not in ("linear", "nearest"):
        raise NotImplementedError(f"{op.name}: interpolation mode {op.imode!r} is not "
                                  "implemented in mge (linear and nearest are)")
    xc = _nchw(op, x).astype(np.float64)
    n, c, h, w = xc.shape
    m = mat.astype(np.float64)
    nm = m.shape[0]
    if mat_idx is not None:
        b = np.asarray(mat_idx).astype(np.int64).reshape(-1)
        if b.size and (b.min() < 0 or b.max() >= n):
            raise IndexError(f"{op.name}: mat_idx out of bound: {b.tolist()} (src batch {n})")
    else:
        b = np.arange(nm)
    oh, ow = op.out_shape
    gy, gx = np.meshgrid(np.arange(oh, dtype=np.float64), np.arange(ow, dtype=np.float64),
                         indexing="ij")
    gx, gy = gx.reshape(1, oh * ow), gy.reshape(1, oh * ow)
    nx = m[:, 0, 0:1] * gx + m[:, 0, 1:2] * gy + m[:, 0, 2:3]
    ny = m[:, 1, 0:1] * gx + m[:, 1, 1:2] * gy + m[:, 1, 2:3]
    if isinstance(op, WarpPerspective):
        d = m[:, 2, 0:1] * gx + m[:, 2, 1:2] * gy + m[:, 2, 2:3]
    else:
        d = np.ones_like(nx)
    ax, ay = nx / d, ny / d
    if _cv_path(op):
        ax, ay = _cv_coords(op, m, gx, gy, ax, ay)
    taps = (_bilinear_taps if op.imode == "linear" else _nearest_taps)(
        ax, ay, h, w, op.bmode, op.border_val)
    return xc.reshape(n, c, h * w), b, taps, (gx, gy, d, ax, ay)


def _warp_forward(op, x, mat, mat_idx=None):
    xf, b, t, _ = _warp_setup(op, x, mat, mat_idx)
    y = _gather(xf, b, t).reshape((len(b), xf.shape[1]) + op.out_shape)
    return (_out(_from_nchw(op, y), x),)


def _warp_backward(op, index, x, mat, mat_idx, g):
    xf, b, t, (gx, gy, d, ax, ay) = _warp_setup(op, x, mat, mat_idx)
    oh, ow = op.out_shape
    gc = _nchw(op, g).astype(np.float64).reshape(len(b), xf.shape[1], oh * ow)
    if index == 0:
        xc_shape = _nchw(op, x).shape
        dx = _scatter(xf.shape, b, t, gc).reshape(xc_shape)
        return _out(_from_nchw(op, dx), g)
    cx, cy = _coord_grads(xf, b, t, gc)
    cx, cy = cx / d, cy / d
    rows = [np.stack([(cx * gx).sum(1), (cx * gy).sum(1), cx.sum(1)], 1),
            np.stack([(cy * gx).sum(1), (cy * gy).sum(1), cy.sum(1)], 1)]
    if isinstance(op, WarpPerspective):
        cd = -(cx * ax + cy * ay)
        rows.append(np.stack([(cd * gx).sum(1), (cd * gy).sum(1), cd.sum(1)], 1))
    return _out(np.stack(rows, 1), mat)


@def_kernel(WarpPerspective)
def _cpu_warp_perspective(op, x, mat, mat_idx=None):
    return _warp_forward(op, x, mat, mat_idx)


@def_kernel(WarpAffine)
def _cpu_warp_affine(op, x, mat):
    return _warp_forward(op, x, mat)


# -- remap -----------------------------------------------------------------------------------------

def _remap_setup(op, x, map_xy):
    xc = _nchw(op, x).astype(np.float64)
    n, c, h, w = xc.shape
    mp = map_xy.astype(np.float64).reshape(n, map_xy.shape[1] * map_xy.shape[2], 2)
    make = {"linear": _bilinear_taps, "nearest": _nearest_taps}.get(op.imode)
    if make is None:
        raise NotImplementedError(f"Remap: interpolation mode {op.imode!r} is not implemented "
                                  "in mge (linear and nearest are)")
    t = make(mp[..., 0], mp[..., 1], h, w, op.border_type, op.scalar)
    return xc.reshape(n, c, h * w), np.arange(n), t


@def_kernel(Remap)
def _cpu_remap(op, x, map_xy):
    xf, b, t = _remap_setup(op, x, map_xy)
    y = _gather(xf, b, t).reshape(xf.shape[:2] + tuple(map_xy.shape[1:3]))
    return (_out(_from_nchw(op, y), x),)


def _remap_backward(op, index, x, map_xy, g):
    xf, b, t = _remap_setup(op, x, map_xy)
    p = map_xy.shape[1] * map_xy.shape[2]
    gc = _nchw(op, g).astype(np.float64).reshape(xf.shape[0], xf.shape[1], p)
    if index == 0:
        dx = _scatter(xf.shape, b, t, gc).reshape(_nchw(op, x).shape)
        return _out(_from_nchw(op, dx), g)
    cx, cy = _coord_grads(xf, b, t, gc)
    return _out(np.stack([cx, cy], -1).reshape(map_xy.shape), map_xy)


# -- RoI align / pooling ---------------------------------------------------------------------------

def _roi_align_setup(op, x, rois):
    n, c, h, w = x.shape
    r = rois.astype(np.float64)
    b = r[:, 0].astype(np.int64)
    sw, sh = r[:, 1] * op.spatial_scale - op.offset, r[:, 2] * op.spatial_scale - op.offset
    ew, eh = r[:, 3] * op.spatial_scale - op.offset, r[:, 4] * op.spatial_scale - op.offset
    ph, pw, sph, spw = op.pooled_height, op.pooled_width, op.sample_height, op.sample_width
    bh = np.maximum(eh - sh, 0.0) / ph
    bw = np.maximum(ew - sw, 0.0) / pw
    fh = (np.arange(ph)[:, None] + (np.arange(sph)[None, :] + 0.5) / sph)  # (ph, sph)
    fw = (np.arange(pw)[:, None] + (np.arange(spw)[None, :] + 0.5) / spw)  # (pw, spw)
    # coordinates (K, ph, pw, sph, spw) flattened to (K, S * P), sample-major
    hc = sh[:, None, None] + bh[:, None, None] * fh[None]
    wc = sw[:, None, None] + bw[:, None, None] * fw[None]
    hc = np.broadcast_to(hc[:, :, None, :, None], (len(b), ph, pw, sph, spw))
    wc = np.broadcast_to(wc[:, None, :, None, :], (len(b), ph, pw, sph, spw))
    hc = hc.transpose(0, 3, 4, 1, 2).reshape(len(b), sph * spw * ph * pw)
    wc = wc.transpose(0, 3, 4, 1, 2).reshape(len(b), sph * spw * ph * pw)
    t = _bilinear_taps(wc, hc, h, w, "constant", 0.0)
    xf = x.astype(np.float64).reshape(n, c, h * w)
    return xf, b, t, sph * spw, ph * pw


def _roi_samples(xf, b, t, s, p):
    """``(K, C, S, P)`` values of every sample point."""
    v = np.einsum("nckq,nkq->ncq", _values(xf, b, t), t.w)
    return v.reshape(v.shape[0], v.shape[1], s, p)


@def_kernel(ROIAlign)
def _cpu_roi_align(op, x, rois):
    xf, b, t, s, p = _roi_align_setup(op, x, rois)
    v = _roi_samples(xf, b, t, s, p)
    shape = (len(b), x.shape[1], op.pooled_height, op.pooled_width)
    if op.mode == "max":
        idx = v.argmax(2)
        y = np.take_along_axis(v, idx[:, :, None], 2)[:, :, 0]
    else:
        idx = np.full(v.shape[:1] + v.shape[1:2] + v.shape[3:], -1)
        y = v.mean(2)
    return _out(y.reshape(shape), x), idx.reshape(shape).astype(np.int32)


def _roi_align_backward(op, x, rois, g):
    xf, b, t, s, p = _roi_align_setup(op, x, rois)
    gc = g.astype(np.float64).reshape(len(b), x.shape[1], p)
    if op.mode == "max":
        v = _roi_samples(xf, b, t, s, p)
        sel = v.argmax(2)[:, :, None, :] == np.arange(s)[None, None, :, None]
        gs = (gc[:, :, None, :] * sel).reshape(len(b), x.shape[1], s * p)
    else:
        gs = np.repeat(gc[:, :, None, :] / s, s, axis=2).reshape(len(b), x.shape[1], s * p)
    return _out(_scatter(xf.shape, b, t, gs).reshape(x.shape), g)


def _roi_pool_masks(op, x, rois):
    n, c, h, w = x.shape
    r = rois.astype(np.float64)
    b = r[:, 0].astype(np.int64)
    # C's round(): half away from zero
    rnd = lambda a: (np.sign(a) * np.floor(np.abs(a) + 0.5)).astype(np.int64)  # noqa: E731
    s = rnd(r[:, 1:] * np.float32(op.scale))
    sw, sh, ew, eh = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
    rw, rh = np.maximum(ew - sw + 1, 1), np.maximum(eh - sh + 1, 1)
    ph, pw = op.out_shape

    def axis_mask(start, length, pooled, size):
        bins = length.astype(np.float32) / np.float32(pooled)
        k = np.arange(pooled, dtype=np.float32)
        lo = np.floor(k[None] * bins[:, None]).astype(np.int64) + start[:, None]
        hi = np.ceil((k[None] + 1) * bins[:, None]).astype(np.int64) + start[:, None]
        lo, hi = np.clip(lo, 0, size), np.clip(hi, 0, size)
        pos = np.arange(size)
        return (pos[None, None] >= lo[..., None]) & (pos[None, None] < hi[..., None])

    mh = axis_mask(sh, rh, ph, h)  # (K, ph, H)
    mw = axis_mask(sw, rw, pw, w)  # (K, pw, W)
    mask = mh[:, :, None, :, None] & mw[:, None, :, None, :]  # (K, ph, pw, H, W)
    return b, mask


@def_kernel(ROIPooling)
def _cpu_roi_pooling(op, x, rois):
    b, mask = _roi_pool_masks(op, x, rois)
    k, ph, pw, h, w = mask.shape
    xb = x[b].astype(np.float64)[:, :, None, None]  # (K, C, 1, 1, H, W)
    m = mask[:, None]
    cnt = mask.reshape(k, 1, ph, pw, h * w).sum(-1)
    if op.mode == "max":
        vals = np.where(m, xb, -np.inf).reshape(k, x.shape[1], ph, pw, h * w)
        idx = vals.argmax(-1)
        y = np.take_along_axis(vals, idx[..., None], -1)[..., 0]
        y = np.where(cnt > 0, y, 0.0)
        idx = np.where(cnt > 0, idx, -1)
    else:
        y = np.where(m, xb, 0.0).reshape(k, x.shape[1], ph, pw, h * w).sum(-1)
        y = np.where(cnt > 0, y / np.maximum(cnt, 1), 0.0)
        idx = np.zeros(y.shape, np.int64)
    return _out(y, x), idx.astype(np.int32)


def _roi_pooling_backward(op, x, rois, g):
    b, mask = _roi_pool_masks(op, x, rois)
    k, ph, pw, h, w = mask.shape
    gc = g.astype(np.float64)
    cnt = mask.reshape(k, 1, ph, pw, h * w).sum(-1)
    if op.mode == "max":
        _, idx = _cpu_roi_pooling(op, x, rois)
        sel = (idx[..., None] == np.arange(h * w)) & (cnt[..., None] > 0)
        contrib = np.einsum("kcpq,kcpqs->kcs", gc, sel).reshape(k, x.shape[1], h, w)
    else:
        wgt = mask.reshape(k, 1, ph, pw, h * w) / np.maximum(cnt, 1)[..., None]
        contrib = np.einsum("kcpq,kcpqs->kcs", gc, np.broadcast_to(
            wgt, (k, x.shape[1], ph, pw, h * w))).reshape(k, x.shape[1], h, w)
    dx = np.zeros(x.shape)
    np.add.at(dx, b, contrib)
    return _out(dx, g)


# -- NMS -------------------------------------------------------------------------------------------

@def_kernel(NMSKeep)
def _cpu_nms(op, boxes):
    nb, n, _ = boxes.shape
    idx_out = np.zeros((nb, op.max_output), np.int32)
    cnt_out = np.zeros((nb,), np.int32)
    for i in range(nb):
        bx = boxes[i].astype(np.float32)
        area = (bx[:, 2] - bx[:, 0]) * (bx[:, 3] - bx[:, 1])
        alive = np.ones(n, bool)
        kept = []
        for j in range(n):  # boxes are sorted by score
            if not alive[j]:
                continue
            kept.append(j)
            if len(kept) == op.max_output:
                break
            xx1 = np.maximum(bx[j, 0], bx[:, 0])
            yy1 = np.maximum(bx[j, 1], bx[:, 1])
            xx2 = np.minimum(bx[j, 2], bx[:, 2])
            yy2 = np.minimum(bx[j, 3], bx[:, 3])
            inter = np.maximum(xx2 - xx1, 0) * np.maximum(yy2 - yy1, 0)
            iou = inter / (area[j] + area - inter)
            alive &= ~(iou > op.iou_thresh)
        idx_out[i, :len(kept)] = kept
        cnt_out[i] = len(kept)
    return idx_out, cnt_out


# -- colour conversion -----------------------------------------------------------------------------

def _descale(v, n=14):
    return (v + (1 << (n - 1))) >> n


def _u8(v):
    return np.clip(v, 0, 255).astype(np.uint8)


def _cvt_u8(m, x):
    v = x.astype(np.int64)
    if m in ("RGB2GRAY", "RGBA2GRAY"):
        return _u8(_descale(v[..., 0:1] * 4899 + v[..., 1:2] * 9617 + v[..., 2:3] * 1868))
    if m == "BGR2GRAY":
        return _u8(_descale(v[..., 2:3] * 4899 + v[..., 1:2] * 9617 + v[..., 0:1] * 1868))
    if m == "RGB2YUV":  # MegEngine's coefficients, in its channel order
        y = _descale(v[..., 0] * 1868 + v[..., 1] * 9617 + v[..., 2] * 4899)
        cr = _descale((v[..., 0] - y) * 8061 + (128 << 14))
        cb = _descale((v[..., 2] - y) * 14369 + (128 << 14))
        return _u8(np.stack([y, cr, cb], -1))
    if m == "YUV2RGB":
        y, cr, cb = v[..., 0], v[..., 1] - 128, v[..., 2] - 128
        r = y + _descale(cr * 33292)
        g = y + _descale(cb * -9519 + cr * -6472)
        b = y + _descale(cb * 18678)
        return _u8(np.stack([r, g, b], -1))
    raise NotImplementedError(f"cvt_color: mode {m!r} is not implemented in mge for uint8")


def _cvt_f32(m, x):
    v = x.astype(np.float32)
    if m in ("RGB2GRAY", "RGBA2GRAY"):
        return v[..., 0:1] * np.float32(0.299) + v[..., 1:2] * np.float32(0.587) + \
            v[..., 2:3] * np.float32(0.114)
    if m == "BGR2GRAY":
        return v[..., 2:3] * np.float32(0.299) + v[..., 1:2] * np.float32(0.587) + \
            v[..., 0:1] * np.float32(0.114)
    f = np.float32
    if m == "RGB2YUV":
        y = v[..., 0] * f(0.114) + v[..., 1] * f(0.587) + v[..., 2] * f(0.299)
        return np.stack([y, (v[..., 0] - y) * f(0.492) + f(0.5),
                         (v[..., 2] - y) * f(0.877) + f(0.5)], -1)
    if m == "YUV2RGB":
        y, cr, cb = v[..., 0], v[..., 1] - f(0.5), v[..., 2] - f(0.5)
        return np.stack([y + cr * f(2.032), y + cb * f(-0.581) + cr * f(-0.395),
                         y + cb * f(1.140)], -1)
    raise NotImplementedError(f"cvt_color: mode {m!r} is not implemented in mge for float32")


@def_kernel(CvtColor)
def _cpu_cvt_color(op, x):
    m = op.mode
    if m in ("RGB2BGR", "BGR2RGB"):
        return (np.ascontiguousarray(x[..., ::-1]),)
    if m == "RGBA2RGB":
        return (np.ascontiguousarray(x[..., :3]),)
    if m == "RGBA2BGR":
        return (np.ascontiguousarray(x[..., 2::-1]),)
    if m in ("GRAY2RGB", "GRAY2BGR"):
        return (np.ascontiguousarray(np.repeat(x, 3, axis=-1)),)
    if x.dtype == np.uint8:
        return (_cvt_u8(m, x),)
    if x.dtype.kind != "f":
        raise TypeError(f"cvt_color: {m} takes float32 or uint8 images, got {x.dtype}")
    return (_out(_cvt_f32(m, x), x),)


# -- correlation -----------------------------------------------------------------------------------

def _corr_terms(op, a, b):
    """Yield ``(channel_index, dy, dx, patch1, patch2)`` windows for every displacement."""
    n, c, h, w = a.shape
    oh, ow, border, rad, gw = op.geometry(h, w)
    p = op.pad_size
    ap = np.pad(a, ((0, 0), (0, 0), (p, p), (p, p)))
    bp = np.pad(b, ((0, 0), (0, 0), (p, p), (p, p)))
    return ap, bp, oh, ow, border, rad, gw


def _corr_windows(op, oh, ow, border, rad, gw):
    kr = (op.kernel_size - 1) // 2
    s1, s2 = op.stride1, op.stride2
    for ti in range(gw):
        for tj in range(gw):
            dyy, dxx = (ti - rad) * s2, (tj - rad) * s2
            for ky in range(-kr, kr + 1):
                for kx in range(-kr, kr + 1):
                    r1 = slice(border + ky, border + ky + (oh - 1) * s1 + 1, s1)
                    c1 = slice(border + kx, border + kx + (ow - 1) * s1 + 1, s1)
                    r2 = slice(border + ky + dyy, border + ky + dyy + (oh - 1) * s1 + 1, s1)
                    c2 = slice(border + kx + dxx, border + kx + dxx + (ow - 1) * s1 + 1, s1)
                    yield ti * gw + tj, (r1, c1), (r2, c2)


@def_kernel(Correlation)
def _cpu_correlation(op, a, b):
    ap, bp, oh, ow, border, rad, gw = _corr_terms(op, a.astype(np.float64), b.astype(np.float64))
    n, c = a.shape[:2]
    y = np.zeros((n, gw * gw, oh, ow))
    for k, (r1, c1), (r2, c2) in _corr_windows(op, oh, ow, border, rad, gw):
        p1, p2 = ap[:, :, r1, c1], bp[:, :, r2, c2]
        y[:, k] += (p1 * p2).sum(1) if op.is_multiply else np.abs(p1 - p2).sum(1)
    y /= op.kernel_size * op.kernel_size * c
    return (_out(y, a),)


def _correlation_backward(op, index, a, b, g):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ap, bp, oh, ow, border, rad, gw = _corr_terms(op, a64, b64)
    n, c, h, w = a.shape
    gc = g.astype(np.float64) / (op.kernel_size * op.kernel_size * c)
    d = np.zeros(ap.shape)
    for k, (r1, c1), (r2, c2) in _corr_windows(op, oh, ow, border, rad, gw):
        p1, p2 = ap[:, :, r1, c1], bp[:, :, r2, c2]
        gk = gc[:, k][:, None]
        if op.is_multiply:
            contrib = gk * (p2 if index == 0 else p1)
        else:
            contrib = gk * np.sign(p1 - p2) * (1 if index == 0 else -1)
        if index == 0:
            d[:, :, r1, c1] += contrib
        else:
            d[:, :, r2, c2] += contrib
    p = op.pad_size
    return _out(d[:, :, p:p + h, p:p + w], g)


# -- backward --------------------------------------------------------------------------------------

@def_kernel(VisionBackward)
def _cpu_vision_backward(op, *args):
    f, i = op.forward, op.index
    *inputs, g = args
    if isinstance(f, Resize):
        return (_resize_backward(f, inputs[0], g),)
    if isinstance(f, Resize3D):
        return (_resize3d_backward(f, inputs[0], g),)
    if isinstance(f, (WarpPerspective, WarpAffine)):
        mat_idx = inputs[2] if len(inputs) == 3 else None
        return (_warp_backward(f, i, inputs[0], inputs[1], mat_idx, g),)
    if isinstance(f, Remap):
        return (_remap_backward(f, i, inputs[0], inputs[1], g),)
    if isinstance(f, ROIAlign):
        return (_roi_align_backward(f, inputs[0], inputs[1], g),)
    if isinstance(f, ROIPooling):
        return (_roi_pooling_backward(f, inputs[0], inputs[1], g),)
    if isinstance(f, Correlation):
        return (_correlation_backward(f, i, inputs[0], inputs[1], g),)
    raise NotImplementedError(f"VisionBackward: no gradient of {f.name}")
