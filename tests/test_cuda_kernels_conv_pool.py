"""The CUDA device's convolution and pooling kernels and launch plans, checked without a GPU.

``mge/_core/device/cuda/kernels/conv.py`` and ``pool.py`` write CUDA C (im2col, col2im, the
dy transpose, the pooling kernels) and pure-Python plans in ``kernels/launch.py``'s format
(``PLANS[op class](op, ins, outs)``: ``Launch``es with grid, block and arguments; cuBLAS ``Gemm``s
with m, n, k, transposes, leading dims and batch strides; ``Memset``; workspace).  Here:

* every kernel and dtype signature compiles with NVRTC for ``compute_90`` and an older
  architecture (one program per group, ``-Ofc=max``), and ptxas assembles a representative
  program for ``sm_90`` with the kernels' own flags;
* the same sources built with g++ (one library of every kernel, built once) run the plans on the
  host through ``tests/cuda_plans.run_plan`` -- the kernels through ctypes with exactly the
  plan's arguments, each GEMM by numpy as the plan states it (column-major operands at the
  plan's byte offsets, leading dims and batch strides, bounds checked, in the plan's compute
  dtype) -- over a grid of shapes, strides, paddings, dilations, groups, 1-D/2-D/3-D, workspace
  limits that cut the batch into chunks, and 32- and 64-bit index variants (``index_bits=64``).
  Outputs and workspace start as 0xff bytes (NaN), so an element a plan forgets shows.  The
  convolutions are compared with float64 references within a bound of the float rounding
  (relative to the sums of magnitudes) and with the CPU kernels (``KERNELS``); the pooling ops
  are bit-identical to the CPU kernels (save what ``pool.DIFFERENCES`` says);
* the plans' structure (``PLANS`` covers every op, ``STRIDED``, chunking, fast paths, call
  batching, index widths, launch geometry, GEMM outputs that never overlap) and the errors
  (the op's rule first, then the CUDA limits; neither family has data-dependent ``Check``s);
* a convolution's mixed-dtype GEMM (float16 into float32) through ``HostBackend.gemm`` and
  ``pycuda_backend.gemm_ex_args`` (the cuBLAS arguments the GPU gets).

Without libnvrtc, ptxas or g++ the tests that need them are skipped with the reason, except
under ``CI`` (which installs them), where that is a failure.
"""
import concurrent.futures
import os
import re
import warnings

import numpy as np
import pytest

from cuda_plans import library, run_plan
from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc, pycuda_backend
from mge._core.device.cuda.host_backend import HostBackend
from mge._core.device.cuda.kernels import conv as ck
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import launch as L
from mge._core.device.cuda.kernels import pool as pk
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.nn_conv import Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter
from mge._core.ops.nn_pool import AdaptivePooling, MaxPoolingGather, Pooling, PoolingBackward
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
FLOATS = (F16, F32, F64)
MODES = ("max", "average", "average_count_exclude_padding")
WORKERS = min(4, os.cpu_count() or 1)


# -- every kernel ---------------------------------------------------------------------------------

# Mixed dtype signatures of the backward ops (x, y, dy / z): y of another dtype than x, and the
# gradient of a third.
MIXED = [(F32, F32, F16), (F16, F32, F64), (F64, F16, F32)]


def _all_kernels():
    """{group: [KernelSource]}: every kernel and dtype signature, both index widths."""
    bits = (32, 64)
    conv = [f(d, b) for f in (ck.im2col_kernel, ck.col2im_kernel, ck.nchw_to_cnp_kernel)
            for d in FLOATS for b in bits]
    forward = [pk.pooling_kernel(m, d, b) for m in MODES
               for d in (ek.SUPPORTED_DTYPES if m == "max" else FLOATS) for b in bits]
    backward = [pk.pooling_backward_kernel(m, d, d, d, b) for m in MODES for d in FLOATS
                for b in bits]
    backward += [pk.pooling_backward_kernel("max", *sig, b) for sig in MIXED for b in bits]
    backward += [pk.max_pooling_gather_kernel(*sig, b) for sig in [(d, d, d) for d in FLOATS]
                 + MIXED for b in bits]
    return {"conv": conv, "pool-forward": forward, "pool-backward": backward}


KERNEL_GROUPS = _all_kernels()


def _fast_options():
    return fast_options(ek.NVRTC_OPTIONS)




def _entries(ptx):
    return set(re.findall(r"\.entry\s+(\w+)", ptx))


@pytest.mark.parametrize("group", sorted(KERNEL_GROUPS))
def test_every_kernel_compiles_for_hopper_and_an_older_arch(group, old_arch):
    kernels = KERNEL_GROUPS[group]
    source = ek.program(kernels)

    def compile_for(arch):
        return _entries(nvrtc.compile_ptx(source, f"{group}.cu", arch, _fast_options()))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        found = dict(zip(("compute_90", old_arch), pool.map(compile_for, ("compute_90", old_arch))))
    for arch, entries in found.items():
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"


def test_ptxas_assembles_a_representative_program_for_sm90(nvrtc_ready, ptxas_ready):
    # the conv kernels of every dtype, and pooling kernels of float16 (inline PTX conversions)
    # and of the other widths, with the kernels' own flags
    kernels = [k for k in KERNEL_GROUPS["conv"] if k.index_bits == 32]
    kernels += [pk.pooling_kernel("max", F16, 64), pk.pooling_kernel("average", F32),
                pk.pooling_kernel("max", "int8"),
                pk.pooling_backward_kernel("max", F16, F16, F16),
                pk.pooling_backward_kernel("average_count_exclude_padding", F64, F64, F64, 64),
                pk.max_pooling_gather_kernel(F32, F32, F16)]
    ptx = nvrtc.compile_ptx(ek.program(kernels), "conv-pool.cu", "compute_90", ek.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="conv-pool.ptx")
    assert cubin[:4] == b"\x7fELF"
    absent = [k.name for k in kernels if k.name.encode() not in cubin]
    assert not absent, f"not in the cubin: {absent}"


def test_kernel_names_are_unique_c_identifiers():
    names = [k.name for group in KERNEL_GROUPS.values() for k in group]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"mge_[a-z0-9_]+_s(32|64)", n) and "__" not in n for n in names)


# -- the host build and the plans -----------------------------------------------------------------

_HOST_EXTRA = [ek.typecvt_kernel(F32, F16)]


@pytest.fixture(scope="module")
def host():
    """Whether float16 runs on the host, after one build of every kernel (float16 ones where g++
    has ``_Float16``): every plan below then runs in that library (``cuda_plans.library`` reuses
    a library built for more kernels)."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    f16 = hostbuild.have_float16()
    kernels = [k for group in KERNEL_GROUPS.values() for k in group] + _HOST_EXTRA
    library([k for k in kernels if f16 or "f16" not in k.name], jobs=WORKERS)
    return f16


def _need_float16(host, *dtypes):
    if F16 in dtypes and not host:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")


def _layouts(descs):
    """``launch.Layout``s of ``(shape, dtype)`` pairs or arrays."""
    return [L.Layout(d.shape, d.dtype) if isinstance(d, np.ndarray) else L.Layout(*d)
            for d in descs]


def _outs(op, ins):
    """The outputs' ``Layout``s by the op's rule (as the device gives them to the plan)."""
    return [L.Layout(d.shape, d.dtype) for d in
            INFER[type(op)](op, [TensorDesc(i.shape, i.dtype) for i in ins])]


def plan_of(op, descs, **options):
    """``(plan, ins, outs)`` of ``op`` on ``descs`` through its family's ``PLANS`` table."""
    ins = _layouts(descs)
    outs = _outs(op, ins)
    table = ck.PLANS if type(op) in ck.PLANS else pk.PLANS
    return table[type(op)](op, ins, outs, **options), ins, outs


def _check_structure(plan):
    """What the host run cannot see: every launch a 1-D grid of THREADS-thread blocks covering
    its ``n`` (up to the grid-stride cap), and no two batch entries of one GEMM writing one
    element (cuBLAS runs them in parallel)."""
    for s in plan.steps:
        if isinstance(s, L.Launch):
            assert s.block == (L.THREADS, 1, 1), s.kernel.name
            n = next(int(a) for a in s.args if isinstance(a, (np.int32, np.int64)))
            assert s.grid == L.grid_for(n), (s.kernel.name, s.grid, n)
        elif isinstance(s, L.Gemm):
            e = np.dtype(s.c_dtype).itemsize
            assert s.c.offset % e == 0
            cells = (s.c.offset // e + np.arange(s.batch)[:, None, None] * s.stride_c
                     + np.arange(s.m)[None, :, None] + np.arange(s.n)[None, None, :] * s.ldc)
            assert np.unique(cells).size == cells.size, "two batch entries write one element"
        else:
            assert isinstance(s, L.Memset), s


def run(op, arrays, **options):
    """Plan ``op`` on ``arrays`` through ``PLANS``, check the plan's structure, run it on the
    host build (``cuda_plans.run_plan``); the outputs."""
    plan, _, outs = plan_of(op, arrays, **options)
    _check_structure(plan)
    if options.get("index_bits") == 64:
        assert all(k.name.endswith("_s64") for k in plan.kernels if "typecvt" not in k.name)
    return run_plan(plan, list(arrays), outs)


def _cpu(op, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [np.asarray(a) for a in KERNELS[type(op)](op, *arrays)]


def test_the_plans_tables_cover_every_op_and_read_no_strides():
    assert set(ck.PLANS) == {Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter}
    assert set(pk.PLANS) == {Pooling, AdaptivePooling, PoolingBackward, MaxPoolingGather}
    assert ck.STRIDED == frozenset() and pk.STRIDED == frozenset()
    for table in (ck.PLANS, pk.PLANS):
        assert all(cls in KERNELS for cls in table)  # the CPU device has each


# -- convolutions ---------------------------------------------------------------------------------

# (x shape, weight shape, stride, padding, dilation, groups, output_padding of the transpose)
CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1, (0, 0)),
    ((3, 3, 7, 6), (4, 3, 3, 2), (2, 1), (1, 0), (1, 1), 1, (1, 0)),
    ((3, 4, 9, 8), (2, 3, 2, 2, 3), (2, 2), (1, 2), (2, 1), 2, (0, 1)),  # groups, dilation
    ((1, 6, 5, 5), (3, 2, 2, 3, 3), (1, 1), (1, 1), (1, 1), 3, (0, 0)),  # groups > images
    ((3, 4, 6, 5), (6, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, (0, 0)),  # pointwise
    ((2, 4, 6, 5), (2, 3, 2, 1, 1), (1, 1), (0, 0), (3, 1), 2, (2, 0)),  # pointwise grouped
    ((2, 2, 8, 7), (3, 2, 1, 1), (2, 2), (0, 0), (1, 1), 1, (1, 1)),  # 1x1, stride 2
    ((4, 2, 5, 5), (3, 2, 3, 3), (1, 1), (2, 2), (1, 1), 1, (0, 0)),  # padding > kernel / 2
    ((3, 3, 10), (4, 3, 3), (2,), (1,), (2,), 1, (1,)),  # 1-D
    ((2, 2, 5, 4, 6), (3, 2, 2, 3, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), 1, (0, 1, 0)),  # 3-D
]


def _case_id(case):
    xs, ws, s, p, d, g, _ = case
    return f"{len(s)}d-x{'x'.join(map(str, xs))}-k{'x'.join(map(str, ws[-len(s):]))}" \
           f"-s{''.join(map(str, s))}-p{''.join(map(str, p))}-d{''.join(map(str, d))}-g{g}"


def _conv_problems(case, dtype, rng):
    """(op, inputs) of the three convolutions on one geometry."""
    xs, ws, s, p, d, g, opad = case
    fwd = Convolution(s, p, d, g)
    x = rng.normal(size=xs).astype(dtype)
    w = rng.normal(size=ws).astype(dtype)
    (y,) = _cpu(fwd, x.astype(F64), w.astype(F64))
    dy = rng.normal(size=y.shape).astype(dtype)
    deconv = ConvolutionBackwardData(s, p, d, g, opad)
    dfilter = ConvolutionBackwardFilter(s, p, d, g)
    return [(fwd, (x, w)), (deconv, (w, dy)), (dfilter, (x, dy, w))]


# relative tolerance of a sum of products against the float64 reference, as a fraction of the
# sum of magnitudes (float32 sums of up to a few hundred terms in another order)
_SUM_RTOL = {F16: 1e-5, F32: 1e-5, F64: 1e-12}


def _check_close(got, op, inputs, what):
    """``got`` is the float64 result within the rounding of its dtype, and the CPU kernel's."""
    dtype = got.dtype
    wide = [a.astype(F64) for a in inputs]
    (ref,) = _cpu(op, *wide)
    (scale,) = _cpu(op, *[np.abs(a) for a in wide])  # the sums of magnitudes
    tol = _SUM_RTOL[dtype] * scale + 1e-30
    if dtype == F16:  # rounded once to float16 at the end
        tol = tol + 2.0 ** -11 * (np.abs(ref) + tol) + 2.0 ** -25
    (cpu,) = _cpu(op, *inputs)
    for want, name in ((ref, "float64 reference"), (cpu.astype(F64), "CPU kernel")):
        err = np.abs(got.astype(F64) - want)
        limit = tol if name.startswith("float64") else 2 * tol
        bad = np.flatnonzero(~(err <= limit))
        assert not bad.size, (f"{what}: {bad.size} of {got.size} differ from the {name}, e.g. "
                              f"{got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}")


def _chunk(plan):
    """Images a chunk of a chunked plan (its im2col/col2im launches' ``images``), else 0."""
    sizes = [int(s.args[4]) for s in plan.launches if "col" in s.kernel.name]
    return max(sizes, default=0)


def _limits(plan):
    """Workspace limits that cut the batch differently: the default, about two images a chunk,
    and below one image (one image a chunk)."""
    if not plan.workspace or _chunk(plan) < 2:
        return [ck.DEFAULT_WORKSPACE_LIMIT, 1]
    per_image = plan.workspace // _chunk(plan)
    return [ck.DEFAULT_WORKSPACE_LIMIT, 2 * per_image + per_image // 2, 1]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
def test_the_conv_plans_compute_what_the_cpu_kernels_do(host, case, dtype):
    _need_float16(host, dtype)
    rng = np.random.default_rng(sum(map(ord, _case_id(case) + str(dtype))))
    for op, inputs in _conv_problems(case, dtype, rng):
        plan, _, _ = plan_of(op, inputs)
        for k, limit in enumerate(_limits(plan)):
            plan, _, _ = plan_of(op, inputs, workspace_limit=limit)
            if plan.workspace:
                # the chunks' workspace is under the limit whenever one image fits
                one = plan_of(op, inputs, workspace_limit=1)[0].workspace
                assert plan.workspace <= max(limit, one)
            bits = 64 if k == 1 else 32  # the 64-bit variants on one of the chunkings
            (got,) = run(op, inputs, workspace_limit=limit, index_bits=bits)
            _check_close(got, op, inputs, f"{type(op).__name__} {dtype} workspace limit "
                         f"{limit} ({_chunk(plan)} images a chunk, {bits}-bit index)")


def _random_geometries(count, seed=2024):
    """``count`` seeded random 1-D to 3-D geometries in CONV_CASES' form: odd strides,
    dilations, paddings and groups together (sizes the op's rule accepts)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        nd = int(rng.integers(1, 4))
        g = int(rng.choice([1, 1, 2, 3]))
        ig, og = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        k = tuple(int(v) for v in rng.integers(1, 4, nd))
        s = tuple(int(v) for v in rng.integers(1, 4, nd))
        d = tuple(int(v) for v in rng.integers(1, 3, nd))
        p = tuple(int(rng.integers(0, kk + 1)) for kk in k)
        sp = tuple(int(v) for v in rng.integers(3, 9 if nd < 3 else 6, nd))
        if any((n + 2 * pp - dd * (kk - 1) - 1) < 0 for n, pp, dd, kk in zip(sp, p, d, k)):
            continue
        opad = tuple(int(rng.integers(0, max(ss, dd))) for ss, dd in zip(s, d))
        ws = (g, og, ig) + k if g > 1 else (og, ig) + k
        cases.append(((int(rng.integers(1, 4)), g * ig) + sp, ws, s, p, d, g, opad))
    return cases


@pytest.mark.parametrize("case", _random_geometries(12), ids=_case_id)
def test_random_geometries_in_float32(host, case):
    rng = np.random.default_rng(sum(map(ord, _case_id(case))))
    for op, inputs in _conv_problems(case, F32, rng):
        for limit in (ck.DEFAULT_WORKSPACE_LIMIT, 1):
            (got,) = run(op, inputs, workspace_limit=limit)
            _check_close(got, op, inputs, f"{type(op).__name__} workspace limit {limit}")


def test_chunks_cover_the_batch_evenly_under_the_limit():
    assert ck.batch_chunks(10, 100, 400) == [(0, 4), (4, 4), (8, 2)]
    assert ck.batch_chunks(9, 100, 400) == [(0, 3), (3, 3), (6, 3)]  # 3 chunks, even
    assert ck.batch_chunks(5, 100, 10_000) == [(0, 5)]
    assert ck.batch_chunks(3, 100, 50) == [(0, 1), (1, 1), (2, 1)]  # one image does not fit
    assert ck.batch_chunks(4, 100, 700, fixed_bytes=400) == [(0, 2), (2, 2)]
    assert ck.batch_chunks(0, 100, 400) == []
    for images in range(1, 30):
        for most in range(1, 12):
            chunks = ck.batch_chunks(images, 10, most * 10)
            assert [n0 for n0, _ in chunks] == list(np.cumsum([0] + [c for _, c in chunks])[:-1])
            assert sum(c for _, c in chunks) == images
            assert max(c for _, c in chunks) <= most
            assert len(chunks) == -(-images // most)


def test_the_forward_plan_states_its_gemms_in_cublas_terms():
    op = Convolution((1, 1), (1, 1), (1, 1), 2)
    plan, _, _ = plan_of(op, [((3, 4, 5, 6), F32), ((2, 3, 2, 3, 3), F32)])
    im2col, *gemms = plan.steps
    assert im2col.kernel.name == "mge_im2col_f32_s32" and _chunk(plan) == 3
    assert im2col.args[:2] == (L.Buf("ws"), L.Buf("in0"))
    assert im2col.args[2:5] == (4 * 3 * 30, 4, 3)  # n = channels * images * P, channels, images
    assert im2col.grid == (-(-360 // L.THREADS), 1, 1)
    assert len(gemms) == 2  # groups (2) <= images (3): one call per group, batched over images
    g1 = gemms[1]
    assert (g1.transa, g1.transb, g1.m, g1.n, g1.k) == (False, False, 30, 3, 18)
    assert (g1.a, g1.lda, g1.stride_a) == (L.Buf("ws", 18 * 90 * 4), 90, 30)  # bytes; elements
    assert (g1.b, g1.ldb, g1.stride_b) == (L.Buf("in1", 3 * 18 * 4), 18, 0)
    assert (g1.c, g1.ldc, g1.stride_c, g1.batch) == (L.Buf("out0", 3 * 30 * 4), 30, 6 * 30, 3)
    assert plan.workspace == 4 * 9 * 3 * 30 * 4 and plan.checks == () and plan.readback is None
    assert plan.notes == ("batch in 1 chunks of up to 3 images",)
    # more groups than images: one call per image, batched over the groups
    plan, _, _ = plan_of(Convolution((1, 1), (0, 0), (1, 1), 4),
                         [((2, 8, 5, 5), F64), ((4, 1, 2, 3, 3), F64)])
    gemms = [s for s in plan.steps if isinstance(s, L.Gemm)]
    assert [(g.batch, g.stride_b, g.compute_dtype) for g in gemms] == [(4, 18, F64)] * 2
    assert gemms[1].c == L.Buf("out0", 4 * 9 * 8)  # image 1 of y (4 x 3 x 3 float64)


def test_pointwise_convolutions_run_as_gemms_on_the_tensors_themselves():
    op = Convolution((1, 1), (0, 0), (1, 1), 1)
    plan, _, _ = plan_of(op, [((5, 4, 3, 3), F16), ((6, 4, 1, 1), F16)])
    assert plan.workspace == 0 and plan.notes == ("pointwise: the GEMMs read x",)
    (gemm,) = plan.steps
    assert (gemm.a, gemm.stride_a, gemm.batch, gemm.k) == (L.Buf("in0"), 36, 5, 4)
    assert (gemm.a_dtype, gemm.c_dtype, gemm.compute_dtype) == (F16, F16, F32)
    plan, _, _ = plan_of(ConvolutionBackwardData((1, 1), (0, 0), (1, 1), 1, (0, 0)),
                         [((6, 4, 1, 1), F32), ((5, 6, 3, 3), F32)])
    assert [s.c.name for s in plan.steps] == ["out0"] and plan.workspace == 0


def test_the_filter_gradient_sums_chunks_and_rounds_float16_once(host):
    _need_float16(host, F16)
    op = ConvolutionBackwardFilter((1, 1), (1, 1), (1, 1), 1)
    descs = [((4, 2, 5, 5), F16), ((4, 3, 5, 5), F16), ((3, 2, 3, 3), F16)]
    plan, _, _ = plan_of(op, descs, workspace_limit=3000)
    gemms = [s for s in plan.steps if isinstance(s, L.Gemm)]
    assert len(gemms) == 2 and [g.beta for g in gemms] == [0.0, 1.0]
    acc = gemms[0].c
    assert acc.name == "ws" and acc.offset > 0 and acc.offset % ck.WORKSPACE_ALIGNMENT == 0
    assert all(g.c == acc and g.c_dtype == F32 for g in gemms)
    last = plan.steps[-1]
    assert last.kernel.name == ek.typecvt_kernel(F32, F16).name
    assert last.args == (L.Buf("out0"), acc, np.int64(54))
    names = [s.kernel.name for s in plan.launches]
    assert names.count("mge_nchw_to_cnp_f16_s32") == 2  # two images a chunk: dy transposed
    assert plan.workspace <= 3000 and len(plan.notes) == 2
    # and it computes what the CPU kernel does (summed in float32, rounded once)
    rng = np.random.default_rng(5)
    x, dy, w = (rng.normal(size=d[0]).astype(F16) for d in descs)
    (got,) = run(op, [x, dy, w], workspace_limit=3000)
    _check_close(got, op, [x, dy, w], "float16 filter gradient in two chunks")
    one, _, _ = plan_of(op, [((1,) + descs[0][0][1:], F16), ((1,) + descs[1][0][1:], F16),
                             descs[2]])
    assert [s.c.name for s in one.steps if isinstance(s, L.Gemm)] == ["out0"]
    assert "mge_nchw_to_cnp_f16_s32" not in [k.name for k in one.kernels]
    empty, _, _ = plan_of(op, [((0, 2, 5, 5), F32), ((0, 3, 5, 5), F32), ((3, 2, 3, 3), F32)])
    assert empty.steps == (L.Memset(L.Buf("out0"), 54 * 4),) and empty.workspace == 0


def test_an_empty_batch_and_zero_gradients(host):
    op = ConvolutionBackwardFilter((1, 1), (1, 1), (1, 1), 1)
    x, dy, w = np.ones((0, 2, 5, 5), F32), np.ones((0, 3, 5, 5), F32), np.ones((3, 2, 3, 3), F32)
    (dw,) = run(op, [x, dy, w])  # the output starts as NaN bytes: the Memset zeroes it
    assert dw.shape == w.shape and not dw.any()
    np.testing.assert_array_equal(dw, _cpu(op, x, dy, w)[0])
    fwd, _, _ = plan_of(Convolution((1, 1), (1, 1), (1, 1), 1),
                        [((0, 2, 5, 5), F32), ((3, 2, 3, 3), F32)])
    assert fwd.steps == () and fwd.workspace == 0
    back, _, _ = plan_of(ConvolutionBackwardData((1, 1), (1, 1), (1, 1), 1, (0, 0)),
                         [((3, 2, 3, 3), F32), ((0, 3, 5, 5), F32)])
    assert back.steps == () and back.workspace == 0


def test_large_launches_take_64_bit_indices():
    assert ck.launch_index_bits(2 ** 31 - 1) == 32 and ck.launch_index_bits(2 ** 31) == 64
    op = Convolution((1, 1), (1, 1), (1, 1), 1)
    descs = [((2, 64, 4096, 4096), F32), ((8, 64, 3, 3), F32)]
    plan, _, _ = plan_of(op, descs, workspace_limit=1 << 40)
    assert _chunk(plan) == 2 and plan.kernels[0].name == "mge_im2col_f32_s64"
    assert isinstance(plan.steps[0].args[2], np.int64)
    small, _, _ = plan_of(op, descs)
    assert _chunk(small) == 1 and small.kernels[0].name == "mge_im2col_f32_s64"  # 9.7 GB a column
    assert small.notes == ("batch in 2 chunks of up to 1 images",)
    # the second chunk's x and y start one image in (byte offsets past 2**31)
    second = [s for s in small.steps if isinstance(s, L.Launch)][1]
    assert second.args[1] == L.Buf("in0", 64 * 4096 * 4096 * 4)
    pool, _, _ = plan_of(Pooling("max", (2, 2)), [((64, 64, 4096, 4096), F16)])
    assert pool.kernels[0].name == "mge_pool_max_f16_s64"
    assert pool.steps[0].grid == L.grid_for(64 * 64 * 2048 * 2048) == (65535, 1, 1)


def test_convolution_errors_name_the_op_shapes_and_dtypes():
    op = Convolution((1, 1), (0, 0), (1, 1), 1)
    f32 = _layouts([((1, 2, 5, 5), F32), ((3, 2, 3, 3), F32)])
    good = _outs(op, f32)
    # the op's rule first (outputs not even looked at)
    with pytest.raises(TypeError, match=r"Convolution: inputs must be floating point.*int32"):
        ck.conv_forward_plan(op, _layouts([((1, 2, 5, 5), "int32"), ((3, 2, 3, 3), "int32")]),
                             [])
    with pytest.raises(ValueError, match=r"Convolution: input has 4 channels.*\(1, 4, 5, 5\)"):
        ck.conv_forward_plan(op, _layouts([((1, 4, 5, 5), F32), ((3, 2, 3, 3), F32)]), [])
    with pytest.raises(TypeError, match=r"CUDA plan: expects 2 inputs"):
        ck.conv_forward_plan(op, f32[:1], good)
    four = Convolution((1,) * 4, (0,) * 4, (1,) * 4, 1)
    ins = _layouts([((1, 2, 3, 3, 3, 3), F32), ((1, 2, 1, 1, 1, 1), F32)])
    with pytest.raises(ValueError, match=r"CUDA plan: the CUDA kernels take 1 to 3 spatial dims, "
                                         r"got 4.*\(1, 2, 3, 3, 3, 3\)"):
        ck.conv_forward_plan(four, ins, _outs(four, ins))
    bad_w = ConvolutionBackwardFilter((1, 1), (0, 0), (1, 1), 1)
    ins = _layouts([((1, 2, 5, 5), F32), ((1, 3, 3, 3), F32), ((3, 2, 3, 3), F16)])
    with pytest.raises(TypeError, match=r"CUDA plan: all inputs must have one dtype.*float16"):
        ck.conv_backward_filter_plan(bad_w, ins, _outs(bad_w, ins))
    # what the device must get right: the rule's outputs, dense inputs (STRIDED is empty)
    with pytest.raises(ValueError, match=r"Convolution: CUDA plan: outputs \[\(\(1, 3, 3, 3\), "
                                         r"dtype\('float16'\)\)\] are not the op's"):
        ck.conv_forward_plan(op, f32, [L.Layout((1, 3, 3, 3), F16)])
    strided = [L.Layout((1, 2, 5, 5), F32, (100, 50, 10, 2)), f32[1]]
    with pytest.raises(ValueError, match=r"CUDA plan: input 0 has strides \(100, 50, 10, 2\); "
                                         r"the plan takes dense inputs"):
        ck.conv_forward_plan(op, strided, good)
    assert ck.conv_forward_plan(op, [L.Layout((1, 2, 5, 5), F32, (50, 25, 5, 1)), f32[1]], good)
    with pytest.raises(ValueError, match=r"Convolution: CUDA plan: index_bits must be 32 or 64"):
        ck.conv_forward_plan(op, f32, good, index_bits=16)
    with pytest.raises(TypeError, match=r"im2col kernel: unsupported dtype int32"):
        ck.im2col_kernel("int32")
    with pytest.raises(TypeError, match=r"col2im kernel: not a dtype"):
        ck.col2im_kernel("float33")
    with pytest.raises(ValueError, match=r"index_bits must be 32 or 64, got 16"):
        ck.nchw_to_cnp_kernel(F32, 16)
    with pytest.raises(ValueError, match=r"CUDA window: 1 to 3 spatial dims"):
        ck.pack_window((5, 5), (3,), (3, 3), (1, 1), (0, 0))


def test_a_float16_to_float32_gemm_of_a_plan_through_the_backends():
    """The backward-data plan's GEMM sums float16 products into float32 columns: HostBackend's
    ``gemm(g, a, b, c)`` runs it as the host runner does, and the GPU backend's cuBLAS call
    passes each operand's own data type (CUDA_R_16F, 16F, 32F) computing in 32F."""
    op = ConvolutionBackwardData((1, 1), (1, 1), (1, 1), 1, (0, 0))
    plan, _, _ = plan_of(op, [((3, 2, 3, 3), F16), ((2, 3, 4, 4), F16)])
    g = next(s for s in plan.steps if isinstance(s, L.Gemm))
    assert (g.a_dtype, g.b_dtype, g.c_dtype, g.compute_dtype) == (F16, F16, F32, F32)
    assert (g.a.name, g.b.name, g.c.name) == ("in1", "in0", "ws")
    args = pycuda_backend.gemm_ex_args(g, 0x100, 0x200, 0x300, handle=7)
    assert args[:6] == (7, 0, 1, g.m, g.n, g.k) and args[8:11] == (2, g.lda, g.stride_a)
    assert args[12:15] == (2, g.ldb, g.stride_b) and args[17:20] == (0, g.ldc, g.stride_c)
    assert args[20:] == (g.batch, 68, -1)  # CUBLAS_COMPUTE_32F
    # TF32 is for float32 operands only: float16 ones compute in 32F even where it is allowed
    assert pycuda_backend.gemm_ex_args(g, 1, 2, 3, 7, allow_tf32=True)[21] == 68
    be = HostBackend(capacity=1 << 22)
    base, _ = be.reserve(1 << 16)
    rng = np.random.default_rng(3)
    a = rng.normal(size=g.stride_a * g.batch + g.lda * g.k).astype(F16)
    b = rng.normal(size=g.stride_b * g.batch + g.ldb * g.n).astype(F16)
    be.copy_htod(base, a)
    be.copy_htod(base + 8192, b)
    be.gemm(g, base, base + 8192, base + 16384)
    c = np.empty(g.ldc * g.n, F32)
    be.copy_dtoh(c, base + 16384)
    am = a[:g.m + (g.k - 1) * g.lda].astype(F64)
    want = np.stack([am[j * g.lda:j * g.lda + g.m] for j in range(g.k)], 1) @ np.stack(
        [b[j * g.ldb:j * g.ldb + g.n].astype(F64) for j in range(g.k)], 0)  # A (m x k) @ B^T
    np.testing.assert_allclose(c.reshape(g.n, g.ldc).T[:g.m], want, rtol=1e-5, atol=1e-5)
    assert be.gemms == [g]


# -- pooling --------------------------------------------------------------------------------------

# (x shape, kernel, stride, padding)
POOL_CASES = [
    ((2, 3, 7, 6), (3, 3), (2, 2), (1, 1)),
    ((2, 3, 7, 6), (2, 2), (2, 2), (0, 0)),
    ((1, 2, 8, 9), (3, 2), (1, 2), (1, 0)),  # overlapping windows
    ((2, 2, 11), (4,), (3,), (2,)),  # 1-D
    ((1, 2, 5, 6, 4), (2, 3, 2), (1, 2, 2), (1, 1, 0)),  # 3-D
    ((2, 1, 5, 5), (5, 5), (1, 1), (2, 2)),  # windows far into the padding
]
# padding as large as the kernel: only "average" takes it (whole windows of padding)
AVERAGE_ONLY = [((1, 2, 4, 4), (2, 2), (1, 1), (2, 2))]


def _pool_id(case):
    xs, k, s, p = case
    return f"x{'x'.join(map(str, xs))}-k{''.join(map(str, k))}-s{''.join(map(str, s))}" \
           f"-p{''.join(map(str, p))}"


def _pool_values(shape, dtype, rng, special=True):
    """Values with many ties (small integers, halves), and for floats -0.0, +-inf and NaN."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.4
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        v = rng.integers(-3, 4, shape)
        v.flat[::7] = info.min
        v.flat[3::11] = info.max
        return np.clip(v, info.min, info.max).astype(dtype)
    v = (rng.integers(-6, 7, shape) / 2).astype(dtype)
    if special:
        flat = v.reshape(-1)
        flat[5::17], flat[9::23], flat[2::13] = -0.0, -np.inf, np.inf
        flat[11::29] = np.nan
    return v


def _assert_same(got, want, what, tol=None, zero_sign=True):
    """``got`` is ``want`` bit for bit (NaN equal to NaN; the sign of a zero too, unless not
    ``zero_sign``), or within the elementwise bound ``tol``."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if tol is not None:
        ok = np.abs(got.astype(F64) - want.astype(F64)) <= tol
    elif got.dtype.kind == "f":
        ok = (got == want) | (np.isnan(got) & np.isnan(want))
        if zero_sign:
            ok &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)
    else:
        ok = got == want
    bad = np.flatnonzero(~ok)
    assert not bad.size, (f"{what}: {bad.size} of {got.size} differ, e.g. at {bad[0]}: "
                          f"{got.flat[bad[0]]!r} vs {want.flat[bad[0]]!r}")


def _pool_cases(mode):
    return POOL_CASES + (AVERAGE_ONLY if mode == "average" else [])


FORWARD = [(m, d, c) for m in MODES for d in (ek.SUPPORTED_DTYPES if m == "max" else FLOATS)
           for c in _pool_cases(m)]


@pytest.mark.parametrize("mode, dtype, case", FORWARD,
                         ids=[f"{m}-{d}-{_pool_id(c)}" for m, d, c in FORWARD])
def test_pooling_is_the_cpu_kernel_bit_for_bit(host, mode, dtype, case):
    _need_float16(host, dtype)
    xs, k, s, p = case
    rng = np.random.default_rng(sum(map(ord, f"{mode}{dtype}{_pool_id(case)}")))
    x = _pool_values(xs, np.dtype(dtype), rng, special=(mode == "max"))
    if mode != "max":
        x = (x + rng.normal(size=xs)).astype(dtype)
    op = Pooling(mode, k, s, p)
    (want,) = _cpu(op, x)
    for bits in (32, 64):
        (got,) = run(op, [x], index_bits=bits)
        # numpy leaves the sign of max(+0, -0) to its SIMD loops (pool.DIFFERENCES)
        _assert_same(got, want, f"Pooling {mode} {dtype} {bits}-bit", zero_sign=mode != "max")


ADAPTIVE = [((2, 3, 7, 9), (3, 4)), ((1, 2, 10), (3,)), ((1, 2, 4, 5, 6), (2, 5, 1)),
            ((2, 2, 5, 5), (5, 5))]


@pytest.mark.parametrize("mode", MODES)
def test_adaptive_pooling_is_the_cpu_kernel(host, mode):
    rng = np.random.default_rng(17)
    for xs, shape in ADAPTIVE:
        x = (rng.normal(size=xs) + _pool_values(xs, F32, rng, special=False)).astype(F32)
        op = AdaptivePooling(mode, shape)
        (got,) = run(op, [x])
        (want,) = _cpu(op, x)
        _assert_same(got, want, f"AdaptivePooling {mode} {xs} -> {shape}")


BACKWARD = [(m, (d, d, d), c) for m in MODES for d in FLOATS for c in _pool_cases(m)]
BACKWARD += [("max", sig, POOL_CASES[2]) for sig in MIXED]


def _average_backward_tolerance(op, x, y, dy, want):
    """The bound of average PoolingBackward of float16/32 against the CPU kernel, which divides
    in float64 and rounds each sum to float32 (pool.DIFFERENCES): a few float32 roundings per
    window of the sum of magnitudes, and one float16 ulp at the end."""
    if dy.dtype == F64:
        return None  # bit for bit
    (scale,) = _cpu(op, x, y, np.abs(dy).astype(F64))
    windows = np.prod(np.ceil(np.array(op.kernel) / np.array(op.stride)))
    tol = 2.0 ** -23 * (windows + 1) * scale
    if dy.dtype == F16:
        tol = tol + 2.0 ** -10 * np.abs(want.astype(F64))  # the neighbour of a tie
    return tol


@pytest.mark.parametrize("mode, sig, case", BACKWARD,
                         ids=[f"{m}-{'-'.join(map(str, s))}-{_pool_id(c)}" for m, s, c in BACKWARD])
def test_pooling_backward_is_the_cpu_kernel(host, mode, sig, case):
    _need_float16(host, *sig)
    xs, k, s, p = case
    xd, yd, gd = sig
    rng = np.random.default_rng(sum(map(ord, f"{mode}{sig}{_pool_id(case)}")))
    x = _pool_values(xs, xd, rng)  # ties, NaN, infinities
    (y,) = _cpu(Pooling(mode, k, s, p), x)
    y = y.astype(yd)
    dy = rng.normal(size=y.shape).astype(gd)  # finite (pool.DIFFERENCES)
    op = PoolingBackward(mode, k, s, p)
    (want,) = _cpu(op, x, y, dy)
    tol = None if mode == "max" else _average_backward_tolerance(op, x, y, dy, want)
    for bits in (32, 64):
        (got,) = run(op, [x, y, dy], index_bits=bits)
        _assert_same(got, want, f"PoolingBackward {mode} {sig} {bits}-bit", tol)


GATHER = [(sig, c) for sig in [(d, d, d) for d in FLOATS] + MIXED for c in POOL_CASES]


@pytest.mark.parametrize("sig, case", GATHER,
                         ids=[f"{'-'.join(map(str, s))}-{_pool_id(c)}" for s, c in GATHER])
def test_max_pooling_gather_is_the_cpu_kernel(host, sig, case):
    _need_float16(host, *sig)
    xs, k, s, p = case
    xd, yd, zd = sig
    rng = np.random.default_rng(sum(map(ord, f"{sig}{_pool_id(case)}")))
    x = _pool_values(xs, xd, rng)
    (y,) = _cpu(Pooling("max", k, s, p), x)
    y = y.astype(yd)
    z = rng.normal(size=xs).astype(zd)
    z.flat[::5] = -0.0  # the CPU's 0 + z makes it +0
    op = MaxPoolingGather(k, s, p)
    (want,) = _cpu(op, x, y, z)
    for bits in (32, 64):
        (got,) = run(op, [x, y, z], index_bits=bits)
        _assert_same(got, want, f"MaxPoolingGather {sig} {bits}-bit")


def test_max_pooling_backward_gives_a_tie_to_the_first_maximum(host):
    x = np.array([[[[1, 3, 3], [3, 0, 3], [2, 3, 1]]]], F32)
    op = PoolingBackward("max", (2, 2), (1, 1), (0, 0))
    (y,) = _cpu(Pooling("max", (2, 2), (1, 1), (0, 0)), x)
    dy = np.array([[[[1, 2], [4, 8]]]], F32)
    (got,) = run(op, [x, y, dy])
    # every window's maximum is 3; the first in row-major window order takes its dy
    want = np.array([[[[0, 1 + 2, 0], [4, 0, 8], [0, 0, 0]]]], F32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_cpu(op, x, y, dy)[0], want)


def test_pooling_plans_launch_one_kernel_a_thread_per_element():
    op = Pooling("average_count_exclude_padding", (3, 3), (2, 2), (1, 1))
    plan, _, _ = plan_of(op, [((2, 3, 7, 6), F16)])
    (launch,) = plan.steps
    assert plan.workspace == 0 and plan.checks == ()
    assert launch.kernel.name == "mge_pool_average_count_exclude_padding_f16_s32"
    assert launch.args[:2] == (L.Buf("out0"), L.Buf("in0")) and launch.args[2] == 2 * 3 * 4 * 3
    w = launch.args[3]
    assert (w["in_"].tolist(), w["k"].tolist(), w["pad"].tolist()) == (
        [1, 7, 6], [1, 3, 3], [0, 1, 1])  # 2-D as 3-D with a leading size-1 dim
    back, _, _ = plan_of(PoolingBackward("max", (3, 3), (2, 2), (1, 1)),
                         [((2, 3, 7, 6), F32), ((2, 3, 4, 3), F32), ((2, 3, 4, 3), F32)])
    (launch,) = back.steps
    assert launch.args[:4] == (L.Buf("out0"), L.Buf("in0"), L.Buf("in1"), L.Buf("in2"))
    assert launch.args[4] == 2 * 3 * 7 * 6  # a thread per input element
    assert plan_of(op, [((0, 3, 7, 6), F32)])[0].steps == ()
    adaptive, _, _ = plan_of(AdaptivePooling("max", (3, 4)), [((2, 3, 7, 9), F32)])
    assert adaptive.steps[0].kernel.name == "mge_pool_max_f32_s32"
    assert plan_of(op, [((2, 3, 7, 6), F32)], index_bits=64)[0].kernels[0].name.endswith("_s64")


def test_pooling_errors_name_the_op_mode_and_dtypes():
    with pytest.raises(ValueError, match=r"CUDA Pooling kernel: unknown mode 'median'"):
        pk.pooling_kernel("median", F32)
    with pytest.raises(TypeError, match=r"Pooling\('average'\) kernel: unsupported dtype int32"):
        pk.pooling_kernel("average", "int32")
    with pytest.raises(TypeError, match=r"PoolingBackward\('max'\) kernel: unsupported dtype "
                                        r"int8 .*dtypes: float32, int8, float32"):
        pk.pooling_backward_kernel("max", F32, "int8", F32)
    with pytest.raises(TypeError, match=r"MaxPoolingGather kernel: unsupported dtype complex64"):
        pk.max_pooling_gather_kernel(F32, F32, "complex64")
    with pytest.raises(ValueError, match=r"index_bits must be 32 or 64"):
        pk.pooling_kernel("max", F32, index_bits=8)
    assert pk.pooling_kernel("MAX", F32).name == "mge_pool_max_f32_s32"
    # the op's rule first
    with pytest.raises(TypeError, match=r"Pooling\.average: average pooling needs a floating "
                                        r"point input"):
        pk.pooling_plan(Pooling("average", (2, 2)), _layouts([((1, 1, 4, 4), "int32")]), [])
    with pytest.raises(ValueError, match=r"Pooling\.max: kernel \(5, 5\) is larger than the padded "
                                         r"input.*\(1, 1, 4, 4\)"):
        pk.pooling_plan(Pooling("max", (5, 5)), _layouts([((1, 1, 4, 4), F32)]), [])
    # then the CUDA limits and the device's side of the contract
    six = Pooling("max", (1,) * 4)
    ins = _layouts([((1, 1, 2, 2, 2, 2), F32)])
    with pytest.raises(ValueError, match=r"CUDA plan: the CUDA kernels take 1 to 3 spatial dims"):
        pk.pooling_plan(six, ins, _outs(six, ins))
    with pytest.raises(TypeError, match=r"CUDA plan: expects 3 inputs"):
        pk.pooling_backward_plan(PoolingBackward("max", (2, 2)), _layouts([((1, 1, 4, 4), F32)]),
                                 [])
    op = Pooling("max", (2, 2))
    ins = _layouts([((1, 1, 4, 4), F32)])
    with pytest.raises(ValueError, match=r"Pooling\.max: CUDA plan: outputs \[\(\(1, 1, 3, 3\), "
                                         r"dtype\('float32'\)\)\] are not the op's \[\(\(1, 1, 2, "
                                         r"2\)"):
        pk.pooling_plan(op, ins, [L.Layout((1, 1, 3, 3), F32)])
    with pytest.raises(ValueError, match=r"CUDA plan: input 0 has strides"):
        pk.pooling_plan(op, [L.Layout((1, 1, 4, 4), F32, (16, 16, 1, 4))], _outs(op, ins))
    with pytest.raises(ValueError, match=r"Pooling\.max: CUDA plan: index_bits must be 32 or 64"):
        pk.pooling_plan(op, ins, _outs(op, ins), index_bits=48)
