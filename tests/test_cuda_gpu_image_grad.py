"""The sampling ops' gradients (``kernels/image_grad.py``) on a real GPU, against cpu0.

The data gradients of ``warp_affine``, ``warp_perspective`` (with ``mat_idx`` too) and ``remap``
are scatters with ``atomicAdd``: on a GPU thousands of threads add into the same pixels at once,
which the host build (serial threads) cannot show, so these tests use images big enough for real
contention and a matrix that folds most of the output onto a few border pixels.  The warps'
matrix gradients are deterministic (no atomics): two runs give the same bits.

Every test is marked ``gpu`` and skipped, with the reason, where mge cannot put tensors on gpu0
(as ``tests/test_cuda_gpu.py``); ``MGE_GPU_TEST_DEVICE=cpu0`` runs them with cpu0 in gpu0's
place (a check of the tests themselves, nothing skipped).

Tolerances: the data gradients sum in float32 (float64 for float64) in the threads' order where
the CPU sums in float64: ``rtol 1e-5, atol 1e-4`` for float32 (sums of up to a few thousand terms
on the folded border pixels), float16 ``2e-3`` (one rounding of the float32 sum), float64
``1e-10``; the matrix gradients sum in float64 and round once: ``rtol 1e-5`` of float32 (their
sums grow with the output's coordinates, so ``atol`` scales with the largest value).
"""

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.autodiff import GradManager

from cuda_gpu_fixtures import DEV, _gpu_or_skip, _sync_after  # noqa: F401 (autouse fixtures)

pytestmark = pytest.mark.gpu

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
#: (rtol, atol) of a data gradient by dtype (the module docstring)
DATA_TOL = {F16: (2e-3, 2e-3), F32: (1e-5, 1e-4), F64: (1e-10, 1e-10)}
BORDERS = ("replicate", "reflect", "reflect_101", "wrap", "constant")


def _on(dev, a):
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=dev)


def _grads(dev, fn, arrays, attach, seed=0):
    """``[y, *grads]`` as numpy arrays: ``y = fn(*tensors)`` on ``dev`` and the gradients of
    ``(y * dy).sum()`` with respect to the inputs ``attach``."""
    ts = [_on(dev, a) for a in arrays]
    gm = GradManager()
    gm.attach([ts[k] for k in attach])
    with gm:
        y = fn(*ts)
        dy = np.random.default_rng(seed).normal(size=y.shape).astype(y.dtype)
        gm.backward((y * _on(dev, dy)).sum())
    out = [y] + [ts[k].grad for k in attach]
    assert all(o.device == dev for o in out)
    return [o.numpy() for o in out]


def _compare(got, ref, tols):
    for k, (g, r) in enumerate(zip(got, ref)):
        assert g.dtype == r.dtype and g.shape == r.shape
        rtol, atol = tols[k]
        scale = max(1.0, float(np.abs(r.astype(F64)).max()))
        np.testing.assert_allclose(g.astype(F64), r.astype(F64), rtol=rtol, atol=atol * scale,
                                   err_msg=f"output {k}")


def _image(dtype, fmt="NCHW", n=2, c=3, h=64, w=80, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, c, h, w))
    return (x if fmt == "NCHW" else x.transpose(0, 2, 3, 1)).astype(dtype)


# a shrinking affine map that also shifts much of the output outside the image: the border
# modes fold those positions onto few pixels (heavy atomic contention there)
_AFFINE = np.array([[[0.5, 0.1, -20.0], [-0.05, 0.6, -15.0]],
                    [[1.3, -0.2, 10.0], [0.15, 1.1, -30.0]]])
_PERSP = np.concatenate([_AFFINE, [[[1e-3, -2e-3, 1.0]], [[-1e-3, 1e-3, 0.9]]]], 1)


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_warp_affine_gradients_on_the_gpu(fmt, dtype):
    x, mat = _image(dtype, fmt), _AFFINE.astype(F64 if dtype == F64 else F32)
    for k, border in enumerate(BORDERS):
        def fn(a, m):
            return F.vision.warp_affine(a, m, (48, 56), border, 1.5, fmt, "linear")
        got = _grads(DEV, fn, [x, mat], (0, 1), seed=k)
        ref = _grads("cpu0", fn, [x, mat], (0, 1), seed=k)
        fwd = (1e-3, 1e-3) if dtype == F16 else (1e-5, 1e-6)
        _compare(got, ref, [fwd, DATA_TOL[dtype], (1e-5, 1e-6)])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
def test_warp_perspective_gradients_on_the_gpu(interp, dtype):
    x, mat = _image(dtype), _PERSP.astype(dtype)
    idx = np.array([1, 0, 1, 1], np.int32)
    mats = np.concatenate([mat, mat[::-1]])
    for k, border in enumerate(BORDERS):
        def fn(a, m):
            return F.vision.warp_perspective(a, m, (48, 56), _on(a.device, idx), border, 0.5,
                                             "NCHW", interp)
        got = _grads(DEV, fn, [x, mats], (0, 1), seed=10 + k)
        ref = _grads("cpu0", fn, [x, mats], (0, 1), seed=10 + k)
        _compare(got, ref, [(1e-5, 1e-6), DATA_TOL[dtype], (1e-5, 1e-6)])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("interp", ["linear", "nearest"])
def test_remap_data_gradient_on_the_gpu(interp, dtype):
    x = _image(dtype)
    mp = np.random.default_rng(3).uniform(-10, 90, (2, 40, 50, 2)).astype(dtype)
    for k, border in enumerate(BORDERS):
        def fn(a, m):
            return F.vision.remap(a, m, border, 2.5, interp)
        got = _grads(DEV, fn, [x, mp], (0, 1), seed=20 + k)
        ref = _grads("cpu0", fn, [x, mp], (0, 1), seed=20 + k)
        _compare(got, ref, [(1e-5, 1e-6), DATA_TOL[dtype], (1e-5, 1e-6)])


def test_the_matrix_gradient_is_deterministic_and_the_data_gradient_within_rounding():
    # the matrix gradient sums without atomics: the same bits on every run; the data gradient's
    # atomic order may change from run to run, within float32 rounding of its sums
    x, mat = _image(F32, h=256, w=256), _AFFINE.astype(F32)

    def fn(a, m):
        return F.vision.warp_affine(a, m, (200, 220), "replicate", 0.0, "NCHW", "linear")
    runs = [_grads(DEV, fn, [x, mat], (0, 1), seed=5) for _ in range(3)]
    for r in runs[1:]:
        np.testing.assert_array_equal(r[2], runs[0][2])
        np.testing.assert_allclose(r[1], runs[0][1], rtol=1e-5,
                                   atol=1e-5 * float(np.abs(runs[0][1]).max()))
