"""The CUDA device's relayout, creation and indexing kernels, checked without a GPU.

``cuda/kernels/relayout.py`` and ``cuda/kernels/indexing.py`` write the CUDA C and a
``launch.Plan`` per call through their ``PLANS`` tables.  Here:

* every kernel (each element size, dtype, index-array count, index width and variant) compiles
  with NVRTC for ``compute_90`` and an older architecture (one program per family, ``-Ofc=max``),
  and ptxas assembles a representative program (the transpose, the atomics, the scans) for sm_90;
* every op goes op -> ``PLANS[type(op)](op, ins, outs)`` (``ins``: the inputs' layouts, strided
  views included -- transposed, negative steps, broadcast; ``outs``: the CPU kernel's output
  shapes, which the op's rule gives) -> ``tests/cuda_plans.run_plan`` on the host build of the same
  sources (g++, the block/thread phases emulated serially; the plans' grids, arguments, workspace,
  checks and readbacks) -> compared exactly with the CPU kernel of ``mge._core.device.cpu.KERNELS``
  (float incr sums within a stated tolerance): every view op, every creation op and dtype, every
  index op with negative indices, masks (through CondTake's counts and flat indices, a
  ``Readback`` sizing a get's output), CondTake with empty and full results;
* out-of-range indices raise, through the plans' ``Check``s, the CPU kernel's exception with the
  same message (the bad element or the index's range read back);
* errors the plans see: unknown modes, unsupported dtypes, bad axes, values that do not fit.

The host library is built once for the module (every kernel, ``WORKERS`` translation units):
``cuda_plans.library`` reuses it for every plan.  Without NVRTC, ptxas or g++ the tests that need
them skip with the reason, except under ``CI``, where that is a failure.
"""
import concurrent.futures
import os
import re

import numpy as np
import pytest

from cuda_plans import library, run_plan
from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import indexing as ix
from mge._core.device.cuda.kernels import relayout as rl
from mge._core.device.cuda.kernels.launch import Buf, Layout, Plan, Readback
from mge._core.ops.creation import Arange, Eye, Fill, Linspace
from mge._core.ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor,
    Subtensor,
)
from mge._core.ops.nn import IndexingOneHot, IndexingSetOneHot
from mge._core.ops.shape import (
    Broadcast, BroadcastTo, Concat, CondTake, Diag, Dimshuffle, Gather, Repeat, Roll, Scatter,
    ScatterAdd, Split, Stack, Tile, Where,
)
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch)

DTYPES = ek.SUPPORTED_DTYPES
F16 = np.dtype("float16")
PLANS = {**rl.PLANS, **ix.PLANS}
WORKERS = min(4, os.cpu_count() or 1)


# -- every kernel ---------------------------------------------------------------------------------

def _families():
    """{family: [KernelSource]}: every kernel these modules generate."""
    sizes = rl.ELEMENT_SIZES
    relayout = [rl.copy_kernel(s, c, b) for s in sizes for c, b in ((True, 64), (False, 32),
                                                                       (False, 64))]
    relayout += [rl.transpose_kernel(s) for s in sizes] + [rl.fill_kernel(s) for s in sizes]
    relayout += [rl.eye_kernel(s) for s in sizes]
    relayout += [rl.arange_kernel(d, i) for d in DTYPES for i in (False, True)]
    relayout += [rl.linspace_kernel(d) for d in DTYPES]
    index = [ix.index_kernel(mode, m, itemsize=s, index_bits=b) for mode in ("get", "set")
             for s in sizes for m in (1, 2, 3) for b in (32, 64)]
    index += [ix.index_kernel("get", ix.MAX_INDEX, itemsize=4)]
    atomics = [ix.index_kernel("incr", m, dtype=d, index_bits=b) for d in DTYPES
               for m in (1, 2) for b in (32, 64)]
    select = [ix.where_kernel(m, s, c, b) for m in DTYPES for s in sizes
              for c, b in ((True, 64), (False, 32), (False, 64))]
    select += [ix.condtake_count_kernel(m) for m in DTYPES] + [ix.condtake_scan_kernel()]
    select += [ix.condtake_write_kernel(m, s) for m in DTYPES for s in sizes]
    return {"relayout": relayout, "index": index, "atomics": atomics, "select": select}


FAMILIES = _families()


def _fast_options():
    return fast_options(rl.NVRTC_OPTIONS)




@pytest.fixture(scope="module")
def sweep(old_arch):
    """{(family, arch): set of PTX entry names, or the CudaCompileError}."""
    jobs = [(f, a) for f in FAMILIES for a in ("compute_90", old_arch)]

    def compile_one(job):
        family, arch = job
        try:
            ptx = nvrtc.compile_ptx(ek.program(FAMILIES[family]), f"{family}.cu", arch,
                                    _fast_options())
            return set(re.findall(r"\.entry\s+(\w+)", ptx))
        except nvrtc.CudaCompileError as e:
            return e

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(compile_one, jobs))
    nvrtc.clear_cache()
    return dict(zip(jobs, results))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_kernel_compiles_for_hopper_and_an_older_arch(family, sweep, old_arch):
    for arch in ("compute_90", old_arch):
        result = sweep[(family, arch)]
        if isinstance(result, Exception):
            pytest.fail(str(result))
        missing = [k.name for k in FAMILIES[family] if k.name not in result]
        assert not missing, f"not in the PTX for {arch}: {missing}"


def test_ptxas_assembles_a_representative_program_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    kernels = [rl.transpose_kernel(2), rl.copy_kernel(8, False, 32), rl.linspace_kernel(F16),
               rl.arange_kernel(np.dtype("int8"), True),
               ix.index_kernel("get", 3, itemsize=1, index_bits=32),
               ix.index_kernel("incr", 1, dtype=F16), ix.index_kernel("incr", 2, dtype="int8"),
               ix.index_kernel("incr", 1, dtype="float64"),
               ix.index_kernel("incr", 1, dtype="bool"),
               ix.index_kernel("incr", 1, dtype="int64"), ix.where_kernel(F16, 2, False, 32),
               ix.condtake_count_kernel(F16), ix.condtake_scan_kernel(),
               ix.condtake_write_kernel("bool", 4)]
    ptx = nvrtc.compile_ptx(ek.program(kernels), "representative.cu", "compute_90",
                            rl.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="representative.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert [k.name for k in kernels if k.name.encode() not in cubin] == []


# -- the host build and the plans' runs -----------------------------------------------------------

def _host_kernels(float16):
    kernels = [k for f in ("relayout", "index", "atomics", "select") for k in FAMILIES[f]]
    return [k for k in kernels if float16 or ("f16" not in k.name)]


@pytest.fixture(scope="module")
def host():
    """The host library of every kernel (``run_plan`` then finds each plan's kernels in it)."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    return library(_host_kernels(hostbuild.have_float16()), jobs=WORKERS)


def _cpu(op, *arrays):
    return KERNELS[type(op)](op, *arrays)


def _elems(a):
    return tuple(s // a.itemsize for s in a.strides)


def _layout(a):
    return Layout(a.shape, a.dtype, _elems(a))


def _plan(op, *arrays, outs=None):
    """The op's plan for ``arrays`` (views as they lie) and ``outs`` (default: the CPU
    kernel's output layouts, which the op's rule gives); (plan, outs)."""
    if outs is None:
        outs = [Layout(w.shape, w.dtype) for w in _cpu(op, *arrays)]
    return PLANS[type(op)](op, [_layout(a) for a in arrays], outs), outs


def _gpu(op, *arrays, outs=None):
    """The op's plan run on the host build: its outputs."""
    plan, outs = _plan(op, *arrays, outs=outs)
    with np.errstate(all="ignore"):
        return run_plan(plan, list(arrays), outs)


def _same(op, *arrays, outs=None):
    """The plan's outputs are exactly the CPU kernel's."""
    want = _cpu(op, *arrays)
    got = _gpu(op, *arrays, outs=outs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (op, g.shape, w.shape)
        np.testing.assert_array_equal(g, w, err_msg=str(op))


def _data(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        return rng.normal(0, 10, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)


def _skip_f16(*dtypes):
    if F16 in [np.dtype(d) for d in dtypes] and not hostbuild.have_float16():
        pytest.skip("this g++ has no _Float16")


def _cpu_error(exc, op, *arrays):
    with pytest.raises(exc) as e:
        _cpu(op, *arrays)
    return str(e.value)


def _gpu_error(exc, op, *arrays, outs=None):
    with pytest.raises(exc) as e:
        _gpu(op, *arrays, outs=outs)
    return str(e.value)


# -- relayout -------------------------------------------------------------------------------------

def _views(rng, dtype):
    """Views of one base: dense, transposed (2-D and batched), negative steps, broadcast."""
    base = _data(rng, dtype, (6, 40, 36))
    return [base, base.transpose(0, 2, 1), base[0].T, base[::-1, 3:30:2, ::-3],
            np.broadcast_to(base[:, :1, 5:9], (6, 7, 4)), base[2, 5], base[:, 0, :].T[::-1]]


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
def test_copy_launch_copies_every_kind_of_view(host, dtype):
    rng = np.random.default_rng(1)
    launched = set()
    for v in _views(rng, dtype):
        launch = rl.copy_launch(v.shape, _elems(v), _elems(np.empty(v.shape)), v.itemsize)
        launched.add(launch.kernel.name)
        (out,) = run_plan(Plan((launch,)), [v], [Layout(v.shape, v.dtype)])
        np.testing.assert_array_equal(out, v)
    size = np.dtype(dtype).itemsize  # each kernel ran: the tiled transpose, general, dense
    assert {f"mge_transpose_{size}", f"mge_copy_{size}_s32"} <= launched
    assert any(name.endswith("_c") for name in launched)


def test_copy_launch_picks_the_fast_paths():
    dense = rl.copy_launch((3, 4, 5), (20, 5, 1), (20, 5, 1), 2)
    assert dense.kernel.name == "mge_copy_8_c" and dense.args[2] == 3 * 4 * 5 * 2 // 8
    assert dense.args[:2] == (Buf("out0"), Buf("in0")) and dense.block == (256, 1, 1)
    odd = rl.copy_launch((3,), (1,), (1,), 2, Buf("in0", 2))
    assert odd.kernel.name == "mge_copy_2_c"  # an offset of one float16: no widening
    t = rl.copy_launch((64, 48), (1, 64), (48, 1), 4)
    assert t.kernel.name == "mge_transpose_4" and t.grid == (2, 2, 1) and t.block == (32, 8, 1)
    batched = rl.copy_launch((5, 64, 48), (3072, 1, 64), (3072, 48, 1), 4)
    assert batched.kernel.name == "mge_transpose_4" and batched.grid == (2, 2, 5)
    general = rl.copy_launch((4, 5), (1, 4), (5, 1), 4)  # too small to tile
    assert general.kernel.name == "mge_copy_4_s32"
    assert rl.copy_launch((2 ** 20, 2 ** 12), (1, 2 ** 20), (2 ** 12, 0), 1).kernel.name == \
        "mge_copy_1_s64"
    assert rl.copy_launch((0, 5), (5, 1), (5, 1), 4) is None


def test_every_op_class_has_a_plan_and_the_strided_ones_read_views():
    assert set(rl.PLANS) == {Dimshuffle, Broadcast, BroadcastTo, Subtensor, SetSubtensor, Concat,
                             Stack, Split, Tile, Repeat, Roll, Diag, Fill, Arange, Linspace, Eye}
    assert rl.STRIDED == set(rl.PLANS) - {Fill, Arange, Linspace, Eye}
    assert set(ix.PLANS) == ix.STRIDED == {
        IndexingMultiAxisVec, IndexingSetMultiAxisVec, IndexingIncrMultiAxisVec, IndexingOneHot,
        IndexingSetOneHot, Gather, Scatter, ScatterAdd, Where, CondTake}


def test_view_ops_match_the_cpu_kernels(host):
    rng = np.random.default_rng(2)
    x = _data(rng, "float32", (4, 6, 5))[:, ::-1, 1:]  # non-contiguous, a negative step
    for op in (Dimshuffle((2, "x", 0, 1)), Tile((2, 1, 3)), Tile((2, 2, 1, 3)), Repeat(3, 1),
               Roll((2, -1, 7), (1, 2, 1)), Split(1, (2, 3, 1)), Dimshuffle((0, 1, 2))):
        _same(op, x)
    _same(Broadcast((3, 4, 6, 4)), x[:, :1])
    shape = np.array([2, 4, 6, 4], np.int32)
    _same(BroadcastTo(), x[:, 2:3], shape)  # the device reads the target back: outs[0].shape
    for k in (-2, 0, 3):
        _same(Diag(k), x[0, :, 0])
        _same(Diag(k), x[1])
    plan, _ = _plan(Roll((2,), (0,)), x)
    assert len(plan.launches) == 2  # two copies per rolled axis
    assert _plan(Tile((0, 2)), x[0])[0].steps == ()  # an empty output launches nothing


def test_subtensor_and_setsubtensor_views(host):
    rng = np.random.default_rng(3)
    x = _data(rng, "int16", (5, 7, 6)).transpose(1, 0, 2)
    items = (("slice", None, None, -2), ("int", -1), ("new",), ("slice", 1, 5, 3))
    _same(Subtensor(items), x)
    _same(SetSubtensor(items), x, _data(rng, "int16", (1, 1, 2))[:, :, ::-1])
    _same(SetSubtensor((("ell",), ("int", 2))), x, _data(rng, "int16", (7, 1)))


def test_concat_and_stack(host):
    rng = np.random.default_rng(4)
    xs = [_data(rng, "uint8", (3, n, 4)) for n in (2, 5, 1)]
    xs[1] = xs[1][:, ::-1]
    _same(Concat(1), *xs)
    ys = [_data(rng, "float64", (3, 4)), _data(rng, "float64", (4, 3)).T]
    for axis in (0, 2, -1):
        _same(Stack(axis), *ys)


# -- creation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [str(d) for d in DTYPES])
def test_creation_ops_match_the_cpu_kernels(host, dtype):
    _skip_f16(dtype)
    d = np.dtype(dtype)
    ops = [Fill((3, 5), 2.75 if d.kind == "f" else 7, d, "cpu0"), Eye(4, 6, 1, d, "cpu0"),
           Eye(5, 3, -2, d, "cpu0")]
    for start, stop, step in ((0, 50, 3), (-3, 40, 1), (0.5, 7.25, 0.3), (10, -5, -2)):
        ops.append(Arange(start, stop, step, d, "cpu0"))
    for start, stop, num in ((0.0, 1.0, 11), (-3.0, 7.0, 1), (2.0, 2.0, 5), (-1e-310, 1e-310, 4),
                             (0.0, 100.0, 1000)):
        ops.append(Linspace(start, stop, num, d, "cpu0"))
    for op in ops:
        with np.errstate(all="ignore"):
            _same(op)
    assert _plan(Fill((0, 3), 1, d, "cpu0"))[0].steps == ()
    assert _plan(Arange(3, 3, 1, d, "cpu0"))[0].steps == ()


# -- indexing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("idt", ["int32", "int64", "int16"])
def test_gather_scatter_and_scatter_add(host, idt):
    rng = np.random.default_rng(5)
    x = _data(rng, "float32", (6, 5, 7))[:, ::-1]
    index = rng.integers(-5, 5, (6, 4, 7)).astype(idt)
    index[0, 0, :] = 2  # repeated targets for ScatterAdd
    src = _data(rng, "float32", (6, 4, 7))
    for axis in (1, -2):
        _same(Gather(axis), x, index)
    _same(Gather(1), x, index[:, :3, ::2])  # a smaller, strided index along the other axes
    (want,) = _cpu(ScatterAdd(1), x, index, src)
    (got,) = _gpu(ScatterAdd(1), x, index, src)
    # a float sum: exact here (serial), within rounding of the order on a GPU (DIFFERENCES)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    index[0, 0, :] = np.arange(7) % 5  # numpy keeps the last write of repeats; a GPU's races
    _same(Scatter(1), x, index, src[:, ::-1])


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "bool", "int64", "float64"])
def test_scatter_add_adds_repeats_in_every_dtype(host, dtype):
    _skip_f16(dtype)
    rng = np.random.default_rng(6)
    x = _data(rng, dtype, (3, 9))
    index = rng.integers(0, 3, (3, 9)).astype("int32")
    _same(ScatterAdd(0), x, index, _data(rng, dtype, (3, 9)))


def test_out_of_range_indices_raise_the_cpu_error_through_checks(host):
    rng = np.random.default_rng(7)
    x = _data(rng, "int32", (4, 5))
    index = rng.integers(0, 5, (4, 5)).astype("int64")
    index[2, 3] = -6
    plan, _ = _plan(Gather(1), x, index, outs=[Layout(x.shape, x.dtype)])
    assert len(plan.checks) == 1 and plan.workspace >= 8
    for op, args in ((Gather(1), (x, index)), (ScatterAdd(1), (x, index, x)),
                     (Scatter(1), (x, index[:, ::-1], x))):
        assert _gpu_error(IndexError, op, *args, outs=[Layout(x.shape, x.dtype)]) == \
            _cpu_error(IndexError, op, *args)
    oh = rng.integers(0, 5, (8,)).astype("int32")[::2]
    oh[1] = 5
    value = _data(rng, "int32", (4,))
    for bad in (5, -1):  # the one-hot ops take no negative index; the message reads the range
        oh[1] = bad
        for op, args, shape in ((IndexingOneHot(1), (x, oh), (4,)),
                                (IndexingSetOneHot(1), (x, oh, value), x.shape)):
            assert _gpu_error(IndexError, op, *args, outs=[Layout(shape, x.dtype)]) == \
                _cpu_error(IndexError, op, *args)
    assert ix.first_bad(0) is None and ix.first_bad(ix.LLONG_MAX - 7) == 7


def test_one_hot_ops(host):
    rng = np.random.default_rng(8)
    x = _data(rng, "float16" if hostbuild.have_float16() else "int16", (3, 6, 4))[:, :, ::-1]
    for axis, keep in ((1, False), (-1, True), (0, False)):
        ishape = tuple(n for d, n in enumerate(x.shape) if d != axis % 3)
        index = rng.integers(0, x.shape[axis], ishape).astype("int32")
        _same(IndexingOneHot(axis, keep), x, index)
        _same(IndexingSetOneHot(axis), x, index, _data(rng, x.dtype, ishape))
        kept = list(ishape)
        kept.insert(axis % 3, 1)
        _same(IndexingSetOneHot(axis), x, index, _data(rng, x.dtype, kept)[::-1])
    # a value no view reshapes to the index's shape: a dense copy into the workspace first
    index = rng.integers(0, 6, (3, 4)).astype("int32")
    _same(IndexingSetOneHot(1), x, index, _data(rng, x.dtype, (4, 3)).T)  # a view will do
    value = _data(rng, x.dtype, (24,))[::2]
    plan, _ = _plan(IndexingSetOneHot(1), x, index, value)
    assert plan.launches[0].args[1] == Buf("in2") and plan.launches[0].args[0].name == "ws"
    _same(IndexingSetOneHot(1), x, index, value)


# items, index arrays (shape, values range), x shape
_MULTI = [
    ((("arr",),), [(4, 5)], (5, 3, 2)),
    ((("slice", None, None, None), ("arr",)), [(2, 3)], (4, 6, 2)),
    ((("arr",), ("slice", 1, None, 2), ("arr",)), [(3, 1), (4,)], (5, 7, 6)),  # non-adjacent
    ((("int", -2), ("slice", None, None, -1), ("arr",)), [(2, 2)], (3, 4, 5)),  # int: advanced
    ((("new",), ("arr",), ("arr",), ("ell",)), [(6,), (1,)], (4, 5, 3)),
    ((("ell",), ("arr",), ("int", 1)), [(2, 3)], (3, 4, 5)),
]


@pytest.mark.parametrize("case", range(len(_MULTI)))
def test_multi_axis_get_set_and_incr(host, case):
    items, ishapes, xshape = _MULTI[case]
    rng = np.random.default_rng(10 + case)
    x = _data(rng, "float32", xshape).transpose(*range(len(xshape) - 1, -1, -1)).T
    x = x[..., ::-1] if case % 2 else x
    axes = [k for k, i in enumerate([i for i in items if i[0] != "new"]) if i[0] == "arr"]
    arrays = []
    for k, shape in enumerate(ishapes):
        n = x.shape[axes[k]] if "ell" not in items[0] else x.shape[-2]
        arrays.append(rng.integers(-n, n, shape).astype("int64" if k % 2 else "int32"))
    if case == 5:
        arrays = [rng.integers(-4, 4, (2, 3)).astype("int32")]
    (want,) = _cpu(IndexingMultiAxisVec(items), x, *arrays)
    _same(IndexingMultiAxisVec(items), x, *arrays)
    value = _data(rng, "float32", (1,) + want.shape[1:])  # broadcast along the first dim
    (want,) = _cpu(IndexingIncrMultiAxisVec(items), x, value, *arrays)
    (got,) = _gpu(IndexingIncrMultiAxisVec(items), x, value, *arrays)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)  # float sums of repeats
    if all(len(np.unique(a)) == a.size for a in arrays):  # no repeats: a set is exact
        _same(IndexingSetMultiAxisVec(items), x, value, *arrays)


def test_multi_axis_out_of_range_names_numpys_index(host):
    x = np.arange(12, dtype=np.int8).reshape(3, 4)
    items = (("arr",), ("arr",))
    for a0, a1 in (([0, 2], [1, 9]), ([0, 5], [1, 9]), ([[0], [7]], [1, 2]), ([2, -4], [1, 0])):
        arrays = [np.array(a0, np.int32), np.array(a1, np.int64)]
        outs = [Layout(np.broadcast_shapes(*(a.shape for a in arrays)), x.dtype)]
        assert _gpu_error(IndexError, IndexingMultiAxisVec(items), x, *arrays, outs=outs) == \
            _cpu_error(IndexError, IndexingMultiAxisVec(items), x, *arrays)
    plan, _ = _plan(IndexingMultiAxisVec(items), x, *arrays, outs=outs)
    assert len(plan.checks) == 2


def test_mask_index_through_condtake_counts_and_flat_indices(host):
    rng = np.random.default_rng(11)
    x = _data(rng, "int32", (3, 4, 5))
    mask = rng.random((4, 5)) < 0.4
    items = (("slice", None, None, None), ("mask",))
    plan, _ = _plan(IndexingMultiAxisVec(items), x, mask, outs=[])
    assert isinstance(plan.readback, Readback) and plan.readback.outs is not None
    assert plan.readback.outs(int(mask.sum()))[0].shape == (3, int(mask.sum()))
    _same(IndexingMultiAxisVec(items), x, mask, outs=[])  # the output sized by the readback
    _same(IndexingMultiAxisVec(items), x, mask[::-1].T.copy().T[::-1], outs=[])
    _same(IndexingMultiAxisVec(items), x, np.zeros((4, 5), bool), outs=[])
    value = _data(rng, "int32", (1, int(mask.sum())))
    _same(IndexingSetMultiAxisVec(items), x, value, mask)
    _same(IndexingIncrMultiAxisVec(items), x, value, mask)
    # two masks and an array: a readback per mask, then the flat indices and the index kernel
    m0, m1 = np.array([True, False, True]), np.array([False, True, True, False, True])
    items2 = (("mask",), ("arr",), ("mask",))
    x2 = _data(rng, "int32", (3, 4, 5))
    arr = np.array([3, -1], np.int64)
    m1[4] = False
    _same(IndexingMultiAxisVec(items2), x2, m0, arr, m1, outs=[])
    m1[4] = True  # three selected in m1: the counts do not broadcast -- numpy's own error
    assert _gpu_error(IndexError, IndexingMultiAxisVec(items2), x2, m0, arr, m1, outs=[]) == \
        _cpu_error(IndexError, IndexingMultiAxisVec(items2), x2, m0, arr, m1)
    too_many = _data(rng, "int32", (3, int(mask.sum()) + 1))
    assert _gpu_error(ValueError, IndexingSetMultiAxisVec(items), x, too_many, mask,
                      outs=[Layout(x.shape, x.dtype)]) == \
        _cpu_error(ValueError, IndexingSetMultiAxisVec(items), x, too_many, mask)


@pytest.mark.parametrize("mask_dtype", ["bool", "int8", "float16", "float32"])
def test_where(host, mask_dtype):
    _skip_f16(mask_dtype)
    rng = np.random.default_rng(12)
    mask = _data(rng, mask_dtype, (4, 1, 6))
    if mask.dtype.kind == "f":
        mask[0, 0, :3] = [0.0, -0.0, np.nan]
    x, y = _data(rng, "int16", (4, 5, 6)), _data(rng, "int16", (5, 1))
    plan, _ = _plan(Where(), mask, x, y)
    assert plan.launches[0].kernel.name.endswith("_s32")
    _same(Where(), mask, x, y)
    m2 = _data(rng, mask_dtype, x.shape)
    plan, _ = _plan(Where(), m2, x, x[::-1].copy())
    assert plan.launches[0].kernel.name.endswith("_c")
    _same(Where(), m2, x, x[::-1].copy())
    _same(Where(), m2[:, ::-1], x.transpose(0, 2, 1).copy().transpose(0, 2, 1), y)


@pytest.mark.parametrize("n, density", [(5000, 0.3), (1024, 1.0), (700, 0.0), (0, 0.5),
                                        (300_000, 0.5)])
def test_condtake_counts_reads_back_and_writes(host, n, density):
    rng = np.random.default_rng(13)
    x = _data(rng, "float64", (2 * n,))[::-2]  # strided, backwards
    mask = rng.random(n) < density
    _same(CondTake(), mask, x, outs=[])
    plan, _ = _plan(CondTake(), mask, x, outs=[])
    total = int(mask.sum())
    assert [o.shape for o in plan.readback.outs(total)] == [(total,), (total,)]
    if n:  # a block per tile; more tiles than the scan's 256 threads: a chunked scan
        assert plan.launches[0].grid == (-(-n // ix.CONDTAKE_TILE), 1, 1)
        assert len(plan.readback.then(total).launches) == (3 if total else 0)


def test_condtake_of_a_2d_non_contiguous_mask(host):
    rng = np.random.default_rng(14)
    x = _data(rng, "int8", (37, 45))
    _same(CondTake(), (rng.random((45, 37)) < 0.5).T, x, outs=[])


# -- errors ---------------------------------------------------------------------------------------

def _lay(shape, dtype="float32", strides=None):
    return Layout(shape, np.dtype(dtype), strides)


def test_bad_requests_raise_clear_errors():
    f32 = _lay((3, 4))
    with pytest.raises(ValueError, match="unknown mode 'put'"):
        ix.index_kernel("put", 1, itemsize=4)
    with pytest.raises(ValueError, match="element size 3"):
        rl.copy_kernel(3)
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        rl.arange_kernel("complex128", False)
    with pytest.raises(ValueError, match="1 to 8"):
        ix.index_kernel("get", 9, itemsize=4)
    with pytest.raises(TypeError, match="ScatterAdd kernel: unsupported dtype uint32"):
        ix.scatter_plan(ScatterAdd(0), [_lay((3,), "uint32"), _lay((3,), "int32"),
                                        _lay((3,), "uint32")], [_lay((3,), "uint32")])
    with pytest.raises(TypeError, match="Gather: index dtype float32"):
        ix.gather_plan(Gather(0), [_lay((3,)), _lay((3,))], [_lay((3,))])
    with pytest.raises(ValueError, match=r"CUDA Gather: axis 2 is out of range for 2-d input "
                                         r"\(inputs: float32 \(3, 4\), int32 \(3, 4\)\)"):
        ix.gather_plan(Gather(2), [f32, _lay((3, 4), "int32")], [f32])
    with pytest.raises(TypeError, match="Scatter: source dtype float64 is not float32"):
        ix.scatter_plan(Scatter(0), [f32, _lay((3, 4), "int32"), _lay((3, 4), "float64")], [f32])
    with pytest.raises(ValueError, match="Concat: axis -3"):
        rl.concat_plan(Concat(-3), [_lay((2, 3))], [_lay((2, 3))])
    with pytest.raises(TypeError, match="Concat: input dtype int32 is not the output's float32"):
        rl.concat_plan(Concat(0), [_lay((2, 3)), _lay((2, 3), "int32")], [_lay((4, 3))])
    with pytest.raises(ValueError, match="does not broadcast"):
        rl.broadcast_plan(Broadcast((4, 3)), [_lay((2, 3))], [_lay((4, 3))])
    with pytest.raises(TypeError, match="Where: x dtype int16 is not float32"):
        ix.where_plan(Where(), [_lay((3,), "bool"), _lay((3,), "int16"), _lay((3,))],
                      [_lay((3,))])
    with pytest.raises(ValueError, match="CondTake: mask and input must have the same shape"):
        ix.condtake_plan(CondTake(), [_lay((3,), "bool"), _lay((4,))], [])
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 1 with size 4"):
        ix.multi_axis_plan(IndexingMultiAxisVec((("arr",), ("int", 5))),
                           [f32, _lay((2,), "int32")], [_lay((2,))])
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        ix.multi_axis_plan(IndexingSetMultiAxisVec((("arr",),)),
                           [f32, _lay((3,)), _lay((2,), "int32")], [f32])
    with pytest.raises(TypeError, match="IndexingMultiAxisVec: 3 inputs for 1 index arrays"):
        ix.multi_axis_plan(IndexingMultiAxisVec((("arr",),)),
                           [f32, _lay((2,), "int32"), _lay((2,), "int32")], [_lay((2, 4))])
    with pytest.raises(TypeError, match="Eye kernel: unsupported dtype complex128"):
        rl.eye_plan(Eye(2, 2, 0, np.dtype("complex128"), "cpu0"), [],
                    [_lay((2, 2), "complex128")])
