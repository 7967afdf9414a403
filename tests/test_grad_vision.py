"""Backward rules of the image ops (``mge/_core/ops/vision.py``) against central differences.

``CASES`` lists ``(op, arrays)``; ``WRT`` gives, per case index, the inputs checked when not all
float inputs are differentiable (RoI boxes get no gradient, as in MegEngine).  The sampling
positions are kept away from integer coordinates (where bilinear sampling has kinks).  The rules'
backward op ``VisionBackward`` has no rule of its own (no second order, as in MegEngine 1.13), so
every op here is in ``SECOND_ORDER_SKIP``.
"""
import numpy as np
import pytest

from gradcheck import case_id, check_vjp
from helpers import randn as _x

from mge._core.ops.vision import (
    Correlation, Remap, Resize, Resize3D, ROIAlign, ROIPooling, VisionBackward, WarpAffine,
    WarpPerspective,
)
from helpers import exact_tensor as _t
from mge._core.autodiff.registry import BACKWARD
from mge.core import apply

IMG = _x(2, 2, 5, 6, seed=1)


def _mat(n, seed, perspective=True):
    rng = np.random.default_rng(seed)
    m = np.tile(np.eye(3), (n, 1, 1))
    m[:, :2] += rng.uniform(-0.2, 0.2, (n, 2, 3)) + np.array([0, 0, 0.37])
    if perspective:
        m[:, 2, :2] = rng.uniform(-0.02, 0.02, (n, 2))
    return m


def _map(seed):
    rng = np.random.default_rng(seed)
    m = rng.uniform(-1.5, 6.5, (2, 3, 4, 2))
    return np.floor(m) + rng.uniform(0.1, 0.9, m.shape)  # away from integers


ROIS = np.array([[0, 0.3, 0.6, 4.2, 3.7], [1, 1.1, 0.2, 5.3, 4.6], [0, 2.2, 1.3, 3.9, 4.1]])
# RoI pooling: box corners well inside integer bins (its bins move only when a corner rounds)
POOL_ROIS = np.array([[0, 0.1, 0.2, 4.1, 3.9], [1, 1.2, 0.1, 5.1, 4.2]])

RESIZE_CASES = [(Resize(m, "NCHW", s), [IMG]) for m in ("linear", "nearest", "cubic")
                for s in [(7, 3), (3, 9)]]
RESIZE_CASES += [(Resize("linear", "NHWC", (4, 7)), [_x(2, 3, 5, 2, seed=2)])]
RESIZE_CASES += [(Resize3D("linear", a, (3, 5, 2)), [_x(1, 2, 2, 3, 4, seed=3)])
                 for a in (False, True)]
WARP_CASES = [(WarpPerspective("linear", b, "NCHW", 0.7, (4, 5)), [IMG, _mat(2, 4)])
              for b in ("replicate", "constant", "reflect", "wrap")]
WARP_CASES += [(WarpPerspective("linear", "constant", "NCHW", 0.0, (3, 4)),
                [IMG, _mat(3, 5), np.array([1, 0, 1], np.int32)])]
WARP_CASES += [(WarpAffine("linear", b, "NCHW", 0.5, (4, 5)), [IMG, _mat(2, 6, False)[:, :2]])
               for b in ("replicate", "constant")]
REMAP_CASES = [(Remap(i, b, "NCHW", 0.3), [IMG, _map(7)])
               for i in ("linear", "nearest") for b in ("replicate", "constant", "reflect_101")]
ROI_CASES = [(ROIAlign(m, 1.0, o, 2, 3, 2, 1), [IMG, ROIS]) for m in ("average", "max")
             for o in (0.5, 0.0)]
ROI_CASES += [(ROIPooling(m, 1.0, (2, 2)), [IMG, POOL_ROIS]) for m in ("max", "average")]
CORR_CASES = [(Correlation(k, d, s1, s2, p, mul), [_x(1, 2, 5, 6, seed=8), _x(1, 2, 5, 6, seed=9)])
              for k, d, s1, s2, p, mul in [(1, 1, 1, 1, 1, True), (3, 1, 2, 1, 2, True),
                                           (1, 2, 1, 2, 2, False)]]

CASES = RESIZE_CASES + WARP_CASES + REMAP_CASES + ROI_CASES + CORR_CASES
WRT = {id(op): [0] for op, _ in ROI_CASES}
SECOND_ORDER_SKIP = {"Resize", "Resize3D", "WarpPerspective", "WarpAffine", "Remap", "ROIAlign",
                     "ROIPooling", "Correlation"}


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_rule_matches_finite_differences(case):
    op, arrays = case
    check_vjp(op, *arrays, wrt=WRT.get(id(op)), rtol=1e-5, atol=1e-7)


def test_index_inputs_get_no_gradient():
    op, arrays = WARP_CASES[4]
    inputs = [_t(a) for a in arrays]
    out = apply(op, *inputs)
    g = BACKWARD[type(op)](op, inputs, out, (_t(np.ones(out[0].shape)),), (True, True, True))
    assert g[2] is None and g[0].shape == IMG.shape and g[1].shape == arrays[1].shape
    op, arrays = ROI_CASES[0]
    inputs = [_t(a) for a in arrays]
    out = apply(op, *inputs)
    g = BACKWARD[type(op)](op, inputs, out, (_t(np.ones(out[0].shape)), None), (True, True))
    assert g[1] is None


def test_no_gradient_without_output_gradient():
    op, arrays = RESIZE_CASES[0]
    inputs = [_t(a) for a in arrays]
    assert BACKWARD[type(op)](op, inputs, apply(op, *inputs), (None,), (True,)) == [None]


def test_backward_op_has_no_second_order():
    op, arrays = RESIZE_CASES[0]
    bop = VisionBackward(op, 0)
    with pytest.raises(NotImplementedError, match="second-order"):
        BACKWARD[VisionBackward](bop, [_t(a) for a in arrays], None, (None,), (True,))
