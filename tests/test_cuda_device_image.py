"""The image ops on the CUDA device, through the public functional API, against cpu0.

``cudahost0`` (``tests/devices/cuda_host.py``) is the CUDA device's code over the host backend:
``F.nn.pad``, ``F.sliding_window``/``F.sliding_window_transpose``, ``F.vision.interpolate``
(``Resize``, the trilinear ``Resize3D``, and ``align_corners`` through ``WarpPerspective``),
``warp_affine``, ``warp_perspective``, ``remap`` and ``cvt_color`` run ``kernels/image.py``'s
plans through the device's executor, forward and backward (through ``GradManager``: ``Pad``'s
``PadBackward``, the sliding windows' each other, ``VisionBackward`` of the resizes' data, of
``Remap``'s map and data, of the warps' data and matrix -- ``image_grad.py``'s scatters and
matrix sums -- for every border mode, both interpolations, NCHW and NHWC, ``mat_idx``), and
``ran`` checks that the op classes really ran on the device.  Copies and nearest sampling are
bit-exact; sums of taps in another order, and the data gradients' atomic float32 sums, within
float rounding (``image.DIFFERENCES``; the tolerances are stated where they are used).
``mat_idx`` out of range and a formula of ``cvt_color`` on int32 raise the CPU device's errors,
at the call (async level 0) or the next read (level 2), and the runtime keeps working.  Without
g++ the tests are skipped with the reason, except under ``CI``.
"""
import numpy as np
import pytest

import mge.functional as F
from mge.autodiff import GradManager
from mge.core import AsyncError

from cuda_device_fixtures import DEV, at, both, cuda, level, on  # noqa: F401 (fixtures)
from cuda_toolchain import missing as _missing
from mge._core.device.cuda import hostbuild
from mge._core.ops.vision import BORDER_MODES, CVT_MODES

F16, F32, F64, U8, I32 = (np.dtype(d) for d in ("float16", "float32", "float64", "uint8",
                                                  "int32"))
EXACT = (0, 0)
#: (rtol, atol) of a float sum of taps or of gradient terms in another order (float32 rounding)
INTERP = (1e-5, 1e-6)










def close(fn, *tols):
    """``both(fn)``, output ``k`` equal within ``tols[k]`` (the last one for the rest; ``INTERP``
    when none): ``(rtol, atol)`` for floats, integers within ``atol`` (``EXACT``: equal)."""
    got, ref = both(fn)
    tols = tols or (INTERP,)
    for k, (g, r) in enumerate(zip(got, ref)):
        rtol, atol = tols[min(k, len(tols) - 1)]
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"output {k}")
        elif atol:
            diff = np.abs(g.astype(np.int64) - r.astype(np.int64)).max(initial=0)
            assert diff <= atol, f"output {k}: {diff} > {atol}"
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"output {k}")
    return got, ref


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def _grad(d, fn, arrays, attach=(0,), seed=99):
    """``[y, *grads]``: ``y = fn(*tensors)`` on ``d`` and the gradients of ``(y * dy).sum()``
    (``dy`` seeded normal in ``y``'s dtype) w.r.t. the inputs ``attach``."""
    ts = [on(d, a) for a in arrays]
    gm = GradManager()
    gm.attach([ts[k] for k in attach])
    with gm:
        y = fn(*ts)
        dy = np.random.default_rng(seed).normal(size=y.shape).astype(y.dtype)
        gm.backward((y * on(d, dy)).sum())
    return [y] + [ts[k].grad for k in attach]


def _need(dtype):
    """Skip (fail under ``CI``) a float16 case where the host build has no ``_Float16``."""
    if np.dtype(dtype) == F16 and not hostbuild.have_float16():
        _missing("float16 kernels need g++ 12+ (_Float16) for the host build")


def _error(d, fn):
    """The error ``fn()`` raises on ``d`` (an ``AsyncError``'s cause at async level 2)."""
    with pytest.raises(Exception) as info:
        at(d, fn)
    err = info.value
    if isinstance(err, AsyncError):
        err = err.__cause__
    return err


_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(2, 3, 5, 6)).astype(F32)             # NCHW
_XH = _RNG.normal(size=(2, 5, 6, 3)).astype(F32)            # NHWC
_X5 = _RNG.normal(size=(1, 2, 3, 4, 5)).astype(F32)         # NCDHW
_AFFINE = np.array([[[1.1, 0.2, -0.5], [-0.1, 0.9, 0.7]],
                    [[0.8, -0.3, 1.5], [0.2, 1.2, -1.0]]], F32)
_PERSP = np.array([[[1.1, 0.2, -0.5], [-0.1, 0.9, 0.7], [0.01, 0.02, 1.0]],
                   [[0.7, -0.2, 1.2], [0.3, 1.3, -0.8], [-0.02, 0.03, 0.9]],
                   [[0.9, 0.1, 0.4], [0.05, 0.8, 0.3], [0.0, -0.01, 1.1]]], F32)


def _image(dtype, shape_of=_X):
    """``shape_of`` as ``dtype``: floats as they are, integers scaled onto 0..255."""
    if np.dtype(dtype).kind in "iu":
        return np.clip(shape_of * 40 + 128, 0, 255).astype(dtype)
    return shape_of.astype(dtype)


# -- pad -------------------------------------------------------------------------------------------

_PAD = ((0, 0), (1, 2), (2, 1), (3, 2))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "replicate"])
def test_pad_forward_and_gradient_float32(cuda, mode):
    # the forward is a copy (bit-exact); constant's gradient is a crop (bit-exact); reflect's and
    # replicate's sum every gradient element copied from a source at once where the CPU folds one
    # axis after another: a few O(1) float32 terms in another order, so atol 1e-5 (a few ulp of
    # the sums' magnitude), not the interpolation's 1e-6
    def fn(d):
        return _grad(d, lambda x: F.nn.pad(x, _PAD, mode, 1.5), [_X])
    grad_tol = EXACT if mode == "constant" else (1e-5, 1e-5)
    assert {"Pad", "PadBackward"} <= ran(cuda, lambda: close(fn, EXACT, grad_tol))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_forward_and_gradient_float16(cuda, mode):
    # reflect/replicate's gradient sums in float32 and rounds once; the CPU rounds to float16
    # after every axis (``image.DIFFERENCES``): a float16 ulp or two of sums up to ~8, so 1e-2
    _need(F16)
    x = _X[:, :, :4, :4].astype(F16)

    def fn(d):
        return _grad(d, lambda t: F.nn.pad(t, ((1, 1), (0, 0), (2, 1), (1, 3)), mode, 0.1), [x])
    grad_tol = EXACT if mode == "constant" else (1e-2, 1e-2)
    assert {"Pad", "PadBackward"} <= ran(cuda, lambda: close(fn, EXACT, grad_tol))


@pytest.mark.parametrize("dtype", [U8, I32, np.dtype(bool)])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_of_integers_and_bools_is_exact(cuda, mode, dtype):
    x = _image(dtype) if dtype != bool else _X > 0

    def fn(d):
        return [F.nn.pad(on(d, x), ((1, 0), (0, 0), (2, 3), (0, 4)), mode, 7)]
    assert "Pad" in ran(cuda, lambda: close(fn, EXACT))


def test_pad_of_a_scalar_raises_the_cpus_error(cuda, level):
    # MegEngine's Padding asserts on a 0-D input; the plan returned the input for pad_width ()
    messages = []
    for d in (DEV, "cpu0"):
        err = _error(d, lambda: F.nn.pad(on(d, np.float32(3)), ()).numpy())
        assert isinstance(err, ValueError), repr(err)
        messages.append(str(err))
    assert messages[0] == messages[1] and "Pad.constant: cannot pad a 0-D input" in messages[0]
    _still_works(cuda)


# -- sliding windows -------------------------------------------------------------------------------

_WINDOW = dict(kernel_size=(2, 3), padding=(1, 0), stride=(2, 1), dilation=(1, 2))


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_sliding_window_forward_and_gradient(cuda, dtype):
    # forward: copies of the zero-padded input; gradient (SlidingWindowTranspose): each sum in the
    # CPU's order, rounded to the dtype as numpy's ``+=``: both bit-exact
    _need(dtype)

    def fn(d):
        return _grad(d, lambda x: F.sliding_window(x, **_WINDOW), [_X.astype(dtype)])
    assert {"SlidingWindow", "SlidingWindowTranspose"} <= ran(cuda, lambda: close(fn, EXACT))


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_sliding_window_transpose_forward_and_gradient(cuda, dtype):
    _need(dtype)
    w = np.random.default_rng(1).normal(size=(2, 3, 3, 2, 2, 3)).astype(dtype)

    def fn(d):
        return _grad(d, lambda t: F.sliding_window_transpose(t, (5, 6), **_WINDOW), [w])
    assert {"SlidingWindow", "SlidingWindowTranspose"} <= ran(cuda, lambda: close(fn, EXACT))


@pytest.mark.parametrize("dtype", [U8, I32], ids=str)
def test_sliding_windows_of_integers_are_exact(cuda, dtype):
    x = _image(dtype)
    w = np.random.default_rng(2).integers(0, 40, (2, 3, 3, 2, 2, 3)).astype(dtype)

    def fn(d):
        return [F.sliding_window(on(d, x), **_WINDOW),
                F.sliding_window_transpose(on(d, w), (5, 6), **_WINDOW)]
    assert {"SlidingWindow", "SlidingWindowTranspose"} <= ran(cuda, lambda: close(fn, EXACT))


# -- interpolate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("size", [(7, 4), (2, 13), (1, 1)], ids=str)
def test_interpolate_forward_and_gradient(cuda, mode, size, dtype):
    # nearest's forward is a copy (bit-exact); the taps' float64 sums and the gradient's sums of
    # coef * dy per source element are within float rounding of the CPU's matrix contractions
    def fn(d):
        return _grad(d, lambda x: F.vision.interpolate(x, size, mode=mode), [_X.astype(dtype)])
    fwd = EXACT if mode == "nearest" else INTERP
    assert {"Resize", "VisionBackward"} <= ran(cuda, lambda: close(fn, fwd, INTERP))


def test_interpolate_by_a_scale_factor_and_the_linear_mode(cuda):
    def fn(d):
        a = _grad(d, lambda x: F.vision.interpolate(x, scale_factor=1.7), [_X])
        b = _grad(d, lambda x: F.vision.interpolate(x, scale_factor=(0.45, 2)), [_X], seed=3)
        c = _grad(d, lambda x: F.vision.interpolate(x, 11, mode="linear"), [_X[:, :, 0]], seed=4)
        return a + b + c
    assert {"Resize", "VisionBackward"} <= ran(cuda, lambda: close(fn))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_uint8_images(cuda, mode):
    # integers: the float64 sum rounded half to even and clipped; the CPU's sum in another order
    # may land on the other side of a half: at most 1 apart (``image.DIFFERENCES``); nearest copies
    x = _image(U8)

    def fn(d):
        return [F.vision.interpolate(on(d, x), (7, 9), mode=mode),
                F.vision.interpolate(on(d, x), (3, 2), mode=mode)]
    assert "Resize" in ran(cuda, lambda: close(fn, EXACT if mode == "nearest" else (0, 1)))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(4, 3, 7), (1, 2, 2), (6, 9, 1)], ids=str)
def test_interpolate_trilinear_forward_and_gradient(cuda, size, align_corners):
    def fn(d):
        return _grad(d, lambda x: F.vision.interpolate(x, size, mode="trilinear",
                                                       align_corners=align_corners), [_X5])
    assert {"Resize3D", "VisionBackward"} <= ran(cuda, lambda: close(fn))


@pytest.mark.parametrize("mode", ["bilinear", "linear"])
def test_interpolate_with_align_corners_warps_on_the_device(cuda, mode):
    # 2-D align_corners is a warp_perspective by a scaling matrix, forward and data gradient
    x = _X if mode == "bilinear" else _X[:, :, 0]
    size = (7, 4) if mode == "bilinear" else 9

    def fn(d):
        return _grad(d, lambda t: F.vision.interpolate(t, size, mode=mode, align_corners=True),
                     [x])
    assert {"WarpPerspective", "VisionBackward"} <= ran(cuda, lambda: close(fn, INTERP,
                                                                        _grad_tol(F32)))


# -- warps -----------------------------------------------------------------------------------------


def _warp_tol(dtype):
    # integers: the float64 sum rounded, at most 1 from the CPU's (``image.DIFFERENCES``);
    # float16: the float64 sum rounded once where the CPU may round twice: an ulp (2**-11)
    if np.dtype(dtype).kind in "iu":
        return (0, 1)
    return (1e-3, 1e-3) if np.dtype(dtype) == F16 else INTERP


@pytest.mark.parametrize("dtype", [F32, U8, F64, F16], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_warp_affine_forward_every_border_mode(cuda, fmt, interp, dtype):
    _need(dtype)
    x = _image(dtype, _XH if fmt == "NHWC" else _X)

    def fn(d):
        return [F.vision.warp_affine(on(d, x), on(d, _AFFINE), (4, 7), b, 3.5, fmt, interp)
                for b in BORDER_MODES]
    assert "WarpAffine" in ran(cuda, lambda: close(fn, _warp_tol(dtype)))


@pytest.mark.parametrize("dtype", [F32, U8, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_warp_perspective_forward_every_border_mode(cuda, fmt, interp, dtype):
    x = _image(dtype, _XH if fmt == "NHWC" else _X)

    def fn(d):
        return [F.vision.warp_perspective(on(d, x), on(d, _PERSP[:2]), (4, 7), None, b, 3.5, fmt,
                                          interp) for b in BORDER_MODES]
    assert "WarpPerspective" in ran(cuda, lambda: close(fn, _warp_tol(dtype)))


def test_warp_perspective_with_mat_idx(cuda):
    idx = np.array([1, 0, 1], np.int32)

    def fn(d):
        return [F.vision.warp_perspective(on(d, _X), on(d, _PERSP), (6, 5), on(d, idx)),
                F.vision.warp_perspective(on(d, _image(U8, _XH)), on(d, _PERSP), (3, 4), [0, 0, 1],
                                          "constant", 9.0, "NHWC")]
    assert "WarpPerspective" in ran(cuda, lambda: close(fn, INTERP, (0, 1)))


def test_a_mat_idx_out_of_range_raises_the_cpus_error(cuda, level):
    idx = np.array([0, 2, 1], np.int32)
    messages = []
    for d in (DEV, "cpu0"):
        err = _error(d, lambda: F.vision.warp_perspective(on(d, _X), on(d, _PERSP), (4, 7),
                                                          on(d, idx)).numpy())
        assert isinstance(err, IndexError), repr(err)
        messages.append(str(err))
    assert messages[0] == messages[1] and "mat_idx out of bound: [0, 2, 1]" in messages[0]


def _still_works(cuda):
    """The device after an error: a Resize forward and gradient as cpu0's."""
    def fn(d):
        return _grad(d, lambda x: F.vision.interpolate(x, (3, 8)), [_X])
    assert {"Resize", "VisionBackward"} <= ran(cuda, lambda: close(fn))


def _grad_tol(dtype):
    # the data gradient adds each tap's dy * weight with atomics in float32 (float64 for
    # float64) where the CPU sums in float64: a few float32 ulps of sums of O(10) -> 1e-5; float16
    # rounds the float32 sum once, the CPU its float64 sum: a float16 ulp (2**-10 relative)
    return {F16: (2e-3, 2e-3), F32: (1e-5, 1e-5), F64: (1e-12, 1e-12)}[np.dtype(dtype)]


def _mat_tol(dtype):
    # the matrix gradient sums in float64 in another order than numpy, then rounds once: the
    # CPU's bits but for a last-bit double rounding (float64: its last bits)
    return {F32: INTERP, F64: (1e-12, 1e-11)}[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", [F32, F64, F16], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_warp_affine_gradients_every_border_mode(cuda, fmt, interp, dtype):
    # both gradients through GradManager: the image's (a scatter with atomic adds) and the
    # matrix's (deterministic sums in float64) against cpu0's
    _need(dtype)
    x = _image(dtype, _XH if fmt == "NHWC" else _X)
    mat = _AFFINE.astype(F64 if dtype == F64 else F32)

    def fn(d):
        out = []
        for k, b in enumerate(BORDER_MODES):
            out += _grad(d, lambda x_, m_: F.vision.warp_affine(x_, m_, (4, 7), b, 3.5, fmt,
                                                                interp), [x, mat], (0, 1),
                         seed=30 + k)
        return out
    tols = [_warp_tol(dtype), _grad_tol(dtype), _mat_tol(mat.dtype)]
    res = {}
    assert {"WarpAffine", "VisionBackward"} <= ran(
        cuda, lambda: res.setdefault("got", close(fn, *(tols * len(BORDER_MODES)))[0]))
    # not vacuous: both gradients are there for every mode (nearest: the matrix's is 0)
    assert all(np.abs(g).max() > 0.1 for g in res["got"][1::3])
    assert all((np.abs(g).max() > 0.1) == (interp == "linear") for g in res["got"][2::3])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_warp_perspective_gradients_every_border_mode(cuda, fmt, interp, dtype):
    x = _image(dtype, _XH if fmt == "NHWC" else _X)
    mat = _PERSP[:2].astype(dtype)

    def fn(d):
        out = []
        for k, b in enumerate(BORDER_MODES):
            out += _grad(d, lambda x_, m_: F.vision.warp_perspective(x_, m_, (4, 7), None, b, 3.5,
                                                                     fmt, interp),
                         [x, mat], (0, 1), seed=40 + k)
        return out
    tols = [_warp_tol(dtype), _grad_tol(dtype), _mat_tol(dtype)]
    assert {"WarpPerspective", "VisionBackward"} <= ran(
        cuda, lambda: close(fn, *(tols * len(BORDER_MODES))))


def test_warp_perspective_gradients_with_mat_idx(cuda):
    # two matrices sample image 1: its gradient gathers both outputs' terms; image 0's one
    idx = np.array([1, 0, 1], np.int32)

    def fn(d):
        return _grad(d, lambda x_, m_: F.vision.warp_perspective(x_, m_, (6, 5), on(d, idx),
                                                                 "reflect"),
                     [_X, _PERSP], (0, 1))
    got, _ = close(fn, INTERP, _grad_tol(F32), _mat_tol(F32))
    assert np.abs(got[1][0]).max() > 0 and np.abs(got[1][1]).max() > 0


# -- remap -----------------------------------------------------------------------------------------

_MAP = (np.random.default_rng(5).random((2, 4, 7, 2)) * 10 - 2).astype(F32)
_MAP_ON_GRID = _MAP.round()  # the taps' weights are exactly 0 and 1: the derivative's edge
_MAP_ON_GRID[0, 0, :, 0] = [-1, -0.5, 5, 5.5, 6, 6.5, 7]


@pytest.mark.parametrize("dtype", [F32, U8, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
def test_remap_forward_every_border_mode(cuda, interp, dtype):
    x = _image(dtype)
    modes = ("replicate", "constant", "reflect", "reflect_101", "wrap")

    def fn(d):
        return [F.vision.remap(on(d, x), on(d, m), b, 2.5, interp)
                for b in modes for m in (_MAP, _MAP_ON_GRID)]
    assert "Remap" in ran(cuda, lambda: close(fn, _warp_tol(dtype)))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("border", ["replicate", "constant", "reflect", "reflect_101", "wrap"])
def test_remap_map_gradient(cuda, border, interp, dtype):
    # the map's gradient: a thread per position sums dy * value * dweight over the channels and
    # taps in float64 (the CPU's _coord_grads in its order): within float rounding
    x = _X.astype(dtype)

    def fn(d):
        out = []
        for k, m in enumerate((_MAP, _MAP_ON_GRID)):
            out += _grad(d, lambda m_, x_: F.vision.remap(x_, m_, border, 2.5, interp), [m, x],
                         seed=10 + k)
        return out
    assert {"Remap", "VisionBackward"} <= ran(cuda, lambda: close(fn))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
def test_remap_data_gradient_every_border_mode(cuda, interp, dtype):
    # the image's gradient: a scatter of dy * weight with atomic adds (float32 sums for float32)
    x = _X.astype(dtype)
    modes = ("replicate", "constant", "reflect", "reflect_101", "wrap")

    def fn(d):
        out = []
        for k, b in enumerate(modes):
            for j, m in enumerate((_MAP, _MAP_ON_GRID)):
                out += _grad(d, lambda x_, m_: F.vision.remap(x_, m_, b, 2.5, interp), [x, m],
                             (0, 1), seed=50 + 2 * k + j)
        return out
    tols = [_warp_tol(dtype), _grad_tol(dtype), INTERP]
    assert {"Remap", "VisionBackward"} <= ran(cuda, lambda: close(fn, *(tols * 10)))


# -- cvt_color -------------------------------------------------------------------------------------

_COPIES = ("RGB2BGR", "BGR2RGB", "RGBA2RGB", "RGBA2BGR", "GRAY2RGB", "GRAY2BGR")


def _channels(mode):
    return 1 if mode.startswith("GRAY") else 4 if mode.startswith("RGBA") else 3


def _rgb(mode, dtype):
    x = np.random.default_rng(6).random((2, 3, 4, _channels(mode)))
    return (x * 255).astype(dtype) if np.dtype(dtype).kind in "iu" else x.astype(dtype)


@pytest.mark.parametrize("dtype", [F32, U8], ids=str)
def test_cvt_color_every_mode(cuda, dtype):
    # channel copies, MegEngine's integer formulas for uint8 and float32 formulas: bit-exact
    def fn(d):
        return [F.vision.cvt_color(on(d, _rgb(m, dtype)), m) for m in CVT_MODES]
    assert "CvtColor" in ran(cuda, lambda: close(fn, EXACT))


@pytest.mark.parametrize("dtype", [F16, F64, I32], ids=str)
def test_cvt_color_copies_of_other_dtypes(cuda, dtype):
    _need(dtype)

    def fn(d):
        return [F.vision.cvt_color(on(d, _rgb(m, dtype)), m) for m in _COPIES]
    assert "CvtColor" in ran(cuda, lambda: close(fn, EXACT))


@pytest.mark.parametrize("dtype", [F16, F64], ids=str)
def test_cvt_color_formulas_of_other_floats(cuda, dtype):
    # computed in float32 as the CPU kernel, then cast: bit-exact
    _need(dtype)

    def fn(d):
        return [F.vision.cvt_color(on(d, _rgb(m, dtype)), m) for m in CVT_MODES
                if m not in _COPIES]
    assert "CvtColor" in ran(cuda, lambda: close(fn, EXACT))


def test_a_cvt_color_formula_on_int32_raises_the_cpus_error(cuda, level):
    messages = []
    for d in (DEV, "cpu0"):
        err = _error(d, lambda: F.vision.cvt_color(on(d, _rgb("RGB2GRAY", I32)),
                                                   "RGB2GRAY").numpy())
        assert isinstance(err, TypeError), repr(err)
        messages.append(str(err))
    assert messages[0] == messages[1] and "takes float32 or uint8 images" in messages[0]
