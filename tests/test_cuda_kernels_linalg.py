"""The CUDA device's SVD (``kernels/linalg.py``: one-sided Jacobi, a block per matrix), checked
without a GPU.

* every kernel (one per input dtype) compiles with NVRTC for ``compute_90`` and an older
  architecture (one program, ``-Ofc=max``), and ptxas assembles the float and double ones for
  ``sm_90`` (the float one compiled with the kernels' own flags);
* the plan runs on the host build through ``tests/cuda_plans.run_plan`` and is compared, for
  every ``full_matrices``/``compute_uv``, with the CPU kernel (dtypes and shapes) and with
  numpy's float64 SVD of the same values: ``S`` within ``TOL`` of ``S[0]``, and -- singular
  vectors being unique only up to sign and rotations of repeated singular values -- invariantly:
  ``U[..., :k] diag(S) Vh[..., :k, :]`` reconstructs the input and ``U``, ``V`` are orthonormal;
  empty inputs and the zero matrix exactly as the CPU kernel (identities);
* the shared-memory and the workspace regions, and blocks looping over the batch, give the same
  bits; the plan's region is exactly the kernel's; a NaN raises the CPU kernel's error, an
  infinity gives NaN, a matrix still rotating after ``MAX_SWEEPS`` raises "did not converge";
* bad input: unsupported dtypes, non-matrices, outputs the rule does not give, a matrix too large.

Every plan's kernels are built once, in one host library.  Without NVRTC, ptxas or g++ the tests
that need them are skipped with the reason (under ``CI``: a failure).
"""
import re

import numpy as np
import pytest
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import linalg as lk
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Layout, Plan
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.matmul import SVD
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
DTYPES = (F16, F32, F64) + tuple(np.dtype(d) for d in (
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"))

#: (S, reconstruction, orthogonality) tolerances by output dtype, the first two relative to
#: numpy's S[0] (the matrix's 2-norm).  Each Jacobi rotation is exact to about one ulp of the
#: computing type and a column meets N - 1 of them per sweep, over 5 to 30 sweeps; the errors
#: grow as a random walk over those rotations, sqrt(N * sweeps) ulp of float (1.2e-7) or double
#: (2.2e-16): up to some 60 ulp for the 40 x 40 and 64 x 64 cases here (V's orthogonality, which
#: no later rotation restores, the largest).  The bounds are about 7 times what the cases show
#: (at most 1/7 of each).  float16 outputs are U, S and Vh rounded to 11 bits (4.9e-4 each).
TOL = {F16: (4e-3, 1e-2, 1e-2), F32: (3e-5, 3e-5, 2e-4), F64: (1e-13, 1e-13, 1e-13)}


def _outs(op, shape, dtype):
    descs = INFER[SVD](op, [TensorDesc(tuple(shape), np.dtype(dtype))])
    return [Layout(d.shape, d.dtype) for d in descs]


def _plan(op, x):
    return lk.svd_plan(op, [Layout(x.shape, x.dtype)], _outs(op, x.shape, x.dtype))


def _run(op, x):
    return run_plan(_plan(op, x), [x], _outs(op, x.shape, x.dtype))


def _orthogonal(q):
    return np.linalg.qr(q)[0]


def _graded(r, n, decades):
    """An ``n x n`` matrix of singular values ``logspace(0, -decades)`` between random bases."""
    s = np.logspace(0, -decades, n)
    return (_orthogonal(r.standard_normal((n, n))) * s) @ _orthogonal(r.standard_normal((n, n)))


def _cases():
    """[(name, x)] of the matrices compared with numpy."""
    r = np.random.default_rng(0)
    cases = [(f"{d}-{'x'.join(map(str, s))}", r.standard_normal(s).astype(d))
             for d, s in ((F32, (3, 3)), (F32, (5, 3)), (F32, (3, 5)), (F32, (1, 1)),
                          (F32, (4, 1)), (F32, (1, 4)), (F32, (2, 4, 3)), (F32, (2, 3, 7)),
                          (F32, (40, 40)), (F32, (20, 7)), (F64, (6, 6)), (F64, (9, 4)),
                          (F64, (3, 2, 8)), (F64, (64, 64)), (F16, (3, 4, 5)))]
    cases += [(f"{d}-int", r.integers(-9, 10, (2, 4, 3)).astype(d))
              for d in ("int8", "int32", "int64")]
    cases.append(("uint8", r.integers(0, 200, (5, 2)).astype(np.uint8)))
    low = r.standard_normal((6, 2)) @ r.standard_normal((2, 5))  # rank 2: a null space to build
    cases += [("rank2-f64", low), ("rank2-f32", np.ascontiguousarray(low.astype(F32).T))]
    rotation = _orthogonal(r.standard_normal((5, 5)))
    cases.append(("repeated-f64", np.stack([np.eye(5), 3 * rotation])))  # S all equal
    cases.append(("graded-f64", _graded(r, 24, 12)))
    cases.append(("graded-f32", _graded(r, 16, 5).astype(F32)))
    cases.append(("tiny-f32", (r.standard_normal((4, 3)) * 1e-30).astype(F32)))
    cases.append(("huge-f32", (r.standard_normal((3, 4)) * 1e30).astype(F32)))
    cases.append(("one-column-zero", np.array([[1.0, 0.0, 2.0], [3.0, 0.0, 4.0]], F32)))
    return cases


CASES = _cases()
OPTIONS = [(False, True), (True, True), (False, False)]


def _kernels():
    return [lk.svd_kernel(d) for d in (F16, F32, F64, np.int8, np.uint8, np.int32, np.int64)]


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
    kernels = [lk.svd_kernel(d) for d in DTYPES]
    assert len({k.name for k in kernels}) == len(DTYPES)
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "linalg.cu", arch, fast_options(lk.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"
    nvrtc.clear_cache()


def test_ptxas_assembles_the_float_and_double_kernels_for_sm90(nvrtc_ready, ptxas_ready):
    # the float kernel as the device compiles it; the double one (the same template, whose
    # optimised build takes ptxas several seconds) from the sweep's quickly generated PTX
    for kernel, options in ((lk.svd_kernel(F32), lk.NVRTC_OPTIONS),
                            (lk.svd_kernel(F64), fast_options(lk.NVRTC_OPTIONS))):
        ptx = nvrtc.compile_ptx(program([kernel]), f"{kernel.name}.cu", "compute_90", options)
        cubin = nvrtc.assemble(ptx, "sm_90", name=f"{kernel.name}.ptx")
        assert cubin[:4] == b"\x7fELF"
        assert ".shared" in ptx and "bar.sync" in ptx
    nvrtc.clear_cache()


# -- the plan against numpy -----------------------------------------------------------------------

def test_the_family_table():
    from mge._core.device.cuda.launch import plans
    assert lk.PLANS == {SVD: lk.svd_plan} and lk.STRIDED == frozenset() and lk.NOT_DONE == ()
    assert any(m is lk for m in plans.family_modules())


def _check_svd(x, got, full, uv):
    """``got`` (the device's outputs) is an SVD of ``x`` within ``TOL``."""
    want = KERNELS[SVD](SVD(full, uv), x)
    assert [(g.dtype, g.shape) for g in got] == [(w.dtype, w.shape) for w in want]
    a = x.astype(F64)
    ref = np.linalg.svd(a, compute_uv=False)
    s = (got[1] if uv else got[0]).astype(F64)
    tol_s, tol_r, tol_o = TOL[got[0].dtype]
    scale = ref[..., :1]
    assert (s >= 0).all() and (np.diff(s, axis=-1) <= 0).all(), s
    assert (np.abs(s - ref) <= tol_s * scale).all(), (s, ref)
    if not uv:
        return
    u, vh = got[0].astype(F64), got[2].astype(F64)
    k = s.shape[-1]
    rec = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
    assert (np.abs(rec - a) <= tol_r * scale[..., None]).all(), np.abs(rec - a).max()
    for q in (np.swapaxes(u, -1, -2) @ u, vh @ np.swapaxes(vh, -1, -2)):
        assert np.abs(q - np.eye(q.shape[-1])).max() <= tol_o


@pytest.mark.parametrize("full,uv", OPTIONS, ids=["reduced", "full", "values"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=[name for name, _ in CASES])
def test_svd_is_an_svd_of_the_input(host, case, full, uv):
    x = CASES[case][1]
    _check_svd(x, _run(SVD(full, uv), x), full, uv)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3), (0, 2, 3), (2, 3, 0),
                                   (3, 3), (4, 2), (2, 4), (2, 1, 3)])
def test_empty_and_zero_matrices_give_the_cpu_kernels_identities(host, shape):
    for full, uv in OPTIONS + [(True, False)]:
        x = np.zeros(shape, F64)
        got = _run(SVD(full, uv), x)
        want = KERNELS[SVD](SVD(full, uv), x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    if 0 in shape[-2:] or 0 in shape:
        assert _plan(SVD(False, True), np.zeros(shape, F32)).steps == ()


# -- regions, block loops, layout -----------------------------------------------------------------

def test_shared_and_workspace_regions_and_block_loops_give_the_same_bits(host, monkeypatch):
    x = np.random.default_rng(3).standard_normal((5, 6, 9)).astype(F32)
    for full in (False, True):
        op = SVD(full, True)
        plan = _plan(op, x)
        (launch,) = plan.launches
        assert launch.shared_bytes > 0 and launch.args[5] is None and launch.grid[0] == 5
        ref = _run(op, x)
        with monkeypatch.context() as mp:
            mp.setattr(lk, "MAX_BLOCKS", 2)  # two blocks in turn over five matrices
            assert _plan(op, x).launches[0].grid[0] == 2
            for g, w in zip(_run(op, x), ref):
                np.testing.assert_array_equal(g, w)
        with monkeypatch.context() as mp:
            mp.setattr(lk, "MAX_SHARED_BYTES", 0)  # the workspace, one region per block
            mp.setattr(lk, "WORKSPACE_BYTES", 1)   # (one block, reusing its region)
            (launch,) = _plan(op, x).launches
            assert launch.shared_bytes == 0 and launch.args[5] is not None
            assert launch.grid[0] == 1 and launch.args[6] >= lk.region_bytes(
                9, 6, 9 if full else 6, True, launch.block[0], 4)
            for g, w in zip(_run(op, x), ref):
                np.testing.assert_array_equal(g, w)


def test_a_large_double_matrix_takes_the_workspace(host):
    plan = _plan(SVD(), CASES[[n for n, _ in CASES].index("float64-64x64")][1])
    (launch,) = plan.launches
    assert launch.shared_bytes == 0 and launch.args[5] is not None
    assert "workspace" in plan.notes[0] and launch.block[0] == lk.MAX_THREADS


def test_the_plans_region_is_exactly_the_kernels(host):
    import dataclasses
    x = np.random.default_rng(4).standard_normal((7, 4)).astype(F64)
    op = SVD(True, True)
    plan = _plan(op, x)
    (launch,) = plan.launches
    short = Plan((dataclasses.replace(launch, shared_bytes=launch.shared_bytes - 4),),
                 plan.workspace, plan.checks)
    with pytest.raises(AssertionError, match="more dynamic shared memory"):
        run_plan(short, [x], _outs(op, x.shape, x.dtype))
    # a workspace region smaller than the kernel's layout is refused by the kernel, named
    args = list(launch.args)
    args[5], args[6] = launch.args[4] + 256, np.int64(launch.shared_bytes - 4)
    bad = Plan((dataclasses.replace(launch, args=tuple(args), shared_bytes=0),),
               plan.workspace + 256 + launch.shared_bytes, plan.checks)
    with pytest.raises(RuntimeError, match=r"CUDA SVD: the kernel's region .*\(7, 4\).*bug"):
        run_plan(bad, [x], _outs(op, x.shape, x.dtype))


# -- checks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("uv", [True, False])
def test_a_nan_raises_the_cpu_kernels_error(host, uv):
    x = np.random.default_rng(5).standard_normal((3, 4, 4)).astype(F32)
    x[1, 2, 3] = np.nan
    with pytest.raises(ValueError) as cpu:
        KERNELS[SVD](SVD(False, uv), x)
    with pytest.raises(ValueError) as dev:
        _run(SVD(False, uv), x)
    assert str(dev.value) == str(cpu.value) == (
        "SVD: did not converge (input shape (3, 4, 4)): SVD did not converge")


def test_an_infinity_gives_nan_outputs_for_its_matrix_only(host):
    x = np.random.default_rng(6).standard_normal((2, 3, 2)).astype(F64)
    x[0, 1, 1] = -np.inf
    u, s, vh = _run(SVD(True, True), x)
    assert np.isnan(u[0]).all() and np.isnan(s[0]).all() and np.isnan(vh[0]).all()
    _check_svd(x[1:], [u[1:], s[1:], vh[1:]], True, True)


def test_a_matrix_still_rotating_after_the_sweeps_does_not_converge(host, monkeypatch):
    monkeypatch.setattr(lk, "MAX_SWEEPS", 1)
    d = np.diag([1.0, 3.0, 2.0]).astype(F32)  # no rotation: converged in one sweep
    u, s, vh = _run(SVD(), d)
    np.testing.assert_array_equal(s, [3.0, 2.0, 1.0])
    np.testing.assert_array_equal(np.abs(u @ np.diag(s) @ vh), d)
    x = np.random.default_rng(7).standard_normal((4, 4)).astype(F32)
    with pytest.raises(ValueError, match=re.escape(
            "SVD: did not converge (input shape (4, 4)): SVD did not converge")):
        _run(SVD(), x)


# -- bad input ------------------------------------------------------------------------------------

def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="SVD.*bool"):
        _plan(SVD(), np.zeros((3, 3), np.bool_))
    with pytest.raises(ValueError, match="SVD.*at least 2 dimensions"):
        _plan(SVD(), np.zeros(3, F32))
    with pytest.raises(TypeError, match="CUDA SVD kernel: unsupported dtype bool"):
        lk.svd_kernel(np.bool_)
    with pytest.raises(TypeError, match="CUDA SVD kernel: unsupported dtype complex64"):
        lk.svd_kernel(np.complex64)
    with pytest.raises(TypeError, match="CUDA SVD kernel: not a dtype"):
        lk.svd_kernel("matrix")
    # (the plan's own refusal; once the process has made a complex tensor the op's rule refuses
    # complex inputs first -- ops/base.py's guard -- with its own message naming the same)
    c = [Layout((2, 4, 3), np.complex64)]
    with pytest.raises(TypeError, match=r"SVD: .*complex.*\(2, 4, 3\).*complex64"):
        lk.svd_plan(SVD(), c, _outs(SVD(), (2, 4, 3), np.complex64))
    x = [Layout((4, 3), F32)]
    with pytest.raises(ValueError, match=r"CUDA SVD plan: outputs .*\(4, 3\) float32"):
        lk.svd_plan(SVD(), x, [Layout((4, 3), F64), Layout((3,), F32), Layout((3, 3), F32)])
    big = Layout((2, 30000, 20000), F32)
    with pytest.raises(NotImplementedError,
                       match=r"CUDA SVD: .*m = 30000, n = 20000.*\(2, 30000, 20000\) float32"):
        lk.svd_plan(SVD(), [big], _outs(SVD(), big.shape, F32))
