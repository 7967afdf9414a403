"""The CUDA device's norm, RNG, dropout and optimizer kernels, checked without a GPU.

``mge/_core/device/cuda/kernels/{norm,rng,optimizer}.py`` write CUDA C and ``launch.py`` plans,
one per op class in each module's ``PLANS``.  Here:

* every kernel of every dtype signature (and optimizer variant) compiles with NVRTC for
  ``compute_90`` and an older architecture (one program per module, ``-Ofc=max``), and ptxas
  assembles a representative program (compiled with the kernels' own flags) for ``sm_90``;
* each op's plan, from its module's ``PLANS`` on the inputs' layouts and the outputs its rule
  gives, runs on the host build through ``tests/cuda_plans.run_plan`` -- the plans' very grids,
  blocks and workspaces, emulated on the host -- and is compared with the CPU kernel of
  ``KERNELS``: norms (inference BatchNorm bit for bit, the reductions within a stated tolerance of
  float64 references), the optimizer updates bit for bit, in place too (outputs bound to the
  input buffers ``INPLACE`` names);
* RNG: Philox4x32-10 against Random123's known answers and a pure-Python Philox; values
  independent of the grid/block split; distribution sanity with a fixed seed; dropout's mask
  and scaling; GammaRNG's and BetaRNG's ``Check``s raise the CPU kernel's very errors;
* bad input: unsupported dtypes, unknown modes, bad axes, wrong input counts and outputs, bad
  parameters, seeds and streams.

Every plan's kernels are built once, in one host library (``cuda_plans.library``, two
translation units side by side), which ``run_plan`` then reuses.  Without NVRTC, ptxas or g++ the
tests that need them are skipped with the reason, except under ``CI`` (which installs them),
where that is a failure.
"""
import dataclasses
import os
import re

import numpy as np
import pytest
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import norm as nk
from mge._core.device.cuda.kernels import optimizer as ok
from mge._core.device.cuda.kernels import rng as rk
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Buf, Launch, Layout, Plan
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.nn import Dropout, DropoutBackward
from mge._core.ops.nn_norm import BatchNorm, BatchNormBackward, LayerNorm, LayerNormBackward
from mge._core.ops.optimizer import (
    AdadeltaUpdate, AdagradUpdate, AdamUpdate, RMSpropUpdate, SGDUpdate,
)
from mge._core.ops.rng import (
    BetaRNG, GammaRNG, GaussianRNG, PermutationRNG, PoissonRNG, ShuffleRNG, UniformRNG,
)
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
FLOATS = (F16, F32, F64)
WORKERS = min(2, os.cpu_count() or 1)


# -- the cases: ops, inputs and plans -------------------------------------------------------------

def _norm_cases():
    """[(op, inputs)]: every norm op on every float dtype, a few layouts, mixed parameter
    dtypes; one BatchNorm big enough for several chunks per channel."""
    rng = np.random.default_rng(0)
    cases = []
    for dt in FLOATS:
        x = rng.normal(3, 2, (4, 5, 6, 7)).astype(dt)
        w, b = rng.normal(size=5).astype(dt), rng.normal(size=5).astype(dt)
        mean, var = rng.normal(size=5).astype(dt), (rng.random(5) + 0.5).astype(dt)
        dy = rng.normal(size=x.shape).astype(dt)
        cases += [(BatchNorm("training", 1e-5), [x, w, b]),
                  (BatchNorm("inference", 1e-3), [x, w, b, mean, var]),
                  (BatchNormBackward(1e-5), [x, dy, mean, var, w])]
        for affine in (True, False):
            for start, end in ((-1, None), (1, 3), (0, 2)):
                op = LayerNorm(affine, 1e-5, start, end)
                lo, hi = start % 4, 4 if end is None else end
                wb = [rng.normal(size=x.shape[lo:hi]).astype(dt) for _ in range(2)]
                ins = [x] + (wb if affine else [])
                cases.append((op, ins))
                _, mu, rs = KERNELS[LayerNorm](op, *ins)
                cases.append((LayerNormBackward(affine, 1e-5, start, end),
                              [x, dy, mu, rs] + (wb[:1] if affine else [])))
    x = rng.normal(-1, 3, (8, 3, 50, 41)).astype(F32)  # m = 16400: chunks of 1024 per channel
    w64 = rng.normal(size=(3,))
    cases += [(BatchNorm("training", 1e-5), [x, w64, rng.normal(size=3).astype(F16)]),
              (BatchNormBackward(1e-5), [x, rng.normal(size=x.shape).astype(F32),
                                         x.mean(axis=(0, 2, 3)).astype(F64),
                                         x.var(axis=(0, 2, 3)), w64]),
              (BatchNorm("training", 1e-5), [rng.normal(size=(300, 7)).astype(F32),
                                             np.ones(7, F32), np.zeros(7, F32)]),
              (LayerNorm(True, 1e-5, -1, None), [rng.normal(5, 1, (3, 1000)).astype(F16),
                                                 np.ones(1000, F32), np.zeros(1000, F32)])]
    return cases


def _layouts(arrays):
    """The ``Layout``s of dense numpy inputs."""
    return [Layout(a.shape, a.dtype) for a in arrays]


def _out_layouts(op, ins):
    """The outputs' ``Layout``s, as the op's rule gives them (what the device passes a plan)."""
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in ins])
    return [Layout(d.shape, d.dtype) for d in descs]


def _plan(module, op, ins, **kw):
    """``module.PLANS[type(op)]``'s plan of ``op`` on the arrays ``ins``."""
    return module.PLANS[type(op)](op, _layouts(ins), _out_layouts(op, ins), **kw)


def _run(module, op, ins, **kw):
    """The op's plan run on the host: its outputs."""
    return run_plan(_plan(module, op, ins, **kw), ins, _out_layouts(op, ins))


def _norm_plan(op, ins):
    return _plan(nk, op, ins)


def _update_ops():
    ops = []
    for wd in (0.0, 0.01):
        ops += [SGDUpdate(0.1, m, wd, nes) for m, nes in ((0.0, False), (0.9, False), (0.9, True))]
        ops += [AdamUpdate(1e-3, 0.9, 0.999, 1e-8, wd, dec) for dec in (False, True)]
        ops += [AdagradUpdate(0.01, 0.001, 1e-10, wd), AdadeltaUpdate(1.0, 0.9, 1e-6, wd)]
        ops += [RMSpropUpdate(0.01, 0.99, 1e-8, wd, m, c) for c in (False, True)
                for m in (0.0, 0.5)]
    return ops


# (param, grad, state) dtypes: mge's own pairings, and float16 states
UPDATE_DTYPES = [(F32, F32, F32), (F64, F64, F64), (F16, F16, F32), (F16, F16, F16),
                 (F32, F16, F32)]


def _update_inputs(op, dts, rng, n=1500):
    p_dt, g_dt, s_dt = dts
    p, g = rng.normal(size=n).astype(p_dt), rng.normal(size=n).astype(g_dt)

    def state():
        return np.abs(rng.normal(size=n)).astype(s_dt)
    step = np.asarray(3.0, s_dt)
    cls = type(op)
    if cls is SGDUpdate:
        return [p, g] + ([state()] if op.momentum else [])
    if cls is AdamUpdate:
        return [p, g, state(), state(), step]
    if cls is AdagradUpdate:
        return [p, g, state(), step]
    if cls is AdadeltaUpdate:
        return [p, g, state(), state(), step]
    ins = [p, g, state() + 1, step]  # square_avg above g_avg**2: a real centered RMSprop
    if op.momentum:
        ins.append(state())
    if op.centered:
        ins.append(state() * 0.1)
    return ins


def _update_cases():
    rng = np.random.default_rng(1)
    return [(op, _update_inputs(op, dts, rng)) for op in _update_ops() for dts in UPDATE_DTYPES]


def _update_plan(op, ins):
    return _plan(ok, op, ins)


NORM_CASES = _norm_cases()
UPDATE_CASES = _update_cases()


def _rng_kernels():
    ks = [rk.philox_kernel()]
    for d in FLOATS:
        ks += [rk.uniform_kernel(d), rk.gaussian_kernel(d), rk.gamma_kernel(d),
               rk.beta_kernel(d), rk.dropout_kernel(d), rk.dropout_backward_kernel(d)]
    return ks


def _norm_kernels():
    ks = []
    for x in FLOATS:
        for p in FLOATS:  # uniform parameter dtypes, and x's against each other
            ks += nk.batch_norm_kernels("training", x, (p, p)).values()
            ks += nk.batch_norm_kernels("inference", x, (p,) * 4).values()
            ks += nk.batch_norm_backward_kernels((x, x, p, p, p)).values()
            for affine in (True, False):
                ks += nk.layer_norm_kernels(affine, x, (p, p) if affine else ()).values()
                ks += nk.layer_norm_backward_kernels(affine, (x, x, x, x, p)[:5 if affine
                                                                                else 4]).values()
    ks += [k for op, ins in NORM_CASES for k in _norm_plan(op, ins).kernels]
    return list(dict.fromkeys(ks))


def _update_kernels():
    ks = [k for op, ins in UPDATE_CASES for k in _update_plan(op, ins).kernels]
    return list(dict.fromkeys(ks))


GROUPS = {"norm": _norm_kernels, "rng": _rng_kernels, "optimizer": _update_kernels}


# -- compiling ------------------------------------------------------------------------------------

def _fast_options():
    return fast_options(nk.NVRTC_OPTIONS)




@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_kernel_compiles_for_hopper_and_an_older_arch(group, old_arch):
    kernels = GROUPS[group]()
    assert len(kernels) >= 15
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, f"{group}.cu", arch, _fast_options())
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX of {group} for {arch}: {missing}"
    nvrtc.clear_cache()


def test_ptxas_assembles_a_representative_program_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12 (or set "
                 "MGE_PTXAS)")
    # float16 (inline PTX conversions) and the reductions' shared memory and barriers
    kernels = list(nk.batch_norm_kernels("training", F16, (F32, F32)).values())
    kernels += nk.batch_norm_backward_kernels((F32,) * 5).values()
    kernels += nk.layer_norm_kernels(True, F16, (F16, F16)).values()
    kernels += nk.layer_norm_backward_kernels(True, (F32,) * 5).values()
    kernels += [rk.philox_kernel(), rk.gaussian_kernel(F32), rk.gamma_kernel(F64),
                rk.dropout_kernel(F16)]
    kernels += _update_plan(*UPDATE_CASES[0]).kernels  # SGD
    kernels += ok.update_kernels(AdamUpdate(1e-3, 0.9, 0.999, 1e-8, 0.01, True),
                                 (F16, F16, F32, F32, F32)).values()
    ptx = nvrtc.compile_ptx(program(kernels), "representative.cu", "compute_90",
                            nk.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="representative.ptx")
    assert cubin[:4] == b"\x7fELF"
    absent = [k.name for k in kernels if k.name.encode() not in cubin]
    assert not absent, f"not in the cubin: {absent}"
    # the reductions really use shared memory and barriers on the GPU
    assert ".shared" in ptx and "bar.sync" in ptx


def test_nvrtc_reports_a_broken_program(nvrtc_ready):
    broken = program([rk.uniform_kernel(F32)]) + "MGE_KERNEL broken() { undeclared(); }\n"
    with pytest.raises(nvrtc.CudaCompileError, match="undeclared"):
        nvrtc.compile_ptx(broken, "broken.cu", "compute_90", _fast_options())


# -- the host build ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host():
    """One host library of every kernel the plans here launch (two translation units side by
    side); ``run_plan`` finds each plan's kernels in it instead of building them again."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    if not hostbuild.have_float16():
        _missing("the host build of the float16 kernels needs g++ 12 or later (_Float16)")
    kernels = list(dict.fromkeys(k for f in GROUPS.values() for k in f()))
    return library(kernels, jobs=WORKERS)


def test_plans_cover_every_op_of_the_family_and_say_what_they_read():
    assert set(nk.PLANS) == {BatchNorm, BatchNormBackward, LayerNorm, LayerNormBackward}
    assert set(rk.PLANS) == {UniformRNG, GaussianRNG, GammaRNG, BetaRNG, Dropout,
                             DropoutBackward, PoissonRNG, PermutationRNG, ShuffleRNG}
    assert set(ok.PLANS) == set(ok.OPTIMIZER_OPS) == set(ok.INPLACE)
    for module in (nk, rk, ok):
        assert isinstance(module.STRIDED, frozenset) and module.STRIDED <= set(module.PLANS)
    # the plans' steps are launch.py's, and the cases cover every op class
    covered = {type(op) for op, _ in NORM_CASES + UPDATE_CASES}
    assert covered == set(nk.PLANS) | set(ok.PLANS)
    for op, ins in NORM_CASES + UPDATE_CASES:
        plan = _plan(nk if type(op) in nk.PLANS else ok, op, ins)
        assert isinstance(plan, Plan) and all(isinstance(s, Launch) for s in plan.steps)


def test_inplace_pairs_are_outputs_over_the_inputs_they_replace():
    for op, ins in UPDATE_CASES:
        outs = _out_layouts(op, ins)
        pairs = [(j, k) for j, k in ok.INPLACE[type(op)] if j < len(outs)]
        assert [j for j, _ in pairs] == list(range(len(outs))), op  # every output has its input
        for j, k in pairs:
            assert (outs[j].shape, outs[j].dtype) == (ins[k].shape, ins[k].dtype), (op, j, k)


# -- norms ----------------------------------------------------------------------------------------

def _f64_reference(op, ins):
    """The CPU kernel on the inputs converted to float64: the exact-ish reference."""
    outs = KERNELS[type(op)](op, *[a.astype(F64) for a in ins])
    return [np.asarray(o) for o in outs]


def _tolerance(dtype, size):
    # Welford/tree sums in the computing type: a few ulp times log2 of the reduced size; float16
    # outputs: their own rounding (2**-11) plus that
    eps = {F16: 2.0 ** -11, F32: 2.0 ** -23, F64: 2.0 ** -52}[dtype]
    grow = 8 * max(1.0, np.log2(max(size, 2)))
    return eps * (4 if dtype == F16 else grow) + (2.0 ** -23 * grow if dtype == F16 else 0)


@pytest.mark.parametrize("case", range(len(NORM_CASES)))
def test_norm_kernels_compute_what_the_cpu_kernels_compute(host, case):
    op, ins = NORM_CASES[case]
    outs = _run(nk, op, ins)
    cpu = KERNELS[type(op)](op, *ins)
    ref = _f64_reference(op, ins)
    for k, (o, c, r) in enumerate(zip(outs, cpu, ref)):
        assert o.dtype == c.dtype and o.shape == c.shape, (op, k)
        if type(op) is BatchNorm and op.fwd_mode == "inference":
            np.testing.assert_array_equal(o, c, err_msg=f"{op} output {k}")  # same order: bits
            continue
        # relative to the output's scale (dx, y: differences of near-equal terms); an element
        # nobody wrote is NaN (run_plan fills outputs with 0xff bytes) and fails
        scale = np.abs(r).max() + 1e-30
        tol = _tolerance(o.dtype, ins[0].size)
        err = np.abs(o.astype(F64) - r).max() / scale
        cpu_err = np.abs(c.astype(F64) - r).max() / scale
        assert err <= max(tol, 2 * cpu_err), f"{op} output {k}: {err:.3g} (cpu {cpu_err:.3g})"


def test_batch_norm_uses_several_chunks_per_channel_and_every_block():
    op, ins = NORM_CASES[-4]
    plan = _norm_plan(op, ins)
    partial, final, apply = plan.launches
    p = int(partial.args[7])
    assert p > 1 and partial.grid == (3 * p, 1, 1) and partial.block == (nk.NTHREADS, 1, 1)
    assert final.grid == (3, 1, 1) and final.args[9] == p
    assert apply.grid[0] * apply.block[0] >= min(ins[0].size, 65535 * nk.NTHREADS)
    assert plan.workspace >= 3 * p * (8 + 4 + 4) and not plan.checks
    assert all(a.shared_bytes == 0 for a in plan.launches)


def test_batch_norm_of_an_empty_batch_gives_nan_statistics(host):
    op = BatchNorm("training", 1e-5)
    ins = [np.zeros((0, 3, 4), F32), np.ones(3, F32), np.zeros(3, F32)]
    y, mean, var = _run(nk, op, ins)
    assert y.shape == (0, 3, 4) and np.isnan(mean).all() and np.isnan(var).all()
    # written by the kernel (0/0), not run_plan's 0xff fill left alone
    assert (mean.view(np.uint32) != 0xFFFFFFFF).all() and (var.view(np.uint32) != 0xFFFFFFFF).all()


def test_norm_plans_of_nothing_launch_nothing():
    x = np.zeros((2, 0, 3), F32)
    assert not _norm_plan(BatchNorm("training", 1e-5), [x, np.ones(0, F32),
                                                         np.zeros(0, F32)]).steps
    assert not _norm_plan(LayerNorm(False, 1e-5, 1, 2), [np.zeros((0, 4), F32)]).steps


# -- optimizers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", range(len(UPDATE_CASES)))
def test_update_kernels_give_the_cpu_kernels_bits(host, case):
    op, ins = UPDATE_CASES[case]
    cpu = [np.asarray(c) for c in KERNELS[type(op)](op, *[a.copy() for a in ins])]
    outs = _run(ok, op, ins)
    for k, (o, c) in enumerate(zip(outs, cpu)):
        assert o.shape == c.shape and not np.isnan(c).any(), (op, k)
        np.testing.assert_array_equal(o, c.astype(o.dtype), err_msg=f"{op} output {k}")
    # the update moved the parameter (a kernel that copies would not pass the test)
    assert not np.array_equal(outs[0], ins[0])


def _in_place(plan, pairs):
    """``plan`` with each output ``j`` of ``pairs`` bound to input ``k``'s buffer, as the device
    binds an output it writes in place."""
    alias = {f"out{j}": f"in{k}" for j, k in pairs}

    def bind(a):
        return Buf(alias.get(a.name, a.name), a.offset) if isinstance(a, Buf) else a
    steps = [dataclasses.replace(s, args=tuple(bind(a) for a in s.args)) for s in plan.steps]
    return dataclasses.replace(plan, steps=tuple(steps))


def test_updates_run_in_place(host):
    for op, ins in UPDATE_CASES[::7]:
        cpu = [np.asarray(c) for c in KERNELS[type(op)](op, *[a.copy() for a in ins])]
        work = [a.copy() for a in ins]
        outs = _out_layouts(op, work)
        pairs = [(j, k) for j, k in ok.INPLACE[type(op)] if j < len(outs)]
        run_plan(_in_place(_update_plan(op, work), pairs), work, outs)
        for j, k in pairs:
            np.testing.assert_array_equal(work[k], cpu[j].astype(work[k].dtype),
                                          err_msg=f"{op} output {j} over input {k}")


def test_update_plan_launches_the_step_counter_after_the_update():
    op, ins = next(c for c in UPDATE_CASES if type(c[0]) is AdamUpdate)
    plan = _update_plan(op, ins)
    update, step = plan.launches
    assert step.kernel.name.startswith("mge_opt_step_")
    assert (step.grid, step.block) == ((1, 1, 1), (1, 1, 1))
    assert step.args == (Buf("out3"), Buf("in4"))
    assert update.block == (ok.NTHREADS, 1, 1)
    assert update.grid == (-(-ins[0].size // ok.NTHREADS), 1, 1)
    assert plan.workspace == 0 and not plan.checks


# -- RNG ------------------------------------------------------------------------------------------

def _philox_py(ctr, key):
    """Philox4x32-10 in Python (Random123's philox4x32_R with R = 10)."""
    c, (k0, k1) = list(ctr), key
    m = 0xFFFFFFFF
    for _ in range(10):
        p0, p1 = rk.PHILOX_M[0] * c[0], rk.PHILOX_M[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & m, (p0 >> 32) ^ c[3] ^ k1, p0 & m]
        k0, k1 = (k0 + rk.PHILOX_W[0]) & m, (k1 + rk.PHILOX_W[1]) & m
    return tuple(c)


# Random123's kat_vectors for philox4x32_10: counter, key, result
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def test_python_philox_gives_random123s_known_answers():
    for ctr, key, want in KAT:
        assert _philox_py(ctr, key) == want


def test_philox_kernel_gives_random123s_known_answers_and_the_python_values(host):
    rng = np.random.default_rng(2)
    ctr = np.array([c for c, _, _ in KAT] + list(rng.integers(0, 2 ** 32, (50, 4))), np.uint32)
    key = np.array([k for _, k, _ in KAT] + list(rng.integers(0, 2 ** 32, (50, 2))), np.uint32)
    # 3 blocks of 5 threads: the grid-stride loop walks the 53 counters in several rounds
    plan = Plan((Launch(rk.philox_kernel(), (3,), (5,),
                        (Buf("in0"), Buf("in1"), Buf("out0"), np.int64(len(ctr)))),))
    (out,) = run_plan(plan, [ctr, key], [Layout(ctr.shape, np.uint32)])
    for k, (_, _, want) in enumerate(KAT):
        assert tuple(int(v) for v in out[k]) == want
    for c, kk, o in zip(ctr, key, out):
        assert tuple(int(v) for v in o) == _philox_py([int(v) for v in c], [int(v) for v in kk])


def _uniform_op(dtype, n, seed=12345):
    return UniformRNG(seed, 0, np.dtype(dtype), (n,), None)


def test_uniform_values_are_philox_of_seed_stream_and_index(host):
    seed, stream, n = 0x0123456789ABCDEF, 7, 1003
    op = _uniform_op(F32, n, seed)
    (out,) = _run(rk, op, [], stream=stream)
    for i in [0, 1, 2, 3, 4, 517, n - 1]:
        g = i // 4
        words = _philox_py((g & 0xFFFFFFFF, g >> 32, 0, stream),
                           (seed & 0xFFFFFFFF, seed >> 32))
        assert out[i] == np.float32((words[i % 4] >> 8) * 2.0 ** -24)
    (other,) = _run(rk, op, [], stream=stream + 1)
    assert not np.array_equal(out, other)  # the stream separates launches of one seed
    (again,) = _run(rk, op, [], stream=stream)
    np.testing.assert_array_equal(out, again)  # the op (its seed) fixes the numbers


LAUNCHES = [(None, None), (1, 1), (3, 7), (2, 64), (1000, 32)]


@pytest.mark.parametrize("dtype", FLOATS)
def test_rng_values_do_not_depend_on_the_launch(host, dtype):
    rng = np.random.default_rng(3)
    shape = rng.random(999).astype(dtype) + 0.5
    x = rng.normal(size=999).astype(dtype)
    cases = [(_uniform_op(dtype, 1001), []),
             (GaussianRNG(5, 0, 1.0, 2.0, dtype, (1001,), None), []),
             (GammaRNG(6, 0), [shape, shape]), (BetaRNG(6, 0), [shape, shape]),
             (Dropout(0.25, 8), [x])]
    for op, ins in cases:
        first = None
        for grid, block in LAUNCHES:
            outs = _run(rk, op, ins, grid=grid, block=block)
            assert not any(np.isnan(o).any() for o in outs if o.dtype.kind == "f"), op
            if first is None:
                first = outs
            else:
                for a, b in zip(first, outs):
                    np.testing.assert_array_equal(a, b, err_msg=f"{op} at grid {grid} x {block}")


N = 100_000


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_and_gaussian_distributions(host, dtype):
    (u,) = _run(rk, _uniform_op(dtype, N), [])
    u = u.astype(F64)
    assert 0 <= u.min() and u.max() < 1
    # 5 standard errors: mean 1/2 (se 0.0009), variance 1/12 (se 0.00024), a flat histogram
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / N)
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.abs(counts - N / 10).max() < 5 * np.sqrt(N / 10)
    (z,) = _run(rk, GaussianRNG(99, 0, 1.5, 2.0, dtype, (N,), None), [])
    z = (z.astype(F64) - 1.5) / 2.0
    assert abs(z.mean()) < 5 / np.sqrt(N) and abs(z.var() - 1) < 5 * np.sqrt(2 / N)
    assert abs(np.mean(z ** 3)) < 5 * np.sqrt(15 / N)  # symmetric
    assert abs(np.mean(z ** 4) - 3) < 5 * np.sqrt(96 / N)  # normal tails
    assert abs(np.mean(np.abs(z) < 1) - 0.6826894921) < 5 * np.sqrt(0.22 / N)


@pytest.mark.parametrize("a, b", [(0.3, 2.0), (1.0, 1.0), (4.5, 0.5)])
def test_gamma_and_beta_distributions(host, a, b):
    shape, scale = np.full(N, a, F32), np.full(N, b, F32)
    (g,) = _run(rk, GammaRNG(7, 0), [shape, scale])
    g = g.astype(F64)
    mean, var = a * b, a * b * b
    assert g.min() >= 0
    assert abs(g.mean() - mean) < 5 * np.sqrt(var / N)
    assert abs(g.var() - var) / var < 5 * np.sqrt((2 + 6 / a) / N)  # kurtosis 6/a
    (x,) = _run(rk, BetaRNG(8, 0), [shape, scale])
    x = x.astype(F64)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert 0 <= x.min() and x.max() <= 1
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / N)
    assert abs(x.var() - var) / var < 0.05


def _cpu_error(op, ins):
    with pytest.raises(ValueError) as cpu:
        KERNELS[type(op)](op, *ins)
    return str(cpu.value)


@pytest.mark.parametrize("op", [GammaRNG(7, 0), BetaRNG(7, 0)], ids=["gamma", "beta"])
@pytest.mark.parametrize("bad", ["first", "second", "both", "nan"])
def test_a_non_positive_parameter_raises_the_cpu_kernels_error_from_its_check(host, op, bad):
    first, second = np.array([1.0, 2.0, 0.5, 3.0], F32), np.ones(4, F32)
    if bad in ("first", "both"):
        first[1] = -1.0
    if bad in ("second", "both"):
        second[3] = 0.0
    if bad == "nan":
        second[0] = np.nan
    ins = [first, second]
    plan = _plan(rk, op, ins)
    assert len(plan.checks) == 2 and plan.workspace >= 8
    with pytest.raises(ValueError) as got:
        run_plan(plan, ins, _out_layouts(op, ins))
    assert str(got.value) == _cpu_error(op, ins)  # the CPU device's message, word for word
    names = ("shape", "scale") if type(op) is GammaRNG else ("alpha", "beta")
    assert str(got.value) == f"{op.name}: {names[bad in ('second', 'nan')]} must be positive"


def test_good_parameters_set_no_check(host):
    ins = [np.full(64, 0.5, F64), np.full(64, 2.0, F64)]
    (out,) = _run(rk, GammaRNG(3, 0), ins)  # the checks read back zero: no error
    assert (out > 0).all()
    assert not _plan(rk, GammaRNG(3, 0), [np.ones(0, F32)] * 2).checks  # nothing to check


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_masks_the_uniforms_and_scales_as_the_cpu_kernel(host, dtype):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 70)).astype(dtype)
    x[0, :4] = [np.inf, -np.inf, -0.0, np.nan]
    op = Dropout(0.3, 1234)
    y, mask = _run(rk, op, [x])
    (u,) = _run(rk, UniformRNG(1234, 0, F32, (x.size,), None), [])
    np.testing.assert_array_equal(mask, (u >= np.float32(0.3)).reshape(x.shape))
    assert abs(mask.mean() - 0.7) < 5 * np.sqrt(0.21 / x.size)
    # y = x * mask * scale, the CPU kernel's formula on this mask
    with np.errstate(invalid="ignore"):
        want = (x * mask * np.asarray(1 / 0.7, dtype)).astype(dtype)
    np.testing.assert_array_equal(y, want)
    dop = DropoutBackward(0.3)
    dy = rng.normal(size=x.shape).astype(dtype)
    (dx,) = _run(rk, dop, [dy, mask])
    np.testing.assert_array_equal(dx, KERNELS[DropoutBackward](dop, dy, mask)[0])


# -- errors ---------------------------------------------------------------------------------------

def test_unsupported_dtypes_are_named():
    i32 = np.dtype("int32")
    with pytest.raises(TypeError, match=r"CUDA BatchNorm\('training'\) kernel: unsupported "
                                        r"dtype int32.*int32, float32"):
        nk.batch_norm_kernels("training", i32, (F32, F32))
    with pytest.raises(TypeError, match="LayerNormBackward kernel: unsupported dtype bool"):
        nk.layer_norm_backward_kernels(False, (F32, F32, F32, np.dtype(bool)))
    with pytest.raises(TypeError, match="UniformRNG kernel: unsupported dtype int32"):
        rk.uniform_kernel(i32)
    with pytest.raises(TypeError, match="Dropout kernel: not a dtype"):
        rk.dropout_kernel("no such dtype")
    with pytest.raises(TypeError, match=r"SGDUpdate kernel: unsupported dtype int32"):
        ok.update_kernels(SGDUpdate(0.1, 0.0, 0.0, False), (F32, i32))
    # through the plans: a dtype the op's rule takes but the kernels lack
    with pytest.raises(TypeError, match="CUDA BatchNorm.*unsupported dtype"):
        _norm_plan(BatchNorm("training", 1e-5), [np.zeros((2, 3), F32), np.ones(3, np.int32),
                                                 np.zeros(3, F32)])


def test_bad_modes_counts_and_ops_are_named():
    with pytest.raises(ValueError, match="fwd_mode must be 'training' or 'inference', got 'eval'"):
        nk.batch_norm_kernels("eval", F32, (F32, F32))
    with pytest.raises(TypeError, match="4 parameter dtypes expected, got 2"):
        nk.batch_norm_kernels("inference", F32, (F32, F32))
    with pytest.raises(TypeError, match="mean and rstd must have one dtype"):
        nk.layer_norm_backward_kernels(False, (F32, F32, F32, F16))
    with pytest.raises(TypeError, match=r"AdamUpdate kernel: 5 inputs expected.*got 4"):
        ok.update_kernels(AdamUpdate(1e-3, 0.9, 0.999, 1e-8, 0.0, False), (F32,) * 4)
    with pytest.raises(TypeError, match="LayerNorm is no update op"):
        ok.update_kernels(LayerNorm(True, 1e-5, -1, None), (F32,) * 3)


def _lay(*specs):
    return [Layout(s, d) for s, d in specs]


def test_plans_check_shapes_and_axes_through_the_ops_rules():
    with pytest.raises(ValueError, match=r"LayerNorm.*normalised axes \[3, 1\).*input shapes: "
                                         r"\(2, 3, 4\)"):
        nk.PLANS[LayerNorm](LayerNorm(False, 1e-5, 3, 1), _lay(((2, 3, 4), F32)), [])
    with pytest.raises(ValueError, match=r"BatchNorm.*5 elements.*input shapes: \(2, 5, 3\)"):
        nk.PLANS[BatchNorm](BatchNorm("training"), _lay(((2, 5, 3), F32), ((4,), F32),
                                                        ((5,), F32)), [])
    with pytest.raises(ValueError, match="gradient's shape"):
        ok.PLANS[SGDUpdate](SGDUpdate(0.1, 0.0, 0.0, False), _lay(((3,), F32), ((4,), F32)), [])
    with pytest.raises(ValueError, match="drop_prob must be in"):
        rk.PLANS[Dropout](Dropout(1.0, 1), _lay(((3,), F32)), [])
    with pytest.raises(ValueError, match="UniformRNG kernel: seed must fit 64 unsigned bits"):
        rk.PLANS[UniformRNG](UniformRNG(-1, 0, F32, (3,), None), [], _lay(((3,), F32)))
    op = _uniform_op(F32, 3)
    with pytest.raises(ValueError, match="stream must fit 32 unsigned bits"):
        rk.uniform_plan(op, [], _lay(((3,), F32)), stream=2 ** 32)


def test_plans_refuse_outputs_the_ops_rule_does_not_give():
    with pytest.raises(ValueError, match=r"CUDA UniformRNG plan: outputs \(4,\) float32 given, "
                                         r"the op's rule gives \(3,\) float32"):
        rk.PLANS[UniformRNG](_uniform_op(F32, 3), [], _lay(((4,), F32)))
    with pytest.raises(ValueError, match=r"CUDA LayerNorm plan: outputs .* given"):
        nk.PLANS[LayerNorm](LayerNorm(False, 1e-5, -1, None), _lay(((2, 3), F32)),
                            _lay(((2, 3), F32)))
    with pytest.raises(ValueError, match=r"CUDA SGDUpdate plan: outputs .*float64.* given"):
        ok.PLANS[SGDUpdate](SGDUpdate(0.1, 0.0, 0.0, False), _lay(((3,), F32), ((3,), F32)),
                            _lay(((3,), F64)))
