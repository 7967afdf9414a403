"""The CUDA device's relayout, creation and indexing kernels, checked without a GPU.

``cuda/kernels/relayout.py`` and ``cuda/kernels/indexing.py`` write the CUDA C and the launch
plans.  Here:

* every kernel (each element size, dtype, index-array count, index width and variant) compiles
  with NVRTC for ``compute_90`` and an older architecture (one program per family, ``-Ofc=max``),
  and ptxas assembles a representative program (the transpose, the atomics, the scans) for sm_90;
* the same sources built with g++ (``hostbuild.py``; the block/thread phases emulated serially)
  run *the plans' own launches* -- grid, block and arguments as the device would pass them -- on
  numpy arrays and give exactly what the CPU kernels give: views of every kind (transposed,
  negative steps, broadcast), every creation op and dtype, every index op with negative and
  out-of-range indices (the error record turns into the CPU device's IndexError), CondTake with
  empty results;
* errors: unknown modes, unsupported dtypes, bad axes.

Without NVRTC, ptxas or g++ the tests that need them skip with the reason, except under ``CI``.
"""
import concurrent.futures
import ctypes
import os
import re

import numpy as np
import pytest

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import indexing as ix
from mge._core.device.cuda.kernels import relayout as rl
from mge._core.ops.creation import Arange, Eye, Fill, Linspace
from mge._core.ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, numpy_index,
)
from mge._core.ops.nn import IndexingOneHot, IndexingSetOneHot
from mge._core.ops.shape import (
    Broadcast, Concat, CondTake, Diag, Dimshuffle, Gather, Repeat, Roll, Scatter, ScatterAdd,
    Split, Stack, Tile, Where,
)

DTYPES = ek.SUPPORTED_DTYPES
F16 = np.dtype("float16")
WORKERS = min(4, os.cpu_count() or 1)


def _missing(message):
    if os.environ.get("CI"):  # CI installs NVRTC, ptxas and g++: there a missing one fails
        pytest.fail(message)
    pytest.skip(message)


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
    fast = ("-Ofc=max",) if nvrtc.nvrtc_version() >= (12, 8) else ()
    return rl.NVRTC_OPTIONS + fast


@pytest.fixture(scope="module")
def nvrtc_ready():
    why = nvrtc.why_unavailable()
    if why:
        _missing(f"NVRTC is needed to compile the CUDA kernels: {why}")


@pytest.fixture(scope="module")
def old_arch(nvrtc_ready):
    return f"compute_{min(a for a in nvrtc.supported_archs() if a >= 70)}"


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


# -- the host build and a runner of launches ------------------------------------------------------

_SCALARS = {"long long": ctypes.c_longlong, "int": ctypes.c_int, "double": ctypes.c_double,
            "unsigned long long": ctypes.c_ulonglong}
_STRUCTS = {}


def _struct(value):
    """A ctypes struct with ``value``'s bytes and alignment (integer fields only, as the
    kernels' structs: passed in memory like the C struct)."""
    key = (value.dtype.itemsize, value.dtype.alignment)
    if key not in _STRUCTS:
        unit = ctypes.c_int64 if key[1] == 8 else ctypes.c_int32
        assert key[0] % ctypes.sizeof(unit) == 0
        _STRUCTS[key] = type(f"S{key[0]}", (ctypes.Structure,),
                             {"_fields_": [("b", unit * (key[0] // ctypes.sizeof(unit)))]})
    return _STRUCTS[key].from_buffer_copy(value.tobytes())


class Runner:
    """Runs ``Launch`` records of the plans on a host build: buffers by name are numpy arrays
    (views: a pointer is the view's first element)."""

    def __init__(self, lib):
        self.lib = lib
        self.set_launch = lib.function("mge_host_launch", [ctypes.c_uint] * 7)
        self.launched = []

    def run(self, launches, buffers):
        for launch in launches:
            if launch is None:
                continue
            self.launched.append(launch.kernel.name)
            argtypes, values = [], []
            for decl, arg in zip(launch.kernel.params, launch.args, strict=True):
                if isinstance(arg, rl.Ptr):
                    assert "*" in decl, (decl, arg)
                    base = buffers[arg.buffer].__array_interface__["data"][0]
                    argtypes.append(ctypes.c_void_p)
                    values.append(base + arg.offset)
                elif isinstance(arg, np.void):
                    s = _struct(arg)
                    argtypes.append(type(s))
                    values.append(s)
                else:
                    ctype = _SCALARS[decl.rsplit(" ", 1)[0]]
                    argtypes.append(ctype)
                    values.append(arg.item())
            self.set_launch(*launch.grid, *launch.block, 0)
            self.lib.function(launch.kernel.name, argtypes)(*values)


def _host_kernels(float16):
    kernels = [k for f in ("relayout", "index", "atomics", "select") for k in FAMILIES[f]]
    return [k for k in kernels if float16 or ("f16" not in k.name)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    kernels = _host_kernels(hostbuild.have_float16())
    units = [ek.program(kernels[k::WORKERS]) for k in range(WORKERS)]
    lib = hostbuild.build(units, str(tmp_path_factory.mktemp("cuda_index_host")), jobs=WORKERS)
    return Runner(lib)


def _cpu(op, *arrays):
    return KERNELS[type(op)](op, *arrays)


def _elems(a):
    return tuple(s // a.itemsize for s in a.strides)


def _data(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        return rng.normal(0, 10, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)


def _skip_f16(run, *dtypes):
    if F16 in [np.dtype(d) for d in dtypes] and not run.lib.float16:
        pytest.skip("this g++ has no _Float16")


# -- relayout -------------------------------------------------------------------------------------

def _views(rng, dtype):
    """Views of one base: dense, transposed (2-D and batched), negative steps, broadcast."""
    base = _data(rng, dtype, (6, 40, 36))
    return [base, base.transpose(0, 2, 1), base[0].T, base[::-1, 3:30:2, ::-3],
            np.broadcast_to(base[:, :1, 5:9], (6, 7, 4)), base[2, 5], base[:, 0, :].T[::-1]]


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
def test_copy_launch_copies_every_kind_of_view(run, dtype):
    rng = np.random.default_rng(1)
    run.launched.clear()
    for v in _views(rng, dtype):
        out = np.zeros(v.shape, v.dtype)
        launch = rl.copy_launch(v.shape, _elems(v), _elems(out), v.itemsize)
        run.run([launch], {"in0": v, "out0": out})
        np.testing.assert_array_equal(out, v)
    size = np.dtype(dtype).itemsize  # each kernel ran: the tiled transpose, general, dense
    assert {f"mge_transpose_{size}", f"mge_copy_{size}_s32"} <= set(run.launched)
    assert any(name.endswith("_c") for name in run.launched)


def test_copy_launch_picks_the_fast_paths():
    dense = rl.copy_launch((3, 4, 5), (20, 5, 1), (20, 5, 1), 2)
    assert dense.kernel.name == "mge_copy_8_c" and dense.args[2] == 3 * 4 * 5 * 2 // 8
    odd = rl.copy_launch((3,), (1,), (1,), 2, rl.Ptr("in0", 2))
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


def _shape_case(run, op, x, launches, outs=None):
    want = _cpu(op, x)
    got = outs if outs is not None else {"out0": np.zeros(want[0].shape, x.dtype)}
    run.run(launches, {"in0": x, **got})
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got[f"out{k}"], w)


def test_view_ops_match_the_cpu_kernels(run):
    rng = np.random.default_rng(2)
    x = _data(rng, "float32", (4, 6, 5))[:, ::-1, 1:]  # non-contiguous, a negative step
    s, e = x.shape, _elems(x)
    _shape_case(run, Dimshuffle((2, "x", 0, 1)), x, rl.dimshuffle_plan((2, "x", 0, 1), s, e, 4))
    _shape_case(run, Broadcast((3, 4, 6, 4)), x[:, :1], rl.broadcast_plan(
        (3, 4, 6, 4), x[:, :1].shape, _elems(x[:, :1]), 4))
    _shape_case(run, Tile((2, 1, 3)), x, rl.tile_plan((2, 1, 3), s, e, 4))
    _shape_case(run, Tile((2, 2, 1, 3)), x, rl.tile_plan((2, 2, 1, 3), s, e, 4))
    _shape_case(run, Repeat(3, 1), x, rl.repeat_plan(3, 1, s, e, 4))
    _shape_case(run, Roll((2, -1, 7), (1, 2, 1)), x, rl.roll_plan((2, -1, 7), (1, 2, 1), s, e, 4))
    for k in (-2, 0, 3):
        v = x[0, :, 0]
        _shape_case(run, Diag(k), v, rl.diag_plan(k, v.shape, _elems(v), 4))
        m = x[1]
        _shape_case(run, Diag(k), m, rl.diag_plan(k, m.shape, _elems(m), 4))
    parts = (2, 3, 1)
    outs = {f"out{k}": np.zeros((4, n, 4), x.dtype) for k, n in enumerate(parts)}
    _shape_case(run, Split(1, parts), x, rl.split_plan(1, parts, s, e, 4), outs)


def test_subtensor_and_setsubtensor_views(run):
    from mge._core.ops.indexing import SetSubtensor, Subtensor
    rng = np.random.default_rng(3)
    x = _data(rng, "int16", (5, 7, 6)).transpose(1, 0, 2)
    items = (("slice", None, None, -2), ("int", -1), ("new",), ("slice", 1, 5, 3))
    idx = numpy_index(items)
    want = _cpu(Subtensor(items), x)[0]
    out = np.zeros(want.shape, x.dtype)
    run.run(rl.subtensor_plan(idx, x.shape, _elems(x), 2), {"in0": x, "out0": out})
    np.testing.assert_array_equal(out, want)
    value = _data(rng, "int16", (1, 1, 2))[:, :, ::-1]
    want = _cpu(SetSubtensor(items), x, value)[0]
    out = np.zeros(x.shape, x.dtype)
    run.run(rl.setsubtensor_plan(idx, x.shape, _elems(x), value.shape, _elems(value), 2),
            {"in0": x, "in1": value, "out0": out})
    np.testing.assert_array_equal(out, want)


def test_concat_and_stack(run):
    rng = np.random.default_rng(4)
    xs = [_data(rng, "uint8", (3, n, 4)) for n in (2, 5, 1)]
    xs[1] = xs[1][:, ::-1]
    want = _cpu(Concat(1), *xs)[0]
    out = np.zeros(want.shape, want.dtype)
    run.run(rl.concat_plan(1, [a.shape for a in xs], [_elems(a) for a in xs], 1),
            {**{f"in{k}": a for k, a in enumerate(xs)}, "out0": out})
    np.testing.assert_array_equal(out, want)
    ys = [_data(rng, "float64", (3, 4)), _data(rng, "float64", (4, 3)).T]
    for axis in (0, 2, -1):
        want = _cpu(Stack(axis), *ys)[0]
        out = np.zeros(want.shape, want.dtype)
        run.run(rl.stack_plan(axis, [a.shape for a in ys], [_elems(a) for a in ys], 8),
                {"in0": ys[0], "in1": ys[1], "out0": out})
        np.testing.assert_array_equal(out, want)


# -- creation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [str(d) for d in DTYPES])
def test_creation_ops_match_the_cpu_kernels(run, dtype):
    _skip_f16(run, dtype)
    d = np.dtype(dtype)
    cases = [(Fill((3, 5), 2.75 if d.kind == "f" else 7, d, "cpu0"),
              lambda op: rl.fill_launch(op.shape, op.value, op.dtype)),
             (Eye(4, 6, 1, d, "cpu0"), lambda op: rl.eye_launch(op.N, op.M, op.k, op.dtype)),
             (Eye(5, 3, -2, d, "cpu0"), lambda op: rl.eye_launch(op.N, op.M, op.k, op.dtype))]
    for start, stop, step in ((0, 50, 3), (-3, 40, 1), (0.5, 7.25, 0.3), (10, -5, -2)):
        cases.append((Arange(start, stop, step, d, "cpu0"),
                      lambda op: rl.arange_launch(op.start, op.stop, op.step, op.dtype)))
    for start, stop, num in ((0.0, 1.0, 11), (-3.0, 7.0, 1), (2.0, 2.0, 5), (-1e-310, 1e-310, 4),
                             (0.0, 100.0, 1000)):
        cases.append((Linspace(start, stop, num, d, "cpu0"),
                      lambda op: rl.linspace_launch(op.start, op.stop, op.num, op.dtype)))
    for op, plan in cases:
        (want,) = _cpu(op)
        out = np.zeros(want.shape, d)
        with np.errstate(all="ignore"):
            run.run([plan(op)], {"out0": out})
        np.testing.assert_array_equal(out, want, err_msg=str(op))
    assert rl.fill_launch((0, 3), 1, d) is None and rl.arange_launch(3, 3, 1, d) is None


# -- indexing -------------------------------------------------------------------------------------

def _reader(buffers):
    """The device's ``read_index``: element ``off`` (from the pointer passed) of index ``k``."""
    def read(k, off):
        a = buffers[f"idx{k}"] if f"idx{k}" in buffers else buffers["in1"]
        if off is None:
            return a
        addr = a.__array_interface__["data"][0] + int(off) * a.itemsize
        return np.frombuffer(ctypes.string_at(addr, a.itemsize), a.dtype)[0]
    return read


def _run_index(run, plan, buffers):
    err = np.zeros(max(plan.err_words, 1), np.int64)
    run.run(plan.launches, {**buffers, "err": err})
    return plan.error(err, _reader(buffers))


@pytest.mark.parametrize("idt", ["int32", "int64", "int16"])
def test_gather_scatter_and_scatter_add(run, idt):
    rng = np.random.default_rng(5)
    x = _data(rng, "float32", (6, 5, 7))[:, ::-1]
    index = rng.integers(-5, 5, (6, 4, 7)).astype(idt)
    index[0, 0, :] = 2  # repeated targets for ScatterAdd
    src = _data(rng, "float32", (6, 4, 7))
    for axis in (1, -2):
        (want,) = _cpu(Gather(axis), x, index)
        out = np.zeros(want.shape, x.dtype)
        plan = ix.gather_plan(axis, x.shape, _elems(x), index.shape, _elems(index), idt, 4)
        assert _run_index(run, plan, {"in0": x, "in1": index, "out0": out}) is None
        np.testing.assert_array_equal(out, want)
    g = index[:, :3, ::2]  # a smaller, strided index along the other axes
    (want,) = _cpu(Gather(1), x, np.ascontiguousarray(g))
    out = np.zeros(want.shape, x.dtype)
    plan = ix.gather_plan(1, x.shape, _elems(x), g.shape, _elems(g), idt, 4)
    assert _run_index(run, plan, {"in0": x, "in1": g, "out0": out}) is None
    np.testing.assert_array_equal(out, want)
    for add, op in ((False, Scatter(1)), (True, ScatterAdd(1))):
        s = src.copy()
        if not add:  # numpy keeps the last write of repeats; the GPU's is unspecified
            index[0, 0, :] = np.arange(7) % 5
        (want,) = _cpu(op, x, index, s)
        out = np.zeros(x.shape, x.dtype)
        plan = ix.scatter_plan(1, x.shape, _elems(x), index.shape, _elems(index), idt,
                               _elems(s), dtype="float32", add=add)
        assert _run_index(run, plan, {"in0": x, "in1": index, "in2": s, "out0": out}) is None
        if add:  # a float sum: exact here (serial), within rounding of the order on a GPU
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)
        else:
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "bool", "int64", "float64"])
def test_scatter_add_adds_repeats_in_every_dtype(run, dtype):
    _skip_f16(run, dtype)
    rng = np.random.default_rng(6)
    x = _data(rng, dtype, (3, 9))
    index = rng.integers(0, 3, (3, 9)).astype("int32")
    src = _data(rng, dtype, (3, 9))
    (want,) = _cpu(ScatterAdd(0), x, index, src)
    out = np.zeros(x.shape, x.dtype)
    plan = ix.scatter_plan(0, x.shape, _elems(x), index.shape, _elems(index), "int32",
                           _elems(src), dtype=dtype, add=True)
    assert _run_index(run, plan, {"in0": x, "in1": index, "in2": src, "out0": out}) is None
    np.testing.assert_array_equal(out, want)


def _cpu_error(op, *arrays):
    with pytest.raises(IndexError) as e:
        _cpu(op, *arrays)
    return str(e.value)


def test_out_of_range_indices_set_the_error_record(run):
    rng = np.random.default_rng(7)
    x = _data(rng, "int32", (4, 5))
    index = rng.integers(0, 5, (4, 5)).astype("int64")
    index[2, 3] = -6
    out = np.zeros(x.shape, x.dtype)
    plan = ix.gather_plan(1, x.shape, _elems(x), index.shape, _elems(index), "int64", 4)
    err = _run_index(run, plan, {"in0": x, "in1": index, "out0": out})
    assert isinstance(err, IndexError) and str(err) == _cpu_error(Gather(1), x, index)
    plan = ix.scatter_plan(1, x.shape, _elems(x), index.shape, _elems(index), "int64",
                           _elems(x), dtype="int32", add=True)
    err = _run_index(run, plan, {"in0": x, "in1": index, "in2": x, "out0": out})
    assert str(err) == _cpu_error(ScatterAdd(1), x, index, x)
    oh = rng.integers(0, 5, (4,)).astype("int32")
    oh[1] = 5
    plan = ix.one_hot_plan(1, False, x.shape, _elems(x), oh.shape, _elems(oh), "int32", 4)
    err = _run_index(run, plan, {"in0": x, "in1": oh, "out0": np.zeros(4, x.dtype)})
    assert str(err) == _cpu_error(IndexingOneHot(1), x, oh)
    oh[1] = -1  # the one-hot ops take no negative index
    err = _run_index(run, plan, {"in0": x, "in1": oh, "out0": np.zeros(4, x.dtype)})
    assert str(err) == _cpu_error(IndexingOneHot(1), x, oh)
    assert ix.first_bad(0) is None and ix.first_bad(ix.LLONG_MAX - 7) == 7


def test_one_hot_ops(run):
    rng = np.random.default_rng(8)
    x = _data(rng, "float16" if run.lib.float16 else "int16", (3, 6, 4))[:, :, ::-1]
    for axis, keep in ((1, False), (-1, True), (0, False)):
        ishape = tuple(n for d, n in enumerate(x.shape) if d != axis % 3)
        index = rng.integers(0, x.shape[axis], ishape).astype("int32")
        (want,) = _cpu(IndexingOneHot(axis, keep), x, index)
        out = np.zeros(want.shape, x.dtype)
        plan = ix.one_hot_plan(axis, keep, x.shape, _elems(x), index.shape, _elems(index),
                               "int32", 2)
        assert plan.out_shape == want.shape
        assert _run_index(run, plan, {"in0": x, "in1": index, "out0": out}) is None
        np.testing.assert_array_equal(out, want)
        value = _data(rng, x.dtype, ishape)
        (want,) = _cpu(IndexingSetOneHot(axis), x, index, value)
        out = np.zeros(x.shape, x.dtype)
        plan = ix.set_one_hot_plan(axis, x.shape, _elems(x), index.shape, _elems(index),
                                   "int32", _elems(value), 2)
        assert _run_index(run, plan, {"in0": x, "in1": index, "in2": value, "out0": out}) is None
        np.testing.assert_array_equal(out, want)


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
def test_multi_axis_get_set_and_incr(run, case):
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
    indices = [(a.shape, _elems(a), a.dtype) for a in arrays]
    bufs = {f"idx{k}": a for k, a in enumerate(arrays)}
    (want,) = _cpu(IndexingMultiAxisVec(items), x, *arrays)
    plan = ix.multi_axis_plan("IndexingMultiAxisVec", "get", items, x.shape, _elems(x), indices,
                              itemsize=4)
    assert plan.out_shape == want.shape
    out = np.zeros(want.shape, x.dtype)
    assert _run_index(run, plan, {"in0": x, "out0": out, **bufs}) is None
    np.testing.assert_array_equal(out, want)
    value = _data(rng, "float32", (1,) + want.shape[1:])  # broadcast along the first dim
    for mode, op in (("set", IndexingSetMultiAxisVec(items)),
                     ("incr", IndexingIncrMultiAxisVec(items))):
        uniq = [np.unique(a) for a in arrays]
        (want,) = _cpu(op, x, value, *arrays)
        plan = ix.multi_axis_plan(op.name, mode, items, x.shape, _elems(x), indices,
                                  dtype="float32", value_shape=value.shape,
                                  value_strides=_elems(value))
        out = np.zeros(x.shape, x.dtype)
        assert _run_index(run, plan, {"in0": x, "in1": value, "out0": out, **bufs}) is None
        if mode == "incr":
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-4)
        elif all(len(u) == a.size for u, a in zip(uniq, arrays)):  # no repeats: exact
            np.testing.assert_array_equal(out, want)


def test_multi_axis_out_of_range_names_numpys_index(run):
    x = np.arange(12, dtype=np.int8).reshape(3, 4)
    items = (("arr",), ("arr",))
    for a0, a1 in (([0, 2], [1, 9]), ([0, 5], [1, 9]), ([[0], [7]], [1, 2])):
        arrays = [np.array(a0, np.int32), np.array(a1, np.int64)]
        msg = _cpu_error(IndexingMultiAxisVec(items), x, *arrays)
        indices = [(a.shape, _elems(a), a.dtype) for a in arrays]
        plan = ix.multi_axis_plan("IndexingMultiAxisVec", "get", items, x.shape, _elems(x),
                                  indices, itemsize=1)
        out = np.zeros(plan.out_shape, x.dtype)
        err = _run_index(run, plan, {"in0": x, "out0": out, "idx0": arrays[0],
                                     "idx1": arrays[1]})
        assert str(err) == msg


def test_mask_index_through_condtake_indices(run):
    rng = np.random.default_rng(11)
    x = _data(rng, "int32", (3, 4, 5))
    mask = rng.random((4, 5)) < 0.4
    items = (("slice", None, None, None), ("mask",))
    (want,) = _cpu(IndexingMultiAxisVec(items), x, mask)
    flat = np.flatnonzero(mask).astype(np.int32)  # what CondTake's index output gives
    plan = ix.multi_axis_plan("IndexingMultiAxisVec", "get", items, x.shape, _elems(x),
                              [(flat.size, mask.shape)], itemsize=4)
    out = np.zeros(plan.out_shape, x.dtype)
    assert _run_index(run, plan, {"in0": x, "out0": out, "idx0": flat}) is None
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("mask_dtype", ["bool", "int8", "float16", "float32"])
def test_where(run, mask_dtype):
    _skip_f16(run, mask_dtype)
    rng = np.random.default_rng(12)
    mask = _data(rng, mask_dtype, (4, 1, 6))
    if mask.dtype.kind == "f":
        mask[0, 0, :3] = [0.0, -0.0, np.nan]
    x, y = _data(rng, "int16", (4, 5, 6)), _data(rng, "int16", (5, 1))
    (want,) = _cpu(Where(), mask, x, y)
    out = np.zeros(want.shape, want.dtype)
    launch = ix.where_launch((mask.shape, x.shape, y.shape), mask.dtype, 2, _elems(mask),
                             _elems(x), _elems(y))
    assert launch.kernel.name.endswith("_s32")
    run.run([launch], {"in0": mask, "in1": x, "in2": y, "out0": out})
    np.testing.assert_array_equal(out, want)
    m2 = _data(rng, mask_dtype, x.shape)
    (want,) = _cpu(Where(), m2, x, x[::-1].copy())
    launch = ix.where_launch((x.shape,) * 3, m2.dtype, 2, _elems(m2), _elems(x), _elems(x))
    assert launch.kernel.name.endswith("_c")
    run.run([launch], {"in0": m2, "in1": x, "in2": x[::-1].copy(), "out0": out})
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("n, density", [(5000, 0.3), (1024, 1.0), (700, 0.0), (0, 0.5),
                                        (300_000, 0.5)])
def test_condtake_two_passes(run, n, density):
    rng = np.random.default_rng(13)
    x = _data(rng, "float64", (2 * n,))[::-2]  # strided, backwards
    mask = rng.random(n) < density
    want_v, want_i = _cpu(CondTake(), mask, x)
    plan = ix.condtake_plan(x.shape, mask.dtype, 8, _elems(mask), _elems(x))
    work = {name: np.full(size // 8, -1, np.int64) for name, size in plan.workspace.items()}
    run.run(plan.count_launches, {"in0": mask, "in1": x, **work})
    total = int(work["total"][0]) if n else 0
    assert total == want_v.size
    out0, out1 = np.zeros(total, x.dtype), np.zeros(total, np.int32)
    run.run(plan.write_launches(total), {"in0": mask, "in1": x, "out0": out0, "out1": out1,
                                         **work})
    np.testing.assert_array_equal(out0, want_v)
    np.testing.assert_array_equal(out1, want_i)
    if n:  # a block per tile; more tiles than the scan's 256 threads: a chunked scan
        assert plan.count_launches[0].grid == (-(-n // ix.CONDTAKE_TILE), 1, 1)


def test_condtake_of_a_2d_non_contiguous_mask(run):
    rng = np.random.default_rng(14)
    x = _data(rng, "int8", (37, 45))
    mask = (rng.random((45, 37)) < 0.5).T
    want_v, want_i = _cpu(CondTake(), mask, x)
    plan = ix.condtake_plan(x.shape, mask.dtype, 1, _elems(mask), _elems(x))
    work = {name: np.zeros(size // 8, np.int64) for name, size in plan.workspace.items()}
    run.run(plan.count_launches, {"in0": mask, "in1": x, **work})
    total = int(work["total"][0])
    out0, out1 = np.zeros(total, x.dtype), np.zeros(total, np.int32)
    run.run(plan.write_launches(total), {"in0": mask, "in1": x, "out0": out0, "out1": out1,
                                         **work})
    np.testing.assert_array_equal(out0, want_v)
    np.testing.assert_array_equal(out1, want_i)


# -- errors ---------------------------------------------------------------------------------------

def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown mode 'put'"):
        ix.index_kernel("put", 1, itemsize=4)
    with pytest.raises(ValueError, match="element size 3"):
        rl.copy_kernel(3)
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        rl.arange_kernel("complex64", False)
    with pytest.raises(TypeError, match="ScatterAdd kernel: unsupported dtype uint32"):
        ix.scatter_plan(0, (3,), (1,), (3,), (1,), "int32", (1,), dtype="uint32", add=True)
    with pytest.raises(TypeError, match="Gather: index dtype float32"):
        ix.gather_plan(0, (3,), (1,), (3,), (1,), "float32", 4)
    with pytest.raises(ValueError, match="Gather: axis 2 is out of range for 2-d"):
        ix.gather_plan(2, (3, 4), (4, 1), (3, 4), (4, 1), "int32", 4)
    with pytest.raises(ValueError, match="Concat: axis -3"):
        rl.concat_plan(-3, [(2, 3)], [(3, 1)], 4)
    with pytest.raises(ValueError, match="does not broadcast"):
        rl.broadcast_plan((4, 3), (2, 3), (3, 1), 4)
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 1 with size 4"):
        ix.multi_axis_plan("IndexingMultiAxisVec", "get", (("arr",), ("int", 5)), (3, 4),
                           (4, 1), [((2,), (1,), np.int32)], itemsize=4)
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        ix.multi_axis_plan("IndexingSetMultiAxisVec", "set", (("arr",),), (3, 4), (4, 1),
                           [((2,), (1,), np.int32)], itemsize=4, value_shape=(3,),
                           value_strides=(1,))
    with pytest.raises(ValueError, match="1 to 8"):
        ix.index_kernel("get", 9, itemsize=4)
