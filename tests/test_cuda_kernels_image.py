"""The CUDA device's image kernels and launch plans (``kernels/image.py``), checked without a GPU.

* every kernel and dtype signature compiles with NVRTC for ``compute_90`` and an older
  architecture (``-Ofc=max``), and ptxas assembles a representative program for ``sm_90``;
* the same sources built with g++ (one library of every kernel, built once) run each op's plan
  (``PLANS[op class]``) on the host through ``tests/cuda_plans.run_plan``, compared with the CPU
  kernel (``KERNELS``): bit-exact where the kernels copy or sum in the CPU's order (Pad,
  PadBackward's crop, SlidingWindow and its transpose, nearest Resize, CvtColor), else within
  float32 rounding (float64 sums in another order: see ``image.DIFFERENCES``);
* the plans' errors: the op's rule first, the CPU's ``NotImplementedError``/``TypeError`` for
  what mge does not implement, and ``mat_idx`` out of range as a ``Check`` raising the CPU's
  ``IndexError``.
"""
import concurrent.futures
import re
import warnings

import numpy as np
import pytest

from cuda_plans import library, run_plan
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)
from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import image as ik
from mge._core.device.cuda.kernels import launch as L
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.nn import Pad, PadBackward
from mge._core.ops.nn_extra import SlidingWindow, SlidingWindowTranspose
from mge._core.ops.vision import (
    BORDER_MODES, CVT_MODES, CvtColor, Remap, Resize, Resize3D, VisionBackward, WarpAffine,
    WarpPerspective,
)

F16, F32, F64, U8 = (np.dtype(d) for d in ("float16", "float32", "float64", "uint8"))
FLOATS = (F16, F32, F64)
INTS = tuple(d for d in ek.SUPPORTED_DTYPES if d.kind in "iu")


def _all_kernels():
    """{group: [KernelSource]}: every kernel and dtype signature."""
    copy = [ik.pad_kernel(d) for d in ek.SUPPORTED_DTYPES]
    copy += [ik.sliding_window_kernel(d) for d in ek.SUPPORTED_DTYPES]
    copy += [ik.cvt_color_kernel("copy", d) for d in ek.SUPPORTED_DTYPES]
    copy += [ik.cvt_color_kernel("u8", U8)] + [ik.cvt_color_kernel("float", d) for d in FLOATS]
    sums = [ik.pad_backward_kernel(d) for d in FLOATS]
    sums += [ik.sliding_window_transpose_kernel(d) for d in FLOATS + INTS]
    sums += [ik.resize_kernel(d) for d in FLOATS + INTS]
    sums += [ik.resize_backward_kernel(d) for d in FLOATS]
    sample = [ik.sample_kernel(k, d, m) for k in ("affine", "perspective", "remap")
              for d in FLOATS + (U8,) for m in FLOATS]
    sample += [ik.sample_kernel("perspective", d, F32, b) for d in (F32, U8)
               for b in (np.dtype("int32"), np.dtype("int64"))]
    sample += [ik.remap_map_grad_kernel(d, m, d) for d in FLOATS for m in FLOATS]
    return {"copy": copy, "sums": sums, "sample": sample}


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


def test_ptxas_assembles_a_representative_program_for_sm90(nvrtc_ready, ptxas_ready):
    kernels = [ik.pad_kernel(F16), ik.pad_backward_kernel(F32), ik.resize_kernel(U8),
               ik.resize_backward_kernel(F64), ik.sample_kernel("perspective", F16, F32, "int32"),
               ik.remap_map_grad_kernel(F32, F32, F32), ik.cvt_color_kernel("u8", U8),
               ik.sliding_window_transpose_kernel(F16)]
    ptx = nvrtc.compile_ptx(ek.program(kernels), "image.cu", "compute_90", ek.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="image.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert not [k.name for k in kernels if k.name.encode() not in cubin]


def test_kernel_names_are_unique_and_the_table_covers_the_ops():
    names = [k.name for g in KERNEL_GROUPS.values() for k in dict.fromkeys(g)]
    assert len(names) == len(set(names))
    assert set(ik.PLANS) == {Pad, PadBackward, SlidingWindow, SlidingWindowTranspose, Resize,
                             Resize3D, WarpAffine, WarpPerspective, Remap, CvtColor,
                             VisionBackward}
    assert ik.STRIDED == frozenset() and all(cls in KERNELS for cls in ik.PLANS)


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


def run(op, *arrays):
    """``op``'s plan on ``arrays`` run on the host build: the outputs."""
    ins = [L.Layout(a.shape, a.dtype) for a in arrays]
    outs = [L.Layout(d.shape, d.dtype) for d in
            INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in arrays])]
    plan = ik.PLANS[type(op)](op, ins, outs)
    for s in plan.launches:
        assert s.block == (L.THREADS, 1, 1) and s.grid == L.grid_for(int(s.args[
            next(i for i, a in enumerate(s.args) if isinstance(a, np.int64))]))
    return run_plan(plan, list(arrays), outs)


def cpu(op, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [np.asarray(a) for a in KERNELS[type(op)](op, *arrays)]


def same(op, *arrays):
    """The plan's outputs bit-identical to the CPU kernel's."""
    got, ref = run(op, *arrays), cpu(op, *arrays)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g.view(np.uint8), np.ascontiguousarray(r).view(np.uint8))


def near(op, *arrays, rtol=None, atol=0, fatol=0):
    """The plan's outputs equal to the CPU kernel's within the dtype's rounding (integers within
    ``atol``, floats within ``fatol`` more)."""
    got, ref = run(op, *arrays), cpu(op, *arrays)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        if g.dtype.kind in "iu":
            assert np.abs(g.astype(np.int64) - r.astype(np.int64)).max(initial=0) <= atol
            continue
        tol = {F16: 2e-3, F32: 2e-6, F64: 1e-12}[g.dtype]
        a = np.abs(r.astype(np.float64))
        # float16: the CPU rounds partial sums to float16 (a few ulps of the largest magnitude)
        floor = {F16: 1e-3, F32: 1e-6, F64: 1e-14}[g.dtype]
        bound = (rtol or tol) * a + floor * a.max(initial=0) + fatol
        np.testing.assert_array_less(np.abs(g.astype(np.float64) - r), bound + 1e-300)


def data(shape, dtype, seed=0):
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return r.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return r.integers(max(info.min, -100), min(info.max, 200), shape).astype(dtype)
    return r.normal(size=shape).astype(dtype)


PAD_CASES = [((3, 4, 5), ((1, 2), (0, 0), (2, 3))), ((5, 6), ((3, 1),)),
             ((2, 3, 4, 5), ((0, 0), (1, 1), (0, 0), (2, 0))), ((7,), ((0, 0),))]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
@pytest.mark.parametrize("dtype", [F16, F32, F64, np.dtype("int8"), U8, np.dtype("int64"),
                                   np.dtype(bool)], ids=str)
def test_pad_is_the_cpu_kernels_bit_for_bit(host, mode, dtype):
    _need16(host, dtype)
    for shape, width in PAD_CASES:
        same(Pad(width, mode, 2.5 if dtype.kind == "f" else 3), data(shape, dtype))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pad_backward(host, mode, dtype):
    _need16(host, dtype)
    for shape, width in PAD_CASES + [((1, 5), ((2, 3), (1, 1)))]:
        if mode == "reflect" and shape == (1, 5):
            continue
        g = data(tuple(s + a + b for s, (a, b) in zip(shape, width + ((0, 0),) * 4)), dtype)
        op = PadBackward(width, mode)
        (same if mode == "constant" else near)(op, g)


WINDOW_CASES = [((2, 3, 7, 6), (3, 2), (0, 0), (1, 1), (1, 1)),
                ((1, 2, 8, 9), (3, 3), (1, 2), (2, 3), (1, 2)),
                ((2, 1, 5, 5), (2, 2), (1, 1), (1, 1), (2, 1))]


@pytest.mark.parametrize("dtype", [F16, F32, F64, np.dtype("int32"), U8], ids=str)
def test_sliding_window_and_its_transpose_bit_for_bit(host, dtype):
    _need16(host, dtype)
    for xs, k, p, s, d in WINDOW_CASES:
        x = data(xs, dtype)
        fwd = SlidingWindow(k, p, s, d)
        same(fwd, x)
        (y,) = cpu(fwd, x)
        same(SlidingWindowTranspose(xs[2:], k, p, s, d), data(y.shape, dtype, 1))


RESIZE_SIZES = [((2, 3, 5, 7), (9, 4)), ((1, 2, 4, 4), (4, 4)), ((1, 1, 1, 6), (3, 11)),
                ((2, 2, 8, 3), (3, 8))]


@pytest.mark.parametrize("imode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("dtype", [F16, F32, F64, U8, np.dtype("int16")], ids=str)
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_resize(host, imode, dtype, fmt):
    _need16(host, dtype)
    for xs, size in RESIZE_SIZES:
        if fmt == "NHWC":
            xs = (xs[0], xs[2], xs[3], xs[1])
        x = data(xs, dtype)
        op = Resize(imode, fmt, size)
        if imode == "nearest":
            same(op, x)
        else:
            near(op, x, atol=1)
        if dtype.kind == "f":
            (y,) = cpu(op, x)
            near(VisionBackward(op, 0), x, data(y.shape, dtype, 2))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_resize3d_and_its_gradient(host, align, dtype):
    _need16(host, dtype)
    for xs, size in [((2, 2, 3, 4, 5), (5, 2, 7)), ((1, 1, 1, 3, 2), (2, 3, 1))]:
        x = data(xs, dtype)
        op = Resize3D("linear", align, size)
        near(op, x)
        (y,) = cpu(op, x)
        near(VisionBackward(op, 0), x, data(y.shape, dtype, 3))


def _affine(n, seed=0):
    r = np.random.default_rng(seed)
    m = np.tile(np.array([[0.9, 0.2, 0.7], [-0.15, 1.1, -0.4]]), (n, 1, 1))
    return m + r.normal(scale=0.1, size=m.shape)


def _perspective(n, seed=0):
    m = np.concatenate([_affine(n, seed), np.tile([[0.01, -0.02, 1.0]], (n, 1, 1))], 1)
    return m


@pytest.mark.parametrize("bmode", BORDER_MODES)
@pytest.mark.parametrize("imode", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_warps(host, bmode, imode, fmt):
    for dtype, mdt in [(F32, F32), (F64, F64), (U8, F32), (F16, F32)]:
        _need16(host, dtype)
        xs = (2, 3, 6, 7) if fmt == "NCHW" else (2, 6, 7, 3)
        x = data(xs, dtype)
        for op, mat in [(WarpAffine(imode, bmode, fmt, 1.5, (5, 8)), _affine(2)),
                        (WarpPerspective(imode, bmode, fmt, -2.0, (7, 4)), _perspective(2))]:
            near(op, x, mat.astype(mdt), atol=1)
        idx = np.array([1, 0, 1], np.int32)
        near(WarpPerspective(imode, bmode, fmt, 0.5, (4, 5)), x,
             _perspective(3, 1).astype(mdt), idx, atol=1)


def test_warp_perspective_mat_idx_out_of_range_is_the_cpus_index_error(host):
    x = data((2, 1, 4, 4), F32)
    mat = _perspective(3).astype(F32)
    op = WarpPerspective("linear", "constant", "NCHW", 0.0, (3, 3))
    for idx in (np.array([0, 2, 1], np.int32), np.array([-1, 0, 0], np.int64)):
        with pytest.raises(IndexError) as cpu_error:
            cpu(op, x, mat, idx)
        with pytest.raises(IndexError) as got:
            run(op, x, mat, idx)
        assert str(got.value) == str(cpu_error.value)


@pytest.mark.parametrize("bmode", BORDER_MODES)
@pytest.mark.parametrize("imode", ["linear", "nearest"])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_remap_and_its_map_gradient(host, bmode, imode, fmt):
    r = np.random.default_rng(4)
    for dtype, mdt in [(F32, F32), (F64, F64), (U8, F32), (F16, F16)]:
        _need16(host, dtype, mdt)
        xs = (2, 3, 5, 6) if fmt == "NCHW" else (2, 5, 6, 3)
        x = data(xs, dtype)
        mp = (r.uniform(-2.5, 8.5, (2, 4, 7, 2))).astype(mdt)
        op = Remap(imode, bmode, fmt, 0.75)
        near(op, x, mp, atol=1)
        if dtype.kind == "f":
            (y,) = cpu(op, x, mp)
            near(VisionBackward(op, 1), x, mp, data(y.shape, dtype, 5))


@pytest.mark.parametrize("mode", CVT_MODES)
def test_cvt_color_bit_for_bit(host, mode):
    src = mode.split("2")[0]
    c = {"RGB": 3, "BGR": 3, "GRAY": 1, "RGBA": 4, "YUV": 3}[src]
    for dtype in (U8, F32, F16, F64):
        _need16(host, dtype)
        x = data((2, 3, 5, c), dtype) if dtype.kind == "f" else \
            np.random.default_rng(0).integers(0, 256, (2, 3, 5, c)).astype(U8)
        same(CvtColor(mode), x)


def test_the_errors_are_the_ops_and_the_cpus(host):
    x = data((1, 2, 4, 4), F32)
    with pytest.raises(NotImplementedError, match="area"):
        run(Resize("area", "NCHW", (2, 2)), x)
    with pytest.raises(NotImplementedError, match="cubic"):
        run(WarpAffine("cubic", "constant", "NCHW", 0.0, (2, 2)), x, _affine(1).astype(F32))
    with pytest.raises(TypeError, match="takes float32 or uint8"):
        run(CvtColor("RGB2GRAY"), data((1, 2, 2, 3), np.dtype("int32")))
    with pytest.raises(ValueError, match="Pad"):  # the op's rule: reflect wider than the axis
        run(Pad(((5, 0),), "reflect"), data((3,), F32))
    # mat_idx is an index (no gradient, as in MegEngine); the warps' data and matrix gradients
    # are image_grad.py's (tests/test_cuda_kernels_image_grad.py)
    op = WarpPerspective("linear", "constant", "NCHW", 0.0, (2, 2))
    with pytest.raises(NotImplementedError, match="VisionBackward"):
        run(VisionBackward(op, 2), x, _perspective(1).astype(F32), np.zeros(1, np.int32),
            data((1, 2, 2, 2), F32))
