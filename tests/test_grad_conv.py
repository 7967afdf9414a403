"""Backward rules of ``Convolution``, ``ConvolutionBackwardData`` (transposed convolution) and
``ConvolutionBackwardFilter``, checked against central differences in float64.

The three ops are bilinear and each one's gradients are the other two, so every rule is
differentiable again: ``SECOND_ORDER_SKIP`` is empty.  ``CASES`` lists ``(op, arrays)`` checked with
respect to every float input (a later second-order test reuses it).
"""
import numpy as np
import pytest

from gradcheck import check_vjp
from helpers import exact_tensor as _t, randn as _x, raises_at_run, run as _run

from mge.core import apply
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import (
    Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter,
)


def _weight(out_ch, in_ch, kernel, groups, seed):
    if groups == 1:
        return _x(out_ch, in_ch, *kernel, seed=seed)
    return _x(groups, out_ch // groups, in_ch // groups, *kernel, seed=seed)


# stride, padding, dilation, groups, input shape (2-D); kernel (3, 2), 4 output channels.  Small:
# central differences run the op twice per input element.
GEOMETRY_2D = [
    ((1, 1), (0, 0), (1, 1), 1, (2, 2, 4, 4)),
    ((2, 1), (1, 0), (1, 2), 1, (1, 4, 5, 6)),
    ((2, 2), (1, 2), (2, 1), 2, (1, 4, 5, 6)),
    ((3, 2), (0, 1), (1, 1), 1, (1, 2, 6, 7)),   # the floor in the output size drops input columns
    ((1, 2), (2, 1), (2, 2), 4, (1, 4, 4, 5)),   # depthwise
]


def _conv_case(geometry, seed):
    s, p, d, g, shape = geometry
    x = _x(*shape, seed=seed)
    return Convolution(s, p, d, g), [x, _weight(4, shape[1], (3, 2), g, seed + 1)]


CONV_CASES = [_conv_case(geo, 10 * i) for i, geo in enumerate(GEOMETRY_2D)]
CONV_CASES += [
    (Convolution((2,), (1,), (1,), 1), [_x(2, 3, 7, seed=1), _x(2, 3, 3, seed=2)]),               # 1-D
    (Convolution((1, 2, 1), (1, 0, 1), (1, 1, 2), 3),
     [_x(1, 3, 3, 4, 4, seed=3), _x(3, 1, 1, 2, 2, 2, seed=4)]),                                 # 3-D
]

# ConvolutionBackwardData(stride, padding, dilation, groups, output_padding): (weight, dy)
DECONV_CASES = [
    (ConvolutionBackwardData((1, 1), (0, 0), (1, 1), 1, (0, 0)), [_x(3, 2, 2, 3, seed=5), _x(2, 3, 3, 4, seed=6)]),
    (ConvolutionBackwardData((2, 2), (1, 0), (1, 1), 1, (1, 0)), [_x(3, 2, 3, 2, seed=7), _x(1, 3, 3, 4, seed=8)]),
    (ConvolutionBackwardData((2, 1), (0, 1), (1, 2), 2, (1, 0)), [_x(2, 2, 1, 2, 2, seed=9), _x(2, 4, 3, 3, seed=10)]),
    # output_padding at least the stride (allowed below the dilation): the output has rows no
    # convolution of the same geometry reaches back from dy
    (ConvolutionBackwardData((1, 1), (1, 0), (2, 2), 1, (1, 1)), [_x(3, 2, 2, 2, seed=11), _x(1, 3, 3, 4, seed=12)]),
    (ConvolutionBackwardData((1, 2), (0, 1), (2, 3), 1, (1, 2)), [_x(3, 2, 2, 2, seed=13), _x(1, 3, 3, 4, seed=14)]),
]

# ConvolutionBackwardFilter: (x, dy, weight); the weight gives only the shape
FILTER_CASES = []
for _i, (_op, (_xa, _wa)) in enumerate(CONV_CASES[:5]):
    _dy = _x(*_run(_op, _xa, _wa)[0].shape, seed=100 + _i)
    FILTER_CASES.append((ConvolutionBackwardFilter(_op.stride, _op.padding, _op.dilation, _op.groups),
                         [_xa, _dy, _wa]))

CASES = CONV_CASES + DECONV_CASES + FILTER_CASES
SECOND_ORDER_SKIP = set()


def _case_id(case):
    return repr(case[0])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_matches_finite_differences(case):
    op, arrays = case
    check_vjp(op, *arrays)


def _rule(op, arrays, grads, needs=None):
    inputs = tuple(_t(a) for a in arrays)
    outputs = apply(op, *inputs)
    needs = (True,) * len(arrays) if needs is None else needs
    return BACKWARD[type(op)](op, inputs, outputs, tuple(_t(g) for g in grads), needs)


def test_conv_gradients_are_the_backward_ops():
    # dx and dw come from one op each (no chains of small ops), with the forward parameters.
    op, (x, w) = CONV_CASES[3]
    dy = _x(*_run(op, x, w)[0].shape, seed=20)
    dx, dw = _rule(op, [x, w], [dy])
    ref_dx = _run(ConvolutionBackwardData(op.stride, op.padding, op.dilation, op.groups, (0, 1)),
                  w, dy)[0]
    ref_dw = _run(ConvolutionBackwardFilter(op.stride, op.padding, op.dilation, op.groups),
                  x, dy, w)[0]
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_array_equal(dx.numpy(), ref_dx)
    np.testing.assert_array_equal(dw.numpy(), ref_dw)


def test_rules_skip_unneeded_inputs():
    op, (x, w) = CONV_CASES[1]
    dy = _x(*_run(op, x, w)[0].shape, seed=21)
    dx, dw = _rule(op, [x, w], [dy], needs=(False, True))
    assert dx is None and dw.shape == w.shape
    dx, dw = _rule(op, [x, w], [dy], needs=(True, False))
    assert dw is None and dx.shape == x.shape
    for op, arrays in CASES[::3]:
        inputs = tuple(_t(a) for a in arrays)
        assert BACKWARD[type(op)](op, inputs, apply(op, *inputs), (None,), (True,) * len(arrays)) \
            == [None] * len(arrays)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gradients_keep_the_dtype(dtype):
    op, (x, w) = CONV_CASES[2]
    x, w = x.astype(dtype), w.astype(dtype)
    dy = _x(*_run(op, x, w)[0].shape, seed=22).astype(dtype)
    dx, dw = _rule(op, [x, w], [dy])
    assert dx.dtype == dtype and dw.dtype == dtype
    ref = _rule(op, [x.astype("float64"), w.astype("float64")], [dy.astype("float64")])
    tol = 1e-4 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(dx.numpy(), ref[0].numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dw.numpy(), ref[1].numpy(), rtol=tol, atol=tol * 10)


def test_filter_op_checks_its_shapes():
    x, dy, w = _x(2, 4, 6, 7), _x(2, 4, 4, 6), _x(4, 4, 3, 2)
    op = ConvolutionBackwardFilter((1, 1), (0, 0), (1, 1), 1)
    assert _run(op, x, dy, w)[0].shape == w.shape
    raises_at_run(ValueError, r"ConvolutionBackwardFilter: x \(2, 4, 6, 7\), dy \(2, 4, 5, 7\) and "
                  r"weight \(4, 4, 3, 2\) do not belong to one convolution",
                  lambda: apply(op, _t(x), _t(_x(2, 4, 5, 7)), _t(w)))
    raises_at_run(ValueError, "do not belong to one convolution",
                  lambda: apply(op, _t(x), _t(_x(2, 3, 4, 6)), _t(w)))
