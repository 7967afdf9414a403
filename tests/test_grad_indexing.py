"""Backward rules of the indexing ops (``mge/_core/ops/indexing.py``).

Checked against central differences in float64 (``gradcheck.check_vjp``): basic indices (ints,
negative ints, slices with positive and negative steps, new axes, ellipsis), advanced indices with
repeats (which must accumulate), masks, and assigned values that broadcast.  ``CASES`` lists
``(op, arrays)`` for a later second-order test; ``SECOND_ORDER_SKIP`` names (``op.name``) the ops
whose rule is not itself differentiable (none: every rule is built from ops with rules).

Setters with repeated indices are not checked numerically: which write survives is numpy's choice,
and the value's gradient follows MegEngine (every repeat gets it); see the test at the end.
"""
import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck import case_id, check_vjp, rule_vjp
from helpers import exact_tensor as _t, indices as _idx, randn
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec,
    SetSubtensor, Subtensor,
)
from mge._core.ops import indexing
from mge._core.ops.base import OpDef
from mge.core import apply

_x = functools.partial(randn, rng=np.random.default_rng(12))  # successive arrays differ

NEW, ELL, ARR, MASK = ("new",), ("ell",), ("arr",), ("mask",)


def S(start=None, stop=None, step=None):
    return ("slice", start, stop, step)


def I(k):  # noqa: E743  (an int index item)
    return ("int", k)


_BASIC = [
    (I(1),), (I(-1),), (I(1), I(-2)), (S(1, None),), (S(None, None, 2),), (S(None, None, -1),),
    (S(3, 0, -2), S(None, None, -3)), (NEW, I(0)), (ELL, I(1)), (I(0), ELL, NEW), (S(2, 2),),
    (S(-3, None), I(2)), (S(None, None, -2), NEW, S(1, 4, 2)),
]


def _cases():
    c = []
    for items in _BASIC:
        c.append((Subtensor(items), [_x(4, 5)]))
    c.append((Subtensor((ELL,)), [np.array(_x())]))                       # 0-d input
    c.append((Subtensor((I(1), I(2), I(0))), [_x(2, 3, 2)]))              # 0-d result
    # SetSubtensor: value of the region's shape, broadcast, 0-d, with extra leading 1s
    c += [(SetSubtensor((S(1, 3),)), [_x(4, 3), _x(2, 3)]),
          (SetSubtensor((S(None, None, -2), I(1))), [_x(4, 3), _x(2)]),
          (SetSubtensor((S(None, None, 2),)), [_x(4, 3), _x(1, 3)]),
          (SetSubtensor((S(None, None, 2),)), [_x(4, 3), _x(2, 1)]),
          (SetSubtensor((I(-1),)), [_x(4, 3), np.array(_x())]),
          (SetSubtensor((S(0, 2),)), [_x(4, 3), _x(1, 1, 3)]),
          (SetSubtensor((ELL, S(3, 0, -1))), [_x(2, 4), _x(3)]),
          (SetSubtensor((ELL,)), [np.array(_x()), np.array(_x())])]
    # advanced indexing; repeated indices accumulate
    c += [(IndexingMultiAxisVec((ARR,)), [_x(4, 3), _idx([0, 2, 0, 0, -1])]),
          (IndexingMultiAxisVec((S(), ARR)), [_x(2, 4), _idx([[3, 3], [1, -4]])]),
          (IndexingMultiAxisVec((ARR, ARR)), [_x(3, 4), _idx([0, 0, 2]), _idx([1, 1, 3])]),
          (IndexingMultiAxisVec((ARR, ARR)), [_x(3, 4), _idx([[0], [2]]), _idx([1, 1, 0])]),
          (IndexingMultiAxisVec((ARR, S(None, None, -2), ARR)),   # separated: advanced axes first
           [_x(3, 4, 2), _idx([2, 2]), _idx([0, 1])]),
          (IndexingMultiAxisVec((S(1, None), ARR, NEW)), [_x(3, 4), _idx([3, 3, 0])]),
          (IndexingMultiAxisVec((MASK,)), [_x(2, 3), np.array([[True, False, True],
                                                               [False, True, True]])]),
          (IndexingMultiAxisVec((ELL, MASK)), [_x(2, 3), np.array([False, True, True])]),
          (IndexingMultiAxisVec((ARR,)), [_x(3), _idx([], )])]
    # setters with distinct targets
    c += [(IndexingSetMultiAxisVec((ARR,)), [_x(4, 3), _x(2, 3), _idx([3, 0])]),
          (IndexingSetMultiAxisVec((ARR,)), [_x(4, 3), _x(3), _idx([-1, 1])]),
          (IndexingSetMultiAxisVec((S(), ARR)), [_x(2, 4), np.array(_x()), _idx([0, 2])]),
          (IndexingSetMultiAxisVec((ARR, ARR)), [_x(3, 4), _x(1, 2), _idx([0, 2]), _idx([3, 3])]),
          (IndexingSetMultiAxisVec((MASK,)), [_x(2, 3), _x(3), np.array([[True, False, False],
                                                                         [False, True, True]])])]
    # incr: repeats add up, for the value too
    c += [(IndexingIncrMultiAxisVec((ARR,)), [_x(4, 3), _x(5, 3), _idx([0, 2, 0, 0, -1])]),
          (IndexingIncrMultiAxisVec((S(None, None, -1), ARR)), [_x(2, 4), _x(2, 1), _idx([1, 1])]),
          (IndexingIncrMultiAxisVec((ARR, ARR)),
           [_x(3, 4), np.array(_x()), _idx([0, 0, 2]), _idx([1, 1, -1])]),
          (IndexingIncrMultiAxisVec((ARR,)), [_x(4, 3), _x(1, 1, 3), _idx([2, 2])]),
          (IndexingIncrMultiAxisVec((MASK,)), [_x(2, 2), _x(2), np.array([[True, False],
                                                                           [False, True]])])]
    return c


CASES = _cases()
SECOND_ORDER_SKIP = set()


def _case_id(case):
    return case_id(case, lambda op: f"{op.name}{op.items}")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_rule_matches_central_differences(case):
    op, arrays = case
    check_vjp(op, *arrays)


def test_every_op_has_a_rule_and_a_case():
    names = [getattr(indexing, n) for n in indexing.__all__]
    classes = {c for c in names if isinstance(c, type) and issubclass(c, OpDef)}
    assert classes <= set(BACKWARD)
    assert classes <= {type(op) for op, _ in CASES}


# -- hypothesis: slices with any start, stop and step ----------------------------------------------

_bound = st.one_of(st.none(), st.integers(-6, 6))
_step = st.one_of(st.none(), st.integers(-3, 3).filter(bool))


@settings(max_examples=30, deadline=None)
@given(items=st.lists(st.builds(S, _bound, _bound, _step), min_size=1, max_size=2).map(tuple))
def test_any_slices(items):
    x = _x(5, 4)
    check_vjp(Subtensor(items), x)
    region = x[tuple(slice(*i[1:]) for i in items)]
    check_vjp(SetSubtensor(items), x, _x(*region.shape))


@settings(max_examples=30, deadline=None)
@given(index=st.lists(st.integers(-4, 3), min_size=0, max_size=6), axis=st.integers(0, 1))
def test_any_repeated_indices(index, axis):
    items = ((S(),) * axis) + (ARR,)
    x = _x(4, 4)
    check_vjp(IndexingMultiAxisVec(items), x, _idx(index))
    value_shape = (4, len(index)) if axis else (len(index), 4)
    check_vjp(IndexingIncrMultiAxisVec(items), x, _x(*value_shape), _idx(index))


# -- behaviour beyond the numbers -----------------------------------------------------------------

def test_repeated_advanced_indices_accumulate():
    got = rule_vjp(IndexingMultiAxisVec((ARR,)), [np.zeros(3), _idx([1, 1, 1, 2])],
                   [np.array([1.0, 2.0, 3.0, 4.0])], wrt=[0])[0]
    np.testing.assert_array_equal(got, [0, 6, 4])


def test_index_arrays_get_none_and_unneeded_inputs_are_skipped():
    x, v, i = _t(_x(4)), _t(_x(2)), _t(_idx([1, 3]))
    op = IndexingSetMultiAxisVec((ARR,))
    y = apply(op, x, v, i)[0]
    g = _t(np.arange(4.0))
    gx, gv, gi = BACKWARD[type(op)](op, [x, v, i], [y], [g], [True, False, True])
    assert gv is None and gi is None
    np.testing.assert_array_equal(gx.numpy(), [0, 0, 2, 0])
    gx, gv, gi = BACKWARD[type(op)](op, [x, v, i], [y], [g], [False, True, False])
    assert gx is None and gi is None
    np.testing.assert_array_equal(gv.numpy(), [1, 3])


def test_setter_with_repeated_indices_gives_every_repeat_the_gradient():
    # MegEngine's rule (and torch's index_put): the value gets g[index] whichever write survived.
    op = IndexingSetMultiAxisVec((ARR,))
    got = rule_vjp(op, [np.zeros(3), np.zeros(2), _idx([1, 1])], [np.array([5.0, 7.0, 9.0])],
                   wrt=[0, 1])
    np.testing.assert_array_equal(got[0], [5, 0, 9])
    np.testing.assert_array_equal(got[1], [7, 7])


def test_value_gradient_has_the_value_dtype():
    x, v = _t(_x(3, 2).astype("float32")), _t(_x(2).astype("float16"))
    op = SetSubtensor((I(0),))
    y = apply(op, x, v)[0]
    gx, gv = BACKWARD[SetSubtensor](op, [x, v], [y], [_t(np.ones((3, 2), "float32"))],
                                    [True, True])
    assert gx.dtype == np.float32 and gv.dtype == np.float16 and gv.shape == (2,)


def test_incr_kernel_adds_repeats():
    out = apply(IndexingIncrMultiAxisVec((ARR,)), _t(np.zeros((3, 2))), _t(np.ones((1, 1, 2))),
                _t(_idx([0, 0, 2])))[0]
    np.testing.assert_array_equal(out.numpy(), [[2, 2], [0, 0], [1, 1]])
