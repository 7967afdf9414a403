"""Backward rules of ``SlidingWindow``, ``SlidingWindowTranspose`` and ``CTCLoss``
(``mge/_core/ops/nn_extra.py``), checked against central differences in float64.

The two window ops are each other's transpose, so their rules are differentiable again.  The CTC
loss's rule scales the gradient the kernel computed beside the loss: its second output is an
auxiliary result that no gradient flows through, and the rule is not differentiable again
(``SECOND_ORDER_SKIP``); its check gives a cotangent to the loss output alone.
"""
import numpy as np
import pytest

from gradcheck import case_id, check_dropped_output, check_vjp, numeric_vjp, rule_vjp
from mge._core.ops.nn_extra import CTCLoss, SlidingWindow, SlidingWindowTranspose


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _probs(t, n, c, seed=0):
    z = np.exp(_x(t, n, c, seed=seed))
    return z / z.sum(-1, keepdims=True)


SW_GEOMETRY = [  # window, padding, stride, dilation, input shape
    ((2, 2), (0, 0), (1, 1), (1, 1), (1, 2, 3, 3)),
    ((3, 2), (1, 2), (2, 1), (1, 2), (2, 1, 5, 4)),
    ((2, 3), (1, 0), (1, 2), (2, 1), (1, 2, 4, 6)),
]


def _sw_case(geo, seed):
    k, p, s, d, shape = geo
    return SlidingWindow(k, p, s, d), [_x(*shape, seed=seed)]


def _swt_case(geo, seed):
    k, p, s, d, shape = geo
    oh = (shape[2] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (shape[3] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    y = _x(shape[0], shape[1], oh, ow, k[0], k[1], seed=seed)
    return SlidingWindowTranspose(tuple(shape[2:]), k, p, s, d), [y]


_LABEL = np.array([[1, 1, 2], [2, 0, 0]], np.int32)
CTC_CASES = [
    (CTCLoss(0), [_probs(5, 2, 3, seed=3), np.array([5, 4], np.int32), _LABEL,
                  np.array([3, 1], np.int32)]),
    (CTCLoss(2), [_probs(4, 2, 3, seed=4), np.array([4, 3], np.int32),
                  np.array([[1, 0], [0, 0]], np.int32), np.array([2, 1], np.int32)]),
]

WINDOW_CASES = ([_sw_case(g, 10 + i) for i, g in enumerate(SW_GEOMETRY)]
                + [_swt_case(g, 20 + i) for i, g in enumerate(SW_GEOMETRY)])
CASES = WINDOW_CASES + CTC_CASES
SECOND_ORDER_SKIP = {"CTCLoss"}


@pytest.mark.parametrize("case", WINDOW_CASES, ids=case_id)
def test_window_rules(case):
    op, arrays = case
    check_vjp(op, *arrays)
    check_dropped_output(op, *arrays)


@pytest.mark.parametrize("case", CTC_CASES, ids=case_id)
def test_ctc_rule_loss_output(case):
    op, arrays = case
    c = np.random.default_rng(7).standard_normal(arrays[1].shape)
    expected = numeric_vjp(op, arrays, [c, None], [0])
    got = rule_vjp(op, arrays, [c, None], [0])
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-8)
