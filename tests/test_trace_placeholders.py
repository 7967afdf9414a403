"""The tensors the per-op path makes in C are ordinary tensors, and ``apply``'s top-level hook.

Compiled, ``apply``'s outputs and a replay's placeholders are made without calling the class
and get their handle at the ``_info`` slot directly (``mge/_core/cpython_new.pxd``); on CPython
3.11 they start without the instance dict's values array, which CPython makes when first needed.
These tests check that such tensors behave like any other: attributes, ``__dict__``, weak
references, collection, copies.  A replay's ``Match`` is a ``TopHook``, whose ``top`` a compiled
``apply`` calls as a C method; other hooks are called as Python methods.  The tests run in both
modes.
"""
import copy
import gc
import pickle
import weakref

import numpy as np
import pytest

import mge
from mge._core import _accel
from mge.jit import trace

_dispatch = _accel.load("mge._core.dispatch")


def _eager():
    x = mge.tensor(np.arange(4, dtype="float32"))
    return x * 2.0 + 1.0


def _replayed():
    # the output of the third call of a traced function: a placeholder the replay handed out
    # (it got its value when the call ended)
    kept = []

    @trace(symbolic=True)
    def f(x):
        y = x * 2.0 + 1.0
        kept.append(y)
        return y

    x = mge.tensor(np.arange(4, dtype="float32"))
    for _ in range(3):
        kept.clear()
        out = f(x)
    return kept[0], out


@pytest.mark.parametrize("make", ["eager", "replayed"])
def test_tensors_made_by_the_per_op_path_take_attributes(make):
    t = _eager() if make == "eager" else _replayed()[0]
    np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype="float32") * 2 + 1)
    assert t.grad is None and not hasattr(t, "unset_attribute")
    assert "unset_attribute" not in t.__dict__
    t.note = "a"
    t.count = 3
    assert (t.note, t.count) == ("a", 3)
    assert vars(t)["note"] == "a" and t.__dict__["count"] == 3
    del t.note
    assert not hasattr(t, "note")
    t.name = "named"
    assert t.name == "named"


@pytest.mark.parametrize("make", ["eager", "replayed"])
def test_tensors_made_by_the_per_op_path_are_collected(make):
    t = _eager() if make == "eager" else _replayed()[0]
    ref = weakref.ref(t)
    assert ref() is t
    t.cycle = [t]  # (only the collector frees it)
    del t
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("make", ["eager", "replayed"])
def test_tensors_made_by_the_per_op_path_copy_and_pickle(make):
    t = _eager() if make == "eager" else _replayed()[1]
    t.tag = 7
    expected = t.numpy()
    for other in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        np.testing.assert_array_equal(other.numpy(), expected)
        assert isinstance(other, mge.Tensor)


def test_a_top_hook_of_python_is_called_for_every_top_level_apply():
    calls = []

    class Counting(_dispatch.TopHook):
        def top(self, op, inputs):
            calls.append(op)
            return _dispatch.apply_tuple(op, inputs)

    x = mge.tensor([1.0, 2.0])
    prev = _dispatch.set_top_hook(Counting())
    try:
        y = x * 3.0
    finally:
        _dispatch.set_top_hook(prev)
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])
    assert len(calls) == 1


def test_a_hook_lending_another_method_of_a_top_hook_gets_that_method():
    # only a hook's own ``top`` is called as the C method: a lent method of another name runs
    seen = []

    class Owner(_dispatch.TopHook):
        def top(self, op, inputs):
            raise AssertionError("the C top was called instead of the lent method")

        def answer(self, op, inputs):
            seen.append(op)
            return _dispatch.apply_tuple(op, inputs)

    class Lender:
        def __init__(self):
            self.top = Owner().answer

    x = mge.tensor([1.0])
    prev = _dispatch.set_top_hook(Lender())
    try:
        y = x + 1.0
    finally:
        _dispatch.set_top_hook(prev)
    np.testing.assert_array_equal(y.numpy(), [2.0])
    assert len(seen) == 1


def test_the_base_top_hook_refuses_to_answer():
    prev = _dispatch.set_top_hook(_dispatch.TopHook())
    try:
        with pytest.raises(NotImplementedError, match="TopHook must define top"):
            mge.tensor([1.0]) + 1.0
    finally:
        _dispatch.set_top_hook(prev)
    np.testing.assert_array_equal((mge.tensor([1.0]) + 1.0).numpy(), [2.0])  # (still works)
