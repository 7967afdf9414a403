"""The CUDA device's small ops (``kernels/misc.py``) and the new RNG kernels (``kernels/rng.py``:
Poisson, permutation, shuffle), checked without a GPU.

* every kernel compiles with NVRTC for ``compute_90`` and an older architecture (one program,
  ``-Ofc=max``), and ptxas assembles them for ``sm_90``;
* each op's plan (``PLANS``) runs on the host build through ``tests/cuda_plans.run_plan`` and is
  compared with the CPU kernel of ``KERNELS``: OneHot and integer Dots bit for bit, float Dots and
  MatInv within rounding, CheckNonFinite's products and flag bit for bit, AssertEqual's copy;
* the checks raise the CPU kernels' very errors: a label out of range, a singular matrix,
  AssertEqual's error (and its verbose print), a bad Poisson rate;
* random ops by their properties: Poisson means and variances for Knuth's and PTRS's rates,
  permutations of every length around the sort's tiles, reproducible per seed, ShuffleRNG's rows;
* bad input: MatInv above ``MAX_MATINV``, unsupported dtypes, outputs the rule does not give.

Every plan's kernels are built once, in one host library.  Without NVRTC, ptxas or g++ the tests
that need them are skipped with the reason (under ``CI``: a failure).
"""
import re

import numpy as np
import pytest
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import misc as mk
from mge._core.device.cuda.kernels import rng as rk
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Layout, Plan
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.matmul import SVD, Dot, MatInv
from mge._core.ops.misc import AssertEqual, AssertEqualError
from mge._core.ops.nn import OneHot
from mge._core.ops.rng import PermutationRNG, PoissonRNG, ShuffleRNG
from mge.amp.check_non_finite import CheckNonFinite
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
I32 = np.dtype("int32")


def _layouts(arrays):
    return [Layout(a.shape, a.dtype) for a in arrays]


def _out_layouts(op, ins):
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in ins])
    return [Layout(d.shape, d.dtype) for d in descs]


def _module(op):
    return mk if type(op) in mk.PLANS else rk


def _plan(op, ins):
    return _module(op).PLANS[type(op)](op, _layouts(ins), _out_layouts(op, ins))


def _run(op, ins):
    return run_plan(_plan(op, ins), ins, _out_layouts(op, ins))


def _cases():
    """[(op, inputs)] of the misc ops compared with the CPU kernels."""
    r = np.random.default_rng(0)
    cases = []
    for d in ("int8", "uint8", "int32", "int64", "uint64"):
        cases.append((OneHot(7), [r.integers(0, 7, (3, 5)).astype(d)]))
    cases.append((OneHot(1), [np.zeros((4,), np.int16)]))
    cases.append((OneHot(3), [np.zeros((0, 2), np.int32)]))
    for d in ("int8", "uint8", "int16", "int32", "int64", "uint32"):
        a = r.integers(-100 if d[0] == "i" else 0, 100, 3000).astype(d)
        cases.append((Dot(), [a, r.integers(0, 100, 3000).astype(d)]))
    for d, n in ((F16, 300), (F32, 100000), (F64, 777), (F32, 1), (F32, 0)):
        cases.append((Dot(), [r.standard_normal(n).astype(d), r.standard_normal(n).astype(d)]))
    cases.append((Dot(), [np.array(3.0, F32), np.array(-2.0, F32)]))
    for d in (F16, F32, F64):
        cases.append((CheckNonFinite(0.37), [r.standard_normal((3, 4)).astype(d)]))
    bad = r.standard_normal(50).astype(F32)
    bad[7] = np.nan
    cases.append((CheckNonFinite(2.5), [r.standard_normal(9).astype(F16), bad,
                                        np.zeros(0, F64), np.array([np.inf, 1.0])]))
    cases.append((CheckNonFinite(1.0), []))
    for d, shape in ((F32, (4, 4)), (F64, (3, 2, 9, 9)), (F16, (2, 3, 3)), (I32, (5, 5)),
                     (F64, (64, 64)), (F32, (1, 1)), (F32, (0, 3, 3)), (F32, (2, 0, 0))):
        x = (r.integers(-9, 9, shape) if d == I32 else r.standard_normal(shape)).astype(d)
        cases.append((MatInv(), [x]))
    e = r.standard_normal((2, 3)).astype(F32)
    for err in (np.array(0.1, F32), np.zeros(0, F32), np.array([3], np.int8)):
        cases.append((AssertEqual(5.0, False), [e, e, err]))
    return cases


CASES = _cases()


def _new_rng_plans():
    lam = np.ones(10, F32)
    return [_plan(PoissonRNG(1, 0), [lam.astype(d)]) for d in (F16, F32, F64)] + [
        _plan(PermutationRNG(1, 0, 5000, np.dtype(d), None), [])
        for d in ("int32", "int64", "int8", "float16", "float32")] + [
        _plan(ShuffleRNG(1, 0), [np.zeros((9, w), np.uint8)]) for w in (1, 2, 4, 8)]


def _kernels():
    plans = [_plan(op, ins) for op, ins in CASES] + _new_rng_plans()
    plans.append(_plan(AssertEqual(5.0, True), CASES[-1][1]))
    return list(dict.fromkeys(k for p in plans for k in p.kernels))


@pytest.fixture(scope="module")
def host():
    """One host library of every kernel the plans here launch."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    if not hostbuild.have_float16():
        _missing("the host build of the float16 kernels needs g++ 12 or later (_Float16)")
    return library(_kernels(), jobs=2)


# -- compiling ------------------------------------------------------------------------------------

def test_every_kernel_compiles_for_hopper_and_an_older_arch(old_arch):
    kernels = _kernels()
    assert len(kernels) >= 30
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "misc.cu", arch, fast_options(mk.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"
    nvrtc.clear_cache()


def test_ptxas_assembles_matinv_dot_and_the_sort_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    kernels = [mk.matinv_kernel(F64), mk.matinv_kernel(F16), *mk.dot_kernels(F32, F32, F32),
               *rk.sort_kernels(), rk.poisson_kernel(F32), mk.one_hot_kernel(np.int64)]
    ptx = nvrtc.compile_ptx(program(kernels), "rep.cu", "compute_90", mk.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="rep.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert ".shared" in ptx and "bar.sync" in ptx
    nvrtc.clear_cache()


# -- the plans against the CPU kernels ------------------------------------------------------------

def test_plans_cover_every_op_and_read_dense_inputs():
    assert set(mk.PLANS) == {OneHot, Dot, CheckNonFinite, AssertEqual, MatInv}
    assert mk.STRIDED == frozenset() and SVD not in mk.PLANS and mk.NOT_DONE == ()
    assert {PoissonRNG, PermutationRNG, ShuffleRNG} <= set(rk.PLANS) and rk.NOT_DONE == ()
    assert {type(op) for op, _ in CASES} == set(mk.PLANS)
    for op, ins in CASES:
        assert isinstance(_plan(op, ins), Plan)


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{type(op).__name__}-{i}" for i, (op, _) in enumerate(CASES)])
def test_misc_kernels_compute_what_the_cpu_kernels_compute(host, case):
    op, ins = CASES[case]
    got = _run(op, ins)
    want = KERNELS[type(op)](op, *ins)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if isinstance(op, (Dot, MatInv)) and g.dtype.kind == "f":
            tol = {F16: 2e-2, F32: 2e-4, F64: 1e-9}[g.dtype]
            scale = max(1.0, float(np.abs(w.astype(F64)).max(initial=0)))
            np.testing.assert_allclose(g.astype(F64), w.astype(F64), rtol=tol, atol=tol * scale)
        else:
            np.testing.assert_array_equal(g, w)


def test_a_dot_of_many_blocks_sums_every_partial(host):
    a = np.ones(600001, F32)
    plan = _plan(Dot(), [a, a])
    assert plan.launches[0].grid[0] == mk.DOT_BLOCKS
    assert _run(Dot(), [a, a])[0] == 600001


def test_a_label_out_of_range_raises_the_cpu_kernels_error(host):
    x = np.array([[0, 2], [5, -1]], np.int32)
    with pytest.raises(IndexError) as cpu:
        KERNELS[OneHot](OneHot(3), x)
    with pytest.raises(IndexError) as dev:
        _run(OneHot(3), [x])
    assert str(dev.value) == str(cpu.value) == "OneHot: labels must be in [0, 3), got range [-1, 5]"


@pytest.mark.parametrize("x", [np.array([[1.0, 2.0], [2.0, 4.0]]),
                               np.zeros((2, 3, 3), F32),
                               np.stack([np.eye(4), np.diag([1.0, 0.0, 2.0, 3.0])])])
def test_a_singular_matrix_raises_the_cpu_kernels_error(host, x):
    with pytest.raises(ValueError) as cpu:
        KERNELS[MatInv](MatInv(), x)
    with pytest.raises(ValueError) as dev:
        _run(MatInv(), [x])
    assert str(dev.value) == str(cpu.value)


def test_matinv_pivots_rows_and_refuses_large_matrices(host):
    x = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [4.0, -3.0, 8.0]])  # a zero first pivot
    np.testing.assert_allclose(_run(MatInv(), [x])[0], np.linalg.inv(x), rtol=1e-12)
    big = np.zeros((65, 65), F32)
    with pytest.raises(NotImplementedError, match=r"MatInv.*n <= 64.*n = 65.*\(65, 65\)"):
        _plan(MatInv(), [big])


def test_check_non_finite_flags_nan_and_infinity(host):
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones(1000, F16)
        x[999] = bad
        *ys, flag = _run(CheckNonFinite(0.5), [np.ones(3, F32), x])
        assert flag.shape == () and flag.dtype == I32 and int(flag) == 1
    *_, flag = _run(CheckNonFinite(1e-30), [np.full(4, 6e4, F16)])  # finite before scaling
    assert int(flag) == 0


def test_assert_equal_raises_and_prints_as_the_cpu_kernel(host, capsys):
    e = np.arange(6, dtype=F32).reshape(2, 3)
    for verbose in (False, True):
        op = AssertEqual(0.5, verbose)
        for err in (np.array(0.75, F32), np.array(np.nan, F64)):
            with pytest.raises(AssertEqualError) as cpu:
                KERNELS[AssertEqual](op, e, e, err)
            want = capsys.readouterr().out
            with pytest.raises(AssertEqualError) as dev:
                _run(op, [e, e, err])
            assert capsys.readouterr().out == want
            assert str(dev.value) == str(cpu.value)
        (y,) = _run(op, [e, e, np.array(0.25, F32)])
        np.testing.assert_array_equal(y, e)
        assert capsys.readouterr().out == ("AssertEqual: err=0.25\n" if verbose else "")


# -- the new RNG kernels --------------------------------------------------------------------------

@pytest.mark.parametrize("lam", [0.3, 4.0, 9.9, 10.0, 55.0, 1e4])
def test_poisson_samples_have_the_rates_mean_and_variance(host, lam):
    x = np.full(20000, lam, F32)
    (y,) = _run(PoissonRNG(11, 0), [x])
    assert y.dtype == F32 and (y == np.round(y)).all() and (y >= 0).all()
    se = np.sqrt(lam / y.size)
    assert abs(y.mean() - lam) < 5 * se
    assert abs(y.var() / lam - 1) < 0.08
    (again,) = _run(PoissonRNG(11, 0), [x])
    np.testing.assert_array_equal(y, again)


def test_poisson_of_zero_and_of_every_dtype(host):
    for d in (F16, F32, F64):
        (y,) = _run(PoissonRNG(3, 0), [np.array([0.0, 0.0, 2.0, 30.0], d)])
        assert y.dtype == d and y[0] == 0 and y[1] == 0


@pytest.mark.parametrize("lam", [-1.0, np.nan, np.inf, 1e19])
def test_a_bad_poisson_rate_raises_the_cpu_kernels_error(host, lam):
    x = np.array([1.0, lam], F64)
    with pytest.raises(ValueError) as cpu:
        KERNELS[PoissonRNG](PoissonRNG(1, 0), x)
    with pytest.raises(ValueError) as dev:
        _run(PoissonRNG(1, 0), [x])
    assert str(dev.value) == str(cpu.value)


@pytest.mark.parametrize("n", [1, 2, 3, 100, 1023, 1024, 1025, 4096, 5000])
def test_permutations_of_every_length_are_permutations(host, n):
    (p,) = _run(PermutationRNG(5, 0, n, np.dtype("int64"), None), [])
    assert p.dtype == np.int64 and sorted(p.tolist()) == list(range(n))
    if n >= 100:
        assert (p != np.arange(n)).mean() > 0.9


def test_permutations_depend_on_the_seed_only(host):
    a = _run(PermutationRNG(5, 0, 3000, np.dtype("int32"), None), [])[0]
    b = _run(PermutationRNG(5, 7, 3000, np.dtype("float32"), None), [])[0]  # another handle
    c = _run(PermutationRNG(6, 0, 3000, np.dtype("int32"), None), [])[0]
    np.testing.assert_array_equal(a, b.astype(np.int32))
    assert (a != c).any()
    # the keys are Philox's: the permutation is the argsort of the 64-bit keys
    x, y = rk_words(5, 3000)
    keys = (x.astype(np.uint64) << np.uint64(32)) | y.astype(np.uint64)
    np.testing.assert_array_equal(a, np.argsort(keys, kind="stable"))
    # the launch count grows as log^2 of the length, the tiles taking the small steps
    plan = _plan(PermutationRNG(5, 0, 3000, np.dtype("int32"), None), [])
    assert len(plan.launches) == 1 + 1 + (1 + 1) + (2 + 1) + 1


def rk_words(seed, n):
    """Words x, y of draw 0 of elements 0..n-1 (rng.py's pure-Python-free route: the Philox
    known-answer kernel on the host)."""
    ctr = np.zeros((n, 4), np.uint32)
    ctr[:, 0] = np.arange(n, dtype=np.uint32)
    key = np.tile(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32), (n, 1))
    from mge._core.device.cuda.kernels.launch import Buf, Launch
    k = rk.philox_kernel()
    plan = Plan((Launch(k, (4,), (64,), (Buf("in0"), Buf("in1"), Buf("out0"), np.int64(n))),))
    (out,) = run_plan(plan, [ctr.reshape(-1), key.reshape(-1)], [Layout((4 * n,), np.uint32)])
    out = out.reshape(n, 4)
    return out[:, 0], out[:, 1]


@pytest.mark.parametrize("shape,dtype", [((10, 3), F16), ((1500, 2, 2), F64), ((7,), np.int8),
                                         ((5, 0), F32), ((0, 4), F32), ((6, 3), np.uint8)])
def test_shuffle_moves_rows_by_its_permutation(host, shape, dtype):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).astype(dtype).reshape(shape)
    y, perm = _run(ShuffleRNG(9, 0), [x])
    assert y.shape == x.shape and y.dtype == x.dtype and perm.dtype == I32
    assert perm.shape == (shape[0],) and sorted(perm.tolist()) == list(range(shape[0]))
    np.testing.assert_array_equal(y, x[perm])
    if shape[0]:
        (p,) = _run(PermutationRNG(9, 0, shape[0], np.dtype("int32"), None), [])
        np.testing.assert_array_equal(perm, p)


# -- bad input ------------------------------------------------------------------------------------

def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="OneHot"):
        _plan(OneHot(3), [np.zeros(3, F32)])
    with pytest.raises(ValueError, match="Dot"):
        _plan(Dot(), [np.zeros(3, F32), np.zeros(4, F32)])
    with pytest.raises(TypeError, match="CheckNonFinite"):
        _plan(CheckNonFinite(1.0), [np.zeros(3, np.int32)])
    with pytest.raises(ValueError, match="MatInv"):
        _plan(MatInv(), [np.zeros((2, 3), F32)])
    with pytest.raises(TypeError, match="Dot kernel: unsupported dtype bool"):
        mk.dot_kernels(np.bool_, np.bool_, np.bool_)
    with pytest.raises(TypeError, match="PermutationRNG kernel: unsupported dtype bool"):
        rk.perm_out_kernel(np.bool_)
    x = np.zeros((3, 3), F32)
    with pytest.raises(ValueError, match="MatInv plan: outputs"):
        mk.matinv_plan(MatInv(), _layouts([x]), [Layout((3, 3), F64)])
    with pytest.raises(ValueError, match="seed"):
        _plan(PermutationRNG(-1, 0, 3, np.dtype("int32"), None), [])
