"""The CUDA device's generated elementwise kernels, checked without a GPU.

``mge/_core/device/cuda/kernels/elemwise.py`` writes CUDA C per mode and dtype signature;
``mge/_core/device/cuda/nvrtc.py`` compiles it.  Here:

* every mode, for every dtype signature its op rule (and so the CPU kernel) accepts, compiles with
  NVRTC for ``compute_90`` and an older architecture, in both kernel variants (mixed-dtype pairs
  in the contiguous one, and for ``compute_90``), and ptxas assembles representative programs
  (every mode once contiguous and once general, TypeCvt between all dtypes) for ``sm_90``.  Many
  kernels share one NVRTC program (one per dtype), which costs far less than a program each; the
  sweep uses ``-Ofc=max`` (NVRTC 12.8+: the same front end and code generator, little
  optimisation), the contiguous representatives the kernels' own flags;
* the same generated sources, built with g++ (they compile as host C++ too), run through ctypes
  on numpy arrays and are compared with the CPU kernels: every mode on every dtype it takes
  (float16 against the float32 formula rounded once, as the kernels compute it), TypeCvt
  between all dtypes, and the general kernel's broadcasting and stride arithmetic;
* errors: unknown modes and dtypes, programs NVRTC or ptxas refuse.

Without libnvrtc, ptxas or g++ the tests that need them are skipped with the reason, except
under ``CI`` (which installs them), where that is a failure.
"""
import concurrent.futures
import ctypes
import itertools
import os
import re
import subprocess
import sys
import warnings
import zlib

import numpy as np
import pytest

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.ops.elemwise import ELEMWISE_ARITY, ELEMWISE_MODES, Elemwise, TypeCvt, elemwise_op
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)

DTYPES = ek.SUPPORTED_DTYPES
MODES = sorted(ELEMWISE_MODES)
B, I8, U8, I16, I32 = (np.dtype(d) for d in ("bool", "int8", "uint8", "int16", "int32"))
F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
WORKERS = min(4, os.cpu_count() or 1)  # NVRTC and ptxas run outside the GIL


def _accepts(mode, dtypes):
    try:
        ek.elemwise_out_dtype(mode, dtypes)
        return True
    except TypeError:
        return False


def _same_signatures(mode):
    """The one-dtype signatures of ``mode`` its rule accepts."""
    n = ELEMWISE_ARITY[mode]
    return [(d,) * n for d in DTYPES if _accepts(mode, (d,) * n)]


def _mixed_signatures(mode):
    """The mixed-dtype signatures compiled: every pair for a binary mode; for a ternary one the
    triples (x, y, y) and (y, y, x)."""
    n = ELEMWISE_ARITY[mode]
    if n == 2:
        cands = [s for s in itertools.product(DTYPES, repeat=2) if s[0] != s[1]]
    elif n == 3:
        cands = list(dict.fromkeys(s for x, y in itertools.product(DTYPES, repeat=2) if x != y
                                   for s in ((x, y, y), (y, y, x))))
    else:
        cands = []
    return [s for s in cands if _accepts(mode, s)]


SAME = {m: _same_signatures(m) for m in MODES}
MIXED = {m: _mixed_signatures(m) for m in MODES}
# (contiguous, index_bits): the sweep compiles the first two for every signature; the 32-bit
# index differs from the 64-bit one in the index type alone, so the representative program
# carries it (and both are run on the host below)
VARIANTS = [(True, 64), (False, 64), (False, 32)]


# -- compiling: the sweep -------------------------------------------------------------------------

def _fast_options():
    return fast_options(ek.NVRTC_OPTIONS)




def _sweep_programs(old):
    """{(group, arch): [KernelSource]}: every kernel of the sweep, one program per group."""
    groups = {}
    for mode in MODES:
        for sig in SAME[mode]:
            for arch in ("compute_90", old):
                groups.setdefault((f"same-{sig[0]}", arch), []).extend(
                    ek.elemwise_kernel(mode, sig, contiguous=c, index_bits=b)
                    for c, b in VARIANTS[:2])
        for sig in MIXED[mode]:
            groups.setdefault((f"mixed-{sig[0]}", "compute_90"), []).append(
                ek.elemwise_kernel(mode, sig))
    for arch in ("compute_90", old):
        groups[("typecvt", arch)] = [ek.typecvt_kernel(s, d, contiguous=c, index_bits=b)
                                     for s in DTYPES for d in DTYPES for c, b in VARIANTS[:2]]
    return groups


def _compile_group(item):
    (group, arch), kernels = item
    try:
        return _entries(nvrtc.compile_ptx(ek.program(kernels), f"{group}.cu", arch,
                                          _fast_options()))
    except nvrtc.CudaCompileError as e:
        return e


@pytest.fixture(scope="module")
def sweep(old_arch):
    """{(group, arch): (kernels, the PTX's entry names or the CudaCompileError)}."""
    groups = _sweep_programs(old_arch)
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(_compile_group, groups.items()))
    nvrtc.clear_cache()  # tens of MB of PTX nobody asks for again
    return {key: (kernels, r) for (key, kernels), r in zip(groups.items(), results)}


def _entries(ptx):
    return set(re.findall(r"\.entry\s+(\w+)", ptx))


def _check_compiled(sweep, wanted, arch):
    """Every kernel of ``wanted`` is an entry of its group's PTX; a group NVRTC refused is
    compiled again with only ``wanted``, whose own error then names the culprit."""
    missing = []
    for (group, a), (kernels, result) in sweep.items():
        mine = [k for k in kernels if k.name in wanted]
        if a != arch or not mine:
            continue
        if isinstance(result, Exception):
            nvrtc.compile_ptx(ek.program(mine), f"{group}-alone.cu", arch, _fast_options())
            pytest.fail(f"{group} for {arch} does not compile, though these kernels alone do:\n"
                        f"{result}")
        missing += [k.name for k in mine if k.name not in result]
    assert not missing, f"not in the PTX for {arch}: {missing}"


@pytest.mark.parametrize("mode", MODES)
def test_every_signature_of_the_mode_compiles(mode, sweep, old_arch):
    assert SAME[mode], f"{mode} takes none of {[str(d) for d in DTYPES]}"
    same = {ek.elemwise_kernel(mode, s, contiguous=c, index_bits=b).name
            for s in SAME[mode] for c, b in VARIANTS[:2]}
    mixed = {ek.elemwise_kernel(mode, s).name for s in MIXED[mode]}
    _check_compiled(sweep, same | mixed, "compute_90")
    _check_compiled(sweep, same, old_arch)


def test_typecvt_between_every_pair_of_dtypes_compiles(sweep, old_arch):
    names = {ek.typecvt_kernel(s, d, contiguous=c, index_bits=b).name
             for s in DTYPES for d in DTYPES for c, b in VARIANTS[:2]}
    _check_compiled(sweep, names, "compute_90")
    _check_compiled(sweep, names, old_arch)


# -- representative programs through ptxas --------------------------------------------------------

def _representatives(fast):
    """Three programs for ptxas, as (name, kernels, NVRTC options): every mode on float32
    (int32 for the integer-only modes), contiguous, and a few general kernels, with the kernels'
    own flags; every mode on float16 (int8) through a general kernel, of 32- and 64-bit indices
    by turns -- the float16 conversions are inline PTX, which only ptxas checks; TypeCvt between
    every pair."""
    def one(mode, first, second, variant):
        n = ELEMWISE_ARITY[mode]
        dtype = first if _accepts(mode, (first,) * n) else second
        return ek.elemwise_kernel(mode, (dtype,) * n, contiguous=variant[0], index_bits=variant[1])

    own_flags = [one(m, F32, I32, VARIANTS[0]) for m in MODES]
    own_flags += [ek.elemwise_kernel(m, sig, contiguous=False, index_bits=bits) for m, sig, bits in
                  [("add", (F32, F32), 64), ("clip", (F16, F16, F16), 32), ("lt", (I8, F64), 64)]]
    return [
        ("own-flags", own_flags, ek.NVRTC_OPTIONS),
        ("general", [one(m, F16, I8, VARIANTS[1 + k % 2]) for k, m in enumerate(MODES)], fast),
        ("typecvt", [ek.typecvt_kernel(s, d) for s in DTYPES for d in DTYPES], fast)]


@pytest.fixture(scope="module")
def assembled(nvrtc_ready, ptxas_ready):
    """[(kernels, cubin)] of the representative programs (assembling costs more than compiling,
    so not the whole sweep), built side by side."""
    def build(item):
        name, kernels, options = item
        ptx = nvrtc.compile_ptx(ek.program(kernels), f"{name}.cu", "compute_90", options)
        return kernels, nvrtc.assemble(ptx, "sm_90", name=f"{name}.ptx")

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(build, _representatives(_fast_options())))


def test_ptxas_assembles_every_mode_for_sm90(assembled):
    for kernels, cubin in assembled:
        assert cubin[:4] == b"\x7fELF"
        absent = [k.name for k in kernels if k.name.encode() not in cubin]
        assert not absent, f"not in the cubin: {absent}"
    modes = [k.name for part, _ in assembled for k in part if k.name.startswith("mge_ew_")]
    assert len(modes) >= 2 * len(MODES)  # each mode, contiguous and general


# -- host builds: the same sources under g++ ------------------------------------------------------

# Mixed signatures whose results are checked (the rest of the mixed ones only compile): an int
# widened (int8, uint8 -> int16), an int meeting a float (int32, float32 -> float64: MOD takes
# numpy's remainder there), float16 meeting uint8.
SEMANTIC_MIXED = {2: [(I8, U8), (I32, F32), (U8, F16), (F32, F64)],
                  3: [(I8, F32, F32), (F32, I32, F64), (I32, F32, F16)]}


# The integer *_grad modes whose CPU kernels go through float16 steps for 8-bit integers: they
# compute in float here (DIFFERENCES), so they are not compared on those.
_THROUGH_FLOAT16 = {"softplus_grad", "silu_grad", "asinh_grad", "acosh_grad"}


def _semantic_cases():
    cases = []
    for mode in MODES:
        cases += [(mode, s) for s in SAME[mode]
                  if not (mode in _THROUGH_FLOAT16 and s[0] in (I8, U8))]
        if not mode.endswith("_grad"):  # mixed *_grad modes compute differently (DIFFERENCES)
            cases += [(mode, s) for s in SEMANTIC_MIXED.get(ELEMWISE_ARITY[mode], [])
                      if _accepts(mode, s)]
    return cases


SEMANTIC_CASES = _semantic_cases()

# Host-only helpers appended to the host build: the general kernel's offset arithmetic alone,
# for indices too large to allocate.
_OFFSETS_HELPER = """
template <class I> static void mge_test_offsets(const mge_layout<3, I>* L, I i, I* out) {
    I off[3];
    mge_offsets<3, I>(*L, i, off);
    for (int k = 0; k < 3; ++k) out[k] = off[k];
}
extern "C" void mge_test_offsets_3_64(const mge_layout<3, long long>* L, long long i,
                                      long long* out)
{ mge_test_offsets(L, i, out); }
extern "C" void mge_test_offsets_3_32(const mge_layout<3, int>* L, int i, int* out)
{ mge_test_offsets(L, i, out); }
"""

# General kernels the layout tests run.
_GENERAL_CASES = [("add", (F32, F32)), ("clip", (F32, F32, F32)), ("neg", (I32,)),
                  ("cond_leq_mov", (I32, F32, F16)), ("lt", (F64, I8))]


class Host:
    """The host build of the generated kernels: ``call(kernel, out, *ins)`` runs one."""

    def __init__(self, lib):
        self.lib = lib.lib
        self.float16 = lib.float16
        self._library = lib

    def function(self, kernel, argtypes):
        return self._library.function(kernel.name, argtypes)

    def call(self, kernel, out, *ins):
        """The contiguous ``kernel`` over C-contiguous arrays of one shape."""
        fn = self.function(kernel, [ctypes.c_void_p] * (1 + len(ins)) + [ctypes.c_longlong])
        fn(out.ctypes.data, *[a.ctypes.data for a in ins], out.size)
        return out

    def call_general(self, kernel, out, *ins, simplify=True):
        """The general ``kernel`` over views (any strides; inputs broadcast to ``out``)."""
        views = [np.broadcast_to(a, out.shape) for a in ins]
        strides = [tuple(s // v.itemsize for s in v.strides) for v in [out, *views]]
        shape = out.shape
        if simplify:
            shape, strides = ek.simplify_layout(shape, strides)
        packed = ek.pack_layout(shape, strides, kernel.index_bits)
        index = ctypes.c_int if kernel.index_bits == 32 else ctypes.c_longlong
        layout = _layout_struct(len(strides), kernel.index_bits)
        assert ctypes.sizeof(layout) == packed.dtype.itemsize
        fn = self.function(kernel, [ctypes.c_void_p] * (1 + len(ins)) + [index, layout])
        fn(out.ctypes.data, *[v.ctypes.data for v in views], out.size,
           layout.from_buffer_copy(packed.tobytes()))
        return out


def _layout_struct(narrays, bits):
    index = ctypes.c_int if bits == 32 else ctypes.c_longlong
    return type(f"Layout{narrays}_{bits}", (ctypes.Structure,), {"_fields_": [
        ("shape", index * ek.MAX_NDIM), ("strides", (index * ek.MAX_NDIM) * narrays),
        ("ndim", ctypes.c_int)]})


def _host_kernels(float16):
    kernels = []
    for mode, sig in SEMANTIC_CASES:
        dts = set(sig) | {ek.elemwise_out_dtype(mode, sig)}
        if float16 or F16 not in dts:
            kernels.append(ek.elemwise_kernel(mode, sig))
    for s in DTYPES:
        for d in DTYPES:
            if float16 or F16 not in (s, d):
                kernels.append(ek.typecvt_kernel(s, d))
    for mode, sig in _GENERAL_CASES:
        if float16 or F16 not in sig:
            kernels += [ek.elemwise_kernel(mode, sig, contiguous=False, index_bits=b)
                        for b in (32, 64)]
    return kernels


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """One host build (``cuda/hostbuild.py``) of every kernel the semantics tests run, one
    translation unit per core."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    kernels = _host_kernels(hostbuild.have_float16())
    units = [ek.program(kernels[k::WORKERS]) + (_OFFSETS_HELPER if k == 0 else "")
             for k in range(WORKERS)]
    lib = hostbuild.build(units, str(tmp_path_factory.mktemp("cuda_host")), jobs=WORKERS)
    return Host(lib)


# -- semantics: inputs ----------------------------------------------------------------------------

_FLOAT_EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0, 6.0, -6.0,
                0.49999997, 7.0, -7.0, 0.1, 1e-30, -1e-30, 1e-40, 20.0, -20.0, 40.0, -40.0,
                88.5, -88.5, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan]
_FLOAT_SMALL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.1, np.inf, -np.inf, np.nan]
_INT_EDGES = [0, 1, -1, 2, -2, 3, -3, 5, 6, 7, -7, 100, -100]
# integer *_grad modes leave for floats: bounded inputs keep those in the integers' range
_INT_GRAD_LIMIT = {1: 11, 2: 180, 4: 180, 8: 180}


def _int_values(dtype, rng, n, lo=-1000, hi=1000, edges=True):
    info = np.iinfo(dtype)
    lo, hi = max(lo, info.min), min(hi, info.max)
    base = [v for v in _INT_EDGES if lo <= v <= hi] + [info.min, info.max] if edges else []
    return np.array(base + list(rng.integers(lo, hi, n, endpoint=True)), dtype)


def _float_values(dtype, rng, n):
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(_FLOAT_EDGES), rng.normal(0, 4, n)]).astype(dtype)


def _values(dtype, rng, n=200):
    if dtype == B:
        return rng.random(n) < 0.5
    if dtype.kind == "f":
        return _float_values(dtype, rng, n)
    return _int_values(dtype, rng, n, -10 ** 6, 10 ** 6)


def _grid(dtypes, rng):
    """Every pairing of a few edge values, then random values: a column per input."""
    small = []
    for d in dtypes:
        if d == B:
            small.append([False, True])
        elif d.kind == "f":
            small.append(_FLOAT_SMALL)
        else:
            info = np.iinfo(d)
            small.append([v for v in [0, 1, -1, 2, -2, 7, -7, info.min, info.max]
                          if info.min <= v <= info.max])
    grid = list(zip(*itertools.product(*small)))
    columns = []
    for d, g in zip(dtypes, grid):
        with np.errstate(over="ignore"):
            columns.append(np.concatenate([np.array(g).astype(d), _values(d, rng)]))
    n = min(len(c) for c in columns)
    return [c[:n] for c in columns]


def _inputs(mode, dtypes, rng):
    """Inputs of ``mode``: edge values and their pairings, random values; for integers, within
    the values where numpy is defined (no negative powers, converted results in range)."""
    n = len(dtypes)
    cols = [_values(d, rng) for d in dtypes] if n == 1 else _grid(dtypes, rng)
    ints = [d.kind in "iu" for d in dtypes]
    if mode == "pow" and ints[1]:
        cols[1] = np.abs(cols[1] % 13).astype(dtypes[1])  # numpy refuses negative powers
        if ints[0]:
            cols[0] = (cols[0] % 11 - 5).astype(dtypes[0])
    if mode in ("shl", "shr"):
        info = np.iinfo(dtypes[1])
        cols[1] = np.clip(rng.integers(-3, 41, len(cols[1])), info.min, info.max).astype(dtypes[1])
    if mode.endswith("_grad") and all(ints):
        limit = _INT_GRAD_LIMIT[dtypes[0].itemsize]
        if mode in ("sigmoid_grad", "tanh_grad", "abs_grad", "relu6_grad"):
            return cols  # pure integer arithmetic: wrapping included
        x = np.array(_INT_EDGES[:11] + list(rng.integers(-limit, limit, 100, endpoint=True)))
        x = x[(x >= -limit) & (x <= limit)]
        if mode in ("acosh_grad", "atanh_grad"):
            x = x[np.abs(x) > 1]  # dy / 0 and sqrt of negatives have no integer value
        dy = rng.integers(-100, 100, len(x), endpoint=True)
        cols = [x.astype(dtypes[0]), dy.astype(dtypes[1])]
    return cols


# Modes whose float results are exactly numpy's (IEEE operations, no libm): compared bit for bit.
_EXACT = {"add", "sub", "mul", "true_div", "floor_div", "mod", "max", "min", "neg", "abs",
          "square", "sign", "sqrt", "rsqrt", "ceil", "floor", "round", "clip", "relu", "relu6",
          "hsigmoid", "hswish", "fuse_add_relu", "switch_gt0", "cond_leq_mov", "cond_lt_mov",
          "abs_grad", "sigmoid_grad", "tanh_grad", "relu6_grad", "hsigmoid_grad", "hswish_grad",
          "asinh_grad", "acosh_grad", "atanh_grad"}
# (rtol, atol) of the others: CUDA's libm or glibc's against numpy's SIMD functions.
# Measured here: at most 2 ulp in float32 (erf and gelu's a few more, near zero, inside atol), 1
# in float64, and float16 rounds to the same value or its neighbour.
_TOLERANCE = {F32: (1e-6, 1e-6), F64: (1e-15, 1e-15), F16: (1e-3, 6e-8)}


def _cpu(mode, arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (out,) = KERNELS[Elemwise](elemwise_op(mode), *arrays)
    return np.asarray(out)


def _reference(mode, arrays, out_dtype):
    """The CPU kernel's result; for a float16 result, that of the float32 formula rounded once to
    float16, which is what the CUDA kernels compute (DIFFERENCES)."""
    if out_dtype != F16:
        return _cpu(mode, arrays)
    # float16 as float32, 8-bit integers as int16 (which numpy computes in float32, and which
    # stay integers where the kind matters: MOD of an integer dividend)
    wide = [a.astype({F16: F32, I8: I16, U8: I16}.get(a.dtype, a.dtype)) for a in arrays]
    with np.errstate(over="ignore"):
        return _cpu(mode, wide).astype(F16)


def _compare(mode, got, want, arrays, what):
    """``got`` is ``want``: exactly, or within ``_TOLERANCE``; a failure shows the elements."""
    assert got.dtype == want.dtype, what
    rtol, atol = _TOLERANCE.get(got.dtype, (0, 0))
    if got.dtype.kind != "f" or mode in _EXACT:
        rtol = atol = 0  # (float16: the same float32 value, rounded the same way)
    with np.errstate(all="ignore"):
        close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if got.dtype.kind != "f":
        close = got == want
    bad = np.flatnonzero(~close)
    if bad.size:
        rows = [f"  {[a.flat[i].item() for a in arrays]}: got {got.flat[i].item()!r}, "
                f"want {want.flat[i].item()!r}" for i in bad[:12]]
        pytest.fail(f"{what}: {bad.size} of {got.size} differ (rtol {rtol}, atol {atol}):\n"
                    + "\n".join(rows))


def _case_id(case):
    mode, sig = case
    return f"{mode}-{'-'.join(str(d) for d in sig)}"


@pytest.mark.parametrize("case", SEMANTIC_CASES, ids=_case_id)
def test_the_host_build_computes_what_the_cpu_kernel_does(case, host):
    mode, sig = case
    out_dtype = ek.elemwise_out_dtype(mode, sig)
    if F16 in set(sig) | {out_dtype} and not host.float16:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")
    rng = np.random.default_rng(zlib.crc32(_case_id(case).encode()))
    arrays = [np.ascontiguousarray(a) for a in _inputs(mode, sig, rng)]
    want = _reference(mode, arrays, out_dtype)
    got = host.call(ek.elemwise_kernel(mode, sig), np.empty(want.shape, out_dtype), *arrays)
    _compare(mode, got, want, arrays, f"{mode}{tuple(str(d) for d in sig)}")


# Semantics worth seeing at a glance (each also agrees with the CPU kernel): (mode, dtype, inputs,
# expected).
_SPOT_VALUES = [
    # halves away from zero; 0.49999997 too, as on the CPU (0.49999997f + 0.5f rounds to 1)
    ("round", F32, [[2.5, -2.5, 1.5, -0.5, 0.49999997]], [3, -3, 2, -1, 1]),
    ("floor_div", I32, [[-7, 7, -7, 7, -2 ** 31], [2, -2, -2, 0, -1]], [-4, -4, 3, 0, -2 ** 31]),
    ("mod", I32, [[-7, 7, -7, 5], [2, -2, -2, 0]], [1, -1, -1, 0]),  # the divisor's sign
    ("mod", F32, [[-7.0, 7.0, 5.0], [2.0, -2.0, 0.0]], [-1.0, 1.0, np.nan]),  # fmod: the dividend's
    ("floor_div", F32, [[-7.0, 7.0, 1.0, -1.0], [2.0, -2.0, 0.0, 0.0]], [-4, -4, np.inf, -np.inf]),
    # lo > hi: x < lo gives lo first, else x > hi gives hi
    ("clip", F32, [[5.0, 0.0, 2.0, np.nan], [3.0] * 4, [1.0] * 4], [1, 3, 3, np.nan]),
    ("sigmoid", F32, [[-100.0, 100.0, 0.0, -np.inf]], [3.720076e-44, 1.0, 0.5, 0.0]),
    ("softplus", F32, [[100.0, -100.0, np.inf]], [100.0, 3.720076e-44, np.inf]),
    ("relu", F32, [[-1.0, np.nan, 2.0]], [0.0, np.nan, 2.0]),
    ("max", F32, [[1.0, np.nan], [np.nan, 1.0]], [np.nan, np.nan]),
    ("abs", I8, [[-128, -3]], [-128, 3]),  # wraps, as numpy
    ("add", U8, [[250, 3], [10, 4]], [4, 7]),
    ("shl", I8, [[1, 1, 1, -1], [7, 8, -1, 3]], [-128, 0, 0, -8]),
    ("shr", I32, [[-5, -5, 5, -5], [1, 40, 40, -1]], [-3, -1, 0, -1]),
    ("pow", I32, [[3, -2, 7, 2], [4, 3, 0, 31]], [81, -8, 1, -2 ** 31]),
    ("isnan", F32, [[np.nan, np.inf, 0.0]], [True, False, False]),
    ("isinf", F32, [[np.nan, -np.inf, 1e38]], [False, True, False]),
    ("switch_gt0", F32, [[1.0, 0.0, np.nan], [5.0, 5.0, 5.0]], [5.0, 0.0, 0.0]),
    ("cond_leq_mov", I32, [[1, 2, 3], [2, 2, 2], [7, 8, 9]], [7, 8, 0]),
]


@pytest.mark.parametrize("mode, dtype, inputs, expected", _SPOT_VALUES,
                         ids=[f"{m}-{d}" for m, d, _, _ in _SPOT_VALUES])
def test_spot_values(host, mode, dtype, inputs, expected):
    arrays = [np.array(x, dtype) for x in inputs]
    out_dtype = ek.elemwise_out_dtype(mode, [dtype] * len(arrays))
    got = host.call(ek.elemwise_kernel(mode, [dtype] * len(arrays)),
                    np.empty(len(expected), out_dtype), *arrays)
    want = np.array(expected, out_dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_cpu(mode, arrays), want)


def test_float16_round_differs_from_the_cpu_only_just_below_one_half(host):
    if not host.float16:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")
    x = np.array([0.49975586, -0.49975586, 0.5, 1.5, -2.5], F16)
    got = host.call(ek.elemwise_kernel("round", [F16]), np.empty(5, F16), x)
    assert got.tolist() == [0.0, -0.0, 1.0, 2.0, -3.0]  # the CPU gives 1 and -1 first
    assert _cpu("round", [x]).tolist()[:2] == [1.0, -1.0]


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_typecvt_computes_what_astype_does(src, host):
    rng = np.random.default_rng(7)
    for dst in DTYPES:
        if F16 in (src, dst) and not host.float16:
            continue
        if src == B:
            x = np.array([False, True, True, False])
        elif src.kind == "f":
            # in every target's range (beyond it numpy's astype is undefined), plus the values
            # that wrap into 8- and 16-bit targets as on x86
            x = np.concatenate([[0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 100.75, -100.75],
                                rng.uniform(-120, 120, 50)])
            if dst.kind in "iu" and dst.itemsize <= 2:
                x = np.concatenate([x, [200.0, 300.7, -129.5, 1000.25, -1000.25]])
            if dst.kind == "u":
                x = np.abs(x) if dst.itemsize > 2 else x
            if dst.kind == "f" or dst == B:
                x = np.concatenate([x, [np.inf, -np.inf, np.nan, 1e30, 65519.0, 65520.0,
                                        1e-7, 3e-8]])
            with np.errstate(over="ignore"):
                x = x.astype(src)
        else:
            x = _int_values(src, rng, 60, -10 ** 6, 10 ** 6)
        with np.errstate(all="ignore"):
            (want,) = KERNELS[TypeCvt](TypeCvt(dst), x)
        got = host.call(ek.typecvt_kernel(src, dst), np.empty(x.shape, dst), x)
        _compare("typecvt", got, want, [x], f"TypeCvt {src} -> {dst}")


# -- the general kernel: broadcasting and strides -------------------------------------------------

def _layouts(rng):
    """(description, output view, input views): broadcast, transposed, sliced with steps
    (backwards too), 0-d, eight dims, a strided output."""
    a = rng.normal(size=(6, 10)).astype(F32)
    b = rng.normal(size=(10, 6)).astype(F32)
    eight = rng.normal(size=(2, 3, 1, 2, 2, 3, 2, 2)).astype(F32)
    return [
        ("broadcast", np.empty((3, 5, 4), F32), [rng.normal(size=(3, 1, 4)).astype(F32),
                                                rng.normal(size=(1, 5, 1)).astype(F32)]),
        ("transposed", np.empty((6, 10), F32), [a, b.T]),
        ("sliced with steps", np.empty((3, 4), F32), [a[::2, 0::3], b[1:9:2, ::-2].T[:3]]),
        ("0-d", np.empty((), F32), [np.array(1.5, F32), np.array(-2.0, F32)]),
        ("0-d and a vector", np.empty((7,), F32), [np.array(0.25, F32), a[0, :7]]),
        ("eight dims", np.empty(eight.shape[::-1], F32), [eight.T, np.float32(3)]),
        ("strided output", np.empty((6, 20), F32)[:, ::2], [a, a[:, ::-1]]),
    ]


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("simplify", [True, False], ids=["simplified", "as-is"])
def test_the_general_kernel_broadcasts_and_follows_strides(host, bits, simplify):
    rng = np.random.default_rng(3)
    kernel = ek.elemwise_kernel("add", [F32, F32], contiguous=False, index_bits=bits)
    for what, out, ins in _layouts(rng):
        ins = [np.asarray(x, F32) for x in ins]
        out[...] = np.nan
        host.call_general(kernel, out, *ins, simplify=simplify)
        np.testing.assert_array_equal(out, ins[0] + ins[1], err_msg=what)


@pytest.mark.parametrize("case", _GENERAL_CASES, ids=_case_id)
def test_the_general_kernel_of_other_arities_and_dtypes(host, case):
    mode, sig = case
    if F16 in sig and not host.float16:
        _missing("this g++ has no _Float16 for the float16 kernels (gcc 12 or later has it)")
    rng = np.random.default_rng(5)
    values = [_values(d, rng, 60) for d in sig]
    # the first input a transposed view walked backwards, the others broadcast from fewer dims
    ins = [values[0][:60].reshape(3, 4, 5).transpose(2, 0, 1)[::-1]]
    ins += [v[:k].reshape(shape) for v, (k, shape) in zip(values[1:], [(4, (4,)), (5, (5, 1, 1))])]
    out_dtype = ek.elemwise_out_dtype(mode, sig)
    want = _reference(mode, [np.ascontiguousarray(np.broadcast_to(x, (5, 3, 4))) for x in ins],
                      out_dtype)
    for bits in (32, 64):
        out = np.zeros((5, 6, 4), out_dtype)[:, ::2]  # a strided output
        host.call_general(ek.elemwise_kernel(mode, sig, contiguous=False, index_bits=bits), out,
                          *ins)
        np.testing.assert_array_equal(out, want, err_msg=f"{bits}-bit index")


def _offsets_by_python(shape, strides, i):
    coords = np.unravel_index(i, shape) if shape else ()
    return [sum(int(c) * s for c, s in zip(coords, st)) for st in strides]


@pytest.mark.parametrize("bits", [32, 64])
def test_offsets_of_large_indices(host, bits):
    # shapes whose element count passes 2**31 in 64 bits, 2**31 - 1 at most in 32 bits
    if bits == 64:
        shape = (3, 2 ** 31 + 5, 7)
        strides = [(0, 7, 1), (-(2 ** 31 + 5) * 7, 1, 0), ((2 ** 31 + 5) * 7, 7, 1)]
        index, helper = ctypes.c_longlong, host.lib.mge_test_offsets_3_64
    else:
        shape = (5, 2 ** 20 + 3, 409)
        strides = [(0, 409, 1), (-(2 ** 20 + 3) * 409, 1, 0), ((2 ** 20 + 3) * 409, 409, 1)]
        index, helper = ctypes.c_int, host.lib.mge_test_offsets_3_32
    n = int(np.prod(shape, dtype=object))
    assert ek.index_bits_for(shape, [s for s in strides if min(s) >= 0]) == bits
    layout = _layout_struct(3, bits)
    packed = layout.from_buffer_copy(ek.pack_layout(shape, strides, bits).tobytes())
    helper.argtypes = [ctypes.POINTER(layout), index, ctypes.POINTER(index)]
    out = (index * 3)()
    rng = np.random.default_rng(11)
    for i in [0, 1, n - 1, n // 2, 2 ** 31 - 1 if n > 2 ** 31 else n - 2,
              *rng.integers(0, n, 20).tolist()]:
        helper(ctypes.byref(packed), i, out)
        assert list(out) == _offsets_by_python(shape, strides, i), i


def test_simplify_layout_merges_what_every_array_steps_through_alike():
    # C-contiguous arrays and one repeated along the first dim: the size-1 dim goes, the inner
    # two merge for all, the first cannot (the repeated array does not step through it)
    shape, strides = ek.simplify_layout((4, 1, 3, 5),
                                        [(15, 15, 5, 1), (0, 0, 5, 1), (15, 15, 5, 1)])
    assert shape == (4, 15) and strides == [(15, 1), (0, 1), (15, 1)]
    shape, strides = ek.simplify_layout((2,) * 10, [tuple(2 ** k for k in range(9, -1, -1))])
    assert shape == (1024,) and strides == [(1,)]
    assert ek.simplify_layout((), [(), ()]) == ((), [(), ()])
    assert ek.simplify_layout((3, 4), [(1, 3)]) == ((3, 4), [(1, 3)])  # transposed: no merge
    with pytest.raises(ValueError, match="at most 8"):
        ek.pack_layout((2,) * 9, [(1,) * 9])
    assert ek.index_bits_for((2 ** 31,), [(1,)]) == 64
    assert ek.index_bits_for((2, 2 ** 30), [(2 ** 30 + 1, 1)]) == 64
    assert ek.index_bits_for((2, 2 ** 29), [(2 ** 29, 1)]) == 32


# -- names and errors -----------------------------------------------------------------------------

def test_kernel_names_are_unique_c_identifiers():
    names = [ek.elemwise_kernel(m, s, contiguous=c, index_bits=b).name
             for m in MODES for s in SAME[m] + MIXED[m] for c, b in VARIANTS]
    names += [ek.typecvt_kernel(s, d, contiguous=c, index_bits=b).name
              for s in DTYPES for d in DTYPES for c, b in VARIANTS]
    assert len(names) == len(set(names))
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n) or "__" in n]
    assert not bad


def test_unknown_modes_and_unsupported_dtypes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"Elemwise kernel: unknown mode 'frobnicate'.*float32"):
        ek.elemwise_kernel("frobnicate", ["float32"])
    with pytest.raises(TypeError, match=r"Elemwise\('add'\).*complex64.*float32, complex64"):
        ek.elemwise_kernel("add", ["float32", "complex64"])
    with pytest.raises(TypeError, match=r"Elemwise\('add'\).*bool.*dtypes: bool, bool"):
        ek.elemwise_kernel("add", ["bool", "bool"])
    with pytest.raises(TypeError, match=r"Elemwise\('shl'\).*integer"):
        ek.elemwise_kernel("shl", ["float32", "float32"])
    with pytest.raises(TypeError, match=r"Elemwise\('add'\) kernel: takes 2 input"):
        ek.elemwise_kernel("add", ["float32"])
    with pytest.raises(TypeError, match=r"gives float32, not float64"):
        ek.elemwise_kernel("add", ["float32", "float32"], out_dtype="float64")
    with pytest.raises(TypeError, match=r"TypeCvt kernel: unsupported dtype uint32"):
        ek.typecvt_kernel("float32", "uint32")
    with pytest.raises(ValueError, match="index_bits"):
        ek.elemwise_kernel("add", ["float32"] * 2, contiguous=False, index_bits=16)
    assert ek.elemwise_kernel("ADD", ["float32"] * 2).name == "mge_ew_add_f32_f32_to_f32_c"


def test_a_program_nvrtc_refuses_raises_with_its_log(nvrtc_ready):
    kernel = ek.elemwise_kernel("add", [F32, F32])
    broken = kernel.source.replace("return mge_add<T>(a, b);", "return mge_add<T>(a, b) + q;")
    with pytest.raises(nvrtc.CudaCompileError) as info:
        nvrtc.compile_ptx(broken, "broken.cu")
    err = info.value
    assert err.name == "broken.cu" and err.arch == "compute_90"
    assert 'identifier "q" is undefined' in err.log and "broken.cu" in str(err)
    with pytest.raises(nvrtc.CudaCompileError, match="compute_1"):
        nvrtc.compile_ptx(kernel.source, "k.cu", arch="compute_1")


def test_ptx_ptxas_refuses_raises_with_its_messages(nvrtc_ready, ptxas_ready):
    ptx = nvrtc.compile_ptx(ek.elemwise_kernel("neg", [F32]).source, "neg.cu")
    with pytest.raises(nvrtc.CudaCompileError) as info:
        nvrtc.assemble(ptx.replace("neg.f32", "neg.f99"), name="neg.ptx")
    assert info.value.tool == "ptxas" and "neg.ptx" in info.value.log


def test_compile_ptx_caches_and_reports_its_version(nvrtc_ready):
    source = ek.elemwise_kernel("abs", [I32]).source
    first = nvrtc.compile_ptx(source, "abs.cu", options=ek.NVRTC_OPTIONS)
    assert nvrtc.compile_ptx(source, "abs.cu", options=ek.NVRTC_OPTIONS) is first
    assert ".entry mge_ew_abs_i32_to_i32_c" in first
    major, minor = nvrtc.nvrtc_version()
    assert major >= 11 and minor >= 0


def test_importing_nvrtc_loads_nothing_and_a_missing_library_is_explained():
    # nvrtc.py imports nothing of mge: loaded by path in a fresh interpreter, with a library
    # that does not exist
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('nvrtc', {nvrtc.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert not m._state, m._state\n"
        "assert not m.available()\n"
        "print(m.why_unavailable())\n"
        "try:\n    m.compile_ptx('', 'x.cu')\nexcept OSError as e:\n    print('raised', e)\n")
    env = dict(os.environ, MGE_NVRTC_LIBRARY="/nonexistent/libnvrtc.so")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "libnvrtc not found" in proc.stdout and "/nonexistent/libnvrtc.so" in proc.stdout
    assert "raised libnvrtc not found" in proc.stdout


def test_libnvrtc_and_ptxas_are_looked_for_in_the_toolkit_of_cuda_home(tmp_path, monkeypatch):
    # (a bare GPU machine has CUDA's compiler but not the wheels: its toolkit is searched too)
    lib = tmp_path / "targets" / "x86_64-linux" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.13").write_bytes(b"")
    (tmp_path / "bin").mkdir()
    ptxas = tmp_path / "bin" / "ptxas"
    ptxas.write_text("#!/bin/sh\n")
    ptxas.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("MGE_NVRTC_LIBRARY", raising=False)
    assert str(lib / "libnvrtc.so.13") in nvrtc.nvrtc_candidates()
    monkeypatch.setenv("MGE_NVRTC_LIBRARY", "/elsewhere/libnvrtc.so")
    assert nvrtc.nvrtc_candidates() == ["/elsewhere/libnvrtc.so"]  # (an explicit choice only)
    monkeypatch.delenv("MGE_PTXAS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(nvrtc, "_wheel_dirs", lambda package, sub: [])  # (no wheels there)
    assert nvrtc.find_ptxas() == str(ptxas)
