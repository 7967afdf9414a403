"""The CUDA device's complex64 kernels (``kernels/complex.py``), and complex64 through the
data-moving kernels of ``relayout.py`` and ``indexing.py``, checked without a GPU.

* every kernel (each mode and operand dtype pair, each ``TypeCvt`` source -- uint32, uint64 and
  bfloat16 too -- and ``CreateComplex`` part dtype pair, both parts; contiguous and general with
  32- and 64-bit indices) compiles with NVRTC for ``compute_90`` and an older architecture in one
  program, and ptxas assembles the representatives for ``sm_90`` -- whose PTX moves a complex64
  as one 64-bit access (``v2.f32``) and fuses mul's multiply-adds (``fma.rn.f32``) and nothing
  else;
* each op's plan (``PLANS``, inputs as they lie: dense, transposed, negative steps, broadcast,
  0-d) runs on the host build (``tests/cuda_plans.run_plan``) and equals the CPU kernel of
  ``KERNELS`` bit for bit: NaN payloads, infinities and -0 included (an arithmetic NaN by its
  place: its payload is the hardware's, ``DIFFERENCES``);
* complex64 through relayout's copies (the tiled transpose, slices, concat/stack/split,
  broadcast, set-subtensor) and indexing's get/set (arrays and masks), made by relayout's
  creation kernels (Fill, Eye, Arange, Linspace), and the relayout kernel of complex64
  (``typecvt_kernel`` to itself: the int64 copy);
* bad input is named: unknown modes and parts, dtypes the kernels lack (complex128 arithmetic),
  the ops' own rule errors, outputs the rule does not give.

Every plan's kernels are built once, in one host library.  Without NVRTC, ptxas or g++ the tests
that need them are skipped with the reason (under ``CI``: a failure).
"""
import re

import numpy as np
import pytest

try:
    from ml_dtypes import bfloat16 as BF16
except ImportError:  # (an optional dependency: its cases are left out)
    BF16 = None
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import complex as ck
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import indexing as ix
from mge._core.device.cuda.kernels import relayout as rl
from mge._core.device.cuda.kernels.elemwise import pack_layout, program
from mge._core.device.cuda.kernels.launch import Buf, Launch, Layout, Plan, grid_for
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.creation import Arange, Eye, Fill, Linspace
from mge._core.ops.elemwise import ComplexPart, CreateComplex, Elemwise, TypeCvt
from mge._core.ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor,
    Subtensor,
)
from mge._core.ops.shape import Broadcast, Concat, Dimshuffle, Split, Stack
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch)

C64 = np.dtype("complex64")
F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
VARIANTS = ((True, 64), (False, 32), (False, 64))
ALL_PLANS = {**rl.PLANS, **ix.PLANS, **ck.PLANS}


# -- data -----------------------------------------------------------------------------------------

def _f32_bits(words):
    return np.array(words, np.uint32).view(F32)


#: float32 values whose bits must survive: a signalling NaN, a NaN with a payload and its sign,
#: both infinities, both zeros, the smallest subnormal.
SPECIAL = _f32_bits([0x7F800001, 0xFFC00123, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000,
                     0x00000001])


def _complex(rng, shape, special=False):
    """complex64 data of ``shape`` (standard normal parts); ``special``: ``SPECIAL`` in the first
    elements' parts."""
    z = np.array(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), C64)  # (0-d too)
    if special and z.size:
        flat = z.reshape(-1).view(F32)
        k = min(flat.size, SPECIAL.size)
        flat[:k] = SPECIAL[:k]
        flat[-k:] = SPECIAL[::-1][:k]
    return z


def _real(rng, dtype, shape):
    """Data of the real ``dtype`` (bool, integers over their range, floats with -0 and inf)."""
    d = np.dtype(dtype)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(info.min, info.max, shape, dtype=d, endpoint=True)
    x = np.array(rng.standard_normal(shape), d)
    if x.size >= 3:
        x.reshape(-1)[:3] = [np.inf, -0.0, -np.inf]
    return x


def _views(rng, shape):
    """complex64 views of ``shape`` over one base: dense, transposed, negative steps."""
    a, b = shape
    base = _complex(rng, (b, 2 * a))
    return [_complex(rng, shape, special=True), base.T[::2], base[::-1, ::-2].T]


# -- running plans --------------------------------------------------------------------------------

def _layout(a):
    return Layout(a.shape, a.dtype, tuple(s // a.itemsize for s in a.strides))


def _outs(op, ins):
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in ins])
    return [Layout(d.shape, d.dtype) for d in descs]


def _plan(op, ins, outs=None):
    """The op's plan for ``ins`` (views as they lie) and ``outs`` (default: the rule's; ``[]``: a
    mask index, sized by the plan's readback)."""
    return ALL_PLANS[type(op)](op, [_layout(a) for a in ins],
                               _outs(op, ins) if outs is None else outs)


def _run(op, ins, outs=None):
    outs = _outs(op, ins) if outs is None else outs
    return run_plan(_plan(op, ins, outs), list(ins), outs)


def _bits(a):
    """The bytes of ``a``'s elements in C order (complex64 and floats compare by their bits)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.itemsize,)) if a.dtype.kind in "fc" else a


def _arith_nan_free(g, w):
    """Where ``w`` (a complex64 result of add, sub, mul) holds NaN parts ``g`` does too; those
    parts zeroed in both, so the rest compares by its bits (a computed NaN's payload is the
    hardware's)."""
    gp, wp = np.ascontiguousarray(g).view(F32).copy(), np.ascontiguousarray(w).view(F32).copy()
    np.testing.assert_array_equal(np.isnan(gp), np.isnan(wp))
    gp[np.isnan(gp)] = 0
    wp[np.isnan(wp)] = 0
    return gp, wp


def _assert_rounded_apart(got, a, b):
    """``got`` (a mul's result) differs from a multiply that rounds its two products apart by no
    more than that rounding can: 2**-22 of the products' magnitudes per part (and where the
    results are finite)."""
    with np.errstate(all="ignore"):
        a, b = (np.broadcast_to(np.asarray(x).astype(np.complex128), got.shape) for x in (a, b))
        scale = np.stack([abs(a.real * b.real) + abs(a.imag * b.imag),
                          abs(a.real * b.imag) + abs(a.imag * b.real)], -1)
        exact = np.stack([(a * b).real, (a * b).imag], -1)
    parts = np.ascontiguousarray(got).view(F32).reshape(exact.shape).astype(F64)
    ok = np.isfinite(exact) & np.isfinite(parts)
    err = np.abs(parts[ok] - exact[ok])
    assert (err <= 2 ** -22 * scale[ok] + 2 ** -148).all(), err.max(initial=0)


def _numpy_fuses():
    """Whether numpy's complex64 multiply of dense operands is the fused one (its SIMD loop on a
    CPU with FMA): ``re = (1 + 2**-12)**2 + 2**-30`` is ``1 + 2**-11 + 2**-23`` fused,
    ``1 + 2**-11`` with the products rounded apart."""
    a = np.full(16, complex(1 + 2 ** -12, 2 ** -15), C64)
    return bool(((a * a.conj()).real == np.float32(1 + 2 ** -11 + 2 ** -23)).all())


#: numpy fuses mul's multiply-adds on dense operands here (the kernels always do).
NUMPY_FUSES = _numpy_fuses()


def _same(op, ins, outs=None):
    """The plan's outputs are the CPU kernel's, bit for bit (see ``_arith_nan_free``).  mul's are
    numpy's fused multiply of dense copies of the operands, bit for bit (``NUMPY_FUSES``): on
    views numpy's scalar loop rounds the products apart (``DIFFERENCES``), so there both are
    checked against the exact product, within that rounding."""
    got = _run(op, ins, outs)
    with np.errstate(all="ignore"):
        want = [np.asarray(w) for w in KERNELS[type(op)](op, *ins)]
        if isinstance(op, Elemwise) and op.mode == "mul":
            dense = np.multiply(*[np.ascontiguousarray(x) for x in ins])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (op, g.dtype, g.shape, w.dtype, w.shape)
        if isinstance(op, Elemwise) and op.mode in ("add", "sub", "mul"):
            g, w = _arith_nan_free(g, w)
        if isinstance(op, Elemwise) and op.mode == "mul":
            _assert_rounded_apart(want[0], *ins)  # (the bound holds for numpy's own loops)
            _assert_rounded_apart(got[0], *ins)
            if not NUMPY_FUSES:
                continue
            g, w = _arith_nan_free(got[0], dense)
        np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=str(op))
    return got


def _cases():
    """[(op, inputs)] of the complex ops compared with the CPU kernels."""
    r = np.random.default_rng(0)
    cases = []
    # CreateComplex: float32 parts (bits kept), broadcast, views, 0-d, empty, float16/float64
    re_, im_ = _real(r, F32, (3, 4)), _real(r, F32, (3, 4))
    re_[1, :] = SPECIAL[:4]
    im_[2, :] = SPECIAL[3:]
    wide = _real(r, F32, (4, 6))
    for pair in ((re_, im_), (re_[:, :1], im_[:1]), (wide.T[::2, ::-1], im_[::-1]),
                 (np.array(2.5, F32), im_), (np.array(-0.0, F32), np.array(np.inf, F32)),
                 (np.zeros((0, 4), F32), np.zeros((0, 4), F32)),
                 (_real(r, F16, (3, 4)), _real(r, F64, (3, 4))),
                 (_real(r, F64, (2, 1, 5)), _real(r, F16, (3, 1))),
                 (np.array([np.nan, 65504, 6e-8], F16), _real(r, F32, (3,)))):
        cases.append((CreateComplex(), list(pair)))
    # ComplexPart: dense (every special bit), transposed, negative steps, broadcast, empty
    for z in _views(r, (5, 3)) + [np.broadcast_to(_complex(r, (1, 3)), (4, 3)),
                                  np.zeros((2, 0), C64), _complex(r, ())]:
        cases += [(ComplexPart("real"), [z]), (ComplexPart("imag"), [z])]
    # Elemwise: every mode, dense, broadcast, views, 0-d, mixed real operands
    for mode in ck.MODES:
        unary = mode == "neg"
        vs = _views(r, (5, 3))
        pairs = [(vs[0],), (vs[1],), (vs[2],)] if unary else [
            (vs[0], _complex(r, (5, 3), special=True)), (vs[1], vs[2]),
            (vs[0][:, :1], _complex(r, (1, 3))), (vs[2], _complex(r, ())),
            (vs[0], vs[0]), (np.zeros((0, 3), C64), _complex(r, (1, 3)))]
        if not unary:
            for d in ck.OPERAND_DTYPES:
                if d.kind == "b" and mode not in ("eq", "neq"):
                    continue  # the rule refuses bool in arithmetic
                x = _real(r, d, (5, 3))
                pairs += [(vs[1], x), (x[:, ::-1], vs[0])]
            eq = vs[0].copy()
            eq.view(F32)[::3] = 0
            pairs.append((vs[0], eq))  # some elements equal, some equal in one part only
        cases += [(Elemwise(mode), list(p)) for p in pairs]
    # TypeCvt into complex64 from every real dtype (extremes, -0, inf), a view, complex64 itself
    for d in ck.REAL_DTYPES:
        x = _real(r, d, (4, 6))
        cases += [(TypeCvt(C64), [x]), (TypeCvt(C64), [x.T[::-1]])]
    big = np.array([2 ** 60 + 2 ** 36 + 1, -(2 ** 63), 2 ** 63 - 1, 16777217], np.int64)
    cases.append((TypeCvt(C64), [big]))  # rounded once, as numpy does
    cases.append((TypeCvt(C64), [np.array([2 ** 64 - 1, 2 ** 63 + 2 ** 39 + 1, 3], np.uint64)]))
    if BF16 is not None:  # bfloat16 widens exactly, NaN payloads and -0 included
        bits = np.array([0x7F81, 0xFFC1, 0x8000, 0x3F80, 0xC2F7, 0x0001], np.uint16)
        cases += [(TypeCvt(C64), [bits.view(BF16)]),
                  (TypeCvt(C64), [_real(r, F32, (3, 5)).astype(BF16).T])]
    cases.append((TypeCvt(C64), [np.array([1 + 2 ** -24, 3.4e38, 1e39, 1e-46], F64)]))
    cases.append((TypeCvt(C64), [_f32_bits([0x7F800001, 0xFFC00123, 0x80000000])]))
    cases.append((TypeCvt(C64), [_complex(r, (3, 2), special=True).T]))
    return cases


CASES = _cases()


def _moving_cases():
    """[(op, inputs)]: complex64 through relayout's and indexing's copies, and made by its
    creation kernels."""
    r = np.random.default_rng(1)
    base = _complex(r, (40, 36), special=True)
    mask = r.random((40, 36)) < 0.3
    idx = np.array([3, -1, 0, 7], np.int32)
    arr, sl, ell = ("arr",), ("slice", None, None, -2), ("ell",)
    return [
        (Dimshuffle((1, 0)), [base]),                       # the tiled transpose, 8 bytes
        (Dimshuffle((1, "x", 0)), [base[::-3, 2:30]]),
        (Subtensor((("slice", 1, None, 2), ("slice", None, None, -1))), [base]),
        (Concat(0), [base[:5], base[5:9].T.copy().T, base[-3:]]),
        (Concat(1), [base[:, :4], base[:, ::-5]]),
        (Stack(1), [base[:4, :5], base[4:8, :5].T.T]),
        (Split(1, (10, 26)), [base]),
        (Broadcast((3, 40, 36)), [base[:1]]),
        (SetSubtensor((("slice", 2, 9, 3),)), [base, base[:1]]),
        (IndexingMultiAxisVec((arr,)), [base, idx]),
        (IndexingMultiAxisVec((sl, arr)), [base.T, idx]),
        (IndexingMultiAxisVec((ell, arr)), [base, np.array([[0, 5], [35, -36]], np.int64)]),
        (IndexingMultiAxisVec((("mask",),)), [base, mask]),
        (IndexingSetMultiAxisVec((arr,)), [base, _complex(r, (4, 36)), idx]),
        (IndexingSetMultiAxisVec((("mask",),)), [base, _complex(r, (int(mask.sum()),)), mask]),
        # creation: bits by size (Fill, Eye), float64 values rounded into the real part
        (Fill((3, 5), 1.5 - 2j, C64, "cpu0"), []), (Eye(4, 6, -1, C64, "cpu0"), []),
        (Arange(-3, 1e8, 2.3e7 + 0.1, C64, "cpu0"), []), (Arange(0, 7, 2, C64, "cpu0"), []),
        (Linspace(1e-3, 1 + 2 ** -20, 33, C64, "cpu0"), []),
        (Linspace(5.0, 5.0, 1, C64, "cpu0"), []),
    ]


MOVING = _moving_cases()


def _is_mask(op):
    """Whether ``op`` is a mask index get (its output is sized by a readback)."""
    return isinstance(op, IndexingMultiAxisVec) and any(i[0] == "mask" for i in op.items)


def _kernels():
    """Every kernel the plans of ``CASES`` and ``MOVING`` launch first (a mask's later plans build
    their own), the 64-bit general kernels and the complex64 relayout."""
    plans = [_plan(op, ins, [] if _is_mask(op) else None) for op, ins in CASES + MOVING]
    kernels = [k for p in plans for k in p.kernels]
    kernels += [ck.elemwise_kernel("mul", [C64, C64], False, 64), ck.part_kernel("imag", False, 64),
                ek.typecvt_kernel(C64, C64, False, 32)]
    return list(dict.fromkeys(kernels))


@pytest.fixture(scope="module")
def host():
    """One host library of (nearly) every kernel the plans here launch."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    if not hostbuild.have_float16():
        _missing("the host build of the float16 kernels needs g++ 12 or later (_Float16)")
    return library(_kernels(), jobs=2)


def _every_kernel():
    """Every kernel this family generates, and relayout's creation kernels of complex64."""
    out = []
    for mode in ck.MODES:
        if mode == "neg":
            out += [ck.elemwise_kernel(mode, [C64], c, b) for c, b in VARIANTS]
            continue
        pairs = [(C64, C64)] + [p for d in ck.OPERAND_DTYPES for p in ((C64, d), (d, C64))]
        out += [ck.elemwise_kernel(mode, p, c, b) for p in pairs for c, b in VARIANTS]
    out += [ck.typecvt_kernel(d, c, b) for d in (C64,) + ck.REAL_DTYPES for c, b in VARIANTS]
    out += [ck.typecvt_kernel(BF16, c, b) for c, b in VARIANTS] if BF16 is not None else []
    out += [ck.create_kernel(a, b_, c, b) for a in ck.PART_DTYPES for b_ in ck.PART_DTYPES
            for c, b in VARIANTS]
    out += [ck.part_kernel(p, c, b) for p in ("real", "imag") for c, b in VARIANTS]
    out += [rl.arange_kernel(C64, False), rl.linspace_kernel(C64)]  # relayout's of complex64
    return out


# -- compiling ------------------------------------------------------------------------------------

def test_every_kernel_compiles_for_hopper_and_an_older_arch(old_arch):
    kernels = _every_kernel()
    assert len(kernels) == len({k.name for k in kernels}) >= 300
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "complex.cu", arch, fast_options(ck.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"
    nvrtc.clear_cache()


def _entry(ptx, name):
    return ptx.split(f".entry {name}(")[1].split(".entry")[0]


def test_ptxas_assembles_the_representatives_for_sm90(nvrtc_ready):
    if nvrtc.find_ptxas() is None:
        _missing("ptxas is needed to assemble PTX: pip install nvidia-cuda-nvcc-cu12")
    mul = ck.elemwise_kernel("mul", [C64, C64])
    add = ck.elemwise_kernel("add", [C64, C64], False, 32)
    create = ck.create_kernel(F16, F64, False, 32)
    reps = [mul, add, create, ck.part_kernel("imag"), ck.typecvt_kernel(np.int64),
            ck.elemwise_kernel("neq", [F16, C64], False, 64)]
    ptx = nvrtc.compile_ptx(program(reps), "complex_rep.cu", "compute_90", ck.NVRTC_OPTIONS)
    assert nvrtc.assemble(ptx, "sm_90", name="complex_rep.ptx")[:4] == b"\x7fELF"
    for k in (mul, add, create):  # a complex64 element is one 64-bit store (and load)
        assert "st.global.v2.f32" in _entry(ptx, k.name), k.name
    assert "ld.global.v2.f32" in _entry(ptx, mul.name)
    assert _entry(ptx, mul.name).count("fma.rn.f32") == 2
    assert "fma" not in _entry(ptx, add.name)  # --fmad=false: nothing else contracts
    nvrtc.clear_cache()


# -- the plans against the CPU kernels ------------------------------------------------------------

def test_plans_cover_every_op_and_read_views_in_place():
    assert set(ck.PLANS) == {CreateComplex, ComplexPart, Elemwise, TypeCvt}
    assert ck.STRIDED == frozenset(ck.PLANS) and len(ck.NOT_DONE) == 1
    assert {type(op) for op, _ in CASES} == set(ck.PLANS)
    assert set(ck.OPERAND_DTYPES) == {np.dtype(d) for d in ("bool", "int8", "uint8", "int16",
                                                            "uint16", "float16", "float32")}
    forms = {p.notes for p in (_plan(op, ins) for op, ins in CASES)}
    assert {("contiguous",), ("general, 32-bit",), ("empty: nothing to write",)} <= forms
    dense = _plan(Elemwise("mul"), [np.zeros((5, 3), C64)] * 2)
    assert dense.launches[0].kernel.name == "mge_cx_mul_c64_c64_c"
    view = _plan(ComplexPart("real"), [np.zeros((3, 5), C64).T])
    assert view.launches[0].kernel.name == "mge_cx_real_s32" and not view.workspace


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{op.name}-{i}" for i, (op, _) in enumerate(CASES)])
def test_complex_kernels_compute_what_the_cpu_kernels_compute(host, case):
    op, ins = CASES[case]
    _same(op, ins)


def test_the_64_bit_general_kernels_compute_what_the_32_bit_ones_do(host):
    r = np.random.default_rng(2)
    a, b = _complex(r, (6, 1, 4), special=True).transpose(2, 0, 1), _complex(r, (1, 5))
    want = _run(Elemwise("mul"), [a, b])[0]
    shape, strides = ek.simplify_layout((4, 6, 5), [(30, 5, 1), _strides(a, (4, 6, 5)),
                                                    _strides(b, (4, 6, 5))])
    launch = Launch(ck.elemwise_kernel("mul", [C64, C64], False, 64), grid_for(120), (256,),
                    (Buf("out0"), Buf("in0"), Buf("in1"), np.int64(120),
                     pack_layout(shape, strides, 64)))
    (got,) = run_plan(Plan((launch,)), [a, b], [Layout((4, 6, 5), C64)])
    np.testing.assert_array_equal(_bits(got), _bits(want))
    z = _complex(r, (3, 7), special=True)[:, ::-2]
    launch = Launch(ck.part_kernel("imag", False, 64), grid_for(12), (256,),
                    (Buf("out0"), Buf("in0"), np.int64(12),
                     pack_layout((3, 4), [(4, 1), (7, -2)], 64)))
    (got,) = run_plan(Plan((launch,)), [z], [Layout((3, 4), F32)])
    np.testing.assert_array_equal(_bits(got), _bits(z.imag))


def _strides(a, shape):
    lead = len(shape) - a.ndim
    return (0,) * lead + tuple(0 if n == 1 else s // a.itemsize
                               for n, s in zip(a.shape, a.strides))


@pytest.mark.parametrize("case", range(len(MOVING)),
                         ids=[f"{op.name}-{i}" for i, (op, _) in enumerate(MOVING)])
def test_complex64_moves_through_the_copy_and_index_kernels(host, case):
    op, ins = MOVING[case]
    got = _same(op, ins, outs=[] if _is_mask(op) else None)
    assert all(g.dtype == C64 for g in got)
    if isinstance(op, Dimshuffle) and op.pattern == (1, 0):
        assert _plan(op, ins).launches[0].kernel.name == "mge_transpose_8"


def test_the_relayout_of_complex64_is_the_copy_of_its_words(host):
    for c, b in VARIANTS:
        assert ek.typecvt_kernel(C64, C64, c, b) is ek.typecvt_kernel(np.int64, np.int64, c, b)
        assert ek.typecvt_kernel("complex64", "complex64", c, b).name.startswith(
            "mge_typecvt_i64_to_i64")
    z = _complex(np.random.default_rng(3), (5, 6), special=True)[::-1, ::2]
    kernel = ek.typecvt_kernel(C64, C64, False, 32)
    launch = Launch(kernel, grid_for(15), (256,), (Buf("out0"), Buf("in0"), np.int32(15),
                                                   pack_layout((5, 3), [(3, 1), (-6, 2)], 32)))
    (got,) = run_plan(Plan((launch,)), [z], [Layout((5, 3), C64)])
    np.testing.assert_array_equal(_bits(got), _bits(z))


# -- bad input ------------------------------------------------------------------------------------

def _lay(shape, dtype):
    return Layout(shape, dtype)


def test_bad_inputs_are_named():
    c, f = _lay((3,), C64), _lay((3,), F32)
    with pytest.raises(ValueError, match=r"complex Elemwise kernel: mode 'abs'"):
        ck.elemwise_kernel("abs", [C64])
    with pytest.raises(TypeError, match="unsupported dtype int32"):
        ck.elemwise_kernel("add", [C64, "int32"])
    with pytest.raises(TypeError, match="one of them complex64, got float32, float32"):
        ck.elemwise_kernel("add", [F32, F32])
    with pytest.raises(TypeError, match=r"'neg'\) kernel: 1 operand"):
        ck.elemwise_kernel("neg", [C64, C64])
    with pytest.raises(TypeError, match=r"Elemwise.add: complex64 with int32 computes in "
                                        r"complex128.*complex64 \(3,\), int32 \(3,\)"):
        ck.elemwise_plan(Elemwise("add"), [c, _lay((3,), "int32")], [_lay((3,), "complex128")])
    with pytest.raises(TypeError, match="mode 'exp' does not take complex inputs"):
        ck.elemwise_plan(Elemwise("exp"), [c], [c])
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ck.elemwise_plan(Elemwise("mul"), [c, _lay((4,), C64)], [c])
    with pytest.raises(TypeError, match=r"TypeCvt to complex64 kernel: unsupported dtype "
                                        r"complex128 \(these kernels take complex64, bool.*, "
                                        r"bfloat16\)"):
        ck.typecvt_kernel("complex128")
    with pytest.raises(TypeError, match="cannot convert a complex tensor to float32"):
        ck.typecvt_plan(TypeCvt(F32), [c], [f])
    with pytest.raises(TypeError, match="converts into complex64 here, not int32"):
        ck.typecvt_plan(TypeCvt(np.dtype("int32")), [f], [_lay((3,), "int32")])
    with pytest.raises(TypeError, match="CreateComplex kernel: unsupported dtype int32"):
        ck.create_kernel("int32", F32)
    with pytest.raises(TypeError, match="CreateComplex: the real and imaginary parts must be "
                                        "float tensors"):
        ck.create_complex_plan(CreateComplex(), [_lay((3,), "int32"), f], [c])
    with pytest.raises(ValueError, match=r"CUDA CreateComplex plan: outputs \(4,\) complex64"):
        ck.create_complex_plan(CreateComplex(), [f, f], [_lay((4,), C64)])
    with pytest.raises(TypeError, match="ComplexPart: takes a complex tensor, got float32"):
        ck.complex_part_plan(ComplexPart("real"), [f], [f])
    with pytest.raises(ValueError, match="part must be 'real' or 'imag', got 'abs'"):
        ck.part_kernel("abs")
    with pytest.raises(ValueError, match="index_bits must be 32 or 64, got 16"):
        ck.part_kernel("real", False, 16)
    with pytest.raises(TypeError, match="not a dtype"):
        ck.typecvt_kernel("complex-ish")
    # the shared kernels: only the moves of complex64, never its arithmetic or conversions
    with pytest.raises(TypeError, match="TypeCvt kernel: unsupported dtype complex64"):
        ek.typecvt_kernel(C64, F32)
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        ix.index_kernel("incr", 1, dtype=C64)
    with pytest.raises(TypeError, match="unsupported dtype complex64"):
        ix.PLANS[IndexingIncrMultiAxisVec](IndexingIncrMultiAxisVec((("arr",),)),
                                           [c, c, _lay((3,), "int32")], [c])
