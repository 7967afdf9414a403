"""``F.svd`` on a real GPU (``kernels/linalg.py``'s one-sided Jacobi) against cpu0's.

Every test is marked ``gpu`` (``python -m pytest -m gpu tests`` selects them) and is skipped, with
the reason, where mge cannot put tensors on gpu0 -- the skip of ``tests/test_cuda_gpu.py``: the
device's own error (no pycuda, no driver, no GPU).  ``MGE_GPU_TEST_DEVICE=cpu0`` runs them with
cpu0 in gpu0's place (a check of the tests themselves on a machine without a GPU).

Singular vectors are unique only up to sign (and rotations of repeated singular values), so the
GPU's and the CPU's are compared invariantly: the same dtypes and shapes, ``S`` within ``TOL`` of
``S[0]``, ``U[..., :k] diag(S) Vh[..., :k, :]`` equal to the input within the same, ``U`` and
``V`` orthonormal.  The cases cover the kernel's paths: shared memory and the global workspace
(a 96 x 96 float64 matrix), ``m < n`` (the transpose), ``full_matrices`` (Gram-Schmidt's
completion), a rank-deficient matrix, a batch larger than a few blocks, integer and float16
inputs, an empty batch, and a NaN's error.
"""

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError

from cuda_gpu_fixtures import DEV, _gpu_or_skip, _sync_after  # noqa: F401 (autouse fixtures)

pytestmark = pytest.mark.gpu

#: How far gpu0's SVD may be from an exact one, relative to S[0] (orthogonality: absolute): the
#: Jacobi rotations' rounding, a random walk over N * sweeps of them (sqrt of a few thousand ulp
#: for the 96 x 96 case); float16 outputs are rounded to 11 bits.  The host build of the same
#: kernels meets these with a margin of about 7 (tests/test_cuda_kernels_linalg.py).
TOL = {np.dtype("float16"): 1e-2, np.dtype("float32"): 2e-4, np.dtype("float64"): 1e-12}


def _on(dev, a):
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=dev)


def _svd_both(a, **kw):
    """``F.svd(a, **kw)`` on cpu0 and on gpu0: two lists of numpy arrays, gpu0's checked to
    live there and to have cpu0's dtypes and shapes."""
    cpu = [t.numpy() for t in _as_list(F.svd(_on("cpu0", a), **kw))]
    outs = _as_list(F.svd(_on(DEV, a), **kw))
    assert all(t.device == DEV for t in outs), [t.device for t in outs]
    gpu = [t.numpy() for t in outs]
    assert [(g.dtype, g.shape) for g in gpu] == [(c.dtype, c.shape) for c in cpu]
    return cpu, gpu


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _assert_svd(a, u, s, vh, tol):
    """``(u, s, vh)`` is an SVD of ``a`` within ``tol`` (see the module)."""
    a, u, s, vh = (np.asarray(v, np.float64) for v in (a, u, s, vh))
    ref = np.linalg.svd(a, compute_uv=False)
    scale = ref[..., :1]
    assert (np.abs(s - ref) <= tol * scale).all(), np.abs(s - ref).max()
    k = s.shape[-1]
    rec = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
    assert (np.abs(rec - a) <= tol * scale[..., None]).all(), np.abs(rec - a).max()
    for q in (np.swapaxes(u, -1, -2) @ u, vh @ np.swapaxes(vh, -1, -2)):
        assert np.abs(q - np.eye(q.shape[-1])).max() <= tol


def _cases():
    r = np.random.RandomState(0)
    low = r.randn(7, 2) @ r.randn(2, 5)
    return [
        ("f32-batch", r.randn(300, 5, 3).astype("float32")),   # more matrices than blocks
        ("f32-wide", r.randn(2, 4, 9).astype("float32")),      # m < n: the transpose
        ("f32-square", r.randn(3, 32, 32).astype("float32")),
        ("f64-shared", r.randn(2, 20, 12)),
        ("f64-workspace", r.randn(2, 96, 96)),                 # too large for shared memory
        ("f64-rank2", low),
        ("i32", r.randint(-9, 10, (4, 6)).astype("int32")),
        ("f16", r.randn(3, 6, 4).astype("float16")),
    ]


CASES = _cases()


@pytest.mark.parametrize("full", [False, True], ids=["reduced", "full"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=[n for n, _ in CASES])
def test_svd_on_the_gpu_is_an_svd_like_the_cpus(case, full):
    a = CASES[case][1]
    cpu, gpu = _svd_both(a, full_matrices=full)
    tol = TOL[gpu[0].dtype]
    _assert_svd(a.astype(np.float64), *gpu, tol)
    np.testing.assert_allclose(gpu[1].astype(np.float64), cpu[1].astype(np.float64), rtol=0,
                               atol=tol * float(np.abs(cpu[1].astype(np.float64)).max()))


def test_singular_values_only_match_the_cpus():
    for _, a in CASES:
        cpu, gpu = _svd_both(a, compute_uv=False)
        tol = TOL[gpu[0].dtype]
        np.testing.assert_allclose(gpu[0].astype(np.float64), cpu[0].astype(np.float64),
                                   rtol=0, atol=tol * float(np.abs(cpu[0]).max()))


def test_empty_and_zero_matrices_give_the_cpus_identities():
    for shape in ((0, 3, 2), (2, 0, 3), (3, 0), (3, 3)):
        for full in (False, True):
            cpu, gpu = _svd_both(np.zeros(shape, np.float32), full_matrices=full)
            for g, c in zip(gpu, cpu):
                np.testing.assert_array_equal(g, c)


def test_a_nan_raises_the_cpus_error():
    a = np.array([[[1.0, np.nan], [2.0, 3.0]]], np.float32)
    messages = []
    for dev in ("cpu0", DEV):
        try:
            F.svd(_on(dev, a))[1].numpy()
        except AsyncError as e:
            messages.append(str(e.__cause__ or getattr(e, "error", None)))
        except ValueError as e:
            messages.append(str(e))
        else:
            raise AssertionError(f"no error on {dev}")
    assert messages[0] == messages[1] and "did not converge" in messages[0]
