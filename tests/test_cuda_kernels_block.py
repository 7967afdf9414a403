"""``kernels/block.py``: one block prelude for every CUDA kernel family, checked without a GPU.

* every include guard of every family's kernels names one text only (two texts under one guard
  make ``elemwise.program()`` of a mix silently drop one);
* one program joining kernels of every family compiles with NVRTC for compute_90 and an older
  architecture, and ptxas assembles it for sm_90;
* the same program builds with g++, and block kernels of different families run in that one
  library through the one host convention (``mge_host_launch``), checked against numpy.
"""
import ctypes
import re

import numpy as np
import pytest

from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import block as bk
from mge._core.device.cuda.kernels import conv as ck
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import indexing as ix
from mge._core.device.cuda.kernels import norm as nk
from mge._core.device.cuda.kernels import optimizer as ok
from mge._core.device.cuda.kernels import pool as pk
from mge._core.device.cuda.kernels import reduce as rk
from mge._core.device.cuda.kernels import relayout as rl
from mge._core.device.cuda.kernels import rng as gk
from mge._core.device.cuda.kernels import softmax as sk
from mge._core.ops.optimizer import SGDUpdate
from cuda_toolchain import missing as _missing

F16, F32, F64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")


def _every_family():
    """{family: [KernelSource]}: a few kernels of every family, block kernels included."""
    return {
        "elemwise": [ek.elemwise_kernel("add", (F32, F32), F32)],
        "reduce": [rk.reduce_kernel("max", F32), rk.reduce_kernel("max", F16, stage="partial"),
                   rk.cumsum_kernel(F32), rk.topk_kernel(F32)],
        "softmax": [sk.softmax_kernel(F32), sk.cross_entropy_kernel(F32, np.dtype("int32"))],
        "relayout": [rl.transpose_kernel(4), rl.copy_kernel(2, False, 32), rl.fill_kernel(8)],
        "indexing": [ix.condtake_count_kernel(F32), ix.condtake_scan_kernel(),
                     ix.index_kernel("incr", 1, dtype=F16)],
        "norm": list(nk.layer_norm_kernels(True, F32, (F32, F32)).values()),
        "rng": [gk.uniform_kernel(F32), gk.gamma_kernel(F64)],
        "optimizer": list(ok.update_kernels(SGDUpdate(lr=0.1, momentum=0.0, weight_decay=0.0,
                                                        nesterov=False), (F32, F32)).values()),
        "conv": [ck.im2col_kernel(F32), ck.col2im_kernel(F16, 64)],
        "pool": [pk.pooling_kernel("max", F32), pk.pooling_backward_kernel("average", F32, F32,
                                                                          F32)],
    }


FAMILIES = _every_family()
EVERY = [k for ks in FAMILIES.values() for k in ks]


def test_every_guard_names_one_text_across_the_families():
    texts = {}
    for k in EVERY:
        for guard, text in k.parts:
            texts.setdefault(guard, set()).add(text)
    clashes = sorted(g for g, t in texts.items() if len(t) > 1)
    assert not clashes, f"guards with different texts: {clashes}"
    block = {k.name for k in EVERY if ("MGE_BLOCK_PRELUDE", bk.BLOCK_PRELUDE) in k.parts}
    # the families with blocks and barriers all take the one prelude
    for family in ("reduce", "softmax", "norm", "rng", "optimizer"):
        assert {k.name for k in FAMILIES[family]} <= block, family
    assert "mge_transpose_4" in block and ix.condtake_scan_kernel().name in block


def _old_arch():
    return f"compute_{min(a for a in nvrtc.supported_archs() if a >= 70)}"


def test_a_program_of_every_family_compiles_with_nvrtc_and_ptxas():
    why = nvrtc.why_unavailable()
    if why:
        _missing(f"NVRTC is needed: {why}")
    fast = ("-Ofc=max",) if nvrtc.nvrtc_version() >= (12, 8) else ()
    source = ek.program(EVERY)
    for arch in ("compute_90", _old_arch()):
        ptx = nvrtc.compile_ptx(source, "every_family.cu", arch, ("--fmad=false",) + fast)
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        assert not [k.name for k in EVERY if k.name not in entries], arch
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    nvrtc.assemble(nvrtc.compile_ptx(source, "every_family.cu", "compute_90",
                                     ("--fmad=false",)), arch="sm_90")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    why = hostbuild.why_unavailable()
    if why:
        _missing(f"g++ is needed for the host build: {why}")
    if not hostbuild.have_float16():
        _missing("the host build of float16 kernels needs g++ 12 or later (_Float16)")
    return hostbuild.build([ek.program(EVERY)], str(tmp_path_factory.mktemp("cuda_block")),
                           jobs=1)


def test_the_program_builds_on_the_host_with_one_launch_convention(host):
    for k in EVERY:
        assert k.name in host, k.name
    launch = host.function("mge_host_launch", [ctypes.c_uint] * 7)
    launch(3, 2, 1, 32, 8, 1, bk.HOST_SHARED_BYTES + 1)
    grid = (ctypes.c_uint * 3).in_dll(host.lib, "mge_host_grid")
    block = (ctypes.c_uint * 3).in_dll(host.lib, "mge_host_block")
    assert tuple(grid) == (3, 2, 1) and tuple(block) == (32, 8, 1)
    assert ctypes.c_int.in_dll(host.lib, "mge_host_error").value == 2  # beyond the host's


def test_block_kernels_of_two_families_run_in_one_host_library(host):
    rng = np.random.default_rng(7)
    launch = host.function("mge_host_launch", [ctypes.c_uint] * 7)
    error = ctypes.c_int.in_dll(host.lib, "mge_host_error")
    # relayout's tiled transpose: static shared memory, a 3-D grid
    x = rng.standard_normal((2, 40, 70)).astype(F32)
    y = np.full((2, 70, 40), np.nan, F32)
    t = rl.copy_launch(x.transpose(0, 2, 1).shape, (2800, 1, 70), (2800, 40, 1), 4)
    assert t.kernel.name == "mge_transpose_4"
    fn = host.function(t.kernel.name, [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 8)
    launch(*t.grid, *t.block, 0)
    fn(y.ctypes.data, x.ctypes.data, *(int(a) for a in t.args[2:]))
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1))
    # reduce's tile kernel: dynamic shared memory, a 2-D block, a warp-shuffle tree
    x = rng.standard_normal((5, 300)).astype(F32)
    out = np.full(5, np.nan, F32)
    r = rk.reduce_launch("max", F32, x.shape, 1).launches[0]
    fn = host.function(r.kernel.name, [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 5)
    launch(*r.grid, *r.block, r.shared_bytes)
    fn(out.ctypes.data, x.ctypes.data, *r.args[2:])
    assert error.value == 0
    np.testing.assert_array_equal(out, x.max(axis=1))


def test_the_plan_runner_follows_launches_gemms_memsets_checks_and_readbacks(host):
    # tests/cuda_plans.py, the kernel tests' one host runner, on a plan of every kind of step
    from cuda_plans import run_plan
    from mge._core.device.cuda.kernels import launch as lk

    rng = np.random.default_rng(11)
    x = rng.standard_normal((40, 50)).astype(F32)
    ws = lk.Workspace()
    flag, tmp = ws.add(4), ws.add(x.nbytes)
    t = rl.copy_launch((50, 40), (1, 50), (40, 1), 4, src=lk.Buf("in0"), dst=tmp)
    transpose = lk.Launch(t.kernel, t.grid, t.block, t.args)
    # out0 = x^T (50 x 40, row-major) @ x (40 x 50): column-major, C^T = x^T^T ... = x^T @ x
    # is symmetric, so C = A(50 x 40 col-major = x) times B (x^T as 40 x 50 col-major = tmp)
    gemm = lk.Gemm(False, False, 50, 50, 40, lk.Buf("in0"), 50, 0, tmp, 40, 0, lk.Buf("out0"),
                   50, 0, 1, F32, F32, F32, F32)
    zero = lk.Memset(lk.Buf("out1"), 8)
    plan = lk.Plan((transpose, gemm, zero), ws.size,
                   (lk.Check(flag, lambda v: ValueError(f"bad {v}")),))
    got, z = run_plan(plan, [x], [lk.Layout((50, 50), F32), lk.Layout((2,), F32)])
    np.testing.assert_allclose(got, x.T @ x, rtol=1e-5, atol=1e-5)
    assert (z == 0).all()
    # a kernel that sets a check's word: fill_kernel(4) writing 7 at the flag
    fill = rl.fill_launch((1,), 7, np.dtype("int32"), dst=flag)
    bad = lk.Plan((lk.Launch(fill.kernel, fill.grid, fill.block, fill.args),), ws.size,
                  (lk.Check(flag, lambda v: ValueError(f"bad {v}")),))
    with pytest.raises(ValueError, match="bad 7"):
        run_plan(bad, [x], [lk.Layout((1,), F32)])
    # a readback continues with the plan its value chooses
    seen = []
    then = lk.Plan((lk.Memset(lk.Buf("out0"), 4, 0),))
    back = lk.Plan((lk.Launch(fill.kernel, fill.grid, fill.block, fill.args),), ws.size,
                   readback=lk.Readback(flag, np.dtype("int32"),
                                        lambda v: seen.append(v) or then))
    (out,) = run_plan(back, [x], [lk.Layout((1,), F32)])
    assert seen == [7] and out[0] == 0
