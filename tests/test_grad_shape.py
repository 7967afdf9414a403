"""Backward rules of the shape ops (``mge/_core/ops/shape.py``) and the creation ops.

Checked against central differences in float64 (``gradcheck.check_vjp``).  ``CASES`` lists
``(op, arrays)`` for a later second-order test; ``SECOND_ORDER_SKIP`` names (``op.name``) the ops
whose rule is not itself differentiable (none: every rule is built from ops with rules).
"""
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck import case_id, check_vjp, rule_vjp
from helpers import exact_tensor as _t, indices as _idx, randn
from mge._core.device import as_device
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import (
    AddAxis, Arange, Broadcast, BroadcastTo, Concat, CondTake, Diag, Dimshuffle, Eye, Fill, Gather,
    Linspace, RemoveAxis, Repeat, Reshape, Roll, Scatter, ScatterAdd, Split, Stack, Tile, Where,
)
from mge._core.ops import creation, shape
from mge._core.ops.base import OpDef
from mge.core import apply

_x = functools.partial(randn, rng=np.random.default_rng(11))  # successive arrays differ


def _cases():
    cpu = as_device(None)
    c = []
    # reshape, broadcast, axes
    c += [(Reshape((3, 2)), [_x(2, 3)]), (Reshape((-1,)), [_x(2, 3, 2)]),
          (Reshape((1, 1)), [np.array(_x())]), (Reshape(()), [_x(1, 1)]),
          (Reshape((2, -1, 1)), [_x(6)])]
    c += [(Broadcast((2, 3, 4)), [_x(3, 1)]), (Broadcast((2, 3)), [np.array(_x())]),
          (Broadcast((3,)), [_x(1)]), (Broadcast((2, 3)), [_x(2, 3)]),
          (Broadcast((2, 3, 5)), [_x(1, 3, 1)]), (Broadcast((4, 2, 3)), [_x(2, 1)])]
    c += [(BroadcastTo(), [_x(3, 1), np.array([2, 3, 4], np.int32)]),
          (BroadcastTo(), [_x(1, 3, 1), np.array([2, 3, 5], np.int32)])]
    c += [(Dimshuffle((1, 0)), [_x(2, 3)]), (Dimshuffle((2, 0, 1)), [_x(2, 3, 4)]),
          (Dimshuffle(("x", 1, "x", 0)), [_x(2, 3)]), (Dimshuffle(("x",)), [np.array(_x())]),
          (Dimshuffle((0, 1)), [_x(2, 3)])]
    c += [(AddAxis((0,)), [_x(2, 3)]), (AddAxis((-1,)), [_x(2, 3)]), (AddAxis((0, 2)), [_x(3)]),
          (AddAxis((0,)), [np.array(_x())])]
    c += [(RemoveAxis((0,)), [_x(1, 3)]), (RemoveAxis((-1,)), [_x(2, 1)]),
          (RemoveAxis((0, 2)), [_x(1, 3, 1)]), (RemoveAxis((0,)), [_x(1)])]
    # joining and splitting
    c += [(Concat(0), [_x(2, 3), _x(1, 3), _x(3, 3)]), (Concat(-1), [_x(2, 1), _x(2, 4)]),
          (Concat(1), [_x(2, 3)]), (Concat(0), [np.array(_x()), np.array(_x())]),
          (Concat(0), [_x(0, 2), _x(2, 2)])]
    c += [(Stack(0), [_x(2, 3), _x(2, 3)]), (Stack(-1), [_x(2, 3), _x(2, 3), _x(2, 3)]),
          (Stack(1), [_x(2, 3)]), (Stack(0), [np.array(_x()), np.array(_x())])]
    c += [(Split(-1, (1, 2, 3)), [_x(2, 6)]), (Split(0, (2, 0, 1)), [_x(3, 2)]),
          (Split(1, (3,)), [_x(2, 3)])]
    # repetition
    c += [(Tile((2, 3)), [_x(2, 3)]), (Tile((2, 1, 3)), [_x(2, 3)]), (Tile((2,)), [_x(2, 3)]),
          (Tile((2, 0)), [_x(2, 3)]), (Tile((1, 1)), [_x(2, 3)]), (Tile((3,)), [np.array(_x())])]
    c += [(Repeat(3, 0), [_x(2, 3)]), (Repeat(2, -1), [_x(2, 3)]), (Repeat(1, 1), [_x(2, 3)]),
          (Repeat(0, 0), [_x(2, 3)])]
    c += [(Roll((1,), (0,)), [_x(3, 4)]), (Roll((-2, 1), (1, 0)), [_x(3, 4)]),
          (Roll((5,), (-1,)), [_x(3, 4)])]
    # selection
    mask = np.array([[True, False, True], [False, False, True]])
    c += [(Where(), [mask, _x(2, 3), _x(2, 3)]),
          (Where(), [np.array([[True], [False]]), _x(3), np.array(_x())]),
          (Where(), [np.array(True), _x(2, 1), _x(1, 3)])]
    c += [(CondTake(), [mask, _x(2, 3)]), (CondTake(), [np.zeros((2, 2), bool), _x(2, 2)]),
          (CondTake(), [np.array(True), np.array(_x())])]
    c += [(Gather(0), [_x(3, 2), _idx([[0, 2], [0, 0], [2, 1], [-1, 0]])]),
          (Gather(-1), [_x(2, 4), _idx([[3, 3, 0], [1, 2, 1]])]),
          (Gather(1), [_x(3, 4), _idx([[0, 0], [3, 1]])])]  # index smaller on axis 0: a crop
    # Scatter: distinct targets per line (with repeats the written one is unspecified)
    c += [(Scatter(0), [_x(3, 2), _idx([[2, 0], [0, 1]]), _x(2, 2)]),
          (Scatter(-1), [_x(2, 4), _idx([[3, 1], [0, -1]]), _x(2, 2)])]
    c += [(ScatterAdd(0), [_x(3, 2), _idx([[2, 0], [2, 0], [1, 0]]), _x(3, 2)]),
          (ScatterAdd(-1), [_x(3, 4), _idx([[1, 1, -3], [0, 3, 3]]), _x(2, 3)])]
    c += [(Diag(0), [_x(3)]), (Diag(2), [_x(3)]), (Diag(-1), [_x(2)]),
          (Diag(0), [_x(3, 3)]), (Diag(1), [_x(2, 5)]), (Diag(-1), [_x(4, 2)]),
          (Diag(4), [_x(2, 5)]), (Diag(-3), [_x(2, 5)]), (Diag(-2), [_x(3, 3)])]
    # creation: no inputs, no gradients
    f64 = np.dtype("float64")
    c += [(Fill((2, 3), 1.5, f64, cpu), []), (Arange(0, 5, 1, f64, cpu), []),
          (Linspace(0, 1, 5, f64, cpu), []), (Eye(3, 2, 0, f64, cpu), [])]
    return c


CASES = _cases()
SECOND_ORDER_SKIP = set()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rule_matches_central_differences(case):
    op, arrays = case
    check_vjp(op, *arrays)


def _op_classes(module):
    return {getattr(module, n) for n in module.__all__
            if isinstance(getattr(module, n), type) and issubclass(getattr(module, n), OpDef)}


def test_every_op_has_a_rule_and_a_case():
    classes = _op_classes(shape) | _op_classes(creation)
    assert classes <= set(BACKWARD)
    assert classes <= {type(op) for op, _ in CASES}


# -- hypothesis: shapes and axes ------------------------------------------------------------------

_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=25, deadline=None)
@given(shape=_shapes, data=st.data())
def test_broadcast_any_shape(shape, data):
    # Each axis stays, or is stretched from size 1; leading axes may be added.
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    src = tuple(data.draw(st.sampled_from([s, 1])) for s in shape)
    check_vjp(Broadcast(lead + shape), _x(*src))


@settings(max_examples=25, deadline=None)
@given(shape=_shapes.filter(len), data=st.data())
def test_dimshuffle_and_tile_any_shape(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    check_vjp(Dimshuffle(perm), _x(*shape))
    reps = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4).map(tuple))
    check_vjp(Tile(reps), _x(*shape))


@settings(max_examples=25, deadline=None)
@given(shape=_shapes.filter(len), data=st.data())
def test_roll_repeat_and_concat_any_axis(shape, data):
    ndim = len(shape)
    axis = data.draw(st.integers(-ndim, ndim - 1))
    shift = data.draw(st.integers(-4, 4))
    check_vjp(Roll((shift,), (axis,)), _x(*shape))
    check_vjp(Repeat(data.draw(st.integers(0, 3)), axis), _x(*shape))
    other = list(shape)
    other[axis] = data.draw(st.integers(0, 2))
    check_vjp(Concat(axis), _x(*shape), _x(*other))


# -- behaviour beyond the numbers -----------------------------------------------------------------

def test_split_outputs_without_gradient_count_as_zero():
    x = _t(np.arange(6.0).reshape(2, 3))
    op = Split(1, (1, 2))
    outs = apply(op, x)
    g = BACKWARD[Split](op, [x], list(outs), [None, _t(np.ones((2, 2)))], [True])[0]
    np.testing.assert_array_equal(g.numpy(), [[0, 1, 1], [0, 1, 1]])
    assert BACKWARD[Split](op, [x], list(outs), [None, None], [True]) == [None]


def test_indices_and_masks_get_none():
    x = _t(_x(3, 2))
    index = _t(_idx([[0, 2]]))
    y = apply(Gather(0), x, index)[0]
    grads = BACKWARD[Gather](Gather(0), [x, index], [y], [_t(np.ones((1, 2)))], [True, True])
    assert grads[1] is None
    mask = _t(np.array([[True, False], [False, True], [True, True]]))
    outs = apply(CondTake(), mask, x)
    grads = BACKWARD[CondTake](CondTake(), [mask, x], list(outs),
                               [_t(np.ones(4)), None], [True, True])
    assert grads[0] is None
    np.testing.assert_array_equal(grads[1].numpy(), mask.numpy())
    src = _t(_x(1, 2))
    y = apply(Scatter(0), x, index, src)[0]
    assert BACKWARD[Scatter](Scatter(0), [x, index, src], [y], [_t(np.ones((3, 2)))],
                             [True, True, True])[1] is None


def test_inputs_not_needed_are_skipped():
    mask, a, b = _t(np.array([True, False])), _t(_x(2)), _t(_x(2))
    y = apply(Where(), mask, a, b)[0]
    got = BACKWARD[Where](Where(), [mask, a, b], [y], [_t(np.ones(2))], [False, False, True])
    assert got[:2] == [None, None]
    np.testing.assert_array_equal(got[2].numpy(), [0, 1])
    parts = [_t(_x(2)), _t(_x(3))]
    y = apply(Concat(0), *parts)[0]
    got = BACKWARD[Concat](Concat(0), parts, [y], [_t(np.arange(5.0))], [False, True])
    assert got[0] is None
    np.testing.assert_array_equal(got[1].numpy(), [2, 3, 4])


def test_gradients_have_the_input_dtype():
    # dtype promotion makes the output float32; each input's gradient comes back in its dtype.
    mask = _t(np.array([True, False, True]))
    x, y = _t(_x(3).astype("float16")), _t(_x(3).astype("float32"))
    out = apply(Where(), mask, x, y)[0]
    _, gx, gy = BACKWARD[Where](Where(), [mask, x, y], [out], [_t(np.ones(3, "float32"))],
                                [False, True, True])
    assert gx.dtype == np.float16 and gy.dtype == np.float32


def test_repeated_gather_indices_accumulate():
    got = rule_vjp(Gather(0), [np.zeros((3, 1)), _idx([[1], [1], [1], [0]])],
                   [np.array([[1.0], [2.0], [3.0], [4.0]])], wrt=[0])[0]
    np.testing.assert_array_equal(got, [[4], [6], [0]])


def test_tile_and_broadcast_gradient_values():
    got = rule_vjp(Tile((2, 2)), [np.zeros((1, 2))], [np.arange(8.0).reshape(2, 4)], wrt=[0])[0]
    np.testing.assert_array_equal(got, [[0 + 2 + 4 + 6, 1 + 3 + 5 + 7]])
    got = rule_vjp(Broadcast((2, 3)), [np.zeros(())], [np.ones((2, 3))], wrt=[0])[0]
    assert got.shape == () and got == 6


def test_scatter_add_kernel_accumulates():
    out = apply(ScatterAdd(1), _t(np.zeros((2, 3))), _t(_idx([[0, 0], [2, -1]])),
                _t(np.ones((2, 2))))[0]
    np.testing.assert_array_equal(out.numpy(), [[2, 0, 0], [0, 0, 2]])


def test_creation_ops_have_no_gradients():
    op = Fill((2,), 0.0, np.dtype("float32"), as_device(None))
    assert BACKWARD[Fill](op, [], list(apply(op)), [_t(np.ones(2, "float32"))], []) == []
