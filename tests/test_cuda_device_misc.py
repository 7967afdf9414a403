"""The small ops of ``kernels/misc.py`` and the new RNG ops of ``kernels/rng.py`` on the CUDA
device (``cudahost0``: the device's code over the host backend), through the public API, against
``cpu0``: ``F.one_hot``, ``F.dot``, ``F.matinv``, the grad scaler's ``check_non_finite``,
``F.utils._assert_equal``, ``mge.random.poisson``/``permutation``/``shuffle`` and ``F.svd``
(``kernels/linalg.py``) -- each checked to have run on the device (``ran``), errors with the CPU
device's exceptions and messages at async levels 0 and 2.  ``F.svd`` is compared with numpy
invariantly (singular vectors are unique only up to sign): ``U diag(S) Vh`` against the input,
``S`` against numpy's, ``U`` and ``V`` orthonormal.

Without g++ the tests are skipped with the reason, except under ``CI``.  Host compute is off, so
every op runs the device's kernels.
"""
import numpy as np

import mge
import mge.functional as F
from mge.amp.check_non_finite import check_non_finite
from mge.core import AsyncError

from cuda_device_fixtures import DEV, cuda, level, on  # noqa: F401 (fixtures by name)







def both(fn):
    """``fn(device)`` on cudahost0 and cpu0: two lists of host arrays of equal dtypes/shapes."""
    outs = list(fn(DEV))
    assert all(o.device == DEV for o in outs)
    got = [o.numpy() for o in outs]
    ref = [o.numpy() for o in fn("cpu0")]
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
    return got, ref


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def _raises(fn, exc):
    """The message of ``exc`` raised by ``fn()`` (an ``AsyncError`` wrapping it counts)."""
    try:
        out = fn()
        if out is not None:
            out.numpy()
    except AsyncError as e:
        cause = e.__cause__ or getattr(e, "error", None)
        assert isinstance(cause, exc), repr(e)
        return str(cause)
    except exc as e:
        return str(e)
    raise AssertionError(f"{exc.__name__} not raised")


def test_one_hot_dot_and_matinv_run_on_the_device(cuda):
    r = np.random.default_rng(0)
    labels = r.integers(0, 6, (4, 5)).astype(np.int32)
    a, b = r.standard_normal(1000).astype(np.float32), r.standard_normal(1000).astype(np.float32)
    m = r.standard_normal((3, 8, 8)).astype(np.float32)
    names = ran(cuda, lambda: [F.one_hot(on(DEV, labels), 6).numpy(),
                               F.dot(on(DEV, a), on(DEV, b)).numpy(),
                               F.matinv(on(DEV, m)).numpy()])
    assert {"OneHot", "Dot", "MatInv"} <= names
    got, ref = both(lambda d: [F.one_hot(on(d, labels), 6)])
    np.testing.assert_array_equal(got[0], ref[0])
    got, ref = both(lambda d: [F.dot(on(d, a), on(d, b)),
                               F.dot(on(d, a.astype(np.int8)), on(d, b.astype(np.int8)))])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[1], ref[1])
    got, ref = both(lambda d: [F.matinv(on(d, m)), F.matinv(on(d, m.astype(np.float64)))])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-10)


def test_errors_are_the_cpu_devices(cuda, level):
    labels = np.array([0, 7], np.int32)
    sing = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    for fn, exc in ((lambda d: F.one_hot(on(d, labels), 3), IndexError),
                    (lambda d: F.matinv(on(d, sing)), ValueError),
                    (lambda d: mge.random.RNG(seed=1, device=d).poisson(
                        on(d, np.array([1.0, -2.0], np.float32))), ValueError)):
        assert _raises(lambda: fn(DEV), exc) == _raises(lambda: fn("cpu0"), exc)


def test_assert_equal_and_check_non_finite_run_on_the_device(cuda, capsys):
    from mge._core.ops.misc import AssertEqualError
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    names = ran(cuda, lambda: F.utils._assert_equal(on(DEV, x), on(DEV, x + 1e-7)).numpy())
    assert "AssertEqual" in names
    msgs = [_raises(lambda: F.utils._assert_equal(on(d, x), on(d, x + 1), verbose=True),
                    AssertEqualError) for d in (DEV, "cpu0")]
    out = capsys.readouterr().out.splitlines()
    assert msgs[0] == msgs[1] and len(out) == 2 and out[0] == out[1]
    for bad in (False, True):
        def step(d):
            gs = [on(d, x), on(d, np.array([1.0, np.inf if bad else 2.0], np.float16))]
            flag = check_non_finite(gs, 0.125)
            return gs + [flag]
        names = ran(cuda, lambda: [t.numpy() for t in step(DEV)])
        assert "CheckNonFinite" in names
        got, ref = both(step)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
        assert int(got[-1]) == int(bad)


def test_random_permutations_poisson_and_shuffles_run_on_the_device(cuda):
    g = mge.random.RNG(seed=3, device=DEV)
    names = ran(cuda, lambda: [g.permutation(2000).numpy(), g.poisson(
        on(DEV, np.full(5000, 20.0, np.float32))).numpy(),
        g.permutation(on(DEV, np.arange(12.0).reshape(6, 2))).numpy()])
    assert {"PermutationRNG", "PoissonRNG", "ShuffleRNG"} <= names
    p = mge.random.RNG(seed=5, device=DEV).permutation(2000, dtype="int64").numpy()
    assert p.dtype == np.int64 and sorted(p.tolist()) == list(range(2000))
    again = mge.random.RNG(seed=5, device=DEV).permutation(2000, dtype="int64").numpy()
    np.testing.assert_array_equal(p, again)
    y = mge.random.RNG(seed=6, device=DEV).poisson(on(DEV, np.full(20000, 3.0, np.float32)))
    y = y.numpy()
    assert y.dtype == np.float32 and abs(y.mean() - 3) < 0.1 and abs(y.var() - 3) < 0.3
    x = on(DEV, np.arange(30, dtype=np.int32).reshape(10, 3))
    mge.random.shuffle(x)
    v = x.numpy()
    assert x.device == DEV and sorted(v[:, 0].tolist()) == list(range(0, 30, 3))
    np.testing.assert_array_equal(v[:, 1:] - v[:, :1], np.tile([1, 2], (10, 1)))


def _is_svd_of(x, u, s, vh, tol):
    """``(u, s, vh)`` is an SVD of ``x`` (float64 arrays): ``s`` numpy's within ``tol * s[0]``,
    ``u[..., :k] diag(s) vh[..., :k, :]`` is ``x`` within the same, ``u``/``vh`` orthonormal
    within ``tol``."""
    ref = np.linalg.svd(x, compute_uv=False)
    scale = ref[..., :1]
    assert (np.abs(s - ref) <= tol * scale).all(), (s, ref)
    k = s.shape[-1]
    rec = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
    assert (np.abs(rec - x) <= tol * scale[..., None]).all(), np.abs(rec - x).max()
    for q in (np.swapaxes(u, -1, -2) @ u, vh @ np.swapaxes(vh, -1, -2)):
        assert np.abs(q - np.eye(q.shape[-1])).max() <= tol


def test_svd_runs_on_the_device_and_is_an_svd(cuda):
    # float32: Jacobi's rounding over a few hundred rotations is some 1e-6 of S[0] (the kernel
    # tests' bounds, kernels/linalg.py's DIFFERENCES); 1e-4 leaves room; float64 1e-12
    r = np.random.default_rng(1)
    x = r.standard_normal((3, 6, 4)).astype(np.float32)
    names = ran(cuda, lambda: [t.numpy() for t in F.svd(on(DEV, x))])
    assert "SVD" in names
    for a, tol in ((x, 1e-4), (x.transpose(0, 2, 1), 1e-4),  # m >= n and m < n
                   (r.standard_normal((5, 5)), 1e-12),
                   (r.standard_normal((4, 2)) @ r.standard_normal((2, 4)), 1e-12)):  # rank 2
        for full in (False, True):
            got, ref = both(lambda d: list(F.svd(on(d, a), full_matrices=full)))
            u, s, vh = (g.astype(np.float64) for g in got)
            _is_svd_of(np.asarray(a, np.float64), u, s, vh, tol)
        got, ref = both(lambda d: [F.svd(on(d, a), compute_uv=False)])
        np.testing.assert_allclose(got[0], ref[0], rtol=0, atol=tol * float(ref[0].max()))
    # int input answers in float32, float16 in float16 (as on cpu0); empty batches and k = 0
    got, ref = both(lambda d: list(F.svd(on(d, np.arange(6, dtype=np.int32).reshape(2, 3)))))
    _is_svd_of(np.arange(6.0).reshape(2, 3), *(g.astype(np.float64) for g in got), 1e-5)
    got, ref = both(lambda d: list(F.svd(on(d, x.astype(np.float16)))))
    _is_svd_of(x.astype(np.float16).astype(np.float64), *(g.astype(np.float64) for g in got),
               1e-2)
    for shape in ((0, 3, 2), (2, 0, 3), (3, 0)):
        got, ref = both(lambda d: list(F.svd(on(d, np.zeros(shape, np.float32)),
                                             full_matrices=True)))
        for g, w in zip(got, ref):
            np.testing.assert_array_equal(g, w)


def test_svd_of_a_nan_raises_the_cpu_devices_error(cuda, level):
    x = np.array([[[1.0, np.nan], [2.0, 3.0]]], np.float32)
    for uv in (True, False):
        def fn(d):
            out = F.svd(on(d, x), compute_uv=uv)
            return out[1] if uv else out
        assert _raises(lambda: fn(DEV), ValueError) == _raises(lambda: fn("cpu0"), ValueError)
