"""The CUDA device's reduction, scan and softmax kernels, checked without a GPU.

``mge/_core/device/cuda/kernels/reduce.py`` (``Reduce``, ``Argmax``/``Argmin``, ``CumSum``,
``Argsort``, ``TopK``) and ``softmax.py`` (``Softmax``, ``LogSoftmax``, ``SoftmaxCrossEntropy`` and
its backward) write CUDA C per op and dtype signature, and a ``launch.Plan`` per call through their
``PLANS`` tables.  Here:

* every kernel of every signature compiles with NVRTC for ``compute_90`` and an older
  architecture (one program per group, ``-Ofc=max`` as in ``test_cuda_codegen.py``), and ptxas
  assembles for ``sm_90`` a program holding one kernel of each template and stage, with the
  kernels' own flags;
* every op goes op -> ``PLANS[type(op)](op, ins, outs)`` (the layouts the op's shape rule gives)
  -> ``tests/cuda_plans.run_plan`` on the host build of the same sources (g++; grid, block and
  shared bytes through ``mge_host_launch``, the plan's arguments, workspace and checks) -> compared
  with the CPU kernel of ``mge._core.device.cpu.KERNELS``: exactly for integers (wrapping
  included), max/min, argmax/argmin, Argsort and every TopK variant (NaN and ties included);
  float sums, means, products and scans against float64 references within the bounds stated at
  ``_sum_bound``; softmax and the losses within the tolerances of ``_SOFTMAX_TOL`` (measured: a
  few ulp); a label out of range raises, through the plan's ``Check``, the CPU kernel's
  ``IndexError`` with the same message;
* the plans' geometry (coalescing, split rows), the host emulation's shared-memory guard, and
  errors: unknown modes, unsupported dtypes, axes the kernels do not take, layouts that do not
  fit the op.

The host library is built once for the module (every kernel, two translation units) through
``cuda_plans.library``, which then serves every plan's subset of those kernels.  Without libnvrtc, ptxas or g++ the tests that need them are skipped with the
reason, except under ``CI`` (which installs them), where that is a failure.
"""
import concurrent.futures
import dataclasses
import math
import os
import re
import warnings
import zlib

import numpy as np
import pytest

import cuda_plans
from cuda_plans import run_plan
from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import reduce as rk
from mge._core.device.cuda.kernels import softmax as sk
from mge._core.device.cuda.kernels.launch import Buf, Launch, Layout
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.nn import (
    LogSoftmax, Softmax, SoftmaxCrossEntropy, SoftmaxCrossEntropyBackward,
)
from mge._core.ops.reduce import Argmax, Argmin, Argsort, CumSum, Reduce, TopK
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch)

DTYPES = ek.SUPPORTED_DTYPES
B, I8, U8, I16, I32, I64 = (np.dtype(d) for d in ("bool", "int8", "uint8", "int16", "int32",
                                                  "int64"))
F16, F32, F64 = sk.FLOAT_DTYPES
WORKERS = min(2, os.cpu_count() or 1)  # NVRTC, ptxas and g++ run outside the GIL
MODES = rk.REDUCE_KERNEL_MODES
RAW_SCANS = (I8, I64, F32, F64)  # one dtype per accumulator type (u32, u64, float, double)
PLANS = {**rk.PLANS, **sk.PLANS}


def _reduce_kernels():
    return [rk.reduce_kernel(m, d, stage=s) for m in MODES for d in DTYPES for s in rk.STAGES]


def _scan_kernels():
    return [rk.cumsum_kernel(d) for d in DTYPES] + [rk._raw_scan_kernel(d) for d in RAW_SCANS]


def _softmax_kernels():
    ks = [sk.softmax_kernel(d, log) for d in sk.FLOAT_DTYPES for log in (False, True)]
    ks += [sk.cross_entropy_kernel(d, lab, acc) for d in sk.FLOAT_DTYPES
           for lab in sk.LABEL_DTYPES for acc in (False, True)]
    ks += [sk.cross_entropy_backward_kernel(d, lab) for d in sk.FLOAT_DTYPES
           for lab in sk.LABEL_DTYPES]
    ks += [sk.cross_entropy_backward_kernel(d, I32, dy) for d in sk.FLOAT_DTYPES
           for dy in sk.FLOAT_DTYPES if dy != d]
    # the losses' totals are Reduce's "final" kernels but for the mean of float16 (into float16)
    return ks + [rk.total_kernel("mean", F16)]


def _sort_kernels():
    return [rk.topk_kernel(d) for d in DTYPES]


ALL_KERNELS = _reduce_kernels() + _scan_kernels() + _softmax_kernels() + _sort_kernels()

# The split plans' "partial" and "final" stages are one template whose only per-dtype part is the
# accumulator: the host runs them on a dtype of each accumulator kind (32- and 64-bit integers,
# float, double; bool and float16 for their loads), and CumSum's chunk sums on every dtype.
SPLIT_DTYPES = (B, I8, I64, F16, F64)


def _host_kernels(float16):
    kernels = [rk.reduce_kernel(m, d) for m in MODES for d in DTYPES]
    kernels += [rk.reduce_kernel(m, d, stage=s) for m in MODES for d in SPLIT_DTYPES
                for s in ("partial", "final")]
    kernels += [rk.reduce_kernel("sum", d, stage="partial") for d in DTYPES
                if d not in SPLIT_DTYPES]
    kernels += [rk.reduce_kernel(r, F32, stage="final") for r in ("sum", "mean")]
    kernels += _scan_kernels() + _softmax_kernels() + _sort_kernels()
    return [k for k in kernels if float16 or "f16" not in k.name]


# -- compiling ------------------------------------------------------------------------------------

def _fast_options():
    return fast_options(rk.NVRTC_OPTIONS)




def _entries(ptx):
    return set(re.findall(r"\.entry\s+(\w+)", ptx))


@pytest.fixture(scope="module")
def sweep(old_arch):
    """{arch: names of the entries in the PTX of every group}, one program per group."""
    reduce_ks = _reduce_kernels()
    groups = [reduce_ks[k::3] for k in range(3)] + [_scan_kernels() + _sort_kernels(),
                                                    _softmax_kernels()]
    items = [(g, arch) for g in groups for arch in ("compute_90", old_arch)]

    def compile_group(item):
        kernels, arch = item
        return arch, _entries(nvrtc.compile_ptx(rk.program(kernels), "reduce_sweep.cu", arch,
                                                _fast_options()))

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(compile_group, items))
    nvrtc.clear_cache()
    found = {}
    for arch, names in results:
        found.setdefault(arch, set()).update(names)
    return found


def test_every_kernel_compiles_for_hopper_and_an_older_arch(sweep, old_arch):
    names = {k.name for k in ALL_KERNELS}
    assert len(names) == len(ALL_KERNELS), "two kernels share a name"
    for arch in ("compute_90", old_arch):
        missing = sorted(names - sweep[arch])
        assert not missing, f"not in the PTX for {arch}: {missing[:10]}"
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n) or "__" in n]
    assert not bad


def test_ptxas_assembles_each_template_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12 (or set "
                 "MGE_PTXAS)")
    # one kernel per template, stage and accumulator kind (the shuffles of pairs, of 8-, 16-,
    # 32- and 64-bit values, and float16's inline PTX conversions are checked only here)
    kernels = [rk.reduce_kernel("sum", F32), rk.reduce_kernel("argmax", F16, stage="partial"),
               rk.reduce_kernel("argmin", F64, stage="final"), rk.reduce_kernel("max", I8),
               rk.reduce_kernel("mean", I16), rk.reduce_kernel("prod", I64),
               rk.reduce_kernel("min", B), rk.cumsum_kernel(F16), rk._raw_scan_kernel(I64),
               sk.softmax_kernel(F32), sk.softmax_kernel(F16, log=True),
               sk.cross_entropy_kernel(F64, I64, per_sample_acc=True),
               sk.cross_entropy_backward_kernel(F16, U8, F32), rk.topk_kernel(F16)]
    ptx = nvrtc.compile_ptx(rk.program(kernels), "reduce_rep.cu", "compute_90", rk.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="reduce_rep.ptx")
    assert cubin[:4] == b"\x7fELF"
    absent = [k.name for k in kernels if k.name.encode() not in cubin]
    assert not absent, f"not in the cubin: {absent}"
    assert "shfl.sync.down" in ptx and "bar.sync" in ptx  # warp shuffles and barriers


# -- the host build -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host():
    """One host build of every kernel (a translation unit per worker): ``cuda_plans.library``
    keeps it, and every plan of this module then runs in it (no g++ build per plan)."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    return cuda_plans.library(_host_kernels(hostbuild.have_float16()), jobs=WORKERS)


def _layouts(op, arrays):
    """The inputs' ``Layout``s and the outputs' as the op's shape rule gives them."""
    ins = [Layout(a.shape, a.dtype) for a in arrays]
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in arrays])
    return ins, [Layout(d[0], d[1]) for d in descs]


def _plan(op, *arrays):
    """``PLANS[type(op)]`` for ``arrays``: (plan, output layouts)."""
    ins, outs = _layouts(op, arrays)
    return PLANS[type(op)](op, ins, outs), outs


def _run(op, *arrays, plan=None):
    """``op`` on dense ``arrays`` through its plan (or ``plan``) on the host: (outputs, plan)."""
    arrays = [np.asarray(a) for a in arrays]
    arrays = [a if a.flags.c_contiguous else a.copy() for a in arrays]  # (0-d stays 0-d)
    own, outs = _plan(op, *arrays)
    plan = own if plan is None else plan
    return run_plan(plan, arrays, outs), plan


def _need_float16(host, *dtypes):
    if F16 in dtypes and not host.float16:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")


def _cpu(op, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [np.asarray(r) for r in KERNELS[type(op)](op, *arrays)]


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# -- inputs ---------------------------------------------------------------------------------------

def _values(dtype, shape, rng, mode="sum"):
    """Values of ``dtype``: integers over the whole range (sums and products wrap, as numpy's),
    few distinct ones for argmax/argmin (ties), floats around 0, near 1 for products (whose
    logarithms then sum to well within the dtype's range)."""
    size = math.prod(shape)
    if dtype == B:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if mode in ("argmax", "argmin", "max", "min"):
            return rng.integers(-3, 4, shape).clip(info.min, info.max).astype(dtype)
        if mode == "mean":
            return rng.integers(max(info.min, -10 ** 6), min(info.max, 10 ** 6), shape,
                                endpoint=True).astype(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    if mode == "prod":  # log-uniform: products of 20000 terms stay within the dtype's range
        spread = 0.01 if dtype == F16 else 0.05
        return np.exp(rng.uniform(-spread, spread, size)).reshape(shape).astype(dtype)
    scale = 1 if dtype == F16 else 3  # (20000 squares stay within float16's range)
    return rng.normal(0, scale, size).reshape(shape).astype(dtype)


# (shape, axis): a scalar, rows of 1, short rows with a large inner, long rows not a multiple of
# the block, several axes as one; then rows long enough to be split (few outputs)
REDUCE_SHAPES = [((), None), ((1,), 0), ((7,), None), ((5, 1), 1), ((3, 7), 1), ((3, 7), 0),
                 ((2, 300, 3), 1), ((4, 1000), -1), ((3, 4, 5), (1, 2)), ((40, 1, 33), (0, 1))]
SPLIT_SHAPES = [((3, 10000), 1), ((20000, 2), 0)]


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _acc_eps(dtype):
    return _eps(F64) if dtype == F64 else _eps(F32)


def _sum_bound(shape, axis, dtype, absum, ref, terms_per_thread=None):
    """A bound on a float sum's error: every term passes through at most ``n / TY`` additions in
    its thread's run, ``log2(TY)`` in the tree and one for a split's final combination, each
    off by half an ulp of the accumulation type of the partial sum (at most the sum of the
    |terms|); the float64 reference's pairwise sum through ``log2(n)``; plus the output's
    rounding."""
    outer, n, inner = rk.reduce_view(shape if shape else (1,), axis if shape else 0)
    _, ty = rk.block_shape(n, inner)
    steps = (terms_per_thread or -(-n // ty)) + math.log2(ty) + 2
    if dtype == F64:
        steps += math.log2(max(n, 1)) + 1
    return _acc_eps(dtype) * steps * absum + _eps(dtype) * np.abs(ref)


def _reduce_op(mode, axis):
    return {"argmax": Argmax(axis), "argmin": Argmin(axis)}.get(mode) or Reduce(mode, axis)


def _run_reduce(host, mode, x, axis):
    op = _reduce_op(mode, axis)
    (want,) = _cpu(op, x)
    (got,), plan = _run(op, x)
    return got, want, plan


def _reduce_case_id(case):
    mode, dtype = case
    return f"{mode}-{dtype}"


REDUCE_CASES = [(m, d) for m in MODES for d in DTYPES]


@pytest.mark.parametrize("case", REDUCE_CASES, ids=_reduce_case_id)
def test_reduce_computes_what_the_cpu_kernel_does(host, case):
    mode, dtype = case
    _need_float16(host, dtype)
    for shape, axis in REDUCE_SHAPES + (SPLIT_SHAPES if dtype in SPLIT_DTYPES else []):
        x = _values(dtype, shape, _rng(mode, str(dtype), shape), mode)
        got, want, plan = _run_reduce(host, mode, x, axis)
        what = f"{mode} of {dtype}{shape} over {axis} ({len(plan.launches)} launches)"
        assert len(plan.launches) == (2 if (shape, axis) in SPLIT_SHAPES else 1), what
        assert got.dtype == want.dtype and got.shape == want.shape, what
        exact = want.dtype.kind != "f" or mode in ("max", "min")
        if exact:
            np.testing.assert_array_equal(got, want, err_msg=what)
            continue
        wide = x.astype(F64)
        axes = axis if axis is not None else tuple(range(x.ndim))
        if mode == "prod":
            ref = np.prod(wide, axis=axes) if x.ndim else wide
            # every one of the n - 1 multiplications rounds the whole product (half an ulp), in
            # any order; the float64 reference's own as many
            n = x.size // max(1, np.size(ref))
            bound = (n * _acc_eps(dtype) + _eps(want.dtype)) * np.abs(ref)
        else:
            terms = wide * wide if mode == "sum_sqr" else wide
            ref = np.sum(terms, axis=axes) if x.ndim else terms
            bound = _sum_bound(shape, axis, want.dtype,
                               np.sum(np.abs(terms), axis=axes) if x.ndim else np.abs(terms), ref)
            if mode == "mean":
                count = max(1, x.size // max(1, np.size(ref)))
                ref, bound = ref / count, bound / count
                if dtype.kind != "f":  # an exact integer sum divided once
                    bound = _eps(want.dtype) * np.abs(ref)
        err = np.abs(got.astype(F64) - ref)
        assert np.all(err <= bound), f"{what}: error {err.max()} over {np.max(bound)}"


def test_reduce_of_an_empty_axis_is_the_identity_and_mean_nan(host):
    x = np.zeros((3, 0, 2), F32)
    for mode, value in [("sum", 0.0), ("prod", 1.0), ("sum_sqr", 0.0), ("mean", np.nan)]:
        got, want, _ = _run_reduce(host, mode, x, 1)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.full((3, 2), value, F32))
    assert rk.reduce_launch("sum", F32, (0, 5), 1).launches == ()  # nothing to write


@pytest.mark.parametrize("dtype", [F16, F32, F64], ids=str)
def test_nan_and_ties_in_max_min_argmax_argmin(host, dtype):
    _need_float16(host, dtype)
    rng = _rng("nan", str(dtype))
    x = rng.integers(-2, 3, (6, 700)).astype(dtype)  # many ties
    x[1, [5, 400]] = np.nan  # the first NaN wins argmax and argmin, max/min are NaN
    x[2, 699] = np.nan
    x[3, :] = np.nan
    x[4, 10] = np.inf
    x[5, 3] = -np.inf
    for mode in ("max", "min", "argmax", "argmin"):
        for axis in (1, 0):
            got, want, _ = _run_reduce(host, mode, x, axis)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} over {axis}")
    got, _, _ = _run_reduce(host, "argmax", x, 1)
    assert got.tolist()[1:4] == [5, 699, 0]


def test_integer_sums_and_products_wrap_as_numpy(host):
    x = np.full((2, 300), 100, I8)
    got, want, _ = _run_reduce(host, "sum", x, 1)
    assert got.tolist() == want.tolist() == [48] * 2  # 30000 modulo 256
    y = np.full((1, 40), 3, I32)
    got, want, _ = _run_reduce(host, "prod", y, 1)
    assert got.tolist() == want.tolist() == [int(np.int32(np.uint32(pow(3, 40, 2 ** 32))))]
    big = np.array([2 ** 62, 2 ** 62, 2 ** 62, 7], I64)
    got, want, _ = _run_reduce(host, "sum", big, 0)
    assert int(got) == int(want) == -(2 ** 62) + 7
    flags = np.ones(1000, B)
    got, want, _ = _run_reduce(host, "sum_sqr", flags, 0)
    assert got.dtype == I32 and int(got) == int(want) == 1000


# -- CumSum ---------------------------------------------------------------------------------------

CUMSUM_SHAPES = [((), 0), ((1,), 0), ((5,), 0), ((3, 300), 1), ((40, 3, 7), 0), ((2, 513, 3), 1),
                 ((3, 20000), 1), ((9000, 3), 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cumsum_computes_what_the_cpu_kernel_does(host, dtype):
    _need_float16(host, dtype)
    for shape, axis in CUMSUM_SHAPES:
        x = _values(dtype, shape, _rng("cumsum", str(dtype), shape))
        for exclusive in (False, True):
            for reverse in (False, True):
                op = CumSum(axis, exclusive, reverse)
                (want,) = _cpu(op, x)
                (got,), plan = _run(op, x)
                what = (f"cumsum of {dtype}{shape} axis {axis} exclusive={exclusive} "
                        f"reverse={reverse} ({len(plan.launches)} launches)")
                assert got.dtype == want.dtype, what
                if dtype.kind != "f":
                    np.testing.assert_array_equal(got, want, err_msg=what)
                    continue
                wide = x.astype(F64).reshape(shape or (1,))
                flip = np.flip(wide, axis) if reverse else wide
                ref = np.cumsum(flip, axis=axis) - (flip if exclusive else 0)
                absum = np.cumsum(np.abs(flip), axis=axis)
                if reverse:
                    ref, absum = np.flip(ref, axis), np.flip(absum, axis)
                # each prefix: its chunks' carries, the column's carry per TY elements, log2(TY)
                # scan stages; float16 rounds once at the store
                n = (shape or (1,))[axis]
                bound = _sum_bound(shape or (1,), axis, dtype, absum, ref,
                                   terms_per_thread=-(-n // 8))
                err = np.abs(got.astype(F64).reshape(ref.shape) - ref)
                assert np.all(err <= bound), f"{what}: error {err.max()}"


# -- Argsort and TopK -----------------------------------------------------------------------------

# rows of one element, a block of several short rows (and a last block not full), a row of the
# largest power of two, rows not a power of two
SORT_SHAPES = [(1,), (5,), (3, 7), (2, 3, 33), (600, 3), (2, 1024), (3, 1000)]


def _distinct_count(dtype):
    return 2 if dtype == B else 2 ** (8 * dtype.itemsize) if dtype.kind in "iu" else 2 ** 11


def _sort_values(dtype, shape, rng, distinct=False):
    if distinct:  # a permutation per row: no ties (numpy's argpartition picks among ties freely)
        perm = np.argsort(rng.random(shape), axis=-1)
        if dtype == B:
            return perm.astype(B)
        lo = np.iinfo(dtype).min if dtype.kind in "iu" else -1024
        return (perm + max(lo, -(shape[-1] // 2))).astype(dtype)
    x = _values(dtype, shape, rng, "argmax")  # few distinct values: ties everywhere
    if dtype.kind == "f" and x.size > 8:
        x.flat[3::11] = np.nan  # NaN sorts last, as numpy
        x.flat[5::13] = -np.inf
        x.flat[::17] = -0.0
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_argsort_and_topk_compute_what_the_cpu_kernels_do(host, dtype):
    _need_float16(host, dtype)
    for shape in SORT_SHAPES:
        n = shape[-1]
        rng = _rng("sort", str(dtype), shape)
        x = _sort_values(dtype, shape, rng)
        for descending in (False, True):
            op = Argsort(descending)
            got, _ = _run(op, x)
            for g, w, what in zip(got, _cpu(op, x), ("values", "indices")):
                np.testing.assert_array_equal(g, w, err_msg=f"Argsort {what} {shape} {descending}")
            for k in sorted({1, 2, n // 2 + 1, n, n + 3}):
                for kth_only, no_sort in ((False, False), (True, False), (False, True)):
                    if no_sort and n > _distinct_count(dtype):
                        continue  # (ties at the cut: numpy's choice is arbitrary)
                    op = TopK(k, descending, kth_only, no_sort)
                    data = _sort_values(dtype, shape, rng, distinct=True) if no_sort else x
                    got, _ = _run(op, data)
                    for g, w, what in zip(got, _cpu(op, data), ("values", "indices")):
                        assert g.shape == w.shape and g.dtype == w.dtype, f"{op} {what}"
                        np.testing.assert_array_equal(g, w, err_msg=f"{op} {what} of {shape}")


def test_sorting_rows_longer_than_a_block_is_refused():
    x = Layout((3, 1025), F32)
    with pytest.raises(NotImplementedError, match=r"Argsort.*at most 1024.*\(3, 1025\)"):
        rk.PLANS[Argsort](Argsort(), [x], [x, Layout(x.shape, I32)])
    with pytest.raises(ValueError, match=r"TopK: k must be a positive int, got 0"):
        rk.topk_launch(F32, (3, 5), 0)
    with pytest.raises(ValueError, match=r"Argsort: needs an input with at least 1 dimension"):
        rk.argsort_launch(F32, ())
    with pytest.raises(TypeError, match=r"TopK kernel: unsupported dtype complex128"):
        rk.topk_launch("complex128", (3, 5), 2)
    plan = rk.topk_launch(F32, (10, 3), 2)
    (launch,) = plan.launches
    assert launch.block == (256, 1, 1) and launch.args[3:7] == (10, 3, 2, 4)
    assert launch.args[:3] == (Buf("out0"), Buf("out1"), Buf("in0"))
    assert rk.argsort_launch(F64, (2, 1024)).launches[0].shared_bytes == 1024 * 16


# -- softmax and the losses -----------------------------------------------------------------------

# (rtol, atol) against the CPU kernels: both a few ulp of the accumulation type from the exact
# value (exp/log of CUDA or glibc, sums in other orders); float16 rounds once from float on both,
# so it lands on the same float16 or (a reduced loss) its neighbour.  Measured here: at most 0.4
# of these in float32 and float64, 0.7 for float16's reduced losses.
_SOFTMAX_TOL = {F16: (1e-3, 1e-5), F32: (1.5e-6, 3e-7), F64: (1e-14, 1e-15)}

SOFTMAX_SHAPES = [((), 0), ((7,), 0), ((64, 10), 1), ((3, 100, 5), 1), ((2, 3000), -1),
                  ((5, 3), 0), ((2, 3, 4), (1, 2)), ((4, 1), 1)]


def _logits(dtype, shape, rng):
    x = rng.normal(0, 4, math.prod(shape)).reshape(shape)
    if x.size > 20:  # large logits: exp would overflow without the max's shift
        x.flat[::7] += 300 if dtype != F16 else 30
    return x.astype(dtype)


def _close(got, want, dtype, what):
    rtol, atol = _SOFTMAX_TOL[dtype]
    assert got.dtype == want.dtype and got.shape == want.shape, what
    ok = np.isclose(got.astype(F64), want.astype(F64), rtol=rtol, atol=atol, equal_nan=True)
    assert ok.all(), (f"{what}: {np.count_nonzero(~ok)} of {ok.size} differ, e.g. got "
                      f"{got[~ok][:4]} want {want[~ok][:4]}")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", sk.FLOAT_DTYPES, ids=str)
def test_softmax_computes_what_the_cpu_kernel_does(host, dtype, log):
    _need_float16(host, dtype)
    for shape, axis in SOFTMAX_SHAPES:
        x = _logits(dtype, shape, _rng("softmax", str(dtype), shape))
        if x.ndim == 2 and x.shape[0] > 1 and x.shape[1] > 2:
            x[1, 2] = np.nan  # its row is NaN on both
        op = (LogSoftmax if log else Softmax)(axis)
        (want,) = _cpu(op, x)
        (got,), _ = _run(op, x)
        _close(got, want, dtype, f"{'log' if log else ''}softmax of {dtype}{shape} over {axis}")


def _label(label_dtype, shape, axis, rng):
    lshape = shape[:axis] + shape[axis + 1:]
    top = min(shape[axis], int(np.iinfo(label_dtype).max) + 1)
    return rng.integers(0, top, lshape).astype(label_dtype)


CE_SHAPES = [((64, 10), 1), ((4, 7, 3), 1), ((3, 5), 0), ((2, 600), 1), ((1, 1), 1)]
CE_CASES = [(F32, lab) for lab in sk.LABEL_DTYPES] + [(F16, I32), (F64, I64), (F64, U8)]


@pytest.mark.parametrize("reduction", sk.REDUCTIONS)
@pytest.mark.parametrize("case", CE_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_cross_entropy_and_its_gradient_compute_what_the_cpu_kernels_do(host, case, reduction):
    dtype, label_dtype = case
    _need_float16(host, dtype)
    for shape, axis in CE_SHAPES:
        rng = _rng("ce", str(dtype), str(label_dtype), shape, reduction)
        x = _logits(dtype, shape, rng)
        label = _label(label_dtype, shape, axis, rng)
        what = f"cross entropy ({reduction}) of {dtype}{shape} over {axis}, {label_dtype} labels"
        op = SoftmaxCrossEntropy(axis, reduction)
        (want,) = _cpu(op, x, label)
        (got,), plan = _run(op, x, label)
        assert len(plan.checks) == 1, what  # the labels' status word
        _close(got, want, dtype, what)
        dy = rng.normal(size=want.shape).astype(dtype)
        op = SoftmaxCrossEntropyBackward(axis, reduction)
        (want,) = _cpu(op, x, label, dy)
        (got,), _ = _run(op, x, label, dy)
        _close(got, want, dtype, "gradient of " + what)


def test_cross_entropy_gradient_of_another_dy_dtype(host):
    _need_float16(host, F16)
    rng = _rng("dy dtype")
    x = _logits(F32, (8, 5), rng)
    label = _label(I32, (8, 5), 1, rng)
    for reduction, dy in [("none", rng.normal(size=8).astype(F16)),
                          ("mean", np.array(3.7, F16))]:
        op = SoftmaxCrossEntropyBackward(1, reduction)
        (want,) = _cpu(op, x, label, dy)
        (got,), plan = _run(op, x, label, dy)
        assert plan.launches[0].kernel.name.endswith("_dy_f16")
        _close(got, want, F32, f"gradient ({reduction}) from a float16 dy")


def _cpu_error(op, *arrays):
    with pytest.raises(IndexError) as e:
        _cpu(op, *arrays)
    return str(e.value)


@pytest.mark.parametrize("case", [((4, 3), 1, I32, 3), ((4, 3), 1, I32, -1), ((2, 3, 5), 1, I64, 7),
                                  ((3, 2), 0, U8, 200), ((4, 3), 1, I16, -300)],
                         ids=lambda c: f"{c[0]}-{c[3]}")
def test_a_label_out_of_range_raises_the_cpu_kernels_error_through_the_check(host, case):
    shape, axis, label_dtype, bad = case
    rng = _rng("bad label", shape, bad)
    x = _logits(F32, shape, rng)
    label = _label(label_dtype, shape, axis, rng)
    label.flat[label.size // 2] = bad
    for reduction in sk.REDUCTIONS:
        op = SoftmaxCrossEntropy(axis, reduction)
        message = _cpu_error(op, x, label)
        assert "out of range" in message and str(bad) in message
        with pytest.raises(IndexError) as e:
            _run(op, x, label)
        assert str(e.value) == message, reduction
        dy = np.ones(label.shape if reduction == "none" else (), F32)
        op = SoftmaxCrossEntropyBackward(axis, reduction)
        message = _cpu_error(op, x, label, dy)
        with pytest.raises(IndexError) as e:
            _run(op, x, label, dy)
        assert str(e.value) == message, f"backward {reduction}"


def test_no_classes_make_every_label_out_of_range(host):
    x, label = np.zeros((3, 0), F32), np.zeros(3, I32)
    op = SoftmaxCrossEntropyBackward(1)
    message = _cpu_error(op, x, label, np.ones(3, F32))
    with pytest.raises(IndexError) as e:
        _run(op, x, label, np.ones(3, F32))
    assert str(e.value) == message


def test_the_mean_loss_of_no_samples_is_nan(host):
    x = np.zeros((0, 4), F32)
    label = np.zeros(0, I32)
    op = SoftmaxCrossEntropy(1, "mean")
    (want,) = _cpu(op, x, label)
    (got,), plan = _run(op, x, label)
    assert len(plan.launches) == 1 and not plan.checks  # only the total: there is no sample
    assert np.isnan(got) and np.isnan(want)


# -- plans and the host emulation -----------------------------------------------------------------

def test_block_shapes_read_coalesced_and_fill_the_block():
    for n, inner in [(1, 1), (3, 1), (1000, 1), (10 ** 6, 1), (8, 3), (5, 33), (1000, 4096),
                     (1, 10 ** 6)]:
        tx, ty = rk.block_shape(n, inner)
        assert tx * ty == rk.THREADS and tx & (tx - 1) == 0 and ty & (ty - 1) == 0
        assert ty <= max(1, 2 ** math.ceil(math.log2(n))), (n, inner)  # no idle rows of threads
        if inner >= 32:
            assert tx >= 32  # a warp reads 32 consecutive elements of a row
    assert rk.block_shape(10 ** 6, 1) == (1, 256)  # a block per long row
    assert rk.block_shape(4, 1) == (64, 4)  # short rows: 64 rows a block


def test_plans_split_long_rows_of_few_outputs_and_not_many_short_ones():
    x = Layout((2, 10 ** 6), F32)
    plan = rk.PLANS[Reduce](Reduce("sum", 1), [x], [Layout((2,), F32)])
    first, second = plan.launches
    assert first.kernel.name.endswith("_partial") and second.kernel.name.endswith("_final")
    splits = first.grid[1]
    assert splits > 1 and plan.workspace == splits * 2 * 4 and not plan.checks
    assert first.args[:2] == (Buf("ws"), Buf("in0"))
    # the workspace as (1, splits, m)
    assert second.args[:5] == (Buf("out0"), Buf("ws"), 1, splits, 2)
    assert all(isinstance(a, (Buf, np.int64)) for a in second.args)
    plan = rk.reduce_launch("sum", F32, (10 ** 5, 8), 1)
    (only,) = plan.launches
    assert only.grid == (10 ** 5 * 8 // 256, 1, 1) and only.block == (32, 8, 1)
    assert only.shared_bytes == 256 * 4 and plan.workspace == 0
    long_scan = rk.cumsum_launch(F32, (10 ** 6,), 0)
    totals, carries, chunks = long_scan.launches
    assert chunks.args[6] == carries.args[0] != totals.args[0]  # two workspace arrays
    assert long_scan.workspace >= 2 * totals.grid[1] * 4
    assert len(rk.cumsum_launch(F32, (1000, 1000), 1).launches) == 1
    assert rk.reduce_launch("argmax", F64, (3, 5), 0).launches[0].shared_bytes == 256 * 16


def _on_one_block(plan):
    # the plan with each launch's grid cut to one block in x (y is the split's chunk: kept)
    steps = tuple(dataclasses.replace(s, grid=(1,) + s.grid[1:]) if isinstance(s, Launch) else s
                  for s in plan.steps)
    return dataclasses.replace(plan, steps=steps)


def test_any_grid_covers_the_work(host):
    # the plan's grid is a choice: a smaller one (a device's limit) gives the same bits
    x = _values(F32, (700, 3), _rng("grid"))
    for op in (Reduce("sum", 1), CumSum(1), Softmax(1), Argmax(1), TopK(2)):
        (full, *_), plan = _run(op, x)
        (small, *_), _ = _run(op, x, plan=_on_one_block(plan))
        assert plan.launches[0].grid[0] > 1, op
        np.testing.assert_array_equal(small, full, err_msg=str(op))


def test_the_host_refuses_a_launch_with_too_little_shared_memory(host):
    x = np.ones((3, 100), F32)
    (got,), plan = _run(Reduce("sum", 1), x)
    assert (got == 100).all()
    (launch,) = plan.steps
    short = dataclasses.replace(plan, steps=(dataclasses.replace(
        launch, shared_bytes=launch.shared_bytes - 4),))
    with pytest.raises(AssertionError, match="more dynamic shared memory"):
        _run(Reduce("sum", 1), x, plan=short)


def test_reduce_view_merges_adjacent_axes():
    assert rk.reduce_view((2, 3, 4), 1) == (2, 3, 4)
    assert rk.reduce_view((2, 3, 4), None) == (1, 24, 1)
    assert rk.reduce_view((2, 3, 4), (1, 2)) == (2, 12, 1)
    assert rk.reduce_view((3, 1, 4), (0, 2)) == (1, 12, 1)  # a size-1 dim between does not count
    assert rk.reduce_view((), None) == (1, 1, 1)
    assert rk.reduce_view((5, 1), 1) == (5, 1, 1)
    assert rk.reduce_view((2, 3, 4), -1) == (6, 4, 1)


def test_every_op_of_the_family_has_a_plan_and_none_reads_strides():
    assert set(rk.PLANS) == {Reduce, Argmax, Argmin, CumSum, Argsort, TopK}
    assert set(sk.PLANS) == {Softmax, LogSoftmax, SoftmaxCrossEntropy,
                             SoftmaxCrossEntropyBackward}
    assert rk.STRIDED == sk.STRIDED == frozenset()


# -- errors ---------------------------------------------------------------------------------------

def test_bad_modes_dtypes_and_axes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"Reduce kernel: unknown mode 'median'"):
        rk.reduce_kernel("median", F32)
    with pytest.raises(ValueError, match=r"unknown stage 'half'"):
        rk.reduce_kernel("sum", F32, stage="half")
    with pytest.raises(TypeError, match=r"Reduce\('sum'\) kernel: unsupported dtype complex64"):
        rk.reduce_kernel("sum", "complex64")
    with pytest.raises(TypeError, match=r"Reduce\('mean'\) kernel: gives float32, not int8"):
        rk.reduce_kernel("mean", I8, out_dtype=I8)
    with pytest.raises(TypeError, match=r"Argmax kernel: unsupported dtype uint32"):
        rk.reduce_launch("argmax", "uint32", (3,), 0)
    with pytest.raises(NotImplementedError, match=r"Reduce\('sum'\).*axes \(0, 2\) of shape "
                                                  r"\(2, 3, 4\) are not adjacent"):
        rk.reduce_launch("sum", F32, (2, 3, 4), (0, 2))
    with pytest.raises(ValueError, match=r"axis 3 is out of range.*\(2, 3\)"):
        rk.reduce_launch("max", F32, (2, 3), 3)
    with pytest.raises(TypeError, match=r"CumSum: axis must be an int"):
        rk.cumsum_launch(F32, (2, 3), (0, 1))
    with pytest.raises(TypeError, match=r"CumSum kernel: gives int32, not bool"):
        rk.cumsum_kernel(B, out_dtype=B)
    with pytest.raises(TypeError, match=r"Softmax kernel: unsupported input dtype int32"):
        sk.softmax_kernel(I32)
    with pytest.raises(TypeError, match=r"SoftmaxCrossEntropy kernel: unsupported label dtype "
                                        r"float32"):
        sk.cross_entropy_kernel(F32, F32)
    with pytest.raises(TypeError, match=r"SoftmaxCrossEntropyBackward kernel: unsupported dy"):
        sk.cross_entropy_backward_kernel(F32, I32, I32)
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropy: reduction must be one of"):
        sk.cross_entropy_launch(F32, I32, (4, 3), 1, "max")
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropy: axis 2 is out of range for "
                                         r"logits of shape \(4, 3\)"):
        sk.cross_entropy_launch(F32, I32, (4, 3), 2)
    with pytest.raises(NotImplementedError, match=r"LogSoftmax.*not adjacent"):
        sk.softmax_launch(F32, (2, 3, 4), (0, 2), log=True)


def test_plans_refuse_layouts_that_do_not_fit_the_op():
    x, x3 = Layout((4, 3), F32), Layout((2, 3, 4), F32)
    with pytest.raises(ValueError, match=r"Reduce.max: cannot take the min/max over an empty "
                                         r"axis \(input shapes: \(3, 0\); dtypes: float32\)"):
        rk.PLANS[Reduce](Reduce("max", 1), [Layout((3, 0), F32)], [Layout((3,), F32)])
    with pytest.raises(ValueError, match=r"Argmin: cannot take the arg-extremum over an empty"):
        rk.PLANS[Argmin](Argmin(0), [Layout((0, 2), F32)], [Layout((2,), I32)])
    with pytest.raises(NotImplementedError, match=r"Reduce.sum.*\(0, 2\) of shape \(2, 3, 4\)"):
        rk.PLANS[Reduce](Reduce("sum", (0, 2)), [x3], [Layout((3,), F32)])
    with pytest.raises(TypeError, match=r"Reduce.sum: expects 1 input\(s\) and 1 output\(s\), "
                                        r"got 2 and 1"):
        rk.PLANS[Reduce](Reduce("sum"), [x, x], [Layout((), F32)])
    with pytest.raises(ValueError, match=r"CumSum: output 0 is \(4, 3\) float32, the op gives "
                                         r"12 elements of int32"):
        rk.PLANS[CumSum](CumSum(0), [Layout((4, 3), B)], [x])
    with pytest.raises(TypeError, match=r"TopK kernel: unsupported dtype complex64"):
        rk.PLANS[TopK](TopK(2), [Layout((4, 3), "complex64")],
                       [Layout((4, 2), "complex64"), Layout((4, 2), I32)])
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropy: label must have shape \(4,\) "
                                         r".*got \(3,\) \(input shapes: \(4, 3\), \(3,\)"):
        sk.PLANS[SoftmaxCrossEntropy](SoftmaxCrossEntropy(1), [x, Layout((3,), I32)],
                                      [Layout((4,), F32)])
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropyBackward: dy must have shape \(\) "
                                         r"\(reduction 'mean'\), got \(4,\)"):
        sk.PLANS[SoftmaxCrossEntropyBackward](
            SoftmaxCrossEntropyBackward(1, "mean"), [x, Layout((4,), I32), Layout((4,), F32)],
            [x])
    with pytest.raises(ValueError, match=r"LogSoftmax: the output is \(4, 3\) float64"):
        sk.PLANS[LogSoftmax](LogSoftmax(1), [x], [Layout((4, 3), F64)])
    with pytest.raises(TypeError, match=r"Softmax kernel: unsupported input dtype int32"):
        sk.PLANS[Softmax](Softmax(1), [Layout((4, 3), I32)], [Layout((4, 3), I32)])
