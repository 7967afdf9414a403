"""Sliding windows, the locally connected, region-restricted and deformable convolutions and the
deformable PS-ROI pooling (re-exported by :mod:`mge.functional.nn`).

``sliding_window``/``sliding_window_transpose`` are ops of their own (``SlidingWindow``, MegEngine's
``Images2Neibs``, and ``SlidingWindowTranspose``).  The others are compositions of differentiable
ops: windows gathered by ``SlidingWindow`` (or, for the deformable ones, bilinear samples gathered
by ``Gather`` at floor/ceil corners with weights that are differentiable in the sample position),
then one batched matrix product.  Their gradients are therefore those of the ops they are made of,
to any order: ``local_conv2d`` and ``region_restricted_conv`` with respect to input and weight,
``deformable_conv2d`` with respect to input, weight, offset and mask, and
``deformable_psroi_pooling`` with respect to input and trans.  The integer sample corners are
constants of the gradient (as in MegEngine's kernels).
"""
import numpy as np

from .._core.ops import Gather, Pad, Reshape, Dimshuffle, TypeCvt
from .._core.ops.nn_extra import SlidingWindow, SlidingWindowTranspose
from ..core import apply
from ..tensor import Tensor
from .utils import _tensor_like

__all__ = ["sliding_window", "sliding_window_transpose", "local_conv2d", "region_restricted_conv",
           "deformable_conv2d", "deformable_psroi_pooling"]


def _pair(name, v):
    if isinstance(v, Tensor):
        v = v.numpy().tolist()
    if isinstance(v, (int, np.integer)):
        return (int(v), int(v))
    v = tuple(int(i) for i in v)
    if len(v) != 2:
        raise ValueError(f"{name}: expected an int or a pair of ints, got {v}")
    return v


def _check_mode(name, conv_mode):
    mode = getattr(conv_mode, "name", conv_mode)
    assert str(mode).lower() == "cross_correlation", \
        f"{name}: only conv_mode='cross_correlation' is supported, got {conv_mode!r}"


def _reshape(x, shape):
    return apply(Reshape(tuple(int(s) for s in shape)), x)[0]


def _perm(x, pattern):
    return apply(Dimshuffle(tuple(pattern)), x)[0]


def _cast(x, dtype):
    if x.dtype == np.dtype(dtype):
        return x
    return apply(TypeCvt(np.dtype(dtype)), x)[0]


def _as_tensor(x, dtype=None):
    if _tensor_like(x):
        return x
    return Tensor(np.asarray(x), dtype=dtype)


def _bias(out, bias):
    if bias is None:
        return out
    if bias.ndim == 1:
        bias = _reshape(bias, (1, bias.shape[0], 1, 1))
    return out + bias


def sliding_window(inp, kernel_size, padding=0, stride=1, dilation=1):
    """Extract sliding local blocks of a batched ``(N, C, H, W)`` input (MegEngine's
    ``Images2Neibs``).

    ``sliding_window(inp, kernel_size, padding=0, stride=1, dilation=1)`` returns
    ``(N, C, OH, OW, window_h, window_w)`` with
    ``out[n, c, oh, ow, i, j] = inp[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]`` (zero outside the
    input) and ``OH = (H + 2*ph - dh*(window_h - 1) - 1) // sh + 1``.  Differentiable (the gradient
    is :func:`sliding_window_transpose`).
    """
    op = SlidingWindow(_pair("sliding_window", kernel_size), _pair("sliding_window", padding),
                       _pair("sliding_window", stride), _pair("sliding_window", dilation))
    return apply(op, inp)[0]


def sliding_window_transpose(inp, output_size, kernel_size, padding=0, stride=1, dilation=1):
    """Sum every window element of ``(N, C, IH, IW, window_h, window_w)`` back onto its location
    in an ``(N, C, *output_size)`` image: the transpose (and the gradient) of
    :func:`sliding_window`.

    ``sliding_window_transpose(inp, output_size, kernel_size, padding=0, stride=1, dilation=1)``;
    ``IH``/``IW`` must be the number of windows that ``output_size`` gives.
    """
    name = "sliding_window_transpose"
    (oh, ow), (ph, pw) = _pair(name, output_size), _pair(name, padding)
    (sh, sw), (dh, dw) = _pair(name, stride), _pair(name, dilation)
    kh, kw = _pair(name, kernel_size)
    expected_h = (oh + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    expected_w = (ow + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    assert inp.ndim == 6, "the input dimension of sliding_window_transpose should be 6"
    assert inp.shape[2] == expected_h and inp.shape[3] == expected_w, \
        "the input shape and output size do not match"
    op = SlidingWindowTranspose((oh, ow), (kh, kw), (ph, pw), (sh, sw), (dh, dw))
    return apply(op, inp)[0]


def _grouped_product(cols, weight, g):
    """``(N, C, OH, OW, K...)`` windows times a ``(G, O/G, C/G, K...)`` weight:
    ``(N, O, OH, OW)``."""
    n, c, oh, ow = (int(s) for s in cols.shape[:4])
    k = int(np.prod(cols.shape[4:]))
    cg = c // g
    og = int(weight.shape[1])
    # (G, N*OH*OW, Cg*K) @ (G, Cg*K, Og) -> (G, N*OH*OW, Og)
    a = _reshape(_perm(_reshape(cols, (n, g, cg, oh, ow, k)), (1, 0, 3, 4, 2, 5)),
                 (g, n * oh * ow, cg * k))
    b = _perm(_reshape(weight, (g, og, cg * k)), (0, 2, 1))
    from .math import matmul
    y = matmul(a, b)
    return _reshape(_perm(_reshape(y, (g, n, oh, ow, og)), (1, 0, 4, 2, 3)), (n, g * og, oh, ow))


def local_conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1,
                 conv_mode="cross_correlation"):
    """Locally connected 2D convolution: every output position has its own kernel (untied
    weights).

    ``local_conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1,
    conv_mode='cross_correlation')``.  ``inp`` is ``(N, IC, IH, IW)``; ``weight`` is
    ``(OH, OW, IC, KH, KW, OC)`` or, grouped, ``(G, OH, OW, IC/G, KH, KW, OC/G)`` (MegEngine's
    ``GroupLocal`` layout); the output ``(N, OC, OH, OW)`` plus ``bias``.  Differentiable with
    respect to ``inp`` and ``weight``.
    """
    _check_mode("local_conv2d", conv_mode)
    if weight.ndim == 6:
        weight = _reshape(weight, (1,) + tuple(weight.shape))
    if inp.ndim != 4 or weight.ndim != 7:
        raise ValueError(f"local_conv2d: expected a 4-D input and a 6-D or 7-D weight, got input "
                         f"{tuple(inp.shape)} and weight {tuple(weight.shape)}")
    g, oh, ow, icg, kh, kw, ocg = (int(s) for s in weight.shape)
    n, c = int(inp.shape[0]), int(inp.shape[1])
    if c != g * icg:
        raise ValueError(f"local_conv2d: the input has {c} channels, the weight "
                         f"{tuple(weight.shape)} expects {g * icg}")
    cols = sliding_window(inp, (kh, kw), padding, stride, dilation)
    if tuple(cols.shape[2:4]) != (oh, ow):
        raise ValueError(f"local_conv2d: the input {tuple(inp.shape)} gives "
                         f"{tuple(cols.shape[2:4])} output positions, the weight has kernels "
                         f"for {(oh, ow)}")
    k = icg * kh * kw
    # (G*OH*OW, N, ICg*K) @ (G*OH*OW, ICg*K, OCg) -> (G*OH*OW, N, OCg)
    a = _reshape(_perm(_reshape(cols, (n, g, icg, oh, ow, kh * kw)), (1, 3, 4, 0, 2, 5)),
                 (g * oh * ow, n, k))
    from .math import matmul
    y = matmul(a, _reshape(weight, (g * oh * ow, k, ocg)))
    out = _reshape(_perm(_reshape(y, (g, oh, ow, n, ocg)), (3, 0, 4, 1, 2)), (n, g * ocg, oh, ow))
    return _bias(out, bias)


def region_restricted_conv(inp, weight, rin, rout, bias=None, stride=1, padding=0, dilation=1,
                           groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """Region-restricted 2D convolution: an input position contributes to an output position only
    where the two lie in the same region (``rin[n, ih, iw] == rout[n, oh, ow]``).

    ``region_restricted_conv(inp, weight, rin, rout, bias=None, stride=1, padding=0, dilation=1,
    groups=1, conv_mode='cross_correlation', compute_mode='default')``.  ``inp`` is
    ``(N, C, H, W)``, ``weight`` ``(groups, O/groups, C/groups, KH, KW)``, ``rin`` ``(N, H, W)``
    and ``rout`` ``(N, OH, OW)`` integer region ids (int32 or uint8).  Differentiable with respect
    to ``inp`` and ``weight``.
    """
    _check_mode("region_restricted_conv", conv_mode)
    assert groups > 0, ("RegionRestrictedConv expected grouped conv mode, which requires "
                        f"groups > 0, but got groups={groups}")
    if weight.ndim == 4 and groups == 1:
        weight = _reshape(weight, (1,) + tuple(weight.shape))
    if inp.ndim != 4 or weight.ndim != 5 or int(weight.shape[0]) != groups:
        raise ValueError(f"region_restricted_conv: expected a 4-D input and a 5-D weight "
                         f"(groups={groups}, O/G, C/G, KH, KW), got input {tuple(inp.shape)} and "
                         f"weight {tuple(weight.shape)}")
    rin, rout = _as_tensor(rin), _as_tensor(rout)
    for name, r in (("rin", rin), ("rout", rout)):
        if r.dtype.kind not in "iu":
            raise TypeError(f"region_restricted_conv: {name} must be int32 or uint8, got {r.dtype}")
    if int(inp.shape[1]) != groups * int(weight.shape[2]):
        raise ValueError(f"region_restricted_conv: the input has {inp.shape[1]} channels, the "
                         f"weight {tuple(weight.shape)} expects {groups * int(weight.shape[2])}")
    k = tuple(int(s) for s in weight.shape[3:])
    n, _, h, w = (int(s) for s in inp.shape)
    if tuple(rin.shape) != (n, h, w):
        raise ValueError(f"region_restricted_conv: rin must be (N, H, W) = {(n, h, w)}, got "
                         f"{tuple(rin.shape)}")
    cols = sliding_window(inp, k, padding, stride, dilation)
    oh, ow = (int(s) for s in cols.shape[2:4])
    if tuple(rout.shape) != (n, oh, ow):
        raise ValueError(f"region_restricted_conv: rout must be (N, OH, OW) = {(n, oh, ow)}, got "
                         f"{tuple(rout.shape)}")
    rcols = sliding_window(_reshape(_cast(rin, np.int32), (n, 1, h, w)), k, padding, stride,
                           dilation)
    same = rcols == _reshape(_cast(rout, np.int32), (n, 1, oh, ow, 1, 1))
    cols = cols * _cast(same, inp.dtype)
    return _bias(_grouped_product(cols, weight, groups), bias)


def _pad1(x):
    """``x`` (..., H, W) with a one-element zero border on both spatial sides."""
    widths = ((0, 0),) * (x.ndim - 2) + ((1, 1), (1, 1))
    return apply(Pad(widths, "constant", 0.0), x)[0]


def _detached(x):
    return x.detach()


def deformable_conv2d(inp, weight, offset, mask, bias=None, stride=1, padding=0, dilation=1,
                      groups=1, conv_mode="cross_correlation", compute_mode="default"):
    """Deformable (modulated, DCNv2) 2D convolution.

    ``deformable_conv2d(inp, weight, offset, mask, bias=None, stride=1, padding=0, dilation=1,
    groups=1, conv_mode='cross_correlation', compute_mode='default')``.

    Args:
        inp: ``(N, C, H, W)``.
        weight: ``(O, C, KH, KW)``; with ``groups > 1``, ``(groups, O/groups, C/groups, KH, KW)``.
        offset: ``(N, 2*DG*KH*KW, OH, OW)``: for deformable group ``d`` and kernel tap ``k``,
            channels ``(d*KH*KW + k)*2`` and ``+1`` are the (h, w) offsets of the tap's sample.
        mask: ``(N, DG*KH*KW, OH, OW)``: the modulation of each sample.
        bias: added to the output (``(1, O, 1, 1)`` or ``(O,)``).

    Each tap samples ``inp`` bilinearly at ``(oh*sh - ph + kh*dh + offset_h, ...)``; samples with
    ``h <= -1``, ``h >= H`` (or the same for ``w``) are zero, and so are the corners outside the
    input.  Differentiable with respect to ``inp``, ``weight``, ``offset`` and ``mask``.
    """
    _check_mode("deformable_conv2d", conv_mode)
    name = "deformable_conv2d"
    (sh, sw), (ph, pw), (dh, dw) = _pair(name, stride), _pair(name, padding), _pair(name, dilation)
    if weight.ndim == 4 and groups == 1:
        weight = _reshape(weight, (1,) + tuple(weight.shape))
    if inp.ndim != 4 or weight.ndim != 5 or int(weight.shape[0]) != groups:
        raise ValueError(f"{name}: expected a 4-D input and a weight (O, C, KH, KW) or "
                         f"(groups={groups}, O/G, C/G, KH, KW), got input {tuple(inp.shape)} and "
                         f"weight {tuple(weight.shape)}")
    offset = _cast(offset, inp.dtype)
    mask = _cast(mask, inp.dtype)
    n, c, h, w = (int(s) for s in inp.shape)
    kh, kw = (int(s) for s in weight.shape[3:])
    kk = kh * kw
    if c != groups * int(weight.shape[2]):
        raise ValueError(f"{name}: the input has {c} channels, the weight {tuple(weight.shape)} "
                         f"expects {groups * int(weight.shape[2])}")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if offset.ndim != 4 or int(offset.shape[1]) % (2 * kk) or \
            tuple(offset.shape[2:]) != (oh, ow) or int(offset.shape[0]) != n:
        raise ValueError(f"{name}: offset must be (N, 2*deformable_groups*{kk}, {oh}, {ow}), got "
                         f"{tuple(offset.shape)}")
    dg = int(offset.shape[1]) // (2 * kk)
    if c % dg or tuple(mask.shape) != (n, dg * kk, oh, ow):
        raise ValueError(f"{name}: mask must be {(n, dg * kk, oh, ow)} and the {c} channels "
                         f"divisible by {dg} deformable groups, got mask {tuple(mask.shape)}")
    p = oh * ow
    taps_h = np.repeat(np.arange(kh) * dh, kw)
    taps_w = np.tile(np.arange(kw) * dw, kh)
    base_h = (taps_h[:, None, None] + (np.arange(oh) * sh - ph)[None, :, None]
              + np.zeros((1, 1, ow))).astype(inp.dtype)
    base_w = (taps_w[:, None, None] + (np.arange(ow) * sw - pw)[None, None, :]
              + np.zeros((1, oh, 1))).astype(inp.dtype)
    off = _reshape(offset, (n, dg, kk, 2, oh, ow))
    py = off[:, :, :, 0] + Tensor(base_h, dtype=inp.dtype)            # (N, DG, K, OH, OW)
    px = off[:, :, :, 1] + Tensor(base_w, dtype=inp.dtype)
    # Corners, as indices into the input with a one-element zero border: every corner outside
    # the input lands on the border (clipped there), so it reads zero.
    # (ops only, no host read: the function traces and dumps with the offsets as inputs)
    from .elemwise import clip, floor
    from .tensor import broadcast_to, stack
    y0, x0 = floor(py.detach()), floor(px.detach())
    ly = py - y0
    lx = px - x0
    hy, hx = 1 - ly, 1 - lx
    wp = w + 2
    # (clipped while float: a wild offset cannot overflow the integer index)
    yi = [_cast(clip(y0 + (1 + d), 0, h + 1), np.int32) for d in (0, 1)]
    xi = [_cast(clip(x0 + (1 + d), 0, w + 1), np.int32) for d in (0, 1)]
    flat = stack([yi[a] * wp + xi[b] for a in (0, 1) for b in (0, 1)], axis=2)
    weights = [hy * hx, hy * lx, ly * hx, ly * lx]                      # same order as flat
    cdg = c // dg
    index = broadcast_to(_reshape(flat, (n, dg, 1, 4 * kk * p)), (n, dg, cdg, 4 * kk * p))
    src = _reshape(_pad1(inp), (n, dg, cdg, (h + 2) * wp))
    vals = apply(Gather(3), src, index)[0]
    vals = _reshape(vals, (n, dg, cdg, 4, kk, p))
    wts = _reshape(stack(weights, axis=2), (n, dg, 1, 4, kk, p))
    sampled = (vals * wts).sum(axis=3)                                  # (N, DG, Cdg, K, P)
    sampled = sampled * _reshape(mask, (n, dg, 1, kk, p))
    cols = _reshape(_perm(_reshape(sampled, (n, c, kk, oh, ow)), (0, 1, 3, 4, 2)),
                    (n, c, oh, ow, kk))
    return _bias(_grouped_product(cols, weight, groups), bias)


def deformable_psroi_pooling(inp, rois, trans, no_trans, part_size, pooled_h, pooled_w,
                             sample_per_part, spatial_scale, trans_std=0.1):
    """Deformable PS-ROI (position-sensitive region of interest) pooling.

    ``deformable_psroi_pooling(inp, rois, trans, no_trans, part_size, pooled_h, pooled_w,
    sample_per_part, spatial_scale, trans_std=0.1)``.

    Args:
        inp: ``(B, C, H, W)`` feature map.
        rois: ``(R, 5)`` boxes ``(batch_index, x0, y0, x1, y1)`` in image coordinates.
        trans: ``(R, 2*num_classes, part_size, part_size)`` offsets of the parts (x then y per
            class), scaled by ``trans_std`` and the box size; unused when ``no_trans``.
        no_trans: the first phase (no offsets) when True.
        part_size, pooled_h, pooled_w, sample_per_part, spatial_scale: as in MegEngine.

    Returns:
        ``(R, C, pooled_h, pooled_w)``: each bin the mean of its ``sample_per_part**2`` bilinear
        samples that fall inside the map (zero if none).  Differentiable with respect to ``inp``
        and ``trans`` (the box coordinates are constants, as in MegEngine).
    """
    name = "deformable_psroi_pooling"
    if inp.ndim != 4 or rois.ndim != 2 or int(rois.shape[1]) != 5 or trans.ndim != 4:
        raise ValueError(f"{name}: expected inp (B, C, H, W), rois (R, 5) and trans "
                         f"(R, 2*classes, part, part), got {tuple(inp.shape)}, "
                         f"{tuple(rois.shape)}, {tuple(trans.shape)}")
    _, c, h, w = (int(s) for s in inp.shape)
    r = int(rois.shape[0])
    ph_, pw_ = int(pooled_h), int(pooled_w)
    if not no_trans:
        assert int(trans.shape[1]) == 2 and tuple(trans.shape[2:]) == (ph_, pw_), \
            (f"{name}: invalid trans shape {tuple(trans.shape)}: expected (R, 2, {ph_}, {pw_})")
    ncls = 1 if no_trans else int(trans.shape[1]) // 2
    icpc = c // ncls
    spp, part = int(sample_per_part), int(part_size)
    f32 = np.float32
    dt = inp.dtype
    # Every value derived from rois and trans is an op (no host read): the function traces and
    # dumps with rois as an input.  The box coordinates get no gradient, as in MegEngine.
    from .elemwise import abs as _abs, ceil, clip, floor, maximum
    from .math import sign
    from .tensor import broadcast_to, stack
    box = _cast(_as_tensor(rois), f32).detach()
    bidx = _cast(box[:, 0], np.int32)

    def c_round(x):  # C's round: halves away from zero
        return sign(x) * floor(_abs(x) + 0.5)

    scale = float(f32(spatial_scale))
    wl = c_round(box[:, 1]) * scale - 0.5
    hl = c_round(box[:, 2]) * scale - 0.5
    wr = (c_round(box[:, 3]) + 1.0) * scale - 0.5
    hr = (c_round(box[:, 4]) + 1.0) * scale - 0.5
    roi_w = maximum(wr - wl, 0.1)
    roi_h = maximum(hr - hl, 0.1)
    bin_w, bin_h = roi_w / float(pw_), roi_h / float(ph_)
    sub_w, sub_h = bin_w / float(spp), bin_h / float(spp)

    def col(v, dims):  # (R,) -> (R, 1, ..., 1)
        return _reshape(v, (r,) + (1,) * dims)

    # Sample positions (R, 1, PH, PW, SPP, SPP) without the offsets
    s_ = Tensor(np.arange(spp, dtype=f32))
    w0 = Tensor(np.arange(pw_, dtype=f32)).reshape(1, pw_) * col(bin_w, 1) + col(wl, 1)
    h0 = Tensor(np.arange(ph_, dtype=f32)).reshape(1, ph_) * col(bin_h, 1) + col(hl, 1)
    ws = _reshape(w0, (r, 1, 1, pw_, 1, 1)) + s_.reshape(1, 1, 1, 1, 1, spp) * col(sub_w, 5)
    hs = _reshape(h0, (r, 1, ph_, 1, 1, 1)) + s_.reshape(1, 1, 1, 1, spp, 1) * col(sub_h, 5)
    wpos = _cast(broadcast_to(ws, (r, 1, ph_, pw_, spp, spp)), dt)
    hpos = _cast(broadcast_to(hs, (r, 1, ph_, pw_, spp, spp)), dt)
    if not no_trans:
        part_h = np.floor(np.arange(ph_, dtype=f32) / f32(ph_) * f32(part)).astype(np.int64)
        part_w = np.floor(np.arange(pw_, dtype=f32) / f32(pw_) * f32(part)).astype(np.int64)
        # MegEngine reads trans as a flat buffer of (R, classes, 2, part_size, part_size)
        cell = (part_h[:, None] * part + part_w[None, :]).reshape(-1)
        idx = ((np.arange(r)[:, None, None, None] * ncls + np.arange(ncls)[None, :, None, None]) * 2
               + np.arange(2)[None, None, :, None]) * part * part + cell[None, None, None, :]
        total = int(np.prod(trans.shape))
        idx = np.clip(idx, 0, total - 1).reshape(1, -1).astype(np.int32)
        flat_t = _reshape(_cast(trans, dt), (1, total))
        t = apply(Gather(1), flat_t, Tensor(idx))[0] * float(trans_std)
        t = _reshape(t, (r, ncls, 2, ph_, pw_, 1, 1))
        wpos = wpos + t[:, :, 0] * _cast(col(roi_w, 5), dt)
        hpos = hpos + t[:, :, 1] * _cast(col(roi_h, 5), dt)
    full = (r, ncls, ph_, pw_, spp, spp)
    wv, hv = broadcast_to(wpos, full), broadcast_to(hpos, full)
    wd, hd = wv.detach(), hv.detach()
    valid = ~((wd < -0.5) | (wd > w - 0.5) | (hd < -0.5) | (hd > h - 0.5))
    count = _cast(valid, f32).sum(axis=(4, 5))                          # (R, NCLS, PH, PW)
    wc, hc = clip(wd, 0, w - 1), clip(hd, 0, h - 1)
    # The clamp is a constant shift: the gradient of a clamped sample is that of the unclamped
    # one (MegEngine's backward does not zero it).
    wpos = wv + (wc - wd)
    hpos = hv + (hc - hd)
    x0, x1 = floor(wc), ceil(wc)
    y0, y1 = floor(hc), ceil(hc)
    dx = wpos - x0
    dy = hpos - y0
    ix0, ix1, iy0, iy1 = (_cast(v, np.int32) for v in (x0, x1, y0, y1))
    flat = stack([iy0 * w + ix0, iy1 * w + ix0, iy0 * w + ix1, iy1 * w + ix1], axis=2)
    wts = stack([(1 - dx) * (1 - dy), (1 - dx) * dy, dx * (1 - dy), dx * dy], axis=2)
    m = 4 * ph_ * pw_ * spp * spp
    src = _reshape(inp[bidx], (r, ncls, icpc, h * w))
    index = broadcast_to(_reshape(flat, (r, ncls, 1, m)), (r, ncls, icpc, m))
    vals = apply(Gather(3), src, index)[0]
    vals = _reshape(vals, (r, ncls, icpc, 4, ph_, pw_, spp, spp))
    keep = _cast(valid, dt) / _cast(_reshape(maximum(count, 1.0), (r, ncls, ph_, pw_, 1, 1)), dt)
    wts = wts * _reshape(keep, (r, ncls, 1, ph_, pw_, spp, spp))
    out = (vals * _reshape(wts, (r, ncls, 1, 4, ph_, pw_, spp, spp))).sum(axis=(3, 6, 7))
    return _reshape(out, (r, c, ph_, pw_))
