"""Image ops (MegEngine's ``megengine.functional.vision``): resizing, warps, remap, RoI pooling,
NMS, colour conversion, correlation.

Output sizes that MegEngine passes as a tensor input (``Resize``'s size, ``WarpPerspective``'s
out_shape) are op parameters here: the functional layer reads them on the host, so every output
shape is known at dispatch.

Backward: ``VisionBackward(forward, index)`` is the gradient of input ``index`` of ``forward``; it
takes ``forward``'s inputs followed by the output gradient.  One class serves every op of this
family (its kernel dispatches on the forward op's type).  Its own rule raises
``NotImplementedError``: as in MegEngine 1.13, no second order through these ops.

The CPU kernels are in ``mge/_core/device/cpu/kernels/vision.py``, the backward rules in
``mge/_core/autodiff/rules/vision.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = [
    "Resize", "Resize3D", "WarpPerspective", "WarpAffine", "Remap", "ROIAlign", "ROIPooling",
    "NMSKeep", "CvtColor", "Correlation", "VisionBackward", "BORDER_MODES", "CVT_MODES",
]

BORDER_MODES = ("replicate", "reflect", "reflect_101", "wrap", "constant", "transparent",
                "isolated")
CVT_MODES = ("RGB2GRAY", "BGR2GRAY", "RGB2BGR", "BGR2RGB", "GRAY2RGB", "GRAY2BGR", "RGBA2RGB",
             "RGBA2BGR", "RGBA2GRAY", "RGB2YUV", "YUV2RGB")
_i32 = np.dtype("int32")
_f32 = np.dtype("float32")


def _lower(v, allowed, what, cls):
    m = str(v).lower()
    if m not in allowed:
        raise ValueError(f"{cls}: unknown {what} {v!r}; expected one of {allowed}")
    return m


def _imode(v, cls):
    m = str(v).lower()
    m = {"bilinear": "linear", "inter_linear": "linear", "bicubic": "cubic",
         "inter_nearest": "nearest", "inter_cubic": "cubic", "inter_area": "area"}.get(m, m)
    return _lower(m, ("linear", "nearest", "cubic", "area"), "interpolation mode", cls)


def _bmode(v, cls):
    m = str(v).lower()
    m = m[len("border_"):] if m.startswith("border_") else m
    return _lower(m, BORDER_MODES, "border mode", cls)


class Resize(OpDef):
    """Resize of ``(N, C, H, W)`` (or NHWC) to ``size = (oh, ow)``."""

    _fields = ("imode", "format", "size")
    long_running = False

    def __init__(self, imode, format, size):
        OpDef.__init__(self, _imode(imode, "Resize"), str(format).upper(),
                       tuple(int(s) for s in size))


class Resize3D(OpDef):
    """Trilinear resize of ``(N, C, D, H, W)`` to ``size = (od, oh, ow)``."""

    _fields = ("imode", "align_corners", "size")
    long_running = False

    def __init__(self, imode, align_corners, size):
        OpDef.__init__(self, _imode(imode, "Resize3D"), bool(align_corners),
                       tuple(int(s) for s in size))


class WarpPerspective(OpDef):
    """``(inp, mat[, mat_idx])`` -> the perspective warp of ``inp`` to ``out_shape``."""

    _fields = ("imode", "bmode", "format", "border_val", "out_shape")
    long_running = False

    def __init__(self, imode, bmode, format, border_val, out_shape):
        OpDef.__init__(self, _imode(imode, "WarpPerspective"), _bmode(bmode, "WarpPerspective"),
                       str(format).upper(), float(border_val), tuple(int(s) for s in out_shape))


class WarpAffine(OpDef):
    """``(inp, mat)`` -> the affine warp of ``inp`` (``mat`` is ``(N, 2, 3)``) to ``out_shape``."""

    _fields = WarpPerspective._fields
    long_running = False
    __init__ = WarpPerspective.__init__


class Remap(OpDef):
    """``(inp, map_xy)`` -> ``inp`` sampled at ``map_xy`` (``(N, OH, OW, 2)``, x then y)."""

    _fields = ("imode", "border_type", "format", "scalar")
    long_running = False

    def __init__(self, imode, border_type, format, scalar):
        OpDef.__init__(self, _imode(imode, "Remap"), _bmode(border_type, "Remap"),
                       str(format).upper(), float(scalar))


class ROIAlign(OpDef):
    """``(inp, rois)`` -> ``(out, index)``: RoI align (``index``: arg-max sample, max mode)."""

    _fields = ("mode", "spatial_scale", "offset", "pooled_height", "pooled_width",
               "sample_height", "sample_width")
    long_running = False

    def __init__(self, mode, spatial_scale, offset, ph, pw, sh, sw):
        OpDef.__init__(self, _lower(mode, ("max", "average"), "mode", "ROIAlign"),
                       float(spatial_scale), float(offset), int(ph), int(pw), int(sh), int(sw))


class ROIPooling(OpDef):
    """``(inp, rois)`` -> ``(out, index)``: RoI pooling to ``out_shape``."""

    _fields = ("mode", "scale", "out_shape")
    long_running = False

    def __init__(self, mode, scale, out_shape):
        OpDef.__init__(self, _lower(mode, ("max", "average"), "mode", "ROIPooling"),
                       float(scale), tuple(int(s) for s in out_shape))


class NMSKeep(OpDef):
    """``boxes (B, N, 4)``, sorted by score -> ``(indices (B, max_output), count (B,))``, int32."""

    _fields = ("iou_thresh", "max_output")
    long_running = False

    def __init__(self, iou_thresh, max_output):
        OpDef.__init__(self, float(iou_thresh), int(max_output))


class CvtColor(OpDef):
    """Colour conversion of NHWC images."""

    _fields = ("mode",)
    long_running = False

    def __init__(self, mode):
        m = str(mode)
        if m not in CVT_MODES:
            raise NotImplementedError(f"cvt_color: mode {m!r} is not implemented in mge "
                                      f"(implemented: {', '.join(CVT_MODES)})")
        OpDef.__init__(self, m)


class Correlation(OpDef):
    """FlowNet correlation of two NCHW tensors."""

    _fields = ("kernel_size", "max_displacement", "stride1", "stride2", "pad_size", "is_multiply")
    long_running = False

    def __init__(self, kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply):
        OpDef.__init__(self, int(kernel_size), int(max_displacement), int(stride1),
                       int(stride2), int(pad_size), bool(is_multiply))

    def geometry(self, h, w):
        """``(out_h, out_w, border, grid_radius, grid_width)`` for an ``h x w`` input."""
        kr = (self.kernel_size - 1) // 2
        border = self.max_displacement + kr
        ph, pw = h + 2 * self.pad_size, w + 2 * self.pad_size
        oh = int(np.ceil((ph - 2 * border) / self.stride1))
        ow = int(np.ceil((pw - 2 * border) / self.stride1))
        rad = self.max_displacement // self.stride2
        return oh, ow, border, rad, 2 * rad + 1


class VisionBackward(OpDef):
    """The gradient of input ``index`` of ``forward``: ``(*forward inputs, dy)`` -> it."""

    _fields = ("forward", "index")
    long_running = False


# -- shape rules -----------------------------------------------------------------------------------

def _nin(op, descs, n):
    if len(descs) not in ((n,) if isinstance(n, int) else n):
        raise op_error(TypeError, op, f"expects {n} inputs, got {len(descs)}", descs)


def _float(op, descs, i=0):
    if descs[i][1].kind != "f":
        raise op_error(TypeError, op, f"input {i} must be floating point", descs)


def _nchw(op, descs, nd=4, i=0):
    s = descs[i][0]
    if s is not None and len(s) != nd:
        raise op_error(ValueError, op, f"input must be {nd}-D, got shape {s}", descs)
    return s


@def_infer(Resize)
def _infer_resize(op, descs):
    _nin(op, descs, 1)
    s = _nchw(op, descs)
    if s is None:
        return [TensorDesc(None, descs[0][1])]
    if op.format == "NHWC":
        return [TensorDesc((s[0],) + op.size + (s[3],), descs[0][1])]
    return [TensorDesc(tuple(s[:2]) + op.size, descs[0][1])]


@def_infer(Resize3D)
def _infer_resize3d(op, descs):
    _nin(op, descs, 1)
    s = _nchw(op, descs, 5)
    return [TensorDesc(None if s is None else tuple(s[:2]) + op.size, descs[0][1])]


def _infer_warp(op, descs, rows):
    _nin(op, descs, (2, 3))
    s = _nchw(op, descs)
    m = descs[1][0]
    if m is not None and (len(m) != 3 or tuple(m[1:]) != (rows, 3)):
        raise op_error(ValueError, op, f"mat must have shape (N, {rows}, 3), got {m}", descs)
    if s is None or m is None:
        return [TensorDesc(None, descs[0][1])]
    if len(descs) == 3:
        if descs[2][0] is not None and tuple(descs[2][0]) != (m[0],):
            raise op_error(ValueError, op, "mat_idx must have shape (N_MAT,)", descs)
    elif m[0] != s[0]:
        raise op_error(ValueError, op, f"batch of mat ({m[0]}) and input ({s[0]}) differ", descs)
    n = m[0]
    if op.format == "NHWC":
        return [TensorDesc((n,) + op.out_shape + (s[3],), descs[0][1])]
    return [TensorDesc((n, s[1]) + op.out_shape, descs[0][1])]


@def_infer(WarpPerspective)
def _infer_warp_perspective(op, descs):
    return _infer_warp(op, descs, 3)


@def_infer(WarpAffine)
def _infer_warp_affine(op, descs):
    return _infer_warp(op, descs, 2)


@def_infer(Remap)
def _infer_remap(op, descs):
    _nin(op, descs, 2)
    s, m = _nchw(op, descs), descs[1][0]
    if m is not None and (len(m) != 4 or m[3] != 2):
        raise op_error(ValueError, op, f"map_xy must have shape (N, OH, OW, 2), got {m}", descs)
    if s is None or m is None:
        return [TensorDesc(None, descs[0][1])]
    if m[0] != s[0]:
        raise op_error(ValueError, op, "batch of map_xy and input differ", descs)
    if op.format == "NHWC":
        return [TensorDesc((s[0], m[1], m[2], s[3]), descs[0][1])]
    return [TensorDesc((s[0], s[1], m[1], m[2]), descs[0][1])]


def _infer_roi(op, descs, ph, pw):
    _nin(op, descs, 2)
    _float(op, descs)
    s, r = _nchw(op, descs), descs[1][0]
    if r is not None and (len(r) != 2 or r[1] != 5):
        raise op_error(ValueError, op, f"rois must have shape (K, 5), got {r}", descs)
    out = None if s is None or r is None else (r[0], s[1], ph, pw)
    return [TensorDesc(out, descs[0][1]), TensorDesc(out, _i32)]


@def_infer(ROIAlign)
def _infer_roi_align(op, descs):
    return _infer_roi(op, descs, op.pooled_height, op.pooled_width)


@def_infer(ROIPooling)
def _infer_roi_pooling(op, descs):
    return _infer_roi(op, descs, *op.out_shape)


@def_infer(NMSKeep)
def _infer_nms(op, descs):
    _nin(op, descs, 1)
    s = descs[0][0]
    if s is not None and (len(s) != 3 or s[2] != 4):
        raise op_error(ValueError, op, f"boxes must have shape (B, N, 4), got {s}", descs)
    b = None if s is None else s[0]
    return [TensorDesc(None if b is None else (b, op.max_output), _i32),
            TensorDesc(None if b is None else (b,), _i32)]


@def_infer(CvtColor)
def _infer_cvt(op, descs):
    _nin(op, descs, 1)
    s = _nchw(op, descs)
    src, dst = op.mode.split("2")
    cin = {"RGB": 3, "BGR": 3, "GRAY": 1, "RGBA": 4, "YUV": 3}
    if s is not None and s[3] != cin[src]:
        raise op_error(ValueError, op, f"{op.mode} expects {cin[src]} channels (NHWC), got {s}",
                       descs)
    return [TensorDesc(None if s is None else tuple(s[:3]) + (cin[dst],), descs[0][1])]


@def_infer(Correlation)
def _infer_correlation(op, descs):
    _nin(op, descs, 2)
    s = _nchw(op, descs)
    if s is not None and descs[1][0] is not None and tuple(descs[1][0]) != tuple(s):
        raise op_error(ValueError, op, "data1 and data2 must have the same shape", descs)
    if s is None:
        return [TensorDesc(None, descs[0][1])]
    oh, ow, _, _, gw = op.geometry(s[2], s[3])
    return [TensorDesc((s[0], gw * gw, oh, ow), descs[0][1])]


@def_infer(VisionBackward)
def _infer_vision_backward(op, descs):
    return [TensorDesc(descs[op.index][0], descs[op.index][1])]
