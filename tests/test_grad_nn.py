"""Backward rules of the neural-network ops (softmax family, one-hot indexing, dropout, padding,
pooling, normalisation, RNG) checked against central differences in float64.

``CASES`` lists ``(op, arrays)`` whose rule is checked with respect to every float input; a later
second-order test reuses it.  ``SECOND_ORDER_SKIP`` holds the ops of ``CASES`` (the instances, so
test ``op in SECOND_ORDER_SKIP``) whose rule is not differentiable again: training-mode batch norm
and layer norm, whose backward ops, as in MegEngine, have no rule of their own.  Backward ops that
take the forward output as an input (max ``PoolingBackward``, ``MaxPoolingGather``) are checked
with respect to their gradient input only, in their own tests, since moving ``x`` or ``y`` alone
breaks the ``y = pool(x)`` they assume.
"""
import numpy as np
import pytest

from gradcheck import check_vjp
from helpers import exact_tensor as _t, randn as _x, raises_at_run, run as _run

import mge
from mge import Tensor
from mge.core import apply
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import (
    AdaptivePooling, BatchNorm, BatchNormBackward, BetaRNG, Dropout, DropoutBackward,
    GammaRNG, GaussianRNG, IndexingOneHot, IndexingSetOneHot, LayerNorm, LayerNormBackward,
    LogSoftmax, MaxPoolingGather, Pad, PadBackward, PermutationRNG, PoissonRNG, Pooling,
    PoolingBackward, ShuffleRNG, Softmax, SoftmaxCrossEntropy, SoftmaxCrossEntropyBackward,
    UniformRNG,
)


def _index(shape, n, seed=0):
    return np.random.default_rng(seed).integers(0, n, shape).astype(np.int32)


def _rule(op, arrays, grads, needs=None):
    """The rule's input gradients (numpy, or None) for output gradients ``grads``."""
    inputs = tuple(_t(a) for a in arrays)
    outputs = apply(op, *inputs)
    grads = tuple(None if g is None else _t(g) for g in grads)
    needs = tuple(True for _ in arrays) if needs is None else needs
    out = BACKWARD[type(op)](op, inputs, outputs, grads, needs)
    return [None if g is None else g.numpy() for g in out]


X = _x(2, 3, 4)
IMG = _x(2, 2, 5, 6, seed=1)
POOL_GEOMETRY = [  # kernel, stride, padding
    ((2, 2), (2, 2), (0, 0)),
    ((3, 2), (1, 2), (1, 1)),
    ((3, 3), (2, 1), (1, 0)),
    ((2, 3), (2, 2), (1, 1)),
]
POOL_MODES = ("max", "average", "average_count_exclude_padding")
PAD_WIDTHS = [((1, 2), (0, 3), (2, 1)), ((2, 0),), ((0, 0), (1, 1))]

SOFTMAX_CASES = [
    (Softmax(1), [X]), (Softmax(-1), [X]), (Softmax((1, 2)), [X]), (Softmax(0), [_x(5)]),
    (LogSoftmax(0), [X]), (LogSoftmax(-1), [X]), (LogSoftmax((0, 2)), [X]),
]
ONE_HOT_CASES = [
    (IndexingOneHot(1, False), [X, _index((2, 4), 3)]),
    (IndexingOneHot(1, True), [X, _index((2, 4), 3)]),
    (IndexingOneHot(-1, False), [X, _index((2, 3), 4, seed=1)]),
    (IndexingSetOneHot(1), [X, _index((2, 4), 3), _x(2, 4, seed=2)]),
    (IndexingSetOneHot(0), [X, _index((3, 4), 2), _x(1, 3, 4, seed=2)]),
]
CROSS_ENTROPY_CASES = [
    (SoftmaxCrossEntropy(1), [_x(6, 5, seed=5) * 3, _index((6,), 5)]),
    (SoftmaxCrossEntropy(1), [X, _index((2, 4), 3)]),
    (SoftmaxCrossEntropy(-1), [X, _index((2, 3), 4, seed=1)]),
    (SoftmaxCrossEntropyBackward(1), [_x(6, 5, seed=5), _index((6,), 5), _x(6, seed=6)]),
    (SoftmaxCrossEntropyBackward(0), [X, _index((3, 4), 2), _x(3, 4, seed=7)]),
    (SoftmaxCrossEntropy(1, "mean"), [_x(6, 5, seed=5) * 3, _index((6,), 5)]),
    (SoftmaxCrossEntropy(-1, "sum"), [X, _index((2, 3), 4, seed=1)]),
    (SoftmaxCrossEntropyBackward(1, "mean"), [_x(6, 5, seed=5), _index((6,), 5), _x(seed=8)]),
    (SoftmaxCrossEntropyBackward(2, "sum"), [X, _index((2, 3), 4), _x(seed=9)]),
]
DROPOUT_CASES = [
    (Dropout(0.3, 5), [X]),
    (Dropout(0.0, 1), [X]),
    (DropoutBackward(0.4), [X, _x(2, 3, 4, seed=3) > 0]),
]
PAD_X = _x(3, 4, 5, seed=4)
PAD_CASES = [(Pad(w, m, 1.5), [PAD_X]) for m in ("constant", "reflect", "replicate")
             for w in PAD_WIDTHS]
PAD_CASES += [(PadBackward(((1, 2), (0, 3), (2, 1)), m), [_x(6, 7, 8, seed=4)])
              for m in ("constant", "reflect", "replicate")]
POOL_CASES = [(Pooling(m, k, s, p), [IMG]) for m in POOL_MODES for k, s, p in POOL_GEOMETRY]
POOL_CASES += [(AdaptivePooling(m, shape), [IMG]) for m in POOL_MODES for shape in [(2, 3), (3, 4)]]
# The average modes' backward does not read x or y, so every input can be moved.
POOL_CASES += [(PoolingBackward(m, k, s, p), [IMG, _run(Pooling(m, k, s, p), IMG)[0],
                                             _x(*_run(Pooling(m, k, s, p), IMG)[0].shape, seed=5)])
               for m in POOL_MODES[1:] for k, s, p in POOL_GEOMETRY[1:3]]

BN_X = _x(4, 3, 2, 3, seed=6)
BN_TRAIN_CASES = [
    (BatchNorm("training", 1e-3), [BN_X, _x(3, seed=7), _x(1, 3, 1, 1, seed=8)]),
    (BatchNorm("training", 1e-3), [_x(5, 3, seed=9), _x(1, 3, seed=7), _x(3, seed=8)]),
    (BatchNorm("training", 1e-2), [_x(3, 2, 4, seed=10), _x(1, 2, 1, seed=7), _x(1, 2, 1, seed=8)]),
]
BN_INFERENCE_CASES = [
    (BatchNorm("inference", 1e-3), [BN_X, _x(3, seed=7), _x(1, 3, 1, 1, seed=8), _x(3, seed=11),
                                    np.random.default_rng(12).random((1, 3, 1, 1)) + 0.5]),
]
LN_CASES = [
    (LayerNorm(False, 1e-3, -1, None), [BN_X]),
    (LayerNorm(False, 1e-3, 1, 3), [BN_X]),
    (LayerNorm(True, 1e-3, -2, None), [BN_X, _x(2, 3, seed=13), _x(2, 3, seed=14)]),
    (LayerNorm(True, 1e-3, 1, 3), [BN_X, _x(3, 2, seed=13), _x(6, seed=14)]),
    (LayerNorm(True, 1e-5, -1, None), [_x(3, 5, seed=15), _x(5, seed=13), _x(5, seed=14)]),
]
RNG_CASES = [(ShuffleRNG(7, 0), [_x(5, 3, seed=16)])]

CASES = (SOFTMAX_CASES + ONE_HOT_CASES + CROSS_ENTROPY_CASES + DROPOUT_CASES + PAD_CASES + POOL_CASES + BN_TRAIN_CASES
         + BN_INFERENCE_CASES + LN_CASES + RNG_CASES)
SECOND_ORDER_SKIP = {op for op, _ in BN_TRAIN_CASES + LN_CASES}

# Normalisation divides by small batch statistics: its central differences are a little noisier.
_RTOL = {BatchNorm: 1e-5, LayerNorm: 1e-5}


def _case_id(case):
    return repr(case[0])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_matches_finite_differences(case):
    op, arrays = case
    check_vjp(op, *arrays, rtol=_RTOL.get(type(op), 1e-6))


# -- max pooling: the backward ops that assume y = pool(x) -------------------------------------------

@pytest.mark.parametrize("geometry", POOL_GEOMETRY)
def test_max_pooling_backward_ops(geometry):
    k, s, p = geometry
    y = _run(Pooling("max", k, s, p), IMG)[0]
    dy = _x(*y.shape, seed=17)
    check_vjp(PoolingBackward("max", k, s, p), IMG, y, dy, wrt=[2])
    check_vjp(MaxPoolingGather(k, s, p), IMG, y, _x(*IMG.shape, seed=18), wrt=[2])
    # The gradient goes somewhere: each window sends dy to exactly one element.
    dx = _run(PoolingBackward("max", k, s, p), IMG, y, dy)[0]
    np.testing.assert_allclose(dx.sum(), dy.sum())


def test_max_pooling_gradient_goes_to_the_first_maximum():
    # Ties in both windows: row-major order picks (0, 1) in the first and (0, 3) in the second.
    x = np.array([[[[1.0, 3.0, 0.0, 5.0], [3.0, 2.0, 5.0, 5.0]]]])
    dx = _rule(Pooling("max", (2, 2)), [x], [np.array([[[[10.0, 20.0]]]])])[0]
    np.testing.assert_array_equal(dx, [[[[0, 10, 0, 20], [0, 0, 0, 0]]]])
    # ... and padding never wins, even against -inf.
    x = np.full((1, 1, 2, 2), -np.inf)
    dx = _rule(Pooling("max", (2, 2), (2, 2), (1, 1)), [x], [np.ones((1, 1, 2, 2))])[0]
    np.testing.assert_array_equal(dx, np.ones((1, 1, 2, 2)))


def test_adaptive_pooling_gradient_is_that_of_its_pooling():
    for mode in POOL_MODES:
        op = AdaptivePooling(mode, (2, 4))
        pool = op.as_pooling(IMG.shape)
        dy = _x(2, 2, 2, 4, seed=19)
        np.testing.assert_array_equal(_rule(op, [IMG], [dy])[0], _rule(pool, [IMG], [dy])[0])


def test_average_pooling_divisors():
    x = np.zeros((1, 1, 2, 2))
    dy = np.ones((1, 1, 2, 2))
    # kernel 2, stride 1, padding 1 over 2x2: each output window sees 1, 2 or 4 real elements.
    avg = _rule(Pooling("average", (2, 2), (1, 1), (1, 1)), [x], [np.ones((1, 1, 3, 3))])[0]
    np.testing.assert_allclose(avg, np.full((1, 1, 2, 2), 1.0))      # 4 windows x 1/4
    exc = _rule(Pooling("average_count_exclude_padding", (2, 2), (1, 1), (1, 1)), [x],
                [np.ones((1, 1, 3, 3))])[0]
    np.testing.assert_allclose(exc, np.full((1, 1, 2, 2), 1 + 0.5 + 0.5 + 0.25))
    assert dy.shape == x.shape


# -- dropout ---------------------------------------------------------------------------------------

def test_dropout_gradient_uses_the_forward_mask():
    x = _x(50, 40, seed=20).astype(np.float32)
    op = Dropout(0.5, 123)
    y, mask = _run(op, x)
    g = np.ones_like(x)
    dx = _rule(op, [x], [g, None])[0]
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, np.where(mask, 2.0, 0.0).astype(np.float32))
    np.testing.assert_array_equal(y == 0, ~mask)


# -- normalisation ---------------------------------------------------------------------------------

def test_batch_norm_training_gradient_formula():
    # The usual closed form, computed in numpy, for a 4-D input with (C,) parameters.
    x, w, b = BN_X, _x(3, seed=7), _x(3, seed=8)
    dy = _x(*x.shape, seed=21)
    dx, dw, db = _rule(BatchNorm("training", 1e-5), [x, w, b], [dy, None, None])
    axes = (0, 2, 3)
    mean = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    xhat = (x - mean) / np.sqrt(var + 1e-5)
    ref_db = dy.sum(axes)
    ref_dw = (dy * xhat).sum(axes)
    ref_dx = (w.reshape(1, 3, 1, 1) / np.sqrt(var + 1e-5)) * (
        dy - dy.mean(axes, keepdims=True) - xhat * (dy * xhat).mean(axes, keepdims=True))
    np.testing.assert_allclose(db, ref_db, rtol=1e-10)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-10)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-9, atol=1e-12)
    assert dw.shape == w.shape and db.shape == b.shape


def test_batch_norm_inference_running_stats_get_true_gradients():
    op, arrays = BN_INFERENCE_CASES[0]
    dy = _x(*arrays[0].shape, seed=22)
    grads = _rule(op, arrays, [dy])
    assert [g.shape for g in grads] == [a.shape for a in arrays]
    skipped = _rule(op, arrays, [dy], needs=(True, False, False, False, False))
    assert skipped[1:] == [None] * 4


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_norm_backward_keeps_dtypes(dtype):
    x = _x(4, 3, 2, 2, seed=23).astype(dtype)
    w = np.ones(3, dtype)
    b = np.zeros(3, dtype)
    dx, dw, db = _rule(BatchNorm("training"), [x, w, b], [np.ones_like(x), None, None])
    assert (dx.dtype, dw.dtype, db.dtype) == (x.dtype,) * 3
    dx, dw, db = _rule(LayerNorm(True, 1e-5, -1, None), [x, np.ones(2, dtype), np.zeros(2, dtype)],
                       [_x(*x.shape, seed=24).astype(dtype), None, None])
    assert (dx.dtype, dw.dtype, db.dtype) == (x.dtype,) * 3
    assert np.isfinite(dx).all()


def test_norm_second_order_is_not_implemented():
    x = Tensor(BN_X, dtype=BN_X.dtype)
    w = Tensor(np.ones(3))
    outs = apply(BatchNorm("training"), x, w, Tensor(np.zeros(3)))
    bwd = BatchNormBackward(1e-5)
    ins = (x, x, outs[1], outs[2], w)
    with pytest.raises(NotImplementedError, match="BatchNormBackward: the second-order"):
        BACKWARD[BatchNormBackward](bwd, ins, apply(bwd, *ins), (x, None, None), (True,) * 5)
    ln = LayerNormBackward(False, 1e-5, -1, None)
    with pytest.raises(NotImplementedError, match="LayerNormBackward: the second-order"):
        BACKWARD[LayerNormBackward](ln, (x,) * 4, (x,), (x,), (True,) * 4)


# -- rules skip what is not asked for --------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_gives_none_without_a_gradient_or_a_need(case):
    op, arrays = case
    outs = _run(op, *arrays)
    none = _rule(op, arrays, [None] * len(outs))
    assert none == [None] * len(arrays)
    grads = [np.ones_like(y) if y.dtype.kind == "f" else None for y in outs]
    unneeded = _rule(op, arrays, grads, needs=(False,) * len(arrays))
    assert unneeded == [None] * len(arrays)


# -- the new backward ops' shape rules -------------------------------------------------------------

def test_backward_op_shape_errors():
    raises_at_run(ValueError, r"IndexingSetOneHot: value must have shape \(2, 4\) or \(2, 1, 4\)",
                  lambda: apply(IndexingSetOneHot(1), _t(X), _t(_index((2, 4), 3)), _t(_x(2, 3))))
    raises_at_run(IndexError, "IndexingSetOneHot: index out of range",
                  lambda: apply(IndexingSetOneHot(1), _t(X), _t(_index((2, 4), 3) + 3),
                                _t(_x(2, 4)))[0].numpy())
    raises_at_run(ValueError, r"PadBackward.reflect: axis 0 of size 3 cannot be the reflect padding",
                  lambda: apply(PadBackward(((1, 1),), "reflect"), _t(_x(3, 2))))
    raises_at_run(ValueError, r"PoolingBackward.max: y and dy must have the pooled shape",
                  lambda: apply(PoolingBackward("max", (2, 2)), _t(IMG), _t(_x(2, 2, 2, 3)),
                                _t(_x(2, 2, 3, 3))))
    raises_at_run(TypeError, "MaxPoolingGather: x and the gradient input must be floating point",
                  lambda: apply(MaxPoolingGather((2, 2), (2, 2), (0, 0)), _t(IMG.astype("int32")),
                                _t(_x(2, 2, 2, 3)), _t(IMG)))
    raises_at_run(TypeError, "DropoutBackward: dy must be floating point and mask bool",
                  lambda: apply(DropoutBackward(0.5), _t(X), _t(X)))
    with pytest.raises(ValueError, match="PadBackward: unknown mode 'wrap'"):
        PadBackward(((1, 1),), "wrap")


# -- RNG ops ---------------------------------------------------------------------------------------

def test_rng_ops_have_no_gradient():
    a = np.random.default_rng(0).random((3, 2)) + 1
    for op, arrays in [(GammaRNG(1, 0), [a, a]), (BetaRNG(1, 0), [a, a]), (PoissonRNG(1, 0), [a])]:
        assert _rule(op, arrays, [np.ones_like(a)]) == [None] * len(arrays)
    f32 = np.dtype("float32")
    dev = mge.tensor(0.0).device
    for op in [UniformRNG(1, 0, f32, (2,), dev), GaussianRNG(1, 0, 0.0, 1.0, f32, (2,), dev),
               PermutationRNG(1, 0, 4, np.dtype("int32"), dev)]:
        assert BACKWARD[type(op)](op, (), apply(op), (None,), ()) == []


def test_shuffle_gradient_moves_rows_back():
    x = np.arange(12.0).reshape(6, 2)
    op = ShuffleRNG(3, 0)
    y = _run(op, x)[0]
    dx = _rule(op, [x], [y, None])[0]
    np.testing.assert_array_equal(dx, x)     # the gradient y, moved back, is x again
