"""The CUDA device's detection kernels (``kernels/detection.py``), checked without a GPU.

* every kernel of every dtype signature compiles with NVRTC for ``compute_90`` and an older
  architecture (one program, ``-Ofc=max``), and ptxas assembles the program (the kernels' own
  flags) for ``sm_90``, with shared memory and barriers in it;
* each op's plan (``PLANS`` on the inputs' layouts, the outputs the rule gives) runs on the host
  build through ``tests/cuda_plans.run_plan`` -- the plans' own grids and blocks, emulated -- and
  is compared with the CPU kernel of ``KERNELS``: ROIAlign, ROIPooling (max and average, and
  their gradients), NMSKeep, Correlation (multiply and subtract, both gradients) and CTCLoss
  (loss and gradient), on float16, float32 and float64; NMSKeep's and ROIPooling max's integer
  outputs bit for bit, the floats within float64 rounding before the output's cast;
* the ``Check``s raise the CPU kernel's very errors (a RoI's batch index, a CTC label, a pred
  length or a label length out of range), and bad dtypes, parameters and forward ops are refused
  at the plan, naming the op.

One host library of every kernel is built up front (``cuda_plans.library``).  Without NVRTC,
ptxas or g++ the tests that need them are skipped with the reason, except under ``CI``.
"""
import os
import re

import numpy as np
import pytest
from cuda_plans import library, run_plan

from mge._core.device.cpu import KERNELS
from mge._core.device.cuda import hostbuild, nvrtc
from mge._core.device.cuda.kernels import detection as dk
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Launch, Layout, Plan
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.nn_extra import CTCLoss
from mge._core.ops.vision import (
    Correlation, NMSKeep, ROIAlign, ROIPooling, VisionBackward, WarpAffine,
)
from cuda_toolchain import (  # noqa: F401 (the fixtures are used by name)
    fast_options, missing as _missing, nvrtc_ready, old_arch, ptxas_ready)

F16, F32, F64 = (np.dtype(d) for d in ("float16", "float32", "float64"))
FLOATS = (F16, F32, F64)
WORKERS = min(2, os.cpu_count() or 1)


# -- the cases ------------------------------------------------------------------------------------

def _rois(dt):
    return np.array([[0, 1.2, 0.5, 7.3, 6.1], [1, 0, 0, 10, 8], [1, 3.7, 2.2, 4.1, 2.9],
                     [0, -2, -1, 12, 10], [-1, 5, 5, 5, 5], [1.7, 8.5, 1.5, 9.5, 7.5]], dt)


def _boxes(rng, b, n, dt=F32):
    xy = rng.random((b, n, 2)) * 60
    wh = rng.random((b, n, 2)) * 20 + 1
    return np.concatenate([xy, xy + wh], -1).astype(dt)


def _ctc_inputs(rng, t, n, c, s, dt=F32, ldt=np.int32):
    p = rng.random((t, n, c)) + 0.05
    p = (p / p.sum(-1, keepdims=True)).astype(dt)
    lab = rng.integers(1, c, (n, s)).astype(ldt)
    if s > 1:
        lab[0, 1] = lab[0, 0]  # a repeated label (the skip transition is barred)
    plen = rng.integers(max(1, 2 * s), t + 1, n).astype(np.int32)
    plen[0] = t
    llen = rng.integers(1, s + 1, n).astype(np.int32)
    llen[0] = s
    return [p, plen, lab, llen]


def _cases():
    """[(op, inputs)]: every op class of the family on every float dtype."""
    rng = np.random.default_rng(0)
    cases = []
    for dt in FLOATS:
        x = rng.normal(size=(2, 3, 9, 11)).astype(dt)
        rois = _rois(dt if dt != F16 else F32)
        # (the CPU's ROIAlign gradient cannot take a negative batch index: np.bincount fails)
        pos = rois[rois[:, 0] >= 0]
        for mode in ("max", "average"):
            op = ROIAlign(mode, 0.8, 0.5, 3, 2, 2, 3)
            cases += [(op, [x, rois]),
                      (VisionBackward(op, 0), [x, pos, rng.normal(size=(5, 3, 3, 2)).astype(dt)])]
            op = ROIPooling(mode, 0.7, (3, 4))
            cases += [(op, [x, rois]),
                      (VisionBackward(op, 0), [x, rois, rng.normal(size=(6, 3, 3, 4)).astype(dt)])]
        cases += [(NMSKeep(0.3, 40), [_boxes(rng, 2, 150, dt)]),
                  (NMSKeep(0.7, 500), [_boxes(rng, 3, 70, dt)])]
        a, b = (rng.normal(size=(2, 3, 8, 9)).astype(dt) for _ in range(2))
        for mult in (True, False):
            for op in (Correlation(3, 2, 1, 1, 2, mult), Correlation(1, 4, 2, 2, 4, mult)):
                y = KERNELS[Correlation](op, a, b)[0]
                g = rng.normal(size=y.shape).astype(dt)
                cases += [(op, [a, b]), (VisionBackward(op, 0), [a, b, g]),
                          (VisionBackward(op, 1), [a, b, g])]
        cases.append((CTCLoss(0), _ctc_inputs(rng, 12, 3, 5, 4, dt)))
    cases.append((CTCLoss(2), _ctc_inputs(rng, 30, 4, 7, 6, F32, np.int64)))
    cases.append((CTCLoss(0), _ctc_inputs(rng, 3, 2, 4, 1, F32, np.int16)))
    # RoIs in float16 for a float32 input; several mask words per box row in NMS
    x = rng.normal(size=(2, 2, 6, 7)).astype(F32)
    cases.append((ROIAlign("average", 1.0, 0.0, 2, 2, 1, 1), [x, _rois(F16)]))
    cases.append((NMSKeep(0.5, 100), [_boxes(rng, 1, 200, F64)]))
    return cases


CASES = _cases()


def _layouts(arrays):
    return [Layout(a.shape, a.dtype) for a in arrays]


def _out_layouts(op, ins):
    descs = INFER[type(op)](op, [TensorDesc(a.shape, a.dtype) for a in ins])
    return [Layout(d.shape, d.dtype) for d in descs]


def _plan(op, ins):
    return dk.PLANS[type(op)](op, _layouts(ins), _out_layouts(op, ins))


def _run(op, ins):
    return run_plan(_plan(op, ins), ins, _out_layouts(op, ins))


def _kernels():
    return list(dict.fromkeys(k for op, ins in CASES for k in _plan(op, ins).kernels))


# -- compiling ------------------------------------------------------------------------------------

def test_every_kernel_compiles_for_hopper_and_an_older_arch(old_arch):
    kernels = _kernels()
    assert len(kernels) >= 20
    source = program(kernels)
    for arch in ("compute_90", old_arch):
        ptx = nvrtc.compile_ptx(source, "detection.cu", arch, fast_options(dk.NVRTC_OPTIONS))
        entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
        absent = [k.name for k in kernels if k.name not in entries]
        assert not absent, f"not in the PTX for {arch}: {absent}"
    nvrtc.clear_cache()


def test_ptxas_assembles_the_program_for_sm90(nvrtc_ready, ptxas_ready):
    kernels = [dk.roi_batch_kernel(F32), dk.roi_align_kernel(F16, F32),
               dk.roi_align_backward_kernel(F32, F32), dk.roi_pooling_kernel(F64, F64),
               dk.roi_pooling_backward_kernel(F32, F32), *dk.nms_kernels(F32).values(),
               dk.correlation_kernel(F32), dk.correlation_backward_kernel(F16),
               dk.ctc_kernel(F32)]
    ptx = nvrtc.compile_ptx(program(kernels), "detection.cu", "compute_90", dk.NVRTC_OPTIONS)
    cubin = nvrtc.assemble(ptx, "sm_90", name="detection.ptx")
    assert cubin[:4] == b"\x7fELF"
    assert not [k.name for k in kernels if k.name.encode() not in cubin]
    assert ".shared" in ptx and "bar.sync" in ptx  # NMS's tiles and scan, CTC's recursions


# -- the host build -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host():
    """One host library of every kernel the plans here launch."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(why)
    if not hostbuild.have_float16():
        _missing("the host build of the float16 kernels needs g++ 12 or later (_Float16)")
    return library(_kernels(), jobs=WORKERS)


def test_plans_cover_every_op_of_the_family():
    assert set(dk.PLANS) == {ROIAlign, ROIPooling, NMSKeep, Correlation, VisionBackward, CTCLoss}
    assert dk.STRIDED == frozenset()
    covered = {type(op) for op, _ in CASES}
    assert covered == set(dk.PLANS)
    forwards = {type(op.forward) for op, _ in CASES if isinstance(op, VisionBackward)}
    assert forwards == {ROIAlign, ROIPooling, Correlation}
    for op, ins in CASES:
        plan = _plan(op, ins)
        assert isinstance(plan, Plan) and plan.steps and \
            all(isinstance(s, Launch) for s in plan.steps)


def _tolerance(dtype):
    return {F16: 2.0 ** -10, F32: 2.0 ** -22, F64: 1e-13}[np.dtype(dtype)]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernels_compute_what_the_cpu_kernels_compute(host, case):
    op, ins = CASES[case]
    got = _run(op, ins)
    ref = [np.asarray(r) for r in KERNELS[type(op)](op, *ins)]
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        if g.dtype.kind == "f":
            tol = _tolerance(g.dtype)
            np.testing.assert_allclose(g.astype(F64), r.astype(F64), rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g, r)


def test_nms_keeps_the_cpus_boxes_in_its_order_and_pads_with_zeros(host):
    rng = np.random.default_rng(3)
    boxes = _boxes(rng, 2, 300)
    boxes[1, 5:] = boxes[1, 0]  # all but five boxes are the first one: few kept
    op = NMSKeep(0.6, 50)
    idx, cnt = _run(op, [boxes])
    ref_idx, ref_cnt = KERNELS[NMSKeep](op, boxes)
    np.testing.assert_array_equal(cnt, ref_cnt)
    np.testing.assert_array_equal(idx, ref_idx)
    assert cnt[1] <= 5 and (idx[1, cnt[1]:] == 0).all() and cnt[0] == 50
    # no box: counts 0
    op = NMSKeep(0.5, 4)
    idx, cnt = _run(op, [np.zeros((2, 0, 4), F32)])
    assert (idx == 0).all() and (cnt == 0).all()


def test_roi_gradients_are_the_same_at_every_run(host):
    op, ins = next((op, ins) for op, ins in CASES if isinstance(op, VisionBackward)
                   and isinstance(op.forward, ROIAlign) and ins[0].dtype == F32)
    first = _run(op, ins)[0]
    for _ in range(2):
        np.testing.assert_array_equal(_run(op, ins)[0], first)


# -- checks and refusals ---------------------------------------------------------------------------

def _cpu_error(op, ins):
    with pytest.raises(Exception) as info:
        KERNELS[type(op)](op, *ins)
    return info.value


@pytest.mark.parametrize("which", ["align", "pool", "align_backward", "pool_backward"])
def test_a_batch_index_out_of_range_raises_the_cpus_error(host, which):
    x = np.ones((2, 1, 5, 5), F32)
    rois = np.array([[0, 0, 0, 3, 3], [-3, 1, 1, 2, 2], [7, 0, 0, 1, 1]], F32)
    fwd = ROIAlign("max", 1.0, 0.0, 2, 2, 1, 1) if "align" in which else \
        ROIPooling("max", 1.0, (2, 2))
    op, ins = fwd, [x, rois]
    if "backward" in which:
        op, ins = VisionBackward(fwd, 0), [x, rois, np.ones((3, 1, 2, 2), F32)]
    want = _cpu_error(op, ins)
    with pytest.raises(type(want)) as info:
        _run(op, ins)
    assert str(info.value) == str(want) == "index -3 is out of bounds for axis 0 with size 2"


@pytest.mark.parametrize("bad", ["label", "negative_label", "pred_length", "label_length"])
def test_ctc_checks_raise_the_cpus_errors(host, bad):
    rng = np.random.default_rng(1)
    p, plen, lab, llen = _ctc_inputs(rng, 8, 3, 5, 3)
    if bad == "label":
        lab[1, 1] = 9
        lab[2, 0] = 7
    elif bad == "negative_label":
        lab[2, 0] = -6
    elif bad == "pred_length":
        plen[1] = 9
    else:
        llen[2] = 4  # 2 * 4 = 8 >= L = 7
    ins = [p, plen, lab, llen]
    want = _cpu_error(CTCLoss(0), ins)
    with pytest.raises(type(want)) as info:
        _run(CTCLoss(0), ins)
    assert str(info.value) == str(want)


def test_ctc_negative_labels_in_range_count_from_the_end(host):
    rng = np.random.default_rng(2)
    p, plen, lab, llen = _ctc_inputs(rng, 8, 2, 5, 3)
    lab[0, 1] = -2
    got = _run(CTCLoss(0), [p, plen, lab, llen])
    ref = KERNELS[CTCLoss](CTCLoss(0), p, plen, lab, llen)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-7)


def test_plans_refuse_what_they_cannot_run():
    x = np.ones((1, 1, 4, 4), np.int32)
    with pytest.raises(TypeError, match="ROIAlign"):
        _plan(ROIAlign("max", 1.0, 0.0, 2, 2, 1, 1), [x.astype(F32), np.ones((1, 5), np.int32)])
    with pytest.raises(ValueError, match="NMSKeep.*max_output"):
        _plan(NMSKeep(0.5, 0), [np.ones((1, 3, 4), F32)])
    with pytest.raises(TypeError, match="NMSKeep.*float16, float32 or float64"):
        _plan(NMSKeep(0.5, 2), [np.ones((1, 3, 4), np.int32)])
    with pytest.raises(NotImplementedError, match="WarpAffine"):
        op = VisionBackward(WarpAffine("linear", "constant", "NCHW", 0.0, (4, 4)), 0)
        dk.PLANS[VisionBackward](op, _layouts([x.astype(F32), np.ones((1, 2, 3), F32),
                                               np.ones((1, 1, 4, 4), F32)]),
                                 [Layout(x.shape, F32)])
    p, plen, lab, llen = _ctc_inputs(np.random.default_rng(0), 4, 2, 3, 1)
    with pytest.raises(TypeError, match="CTCLoss.*label"):
        dk.PLANS[CTCLoss](CTCLoss(0), _layouts([p, plen, lab.astype(F32), llen]),
                          _out_layouts(CTCLoss(0), [p, plen, lab, llen]))
    with pytest.raises(ValueError, match="CTCLoss.*pred_lengths"):
        _plan(CTCLoss(0), [p, plen[:1], lab, llen])
