"""The sampling ops' gradient kernels and plans (``kernels/image_grad.py``), checked without a GPU.

* every kernel and dtype signature compiles with NVRTC for ``compute_90`` and an older
  architecture (``-Ofc=max``); the float64 scatter also for the oldest one NVRTC has (below
  sm_60: its compare-and-swap ``atomicAdd``), and ptxas assembles a representative program for
  ``sm_90``;
* the host build (g++, one library of every kernel, built once) runs ``VisionBackward``'s plan
  (``image.PLANS``, which hands these ops to ``image_grad.sample_grad_plan``) through
  ``tests/cuda_plans.run_plan`` against the CPU kernel with float64 references, for every border
  mode, both interpolations, NCHW and NHWC, the three ops (and ``mat_idx``), float16/32/64;
* the atomic add's host shim is atomic: the scatter run from several threads at once into one
  buffer gives exactly the sum of the runs (integer-valued sums, no rounding);
* the plans' structure (zeroing, the float16 workspace, chunks) and errors.

**Tolerances** (stated per test, all against float64 references).  The data gradient adds each
term ``dy * weight`` with atomics in the accumulating type (float32 for float16/32, float64 for
float64; any order on a GPU): with ``k`` terms at most reaching one pixel and ``S`` the sum of
their magnitudes (the CPU's gradient of ``|dy|``, the weights being >= 0), a sum in any order is
within ``k * u * S`` (``u`` the accumulating unit roundoff), plus the final rounding to the dtype
(``2 u_dtype |ref|``).  The matrix gradient sums in float64 in another order than numpy, then
rounds once: within ``4 u_dtype |ref|`` plus ``1e-11 * max |ref|`` for the float64 sums'
cancellation (about 10^3 terms of float64 rounding each).
"""
import concurrent.futures
import ctypes
import re
import threading
import warnings

import numpy as np
import pytest

from cuda_plans import library, run_plan
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)
from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.backend import ctypes_struct, parse_param
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import image as ik
from mge._core.device.cuda.kernels import image_grad as ig
from mge._core.device.cuda.kernels import launch as L
from mge._core.device.cuda.kernels.image_common import sample_struct
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.vision import BORDER_MODES, Remap, VisionBackward, WarpAffine, WarpPerspective

F16, F32, F64, U8 = (np.dtype(d) for d in ("float16", "float32", "float64", "uint8"))
I32, I64 = np.dtype("int32"), np.dtype("int64")
FLOATS = (F16, F32, F64)
#: unit roundoff of each dtype
UNIT = {F16: 2.0 ** -11, F32: 2.0 ** -24, F64: 2.0 ** -53}


def _all_kernels():
    """{group: [KernelSource]}: every kernel and dtype signature."""
    data = [ig.sample_grad_kernel(k, d, m) for k in ("affine", "perspective", "remap")
            for d in FLOATS for m in FLOATS]
    data += [ig.sample_grad_kernel("perspective", d, F32, I64) for d in FLOATS]
    data += [ig.to_half_kernel()]
    mat = [k for kind in ("affine", "perspective") for x in FLOATS + (U8,) for m in FLOATS
           for k in ig.warp_mat_grad_kernels(kind, x, m, x if x.kind == "f" else F32)]
    mat += list(ig.warp_mat_grad_kernels("perspective", F32, F32, F32, I64))
    return {"data": data, "matrix": mat}


KERNEL_GROUPS = _all_kernels()


@pytest.mark.parametrize("group", sorted(KERNEL_GROUPS))
def test_every_kernel_compiles_for_hopper_and_an_older_arch(group, old_arch):
    kernels = list(dict.fromkeys(KERNEL_GROUPS[group]))
    source = ek.program(kernels)

    def compile_for(arch):
        ptx = nvrtc.compile_ptx(source, f"{group}.cu", arch, fast_options(ek.NVRTC_OPTIONS))
        return set(re.findall(r"\.entry\s+(\w+)", ptx))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        found = dict(zip(("compute_90", old_arch), pool.map(compile_for, ("compute_90", old_arch))))
    for arch, entries in found.items():
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"


def test_the_float64_scatter_uses_hardware_atomics_from_sm60_and_cas_before(nvrtc_ready):
    # atomicAdd on double exists from sm_60; below it the kernel loops on atomicCAS
    source = ek.program([ig.sample_grad_kernel("remap", F64, F64)])
    ptx90 = nvrtc.compile_ptx(source, "d.cu", "compute_90", fast_options(ek.NVRTC_OPTIONS))
    assert re.search(r"atom(\.global)?\.add\.f64", ptx90) or re.search(r"red(\.global)?\.add\.f64",
                                                                       ptx90)
    oldest = min(nvrtc.supported_archs())
    if oldest >= 60:
        pytest.skip(f"this NVRTC compiles for sm_{oldest} and later: no pre-sm_60 path to check")
    ptx = nvrtc.compile_ptx(source, "d.cu", f"compute_{oldest}", fast_options(ek.NVRTC_OPTIONS))
    assert "atom.global.cas.b64" in ptx or "atom.cas.b64" in ptx
    assert not re.search(r"(atom|red)(\.global)?\.add\.f64", ptx)


def test_ptxas_assembles_a_representative_program_for_sm90(nvrtc_ready, ptxas_ready):
    kernels = [ig.sample_grad_kernel("perspective", F16, F32, I32),
               ig.sample_grad_kernel("remap", F64, F64), ig.to_half_kernel(),
               *ig.warp_mat_grad_kernels("affine", U8, F32, F32),
               *ig.warp_mat_grad_kernels("perspective", F64, F64, F64, I64)]
    ptx = nvrtc.compile_ptx(ek.program(kernels), "grad.cu", "compute_90", ek.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="grad.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert not [k.name for k in kernels if k.name.encode() not in cubin]


def test_kernel_names_are_unique_and_image_grad_has_no_plans_table():
    names = [k.name for g in KERNEL_GROUPS.values() for k in dict.fromkeys(g)]
    assert len(names) == len(set(names))
    # image.py's VisionBackward plan is the registered one; this module only serves it
    assert not hasattr(ig, "PLANS")
    assert ik.PLANS[VisionBackward] is ik.vision_backward_plan
    assert ig.DIFFERENCES in ik.DIFFERENCES and "atomicAdd" in ik.DIFFERENCES


# -- the host build and the plans -----------------------------------------------------------------


@pytest.fixture(scope="module")
def host():
    """Whether float16 runs on the host, after one build of every kernel."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    f16 = hostbuild.have_float16()
    kernels = [k for g in KERNEL_GROUPS.values() for k in g]
    library([k for k in dict.fromkeys(kernels) if f16 or "f16" not in k.name], jobs=4)
    return f16


def _need16(host, *dtypes):
    if F16 in dtypes and not host:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")


def _outs(op, arrays):
    return [L.Layout(d.shape, d.dtype) for d in
            INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in arrays])]


def plan_of(op, *arrays):
    return ik.PLANS[type(op)](op, [L.Layout(a.shape, a.dtype) for a in arrays], _outs(op, arrays))


def run(op, *arrays):
    """``op``'s plan run on the host build: its one output."""
    (out,) = run_plan(plan_of(op, *arrays), list(arrays), _outs(op, arrays))
    return out


def cpu(op, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (out,) = KERNELS[type(op)](op, *arrays)
    return np.asarray(out)


def data(shape, dtype, seed=0):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return r.integers(0, 256, shape).astype(dtype)
    return r.normal(size=shape).astype(dtype)


def _affine(n, seed=0):
    r = np.random.default_rng(seed)
    m = np.tile(np.array([[0.9, 0.2, 0.7], [-0.15, 1.1, -0.4]]), (n, 1, 1))
    return m + r.normal(scale=0.1, size=m.shape)


def _perspective(n, seed=0):
    return np.concatenate([_affine(n, seed), np.tile([[0.01, -0.02, 1.0]], (n, 1, 1))], 1)


def _image_shape(fmt, n=2, c=3, h=6, w=7):
    return (n, c, h, w) if fmt == "NCHW" else (n, h, w, c)


def _cases(fmt, imode, bmode):
    """(forward op, its inputs but x) of every sampling op: affine, perspective, perspective with
    mat_idx, remap."""
    r = np.random.default_rng(7)
    return [(WarpAffine(imode, bmode, fmt, 1.5, (5, 8)), [_affine(2)]),
            (WarpPerspective(imode, bmode, fmt, -2.0, (7, 4)), [_perspective(2)]),
            (WarpPerspective(imode, bmode, fmt, 0.5, (4, 5)),
             [_perspective(3, 1), np.array([1, 0, 1], np.int32)]),
            (Remap(imode, bmode, fmt, 0.75), [r.uniform(-2.5, 8.5, (2, 4, 7, 2))])]


def _check_data_grad(f, x, rest, dy):
    """The data gradient's plan vs the CPU's float64 reference, within ``k u S + 2 u |ref|``
    (module docstring)."""
    op = VisionBackward(f, 0)
    got = run(op, x, *rest, dy)
    assert got.dtype == x.dtype and got.shape == x.shape
    x64, rest64 = x.astype(F64), [a.astype(F64) if a.dtype.kind == "f" else a for a in rest]
    ref = cpu(op, x64, *rest64, dy.astype(F64))
    scale = cpu(op, x64, *rest64, np.abs(dy.astype(F64)))
    taps = 4 if f.imode == "linear" else 1
    terms = taps * dy.size // (dy.shape[3] if f.format == "NHWC" else dy.shape[1])
    u_acc, u_out = UNIT[ig.ACCUMULATE[x.dtype]], UNIT[x.dtype]
    bound = terms * u_acc * scale + 2 * u_out * np.abs(ref) + 1e-300
    err = np.abs(got.astype(F64) - ref)
    assert np.all(err <= bound), (f, float(err.max()), float((err / bound).max()))
    return got, ref


@pytest.mark.parametrize("bmode", BORDER_MODES)
@pytest.mark.parametrize("imode", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_data_gradients_every_mode_and_format(host, bmode, imode, fmt):
    for dtype, mdt in [(F32, F32), (F64, F64), (F16, F32), (F32, F16)]:
        _need16(host, dtype, mdt)
        x = data(_image_shape(fmt), dtype)
        for k, (f, rest) in enumerate(_cases(fmt, imode, bmode)):
            rest = [a.astype(mdt) if a.dtype.kind == "f" else a for a in rest]
            dy = data(_outs(f, [x, *rest])[0].shape, dtype, 10 + k)
            got, ref = _check_data_grad(f, x, rest, dy)
            # not vacuous: the gradient is there (constant borders leave pixels at 0)
            assert np.abs(ref).max() > 0.1


def _check_mat_grad(f, x, rest, dy):
    op = VisionBackward(f, 1)
    got = run(op, x, *rest, dy)
    mat = rest[0]
    assert got.dtype == mat.dtype and got.shape == mat.shape
    ref = cpu(op, x, mat.astype(F64), *rest[1:], dy.astype(F64))
    u = UNIT[mat.dtype]
    bound = 4 * u * np.abs(ref) + 1e-11 * np.abs(ref).max() + 1e-300
    err = np.abs(got.astype(F64) - ref)
    assert np.all(err <= bound), (f, float(err.max()), float((err / bound).max()))
    return got, ref


@pytest.mark.parametrize("bmode", BORDER_MODES)
@pytest.mark.parametrize("imode", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_matrix_gradients_every_mode_and_format(host, bmode, imode, fmt):
    for dtype, mdt in [(F32, F32), (F64, F64), (U8, F32), (F16, F16)]:
        _need16(host, dtype, mdt)
        x = data(_image_shape(fmt), dtype)
        gdt = dtype if dtype.kind == "f" else F32
        for k, (f, rest) in enumerate(_cases(fmt, imode, bmode)[:3]):
            rest = [a.astype(mdt) if a.dtype.kind == "f" else a for a in rest]
            dy = data(_outs(f, [x, *rest])[0].shape, gdt, 20 + k)
            got, ref = _check_mat_grad(f, x, rest, dy)
            if imode == "nearest":  # the taps' weights do not move: the CPU's gradient is 0
                assert not np.any(got)
            else:
                assert np.abs(ref).max() > 1.0


def test_the_matrix_gradient_over_many_chunks_and_few_blocks(host, monkeypatch):
    # 7 positions a chunk over a 9 x 11 output: 15 chunks per matrix; 4 blocks walk the 45 rows
    monkeypatch.setattr(ig, "MAT_GRAD_CHUNK", 7)
    monkeypatch.setattr(ig, "MAX_ROW_BLOCKS", 4)
    x = data((2, 9, 8, 3), F64)
    mat = _perspective(3, 2)
    idx = np.array([1, 1, 0], np.int64)
    for fmt, xs in (("NHWC", x), ("NCHW", x.transpose(0, 3, 1, 2).copy())):
        f = WarpPerspective("linear", "reflect", fmt, 0.0, (9, 11))
        dy = data(_outs(f, [xs, mat, idx])[0].shape, F64, 3)
        first = plan_of(VisionBackward(f, 1), xs, mat, idx, dy).launches[0]
        assert first.grid == (4, 1, 1) and int(first.args[5]) == 3 * 15 and int(first.args[6]) == 15
        _check_mat_grad(f, xs, [mat, idx], dy)


def test_many_terms_on_one_pixel_and_non_finite_dy(host):
    # a matrix sending every position far outside: with replicate all taps land on a corner
    # (hundreds of atomic adds to one pixel); with constant every tap is invalid, and an infinite
    # dy times a weight of 0 is NaN, added to pixel 0 as the CPU's bincount adds it
    x = data((1, 2, 5, 5), F32)
    far = np.array([[[0.0, 0.0, -50.0], [0.0, 0.0, -60.0]]], F32)
    f = WarpAffine("linear", "replicate", "NCHW", 0.0, (16, 16))
    dy = data((1, 2, 16, 16), F32, 4)
    got, ref = _check_data_grad(f, x, [far], dy)
    assert np.count_nonzero(ref) == 2 and got[0, :, 0, 0].tolist() == pytest.approx(
        dy.sum((2, 3))[0].tolist(), rel=1e-5)
    f = WarpAffine("linear", "constant", "NCHW", 0.0, (3, 3))
    dy = data((1, 2, 3, 3), F32, 5)
    dy[0, 1, 2, 2] = np.inf
    got, ref = run(VisionBackward(f, 0), x, far, dy), cpu(VisionBackward(f, 0), x, far, dy)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(got).sum() == 1 and not np.any(got[~np.isnan(got)])


def test_data_gradient_plans_zero_their_sums_and_float16_rounds_once(host):
    x, mat = data((1, 2, 4, 4), F32), _affine(1).astype(F32)
    f = WarpAffine("linear", "reflect", "NCHW", 0.0, (3, 5))
    dy = data((1, 2, 3, 5), F32)
    plan = plan_of(VisionBackward(f, 0), x, mat, dy)
    memset, scatter = plan.steps
    assert isinstance(memset, L.Memset) and memset.buf == L.Buf("out0") and memset.value == 0
    assert memset.nbytes == x.nbytes and scatter.args[0] == L.Buf("out0")
    assert plan.workspace == 0 and not plan.checks
    plan = plan_of(VisionBackward(f, 0), x.astype(F16), mat, dy.astype(F16))
    memset, scatter, half = plan.steps
    assert memset.buf.name == "ws" and memset.nbytes == x.size * 4 and scatter.args[0] == memset.buf
    assert half.kernel.name == "mge_img_grad_f32_to_f16" and half.args[1] == memset.buf
    # an empty dy: the gradient is all zeros (the memset alone); an empty x: nothing
    f0 = WarpAffine("linear", "reflect", "NCHW", 0.0, (0, 5))
    plan = plan_of(VisionBackward(f0, 0), x, mat, np.zeros((1, 2, 0, 5), F32))
    assert [type(s) for s in plan.steps] == [L.Memset]
    assert not np.any(run(VisionBackward(f0, 0), x, mat, np.zeros((1, 2, 0, 5), F32)))
    xe = np.zeros((1, 0, 4, 4), F32)
    assert not plan_of(VisionBackward(f, 0), xe, mat, np.zeros((1, 0, 3, 5), F32)).steps


def test_mat_idx_out_of_range_is_the_cpus_index_error(host):
    x = data((2, 1, 4, 4), F32)
    mat = _perspective(3).astype(F32)
    f = WarpPerspective("linear", "constant", "NCHW", 0.0, (3, 3))
    dy = data((3, 1, 3, 3), F32)
    for index in (0, 1):
        for idx in (np.array([0, 2, 1], np.int32), np.array([-1, 0, 0], np.int64)):
            op = VisionBackward(f, index)
            with pytest.raises(IndexError) as cpu_error:
                cpu(op, x, mat, idx, dy)
            with pytest.raises(IndexError) as got:
                run(op, x, mat, idx, dy)
            assert str(got.value) == str(cpu_error.value)


def test_the_plans_errors(host):
    x, mat = data((1, 2, 4, 4), F32), _affine(1).astype(F32)
    f = WarpAffine("linear", "constant", "NCHW", 0.0, (2, 2))
    dy = data((1, 2, 2, 2), F32)
    with pytest.raises(TypeError, match="VisionBackward.*x and dy must have one dtype"):
        plan_of(VisionBackward(f, 0), x, mat, dy.astype(F64))
    with pytest.raises(TypeError, match="dtype uint8 is not taken"):
        plan_of(VisionBackward(f, 0), x.astype(U8), mat, dy.astype(U8))
    with pytest.raises(ValueError, match="dy has shape"):
        plan_of(VisionBackward(f, 0), x, mat, data((1, 2, 3, 2), F32))
    with pytest.raises(ValueError, match="mat must have shape"):  # the forward's own rule
        plan_of(VisionBackward(f, 1), x, _perspective(1).astype(F32), dy)
    with pytest.raises(NotImplementedError, match="cubic"):
        plan_of(VisionBackward(WarpAffine("cubic", "constant", "NCHW", 0.0, (2, 2)), 0),
                x, mat, dy)
    with pytest.raises(ValueError, match="no pixels"):
        plan_of(VisionBackward(f, 1), np.zeros((1, 2, 0, 4), F32), mat, dy)
    with pytest.raises(TypeError, match="not a warp or Remap"):
        ig.sample_grad_plan(VisionBackward(_NotWarp(), 0), [], [])
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        ig.sample_grad_kernel("affine", I32, F32)
    with pytest.raises(ValueError, match="only the warps have a matrix"):
        ig.warp_mat_grad_kernels("remap", F32, F32, F32)
    # Remap's map gradient (index 1) is image.py's kernel, not a scatter
    r = Remap("linear", "replicate", "NCHW", 0.0)
    plan = plan_of(VisionBackward(r, 1), x, data((1, 2, 2, 2), F32), dy)
    assert [k.name for k in plan.kernels] == [ik.remap_map_grad_kernel(F32, F32, F32).name]


class _NotWarp:
    name = "NotWarp"


# -- the host shim of atomicAdd -------------------------------------------------------------------


def _raw_launch(kernel, args):
    """The host kernel called on raw arguments (addresses, numpy scalars and structs)."""
    lib = library([kernel])
    types, values = [], []
    for p, a in zip((parse_param(d) for d in kernel.params), args):
        if p.kind == "pointer":
            types.append(ctypes.c_void_p)
            values.append(a)
        elif p.kind == "scalar":
            types.append(np.ctypeslib.as_ctypes_type(p.dtype))
            values.append(a.item())
        else:
            t = ctypes_struct(a.dtype)
            types.append(t)
            values.append(t.from_buffer_copy(a.tobytes()))
    return lambda: lib.function(kernel.name, types)(*values)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_the_host_atomic_add_is_atomic_across_threads(host, dtype):
    # a 256 x 256 nearest remap onto a 4 x 4 image (replicate): 65536 adds of small integers
    # onto 16 pixels, so every sum is exact; four threads running the same launch 8 times each,
    # at once, into one buffer (ctypes lets go of the GIL) must give exactly 32 times one run's
    # sums.  A plain read-modify-write loses updates whenever two threads really run in
    # parallel (tens of thousands here; on a loaded machine the threads may share one core and
    # lose none, so this catches a broken shim on most runs, not all)
    r = np.random.default_rng(8)
    f = Remap("nearest", "replicate", "NCHW", 0.0)
    xs, mp = (1, 1, 4, 4), r.uniform(-3, 6, (1, 256, 256, 2)).astype(dtype)
    dy = r.integers(1, 4, (1, 1, 256, 256)).astype(dtype)
    g = sample_struct(f, xs, dy.shape, 0, "replicate", 0.0, False)
    kernel = ig.sample_grad_kernel("remap", dtype, dtype)
    acc = np.zeros(xs, dtype)
    call = _raw_launch(kernel, (acc.ctypes.data, dy.ctypes.data, mp.ctypes.data, None,
                                np.int64(dy.size), g, None))
    call()
    once = acc.copy()
    np.testing.assert_array_equal(once, cpu(VisionBackward(f, 0), np.zeros(xs, dtype), mp, dy))
    acc[...] = 0
    start = threading.Barrier(4)

    def worker():
        start.wait()
        for _ in range(8):
            call()
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(acc, 32 * once)
