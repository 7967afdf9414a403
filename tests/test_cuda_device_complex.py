"""complex64 tensors on the CUDA device (``cudahost0``: the device's code over the host backend)
through the public API, against ``cpu0``: everything a user can do with complex tensors on cpu0.

* made and taken apart -- ``mge.tensor`` of complex data, ``F.complex`` (broadcast, float16 and
  float64 parts), ``F.polar``, ``F.real``/``F.imag`` of views, MegEngine's ``create_complex``/
  ``get_real``/``get_imag`` -- bit for bit (NaN payloads, infinities and -0 included);
* the arithmetic the op's rule allows (add, sub, mul, neg, eq, neq), with numpy's promotion of
  float, integer and Python-number operands (``TypeCvt`` into complex64 on the device), numpy's
  broadcast, views, in-place updates (a donated input's buffer reused);
* ``astype("complex64")`` of every dtype a tensor holds;
* every data-moving op: reshape, transpose and the copies that make views dense (the relayout of
  complex64), basic, advanced and mask indexing and their assignments, concat, stack, split,
  broadcast, copies, ``Tensor.to`` between cpu0 and the device and between two devices, the
  creation functions with ``dtype="complex64"``, ``item``/``tolist``/``numpy``, swapping, a
  traced function;
* what cpu0 refuses (reductions, other modes, conversions to real dtypes, matmul, gather...)
  raises on the device the same exception with the same message, at async levels 0 and 2.

Each result is checked to come from the device (its ops counted in ``executed``).  Without g++
the tests are skipped with the reason, except under ``CI``.  Host compute is off, so every op
runs the device's kernels.
"""
import numpy as np
import pytest

try:
    from ml_dtypes import bfloat16 as BF16
except ImportError:  # (an optional dependency: its case is left out)
    BF16 = None

import mge
import mge.functional as F
from mge.core import AsyncError, get_option, set_option
from mge.core._imperative_rt.core2 import create_complex, get_imag, get_real
from mge._core.device.cuda import hostbuild
from mge._core.device.cuda.kernels import complex as ck
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import indexing as ix
from mge._core.device.cuda.kernels import relayout as rl
from mge._core.device.cuda.launch import lookup, plans
from mge._core.ops.elemwise import ComplexPart, CreateComplex, Elemwise, TypeCvt

from cuda_device_fixtures import DEV, at, both, cuda, level, on  # noqa: F401 (fixtures by name)

# cpu0's numpy warns of the NaNs and infinities the special values make; they are meant
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

C64 = np.dtype("complex64")
F32 = np.dtype("float32")

#: float32 values whose bits must survive: a signalling NaN, a NaN with a payload and its sign,
#: both infinities, -0, the smallest subnormal.
SPECIAL = np.array([0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001],
                   np.uint32).view(F32)


def parts(seed, shape, special=False):
    """Two float32 arrays of ``shape`` (``special``: ``SPECIAL`` in the first's first row)."""
    r = np.random.default_rng(seed)
    re_, im_ = (r.standard_normal(shape).astype(F32) for _ in range(2))
    if special:
        re_.reshape(-1)[:SPECIAL.size] = SPECIAL
        im_.reshape(-1)[-SPECIAL.size:] = SPECIAL[::-1]
    return re_, im_


def cdata(seed, shape, special=False):
    """complex64 data of ``shape``."""
    re_, im_ = parts(seed, shape, special)
    z = np.empty(shape, C64)
    z.real, z.imag = re_, im_
    return z


def bits(a):
    """``a``'s elements as their bytes (complex and float results compare bit for bit)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.dtype.kind in "fc" else a


def nan_free(a):
    """``a``'s complex or float parts with each NaN made +0 (a computed NaN's sign and payload
    are the hardware's: ``kernels/complex.py``'s DIFFERENCES); the NaNs' places."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind not in "fc":
        return a, None
    p = a.view(F32).copy() if a.dtype == C64 else a.copy()
    nan = np.isnan(p)
    p[nan] = 0
    return p, nan


def same(fn, computed=False):
    """``fn(device)`` on cudahost0 and cpu0 give the same results, bit for bit (``computed``:
    NaNs by their places)."""
    got, ref = both(fn)
    for g, r in zip(got, ref):
        if computed:
            (g, gn), (r, rn) = nan_free(g), nan_free(r)
            np.testing.assert_array_equal(gn, rn)
        np.testing.assert_array_equal(bits(g), bits(r))
    return got


def ran(dev, fn):
    """``fn()`` run, and the names of the op classes the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k.split(".")[0] for k, v in dev.executed.items() if v > before.get(k, 0)}


def _numpy_fuses():
    """Whether numpy's complex64 multiply of dense operands fuses its multiply-adds (its SIMD
    loop with FMA), as the device's kernel always does (``kernels/complex.py``'s
    DIFFERENCES)."""
    a = np.full(16, complex(1 + 2 ** -12, 2 ** -15), C64)
    return bool(((a * a.conj()).real == np.float32(1 + 2 ** -11 + 2 ** -23)).all())


NUMPY_FUSES = _numpy_fuses()


@pytest.fixture(scope="module", autouse=True)
def _built(cuda):
    """The kernels these tests run, built up front: a few host libraries instead of one g++
    build per op's first use."""
    v = ((True, 64), (False, 32))
    kernels = [ck.elemwise_kernel(m, [C64] * (1 if m == "neg" else 2), c, b)
               for m in ck.MODES for c, b in v]
    kernels += [ck.typecvt_kernel(d, c, b) for d in ck.REAL_DTYPES for c, b in v]
    kernels += [ck.create_kernel(a, i, c, b) for a in ck.PART_DTYPES for i in ck.PART_DTYPES
                for c, b in v]
    kernels += [ck.part_kernel(p, c, b) for p in ("real", "imag") for c, b in v]
    kernels += [rl.copy_kernel(n, c, b) for n in (1, 4, 8) for c, b in v]
    kernels += [rl.transpose_kernel(8), ek.typecvt_kernel(C64, C64, False, 32)]
    kernels += [ix.index_kernel(m, 1, itemsize=8, index_bits=32) for m in ("get", "set")]
    kernels += [ix.condtake_count_kernel(np.bool_), ix.condtake_scan_kernel(),
                ix.condtake_write_kernel(np.bool_, 1)]
    kernels += [ek.elemwise_kernel(m, [F32] * n, contiguous=c, index_bits=b)
                for m, n in (("sin", 1), ("cos", 1), ("mul", 2)) for c, b in v]  # F.polar's
    if BF16 is not None:
        kernels.append(ck.typecvt_kernel(BF16))
    if not hostbuild.have_float16():
        kernels = [k for k in kernels if "f16" not in k.name]
    cuda.backend.preload(kernels)


def test_the_complex_ops_have_the_familys_launchers(cuda):
    """``CreateComplex``/``ComplexPart`` run ``kernels/complex.py``'s plans (registered from its
    table); ``Elemwise``/``TypeCvt`` keep their launchers, which hand complex operands there."""
    for cls in (CreateComplex, ComplexPart):
        assert plans.REGISTERED[cls] is ck and lookup(cls).fn.__module__ == plans.__name__
        assert lookup(cls).strided
    for cls in (Elemwise, TypeCvt):
        assert lookup(cls).fn.__module__.endswith("launch.elemwise") and cls not in plans.REGISTERED
    assert ck in plans.family_modules()


def test_complex_tensors_are_made_and_taken_apart_bit_for_bit(cuda):
    re_, im_ = parts(0, (3, 4), special=True)
    z = cdata(1, (4, 5), special=True)

    def made(d):
        r, i = on(d, re_), on(d, im_)
        return [F.complex(r, i), F.complex(r[:, :1], i[:1]), F.complex(r.T[::-1], on(d, 2.5)),
                create_complex(r, i), on(d, z)]

    def taken(d):
        t = on(d, z)
        return [F.real(t), F.imag(t), F.real(t.T), F.imag(t[::-1, ::-2]), get_real(t[1]),
                get_imag(F.broadcast_to(t[:1], (3, 4, 5))), F.real(F.complex(on(d, re_),
                                                                             on(d, im_)))]
    names = ran(cuda, lambda: [t.numpy() for t in at(DEV, lambda: made(DEV) + taken(DEV))])
    assert {"CreateComplex", "ComplexPart"} <= names
    got = same(made)
    np.testing.assert_array_equal(bits(got[0].real), bits(re_))  # every special bit kept
    np.testing.assert_array_equal(bits(got[-1]), bits(z))
    got = same(taken)
    np.testing.assert_array_equal(bits(got[0]), bits(z.real))
    np.testing.assert_array_equal(bits(got[-1]), bits(re_))
    wide = np.random.default_rng(2).standard_normal((2, 3))
    same(lambda d: [F.complex(on(d, wide.astype("float16")), on(d, wide)),
                    F.complex(on(d, wide), on(d, np.array([np.inf, -0.0, np.nan], "float16")))])
    r, a = np.random.default_rng(3).random((2, 4), dtype=F32), np.linspace(0, 6, 4, dtype=F32)
    got, ref = both(lambda d: [F.polar(on(d, r), on(d, a))])  # through CUDA's sin and cos
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)


def test_arithmetic_and_comparisons_equal_cpu0(cuda):
    z, w = cdata(4, (4, 5), special=True), cdata(5, (4, 5))
    x = parts(6, (4, 5))[0]
    eq = w.copy()
    eq.real[0] = z.real[0]  # equal in one part only
    eq[1] = z[1]

    def exact(d):
        a, b, c = on(d, z), on(d, w), on(d, eq)
        return [a + b, a - b, -a, -(a.T), a == c, a != c, a == a, a != a, b * b, a * b,
                a * on(d, x), on(d, x) + a, a - on(d, x.astype("int16")), a * 2, 1 - a,
                a[:1] * b, (a * b + a - b).T, a.T * b.T, a == on(d, x)]
    names = ran(cuda, lambda: [t.numpy() for t in at(DEV, lambda: exact(DEV))])
    assert {"Elemwise", "TypeCvt"} <= names
    if NUMPY_FUSES:
        same(exact, computed=True)
    else:  # products compared apart: numpy rounds them separately on this CPU
        got, ref = both(exact)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)
    # a negative step: numpy's scalar loop rounds the products apart, the device fuses them
    got, ref = both(lambda d: [on(d, w)[:, ::-1] * on(d, z[:, ::-1].copy())])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6, atol=1e-6)


def test_in_place_updates_reuse_a_donated_buffer(cuda):
    z, w = cdata(7, (64,)), cdata(8, (64,))

    def step(d):
        a, b = on(d, z), on(d, w)
        a += b
        a *= b
        a -= on(d, 1.5)
        return [a, (a * b) + b]  # the product's buffer takes the sum

    before = cuda.inplace
    same(step, computed=not NUMPY_FUSES)
    assert cuda.inplace > before


def test_astype_into_complex64_of_every_dtype(cuda):
    r = np.random.default_rng(9)
    arrays = [r.random(6) < 0.5] + [
        r.integers(np.iinfo(d).min, np.iinfo(d).max, 6, dtype=d, endpoint=True)
        for d in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")]
    arrays += [np.array([1.5, -0.0, np.inf, 65504, 6e-8, -3], d) for d in ("float16", "float32")]
    arrays.append(np.array([1 + 2 ** -24, 3.4e38, 1e39, -1e-46, -0.0, 7], "float64"))
    arrays.append(SPECIAL)
    if BF16 is not None:
        arrays.append(np.array([0x7F81, 0x8000, 0x3F80, 0xC2F7], np.uint16).view(BF16))
    names = ran(cuda, lambda: [on(DEV, a).astype("complex64").numpy() for a in arrays])
    assert "TypeCvt" in names
    got = same(lambda d: [on(d, a).astype("complex64") for a in arrays] +
               [on(d, arrays[-2]).reshape(2, 3).T.astype("complex64")])
    assert all(g.dtype == C64 for g in got)
    z = on(DEV, cdata(10, (3,)))
    assert z.astype("complex64") is not None and z.astype("complex64").dtype == C64


def test_data_moving_ops_equal_cpu0(cuda):
    z, v = cdata(11, (4, 6), special=True), cdata(12, (6,))
    mask = np.random.default_rng(13).random((4, 6)) < 0.4

    def moved(d):
        a = on(d, z)
        return [a.reshape(3, 8), a.T, a.T.flatten(), F.transpose(a, (1, 0)).reshape(-1),
                a[1, ::2], a[::-1, ::-3], a[on(d, np.array([2, 0, -1], np.int32))], a[:, [5, 1]],
                a[on(d, mask)], F.concat([a, a.T.T[::-1]]), F.stack([a, a], axis=1),
                F.split(a, 3, axis=1)[1], F.broadcast_to(a[:1], (3, 4, 6)),
                F.expand_dims(a, 0), F.squeeze(a[:1], 0), F.flatten(a), F.copy(a), a.detach()]

    def assigned(d):
        a = on(d, z)
        a[0] = a[1]
        a[1, ::2] = on(d, v[:3])
        a[on(d, np.array([3, 2], np.int32))] = a[0]
        a[on(d, mask)] = on(d, 5.0)
        a[2:, 1] = on(d, np.array([1.0, -0.0], F32))  # a float value: converted on the device
        a[0, 0] = 7
        return [a]

    before = cuda.relayouts
    names = ran(cuda, lambda: [t.numpy() for t in at(DEV, lambda: moved(DEV) + assigned(DEV))])
    assert {"IndexingMultiAxisVec", "IndexingSetMultiAxisVec", "Concat", "Stack"} <= names
    assert cuda.relayouts > before  # views made dense by the relayout of complex64
    same(moved)
    same(assigned)


def test_transfers_creation_and_reads_equal_cpu0(cuda):
    z = cdata(14, (3, 5), special=True)
    t = on(DEV, z)
    np.testing.assert_array_equal(bits(t.numpy()), bits(z))
    for dst in ("cpu0", "cudahost1", DEV):
        u = t.to(dst)
        assert u.device == dst and u.dtype == C64
        np.testing.assert_array_equal(bits(u.numpy()), bits(z))
    back = on("cpu0", z).to(DEV)
    assert back.device == DEV
    np.testing.assert_array_equal(bits(back.numpy()), bits(z))
    np.testing.assert_array_equal(bits(F.copy(on("cpu0", z).T, DEV).numpy()), bits(z.T))
    assert t[1, 2].item() == complex(z[1, 2]) and t[1, 1:3].tolist() == z[1, 1:3].tolist()
    saved = get_option("enable_swap")
    set_option("enable_swap", 1)
    try:
        mge._full_sync()
        held = cuda.memory_stats()["allocated"]
        t._swap_out()  # to host memory and back, by the device's transfers
        mge._full_sync()
        assert cuda.memory_stats()["allocated"] < held
        t._swap_in()
        np.testing.assert_array_equal(bits(t.numpy()), bits(z))
    finally:
        set_option("enable_swap", saved)
    made = ran(cuda, lambda: at(DEV, lambda: [x.numpy() for x in created(DEV)]))
    assert {"Fill", "Eye", "Arange", "Linspace"} <= made
    same(created)


def created(d):
    """The creation functions with ``dtype="complex64"`` (on the default device)."""
    c = "complex64"
    z = on(d, cdata(17, (2, 3)))
    return [F.zeros((2, 3), dtype=c), F.ones((2, 3), dtype=c), F.full((2, 3), 2.5, dtype=c),
            F.zeros_like(z), F.ones_like(z), F.full_like(z, -1.5), F.eye(3, dtype=c),
            F.eye(3, 5, dtype=c), F.arange(-1, 1e6, 1.37e5, dtype=c),
            F.linspace(1e-3, 1 + 2 ** -20, 9, dtype=c)]


def test_a_traced_function_of_complex_tensors_replays_on_the_device(cuda):
    a, b = parts(15, (8,))

    @mge.jit.trace
    def f(x, y):
        z = F.complex(x, y)
        return F.real(z * z) - F.imag(z - y), z + 1

    for _ in range(3):
        got = [r.numpy() for r in f(on(DEV, a), on(DEV, b))]
    z = (a + 1j * b).astype(C64)
    np.testing.assert_allclose(got[0], (z * z).real - (z - b).imag, rtol=1e-6)
    np.testing.assert_array_equal(got[1], z + 1)


def _error(fn):
    """The exception ``fn()`` raises (an ``AsyncError``'s cause), with device names removed."""
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


REFUSED = [
    lambda d, z: F.sum(z), lambda d, z: F.exp(z), lambda d, z: F.abs(z),
    lambda d, z: z.astype("float32"), lambda d, z: F.matmul(z, z.T), lambda d, z: F.relu(z),
    lambda d, z: z / z, lambda d, z: z > z, lambda d, z: z ** 2, lambda d, z: F.max(z),
    lambda d, z: F.gather(z, 1, on(d, np.zeros((2, 3), np.int32))),
    lambda d, z: F.where(on(d, np.ones((2, 3), bool)), z, z), lambda d, z: F.sort(z),
    lambda d, z: F.tile(z, (2, 1)), lambda d, z: F.cumsum(z, 0),
    lambda d, z: F.real(on(d, np.ones(3, F32))),
    lambda d, z: F.complex(on(d, np.ones(3, np.int32)), on(d, np.ones(3, F32))),
    lambda d, z: z + (1 + 2j),
]


@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_what_cpu0_refuses_raises_the_same_error(cuda, level, case):
    z = cdata(16, (2, 3))
    fn = REFUSED[case]
    got = at(DEV, lambda: _error(lambda: fn(DEV, on(DEV, z))))
    ref = at("cpu0", lambda: _error(lambda: fn("cpu0", on("cpu0", z))))
    assert got == ref
    assert "complex" in got[1]
