"""The CUDA device's quantized kernels (``kernels/quantized.py``), checked without a GPU.

* every kernel compiles with NVRTC for ``compute_90`` and an older architecture (one program,
  ``-Ofc=max``), and ptxas assembles representatives for ``sm_90`` with the kernels' own flags;
* each op's plan (``PLANS``) runs on the host build through ``tests/cuda_plans.run_plan`` and
  equals the CPU kernel of ``KERNELS`` bit for bit (the outputs start as 0xff bytes, so an
  element a plan forgets shows): ``QuantizedTypeCvt`` from and to every quantization and plain
  dtype (halves, NaN, infinities, values past the range), ``QuantizedElemwise`` with broadcasting,
  saturation and inputs of other quantizations, ``ElemwiseMultiType`` in every arithmetic mode and
  the composed ones (the transcendental modes within one quantum: ``DIFFERENCES``),
  ``QuantizedMatrixMul`` (transposes, batch dims, every tile shape, both accumulation modes),
  ``ConvBias``/``BatchConvBias``/``QuantizedConvolutionBackwardData`` over strides, paddings,
  dilations, groups, flipped kernels, zero points, bias rescales, relu, output dtypes, batch
  chunks and 64-bit indices;
* the plans' structure (the tables, the GEMM's mode, tile and grid) and bad input: errors name
  the op, the shapes and the dtypes.

Every plan's kernels are built once, in one host library.  Without NVRTC, ptxas or g++ the tests
that need them are skipped with the reason (under ``CI``: a failure).
"""
import re

import numpy as np
import pytest
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import quantized as qk
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Launch, Layout, Plan
from mge._core.ops import quantized as QO
from mge._core.ops.base import INFER, TensorDesc
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
I8, U8, I32 = np.dtype("int8"), np.dtype("uint8"), np.dtype("int32")

Q8 = ("QuantizedS8", 0.1, None)
Q8B = ("QuantizedS8", 0.05, None)
U8A = ("Quantized8Asymm", 0.07, 120)
U8B = ("Quantized8Asymm", 0.5, 3)
Q4 = ("QuantizedS4", 0.5, None)
U4 = ("Quantized4Asymm", 0.3, 3)
Q32 = ("QuantizedS32", 0.001, None)
RANGES = {"QuantizedS8": (-128, 127), "Quantized8Asymm": (0, 255), "QuantizedS4": (-8, 7),
          "Quantized4Asymm": (0, 15), "QuantizedS32": (-2 ** 31, 2 ** 31 - 1)}
#: ElemwiseMultiType modes whose float step is a transcendental function (CUDA's, not numpy's).
TRANSCENDENTAL = {"qtanh", "qsigmoid", "qexp", "qfuse_add_sigmoid", "qfuse_add_tanh", "qerfc",
                  "qfast_tanh_grad", "qlog", "qgelu"}


def acc(a, b):
    """The qint32 accumulator's qspec of operands quantized as ``a`` and ``b``."""
    return ("QuantizedS32", float(np.float32(a[1]) * np.float32(b[1])), None)


def qvals(rng, shape, spec, full=False):
    """Storage values of ``spec`` (``full``: anything the storage holds)."""
    storage = QO.qspec_storage(spec)
    lo, hi = (np.iinfo(storage).min, np.iinfo(storage).max) if full else RANGES[spec[0]]
    if spec[0] == "QuantizedS32":
        lo, hi = -5000, 5000
    return rng.integers(lo, hi + 1, shape).astype(storage)


def _floats(rng, n, dtype=F32):
    v = np.concatenate([rng.standard_normal(n) * 10, np.arange(-20, 20) * 0.05 + 0.025,
                        [0.49999997, -0.49999997, 1e9, -1e9, 0.0, -0.0, 2.5, -2.5,
                         2 ** 31, 3e9, np.nan, np.inf, -np.inf]])
    with np.errstate(over="ignore"):
        return v.astype(dtype)


# -- the cases ------------------------------------------------------------------------------------

def _typecvt_cases(r):
    cases = []
    for src in (F32, F16, F64):
        x = _floats(r, 300, src)
        for dst in (Q8, U8A, Q32, ("QuantizedS8", 1.0, None), Q4, U4, ("QuantizedS32", 1e-7, None)):
            cases.append((QO.QuantizedTypeCvt(dst, None), [x]))
    for d in ("int32", "int8", "bool", "int64", "uint8", "int16"):
        x = (r.integers(-300, 300, 77) if d != "bool" else r.integers(0, 2, 77)).astype(d)
        cases.append((QO.QuantizedTypeCvt(Q8, None), [x]))
        cases.append((QO.QuantizedTypeCvt(U8B, None), [x]))
    big = np.array([2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1, 7], I32)
    cases.append((QO.QuantizedTypeCvt(Q32, None), [big]))
    for src in (Q8, U8A, Q32, ("QuantizedS8", 300.0, None), Q4):
        x = qvals(r, (6, 11), src, full=True)
        for dst in ("float32", "float16", "float64", "int8", "int32", "bool", "int64", "uint8",
                    "int16", "uint16"):
            cases.append((QO.QuantizedTypeCvt(np.dtype(dst), src), [x]))
        for dst in (U8A, Q8B, Q32, U4):
            cases.append((QO.QuantizedTypeCvt(dst, src), [x]))
    cases.append((QO.QuantizedTypeCvt(Q8, None), [np.zeros((0, 3), F32)]))
    cases.append((QO.QuantizedTypeCvt(U8A, None), [np.array(1.75, F32)]))
    cases.append((QO.QuantizedTypeCvt(F32, U8A), [np.array(7, U8)]))
    return cases


def _elemwise_cases(r):
    a32 = acc(Q8, Q8B)
    cases = []
    x = qvals(r, (4, 6), a32)
    for b_shape in ((4, 6), (6,), (1, 6), (4, 1), ()):
        cases.append((QO.QuantizedElemwise("add", a32), [x, qvals(r, b_shape, a32)]))
    cases.append((QO.QuantizedElemwise("relu", a32), [x]))
    cases.append((QO.QuantizedElemwise("add", a32, (a32, F32)),
                  [x, (r.standard_normal(6) * 0.05).astype(F32)]))
    cases.append((QO.QuantizedElemwise("add", a32, (a32, F16)),
                  [x, (r.standard_normal((4, 1)) * 0.05).astype(F16)]))
    cases.append((QO.QuantizedElemwise("add", a32, (F64, Q32)),
                  [r.standard_normal((2, 4, 6)) * 0.01, qvals(r, (6,), Q32)]))
    cases.append((QO.QuantizedElemwise("add", Q8), [qvals(r, (3, 50), Q8), qvals(r, (50,), Q8)]))
    cases.append((QO.QuantizedElemwise("add", U8A, (U8A, U8B)),
                  [qvals(r, (9,), U8A), qvals(r, (9,), U8B)]))
    cases.append((QO.QuantizedElemwise("relu", U8A), [qvals(r, (3, 3), U8A)]))
    big = np.array([2 ** 31 - 1, -2 ** 31, 5], I32)
    cases.append((QO.QuantizedElemwise("add", Q32), [big, big]))  # saturates
    cases.append((QO.QuantizedElemwise("add", a32), [x[:0], qvals(r, (6,), a32)]))
    return cases


_ARITH = ("qadd", "qsub", "qmul", "qtrue_div", "qmax", "qmin", "qfuse_add_relu", "qneg",
          "qnegate", "qabs", "qrelu", "qh_swish", "qhsigmoid", "qrelu6", "qsquare",
          "qfuse_mul_add3", "qfuse_mul_add4", "qprelu", "qfuse_add_h_swish", "qround",
          "qfloor", "qceil", "qmod", "qfloor_div")


def _multi_type_cases(r):
    cases = []
    specs = (Q8, U8A, Q8B, U8B)
    for k, mode in enumerate(_ARITH + tuple(sorted(TRANSCENDENTAL))):
        n = QO.float_mode(mode)[1]
        ins_q = tuple(specs[(k + j) % 4] for j in range(n))
        ins = [qvals(r, (5, 7) if j == 0 else ((7,) if j == 1 else (5, 1)), q)
               for j, q in enumerate(ins_q)]
        out = (Q8, U8A, ("QuantizedS8", 0.02, None), Q32)[k % 4]
        cases.append((QO.ElemwiseMultiType(mode, out, ins_q), ins))
        if k % 3 == 0:
            cases.append((QO.ElemwiseMultiType(mode, None, ins_q), ins))
    x, y = qvals(r, (3, 4), Q8), (r.standard_normal((3, 4)) * 3).astype(F32)
    cases.append((QO.ElemwiseMultiType("qadd", U8A, (Q8, None)), [x, y]))
    cases.append((QO.ElemwiseMultiType("qmul", None, (None, Q8)), [y, x]))
    h = (r.standard_normal((3, 4)) * 3).astype(F16)
    cases.append((QO.ElemwiseMultiType("qadd", Q8, (Q8, None)), [x, h]))
    cases.append((QO.ElemwiseMultiType("qadd", Q8, (None, None)), [h, h]))
    cases.append((QO.ElemwiseMultiType("qfuse_mul_add3", U8A, (None, Q8, None)),
                  [y.astype(F64), x, y]))
    cases.append((QO.ElemwiseMultiType("qadd", np.dtype("float16"), (Q8, Q8)), [x, x]))
    cases.append((QO.ElemwiseMultiType("qmul", np.dtype("int8"), (Q8, U8A)),
                  [x, qvals(r, (3, 4), U8A)]))
    cases.append((QO.ElemwiseMultiType("qadd", Q8, (Q8, Q8)), [x[:0], x[:1]]))
    return cases


def _matmul_cases(r):
    cases = []
    for (ta, tb, sa, sb), (m, k, n) in zip(
            [(False, False, Q8, Q8B), (False, True, Q8, U8A), (True, False, U8A, U8B),
             (True, True, U8B, Q8), (False, False, Q4, U4), (False, True, Q8, Q8)],
            [(5, 33, 20), (70, 40, 130), (3, 17, 8), (40, 50, 3), (1, 16, 16), (64, 64, 64)]):
        a = qvals(r, (k, m) if ta else (m, k), sa, full=True)
        b = qvals(r, (n, k) if tb else (k, n), sb, full=True)
        cases.append((QO.QuantizedMatrixMul(ta, tb, "default", sa, sb), [a, b]))
    op = QO.QuantizedMatrixMul(False, True, "default", Q8, Q8B)
    cases.append((op, [qvals(r, (2, 3, 7, 16), Q8), qvals(r, (9, 16), Q8B)]))
    cases.append((op, [qvals(r, (16,), Q8), qvals(r, (9, 16), Q8B)]))
    cases.append((op, [qvals(r, (4, 0), Q8), qvals(r, (9, 0), Q8B)]))  # K = 0: zeros
    cases.append((op, [qvals(r, (0, 5), Q8), qvals(r, (9, 5), Q8B)]))
    # qint32 operands: the float64 mode (values whose products stay exact)
    op32 = QO.QuantizedMatrixMul(False, False, "default", Q32, Q8)
    cases.append((op32, [qvals(r, (6, 21), Q32), qvals(r, (21, 19), Q8)]))
    huge = np.full((2, 3), 2 ** 30, I32)
    cases.append((QO.QuantizedMatrixMul(False, False, "default", Q32, Q32),
                  [huge, np.full((3, 2), 4, I32)]))  # saturates
    return cases


def _conv(groups=1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), relu=False, flip=False,
          dtype=None, inp=Q8, weight=Q8B, bias=True, cls=QO.ConvBias, bias_q=None):
    op = cls(stride, padding, dilation, groups, "relu" if relu else "identity",
             "convolution" if flip else "cross_correlation", "default", dtype, inp, weight,
             (bias_q or acc(inp, weight)) if bias else None)
    return op


def _conv_cases(r):
    cases = []
    # (op's parameters, x's shape, (out channels, kernel h, kernel w))
    grid = [
        (dict(), (2, 6, 9, 8), (8, 3, 3)),
        (dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2, relu=True, flip=True,
              dtype=("QuantizedS8", 0.3, None)), (1, 6, 7, 9), (4, 3, 3)),
        (dict(padding=(1, 1), inp=U8A, weight=Q8, dtype=U8B, relu=True), (2, 5, 10, 7),
         (12, 2, 3)),
        (dict(stride=(2, 2), padding=(2, 0), groups=3, dtype=np.dtype("float32"), flip=True),
         (2, 6, 9, 8), (9, 3, 3)),
        (dict(groups=6, padding=(1, 1), inp=U8B, weight=U8A, dtype=Q8B), (2, 6, 7, 9),
         (6, 3, 3)),  # depthwise
        (dict(dilation=(2, 2), padding=(2, 2), bias_q=("QuantizedS32", 0.0007, None),
              dtype=Q8), (2, 6, 10, 7), (12, 2, 3)),  # a bias of another scale: rescaled
        (dict(bias=False, dtype=("QuantizedS32", 0.004, None)), (2, 6, 9, 8), (8, 3, 3)),
        (dict(inp=Q32, weight=Q8, padding=(1, 1), dtype=Q8), (1, 6, 7, 9), (4, 3, 3)),  # f64
        (dict(inp=Q4, weight=Q4, stride=(3, 2), dtype=U4, relu=True), (2, 6, 10, 7),
         (40, 2, 3)),
        (dict(groups=2, padding=(1, 1), dtype=U8A), (2, 64, 12, 12), (70, 3, 3)),  # big tiles
    ]
    for kw, xs, (oc, kh, kwd) in grid:
        op = _conv(**kw)
        g = op.groups
        x = qvals(r, xs, op.inp_q)
        w = qvals(r, (oc, xs[1] // g, kh, kwd), op.weight_q, full=True)
        ins = [x, w]
        if op.bias_q is not None:
            ins.append(r.integers(-3000, 3000, (1, oc, 1, 1)).astype(I32))
        cases.append((op, ins))
    op = _conv(groups=2, padding=(1, 0), dtype=Q8)  # a 5-D weight
    cases.append((op, [qvals(r, (2, 4, 5, 5), Q8), qvals(r, (2, 3, 2, 3, 3), Q8B),
                       r.integers(-100, 100, 6).astype(I32)]))
    op = _conv(groups=2, dtype=U8A, relu=True)  # pointwise: the GEMM reads x
    cases.append((op, [qvals(r, (3, 4, 5, 6), Q8), qvals(r, (6, 2, 1, 1), Q8B),
                       r.integers(-100, 100, (1, 6, 1, 1)).astype(I32)]))
    cases.append((_conv(), [qvals(r, (0, 3, 4, 4), Q8), qvals(r, (2, 3, 3, 3), Q8B),
                            np.zeros((1, 2, 1, 1), I32)]))
    # BatchConvBias: a weight per image
    for kw, xs, ws in [(dict(padding=(1, 1), dtype=Q8, relu=True), (3, 4, 6, 5), (3, 5, 4, 3, 3)),
                       (dict(dtype=U8A, flip=True, stride=(2, 1)), (2, 3, 7, 6), (2, 4, 3, 2, 3)),
                       (dict(dtype=None), (4, 7, 1, 1), (4, 20, 7, 1, 1)),  # BatchMatMul
                       (dict(bias=False, dtype=np.dtype("float32"), inp=U8A, weight=U8B),
                        (2, 3, 5, 5), (2, 17, 3, 2, 2))]:
        op = _conv(cls=QO.BatchConvBias, **kw)
        ins = [qvals(r, xs, op.inp_q), qvals(r, ws, op.weight_q)]
        if op.bias_q is not None:
            ins.append(r.integers(-500, 500, (1, ws[1], 1, 1)).astype(I32))
        cases.append((op, ins))
    return cases


def _deconv(stride=(1, 1), padding=(0, 0), output_padding=(0, 0), dilation=(1, 1), dtype=Q8,
            inp=Q8, weight=Q8B):
    return QO.QuantizedConvolutionBackwardData(stride, padding, output_padding, dilation, 1,
                                               "cross_correlation", "default", dtype, inp, weight)


def _deconv_cases(r):
    cases = []
    for kw, xs, ws in [
            (dict(), (2, 3, 4, 5), (3, 4, 3, 3)),
            (dict(stride=(2, 3), padding=(1, 2), output_padding=(1, 0), dilation=(1, 2),
                  dtype=U8A, inp=U8B, weight=Q8), (2, 5, 4, 3), (5, 3, 3, 2)),
            (dict(stride=(2, 2), dtype=None), (1, 4, 3, 3), (4, 2, 2, 2)),
            (dict(dtype=np.dtype("float32"), inp=Q32), (1, 2, 3, 3), (2, 3, 2, 2)),
            (dict(dtype=U8A), (2, 6, 3, 4), (6, 20, 1, 1))]:  # pointwise
        op = _deconv(**kw)
        cases.append((op, [qvals(r, ws, op.weight_q, full=True), qvals(r, xs, op.inp_q)]))
    return cases


def _cases():
    r = np.random.default_rng(0)
    return (_typecvt_cases(r) + _elemwise_cases(r) + _multi_type_cases(r) + _matmul_cases(r)
            + _conv_cases(r) + _deconv_cases(r))


CASES = _cases()

# (op, inputs, plan options): the batch cut into chunks, the 64-bit index variants
def _images(op, ins):
    """The batch of a convolution's inputs (the transposed one takes the weight first)."""
    return ins[1 if isinstance(op, QO.QuantizedConvolutionBackwardData) else 0].shape[0]


OPTION_CASES = [(op, ins, opts) for op, ins in CASES
                if type(op) in (QO.ConvBias, QO.BatchConvBias,
                                QO.QuantizedConvolutionBackwardData) and _images(op, ins) > 1
                for opts in (dict(workspace_limit=1), dict(index_bits=64))]


def _layouts(arrays):
    return [Layout(a.shape, a.dtype) for a in arrays]


def _out_layouts(op, ins):
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in ins])
    return [Layout(d.shape, d.dtype) for d in descs]


def _plan(op, ins, **options):
    return qk.PLANS[type(op)](op, _layouts(ins), _out_layouts(op, ins), **options)


def _run(op, ins, **options):
    return run_plan(_plan(op, ins, **options), ins, _out_layouts(op, ins))


def _kernels():
    plans = [_plan(op, ins) for op, ins in CASES]
    plans += [_plan(op, ins, **opts) for op, ins, opts in OPTION_CASES]
    return list(dict.fromkeys(k for p in plans for k in p.kernels))


@pytest.fixture(scope="module")
def host():
    """One host library of every kernel the plans here launch."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    if not hostbuild.have_float16():
        _missing("the host build of the float16 kernels needs g++ 12 or later (_Float16)")
    return library(_kernels(), jobs=2)


def _ids(cases):
    return [f"{type(c[0]).__name__}-{i}" for i, c in enumerate(cases)]


def _quantum_apart(got, want):
    """Where the quantized results differ, by at most one quantum (and rarely)."""
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max(initial=0) <= 1, diff.max()
    assert (diff != 0).mean() < 0.05


def _check(op, got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if isinstance(op, QO.ElemwiseMultiType) and op.mode in TRANSCENDENTAL:
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            else:
                _quantum_apart(g, w)
        else:
            np.testing.assert_array_equal(g, w)


# -- compiling ------------------------------------------------------------------------------------

def test_every_kernel_compiles_for_hopper_and_an_older_arch(old_arch):
    kernels = _kernels()
    assert len(kernels) >= 60
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "quantized.cu", arch, fast_options(qk.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        missing = [k.name for k in kernels if k.name not in entries]
        assert not missing, f"not in the PTX for {arch}: {missing}"
    nvrtc.clear_cache()


def test_ptxas_assembles_the_gemms_and_conversions_for_sm90(nvrtc_ready, ptxas_ready):
    a8 = acc(Q8, Q8B)
    # both accumulation modes, a quantized and a plain epilogue (the sweep above compiles the
    # other tiles and epilogues to PTX)
    kernels = [qk.qgemm_kernel(I8, U8, "i32", ("q", I8, Q8), a8, (4, 4)),
               qk.qgemm_kernel(I32, I8, "f64", ("plain", F32, None), a8, (16, 1)),
               qk.qim2col_kernel(U8), qk.qcol2im_kernel("i32", ("q", U8, U8A), a8, 64),
               qk.qbias_kernel(I32),
               qk.qtypecvt_kernel(None, Q8, F16)[0], qk.qtypecvt_kernel(U8A, F64, U8)[0],
               qk.elemwise_multi_type_kernel(QO.ElemwiseMultiType("qprelu", U8A, (Q8, Q8)),
                                             (I8, I8), U8, False, 32)[0]]
    ptx = nvrtc.compile_ptx(program(kernels), "rep.cu", "compute_90", qk.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="rep.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert ".shared" in ptx and "bar.sync" in ptx
    assert "fma.rn.f32" not in ptx  # no contraction: each float step rounds as on the CPU
    nvrtc.clear_cache()


def test_kernel_names_are_unique_c_identifiers():
    kernels = _kernels()
    names = [k.name for k in kernels]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"mge_q[a-z0-9_]+", n) and "__" not in n for n in names)
    # one name, one text: a kernel of the same name made twice is the same source
    for k in kernels:
        assert dict(k.parts)[k.name].startswith(f"MGE_KERNEL {k.name}(")


# -- the plans against the CPU kernels ------------------------------------------------------------

def test_plans_cover_every_op_and_read_dense_inputs():
    assert set(qk.PLANS) == {QO.QuantizedTypeCvt, QO.QuantizedElemwise, QO.ElemwiseMultiType,
                             QO.QuantizedMatrixMul, QO.ConvBias, QO.BatchConvBias,
                             QO.QuantizedConvolutionBackwardData}
    assert qk.STRIDED == frozenset()
    assert {type(op) for op, _ in CASES} == set(qk.PLANS)
    for op, ins in CASES:
        assert isinstance(_plan(op, ins), Plan)
    from mge._core.device.cuda.launch import plans
    assert qk in plans.family_modules()


@pytest.mark.parametrize("case", range(len(CASES)), ids=_ids(CASES))
def test_quantized_kernels_compute_what_the_cpu_kernels_compute(host, case):
    op, ins = CASES[case]
    with np.errstate(all="ignore"):
        want = KERNELS[type(op)](op, *ins)
    _check(op, _run(op, ins), want)


@pytest.mark.parametrize("case", range(len(OPTION_CASES)), ids=_ids(OPTION_CASES))
def test_chunked_and_64_bit_conv_plans_give_the_same_bits(host, case):
    op, ins, opts = OPTION_CASES[case]
    plan = _plan(op, ins, **opts)
    notes = " ".join(plan.notes)
    if "pointwise" in notes:  # no columns: the GEMM reads x (or writes the output)
        assert not any("col" in k.name for k in plan.kernels)
    elif "workspace_limit" in opts:
        assert f"batch in {_images(op, ins)} chunks" in notes
    else:
        assert all(k.name.endswith("_s64") for k in plan.kernels if "im2col" in k.name
                   or "col2im" in k.name)
    _check(op, _run(op, ins, **opts), KERNELS[type(op)](op, *ins))


def test_gemm_tiles_span_the_output_and_the_grid_its_tiles(host):
    r = np.random.default_rng(5)
    for (m, k, n), tile in [((17, 5, 300), (4, 4)), ((16, 40, 300), (1, 16)),
                            ((300, 9, 16), (16, 1)), ((65, 33, 65), (4, 4))]:
        op = QO.QuantizedMatrixMul(False, False, "default", Q8, U8A)
        ins = [qvals(r, (m, k), Q8, full=True), qvals(r, (k, n), U8A, full=True)]
        plan = _plan(op, ins)
        (step,) = plan.steps
        assert step.block == (16, 16, 1)
        rm, rn = tile
        assert step.kernel.name.endswith(f"_{rm}x{rn}"), step.kernel.name
        assert step.grid == (-(-n // (16 * rn)), -(-m // (16 * rm)), 1)
        want = (ins[0].astype(np.int64) @ (ins[1].astype(np.int64) - 120)).astype(np.int32)
        np.testing.assert_array_equal(_run(op, ins)[0], want)


def test_accumulation_mode_follows_the_operands_bounds():
    assert qk.gemm_mode(I8, Q8, I8, Q8) == "i32"
    assert qk.gemm_mode(U8, ("Quantized8Asymm", 1.0, 0), U8, ("Quantized8Asymm", 1.0, 255)) == "i32"
    assert qk.gemm_mode(I32, Q32, I8, Q8) == "f64"
    assert qk.gemm_mode(I8, ("QuantizedS8", 1.0, 2 ** 20), I8, Q8) == "f64"
    assert qk.gemm_mode(I8, ("QuantizedS8", 1.0, 40000), I8, Q8) == "i32"
    x = np.zeros((1, 2, 3, 3), I32)
    plan = _plan(_conv(inp=Q32, weight=Q8, bias=False), [x, np.zeros((1, 2, 1, 1), I8)])
    assert "f64" in plan.notes[0] and "_f64_" in plan.kernels[-1].name


def test_a_long_inner_dimension_sums_exactly(host):
    # 8-bit products summed over K = 4000: int32 tile sums added into int64, as exact as the
    # CPU's float64 (the largest sum is 2**26, far past float32's exact integers)
    k = 4000
    a = np.full((2, k), -128, I8)
    b = np.full((k, 3), -128, I8)
    op = QO.QuantizedMatrixMul(False, False, "default", Q8, Q8)
    (got,) = _run(op, [a, b])
    assert (got == 128 * 128 * k).all()
    np.testing.assert_array_equal(got, KERNELS[QO.QuantizedMatrixMul](op, a, b)[0])


def test_the_qint32_bound_and_nan_store_as_numpy_does(host):
    # float32(2**31 - 1) is 2**31: the clipped value converts to INT32_MIN on x86-64; NaN too
    x = np.array([3e9, np.nan, -3e9, 1.5, -np.inf], F32)
    (got,) = _run(QO.QuantizedTypeCvt(("QuantizedS32", 1.0, None), None), [x])
    assert got.tolist() == [-2 ** 31, -2 ** 31, -2 ** 31, 2, -2 ** 31]
    (got,) = _run(QO.QuantizedTypeCvt(Q8, None), [x])
    assert got.tolist() == [127, 0, -128, 15, -128]


def test_float16_quantizes_in_float16_steps(host):
    # 0.49975586 (the float16 below 0.5) + 0.5 rounds up to 1 in float16: MegEngine's round of it
    # is 1 there, 0 in float32
    x = np.array([0.49975586, -0.49975586, 2.5], F16)
    spec = ("QuantizedS8", 1.0, None)
    (h,) = _run(QO.QuantizedTypeCvt(spec, None), [x])
    (f,) = _run(QO.QuantizedTypeCvt(spec, None), [x.astype(F32)])
    assert h.tolist() == [1, -1, 3] and f.tolist() == [0, 0, 3]


# -- bad input ------------------------------------------------------------------------------------

def _message(exc, fn):
    with pytest.raises(exc) as e:
        fn()
    return str(e.value)


def test_bad_inputs_are_named():
    x = qvals(np.random.default_rng(0), (2, 3, 5, 5), Q8)
    w = np.zeros((4, 2, 3, 3), I8)
    msg = _message(ValueError, lambda: _plan(_conv(), [x, w, np.zeros((1, 4, 1, 1), I32)]))
    assert "ConvBias" in msg and "(2, 3, 5, 5)" in msg and "int8" in msg
    msg = _message(TypeError, lambda: _plan(QO.QuantizedTypeCvt(Q8, None),
                                            [np.zeros(3, np.uint32)]))
    assert "QuantizedTypeCvt" in msg and "uint32" in msg and "(3,)" in msg
    msg = _message(TypeError, lambda: _plan(QO.QuantizedMatrixMul(False, False, "default", Q8,
                                                                  Q8),
                                            [np.zeros((2, 3), U8), np.zeros((3, 2), I8)]))
    assert "QuantizedMatrixMul" in msg and "uint8" in msg
    bad_zp = ("QuantizedS8", 0.1, 300)
    op = _conv(inp=bad_zp, bias=False, padding=(1, 1))
    msg = _message(NotImplementedError, lambda: _plan(op, [np.zeros((1, 3, 4, 4), I8),
                                                           np.zeros((2, 3, 3, 3), I8)]))
    assert "ConvBias" in msg and "zero point 300" in msg and "(1, 3, 4, 4)" in msg
    ins = [np.zeros((3, 4), F32)]
    msg = _message(ValueError, lambda: qk.qtypecvt_plan(QO.QuantizedTypeCvt(Q8, None),
                                                        _layouts(ins), [Layout((3, 4), F32)]))
    assert "QuantizedTypeCvt plan: outputs" in msg
    msg = _message(ValueError, lambda: _plan(_deconv(), [np.zeros((3, 2, 3, 3), I8),
                                                         np.zeros((1, 4, 5, 5), I8)]))
    assert "ConvolutionBackwardData" in msg and "(1, 4, 5, 5)" in msg
    with pytest.raises(ValueError, match="index_bits"):
        _plan(_conv(bias=False), [x, np.zeros((4, 3, 3, 3), I8)], index_bits=16)


def test_kernel_makers_refuse_what_they_lack():
    a8 = acc(Q8, Q8)
    with pytest.raises(ValueError, match="mode"):
        qk.qgemm_kernel(I8, I8, "i16", None, a8)
    with pytest.raises(ValueError, match="tile"):
        qk.qgemm_kernel(I8, I8, "i32", None, a8, (2, 2))
    with pytest.raises(TypeError, match="operand dtype float32"):
        qk.qgemm_kernel(F32, I8, "i32", None, a8)
    with pytest.raises(TypeError, match="im2col kernel: unsupported dtype int16"):
        qk.qim2col_kernel(np.int16)
    with pytest.raises(ValueError, match="index_bits"):
        qk.qim2col_kernel(I8, 16)


def test_no_plan_has_checks_and_gemms_run_on_16x16_blocks():
    for op, ins in CASES:
        plan = _plan(op, ins)
        assert plan.checks == () and plan.readback is None
        for s in plan.steps:
            assert isinstance(s, Launch)
            if "qgemm" in s.kernel.name:
                assert s.block == (16, 16, 1)
            else:
                assert s.block == (256, 1, 1)
