"""complex64 tensors on a real GPU: everything a user can do with complex tensors on cpu0, on gpu0,
against cpu0 (the GPU counterpart of ``tests/test_cuda_device_complex.py``).

Every test is marked ``gpu`` and is skipped, with the reason, where mge cannot put tensors on gpu0
(as ``tests/test_cuda_gpu.py``).  ``MGE_GPU_TEST_DEVICE=cpu0`` runs them with cpu0 in gpu0's place:
a check of the tests themselves on a machine without a GPU.

What must match, and how (``kernels/complex.py``'s DIFFERENCES):

* bit for bit -- data movement (copies, transfers, indexing, concat...), ``F.complex`` of float32
  parts, ``F.real``/``F.imag``, neg, eq/neq, ``astype("complex64")`` of integers, bool, float16
  and float32, the creation functions: NaN payloads, infinities and -0 included;
* add and sub bit for bit where finite, NaN where cpu0 has NaN (a GPU's NaN is the canonical
  one); likewise parts converted from float16 or float64 NaNs;
* mul bit for bit on dense operands where numpy fuses its multiply-adds (``NUMPY_FUSES``), else
  within the rounding of the two products;
* what cpu0 refuses raises the same exception with the same message.
"""

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError

from cuda_gpu_fixtures import DEV, _gpu_or_skip, _sync_after  # noqa: F401 (autouse fixtures)

pytestmark = pytest.mark.gpu

C64 = np.dtype("complex64")
F32 = np.dtype("float32")
#: cpu0's numpy warns of the NaNs and infinities the special values make; they are meant.
QUIET = pytest.mark.filterwarnings("ignore::RuntimeWarning")
#: float32 values whose bits must survive moves: a signalling NaN, a NaN with a payload and its
#: sign, both infinities, -0, the smallest subnormal.
SPECIAL = np.array([0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001],
                   np.uint32).view(F32)


# -- helpers --------------------------------------------------------------------------------------

def on(dev, a):
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=dev)


def cdata(seed, shape, special=False):
    """complex64 data of ``shape`` (``special``: ``SPECIAL`` in the first real parts)."""
    r = np.random.default_rng(seed)
    z = np.empty(shape, C64)
    z.real, z.imag = r.standard_normal(shape), r.standard_normal(shape)
    if special:
        z.real.reshape(-1)[:SPECIAL.size] = SPECIAL
    return z


def run_both(fn):
    """``fn(device)`` with each device the default one: (cpu0's results, the GPU's), as numpy
    arrays; every GPU result must live on the GPU."""
    outs = []
    for dev in ("cpu0", DEV):
        old = mge.get_default_device()
        mge.set_default_device(dev)
        try:
            res = list(fn(dev))
        finally:
            mge.set_default_device(old)
        if dev == DEV:
            assert all(r.device == DEV for r in res)
        outs.append([r.numpy() for r in res])
    for c, g in zip(*outs):
        assert c.dtype == g.dtype and c.shape == g.shape, (c.dtype, c.shape, g.dtype, g.shape)
    return outs


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.dtype.kind in "fc" else a


def nan_free(a):
    """(``a``'s parts with NaNs made 0, where the NaNs were)."""
    a = np.ascontiguousarray(a)
    p = a.view(F32).copy() if a.dtype == C64 else a.astype(np.float64)
    nan = np.isnan(p)
    p[nan] = 0
    return p, nan


def assert_bits(fn):
    """``fn`` gives the same bits on the GPU as on cpu0."""
    for c, g in zip(*run_both(fn)):
        np.testing.assert_array_equal(bits(g), bits(c))


def assert_computed(fn):
    """``fn``'s results: the same bits where finite, NaN where cpu0 has NaN."""
    for c, g in zip(*run_both(fn)):
        if c.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, c)
            continue
        (cp, cn), (gp, gn) = nan_free(c), nan_free(g)
        np.testing.assert_array_equal(gn, cn)
        np.testing.assert_array_equal(bits(gp), bits(cp))


def _numpy_fuses():
    a = np.full(16, complex(1 + 2 ** -12, 2 ** -15), C64)
    return bool(((a * a.conj()).real == np.float32(1 + 2 ** -11 + 2 ** -23)).all())


NUMPY_FUSES = _numpy_fuses()


# -- the tests ------------------------------------------------------------------------------------

@QUIET
def test_complex_tensors_are_made_and_taken_apart():
    z = cdata(0, (64, 33), special=True)
    r = np.random.default_rng(1)
    re_, im_ = r.standard_normal((64, 33)).astype(F32), r.standard_normal((64, 33)).astype(F32)
    re_.reshape(-1)[:SPECIAL.size] = SPECIAL
    assert_bits(lambda d: [on(d, z), F.complex(on(d, re_), on(d, im_)),
                           F.complex(on(d, re_)[:, :1], on(d, im_)[:1]),
                           F.complex(on(d, re_).T, on(d, 2.5)), F.real(on(d, z)),
                           F.imag(on(d, z).T), F.real(on(d, z)[::-1, ::-2])])
    wide = r.standard_normal((5, 7))
    wide[0, :3] = [np.nan, np.inf, -0.0]
    assert_computed(lambda d: [F.complex(on(d, wide.astype("float16")), on(d, wide)),
                               F.complex(on(d, wide), on(d, wide.astype("float16")))])
    ang = np.linspace(0, 6, 100, dtype=F32)
    c, g = run_both(lambda d: [F.polar(on(d, ang), on(d, ang))])
    np.testing.assert_allclose(g[0], c[0], rtol=1e-5, atol=1e-5)


@QUIET
def test_arithmetic_and_comparisons():
    z, w = cdata(2, (300, 7), special=True), cdata(3, (300, 7))
    x = np.random.default_rng(4).standard_normal((300, 7)).astype(F32)
    eq = w.copy()
    eq[::3] = z[::3]
    assert_computed(lambda d: [on(d, z) + on(d, w), on(d, z) - on(d, w), on(d, z) + on(d, x),
                               on(d, z)[:1] - on(d, w), 1 - on(d, z)])
    assert_bits(lambda d: [-on(d, z), -(on(d, z).T), on(d, z) == on(d, eq),
                           on(d, z) != on(d, eq), on(d, z) == on(d, z)])
    mul = [lambda d: on(d, z) * on(d, w), lambda d: on(d, w) * on(d, x),
           lambda d: on(d, w)[:1] * on(d, z), lambda d: on(d, z) * 2,
           lambda d: on(d, w).T * on(d, z).T]
    for fn in mul:
        if NUMPY_FUSES:
            assert_computed(lambda d: [fn(d)])
        else:
            c, g = run_both(lambda d: [fn(d)])
            np.testing.assert_allclose(g[0], c[0], rtol=1e-6, atol=1e-6)
    c, g = run_both(lambda d: [on(d, w)[:, ::-1] * on(d, w)])  # numpy's unfused scalar loop
    np.testing.assert_allclose(g[0], c[0], rtol=1e-6, atol=1e-6)


@QUIET
def test_astype_into_complex64():
    r = np.random.default_rng(5)
    ints = [r.integers(np.iinfo(d).min, np.iinfo(d).max, 50, dtype=d, endpoint=True)
            for d in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")]
    exact = ints + [r.random(50) < 0.5, np.array([1.5, -0.0, np.inf, 65504, 6e-8], "float16"),
                    SPECIAL]
    assert_bits(lambda d: [on(d, a).astype("complex64") for a in exact])
    f64 = np.array([1 + 2 ** -24, 3.4e38, 1e39, -1e-46, -0.0, np.nan])
    assert_computed(lambda d: [on(d, f64).astype("complex64"),
                               on(d, np.array([np.nan, 1], "float16")).astype("complex64")])


@QUIET
def test_data_movement_transfers_and_creation():
    z = cdata(6, (40, 36), special=True)
    mask = np.random.default_rng(7).random((40, 36)) < 0.3

    def moved(d):
        a = on(d, z)
        b = on(d, z)
        b[3] = b[5]
        b[on(d, np.array([1, -1], np.int32))] = b[0]
        b[on(d, mask)] = on(d, np.complex64(2 - 1j))
        b[:, 4] = on(d, np.arange(40, dtype=F32))
        return [a.T.flatten(), F.transpose(a, (1, 0)) + 0 * a.T, a[2:30:3, ::-2],
                a[on(d, np.array([3, -1, 0], np.int32))], a[on(d, mask)],
                F.concat([a, a[::-1]]), F.stack([a, a.T.T], 1), F.split(a, 4, axis=1)[2],
                F.broadcast_to(a[:1], (3, 40, 36)), F.copy(a), b,
                F.zeros((3, 4), dtype="complex64"), F.full((3, 4), -2.5, dtype="complex64"),
                F.ones_like(a), F.eye(5, dtype="complex64"),
                F.arange(0, 10, 0.7, dtype="complex64"), F.linspace(0, 1, 9, dtype="complex64")]
    assert_bits(moved)
    t = on(DEV, z)
    for dst in ("cpu0", DEV):
        np.testing.assert_array_equal(bits(t.to(dst).numpy()), bits(z))
    np.testing.assert_array_equal(bits(on("cpu0", z).to(DEV).numpy()), bits(z))
    assert t[1, 2].item() == complex(z[1, 2])


def _error(fn):
    try:
        out = fn()
        if out is not None:
            out.numpy()
    except AsyncError as e:
        e = e.__cause__ or e
        return type(e), str(e).replace(DEV, "<dev>").replace("cpu0", "<dev>")
    except Exception as e:
        return type(e), str(e).replace(DEV, "<dev>").replace("cpu0", "<dev>")
    raise AssertionError(f"{fn} raised nothing")


@pytest.mark.parametrize("fn", [
    lambda z: F.sum(z), lambda z: F.exp(z), lambda z: F.abs(z), lambda z: z.astype("float32"),
    lambda z: F.matmul(z, z.T), lambda z: z / z, lambda z: z > z, lambda z: F.sort(z),
    lambda z: F.tile(z, (2, 1)), lambda z: z + (1 + 2j)], ids=lambda fn: "")
def test_what_cpu0_refuses_raises_the_same_error(fn):
    z = cdata(8, (2, 3))
    got, ref = _error(lambda: fn(on(DEV, z))), _error(lambda: fn(on("cpu0", z)))
    assert got == ref and "complex" in got[1]
