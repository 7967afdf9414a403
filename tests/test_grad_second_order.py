"""Second-order gradients of every op case, through nested GradManagers.

Each ops test file ``tests/test_grad_*.py`` lists the ``(op, arrays)`` it checks at first order in a
module-level ``CASES`` and, in ``SECOND_ORDER_SKIP``, the ops whose backward rule is not itself
differentiable (op names as strings, ``op.name``, in most files; op instances in
``test_grad_nn.py``: both are understood).  Every other case runs through
``gradcheck.check_grads(..., order=2)``: the gradient of ``sum(c * op(x))`` and the gradient of
``sum(v * grad)`` (a second backward pass, recorded by an outer manager while the inner one runs
the rules) against central differences in float64.  This exercises what ``check_vjp`` cannot: the
grad transformation itself (the forward outputs a rule reads after they died, rules whose ops are
recorded by another key) and each rule's own differentiability.

Runtime: the numeric second derivative costs two first-order passes per input element, so the
cost of a case grows with its number of float input elements.  Cases above ``LARGE`` elements
(the big convolution, padding and pooling cases) are sampled deterministically: the first large
case of each op (class and mode) runs, the other large ones do not.  Smaller cases all run.
"""
import glob
import importlib
import os

import numpy as np
import pytest

from gradcheck import check_grads
from mge.core import apply

LARGE = 100  # float input elements above which a case is sampled (see the module docstring)

_HERE = os.path.dirname(os.path.abspath(__file__))


def _case_modules():
    """The ``test_grad_*`` modules that define ``CASES``, by name."""
    mods = []
    for path in sorted(glob.glob(os.path.join(_HERE, "test_grad_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name == __name__.rpartition(".")[2]:
            continue
        mod = importlib.import_module(name)
        if hasattr(mod, "CASES"):
            mods.append(mod)
    return mods


def skipped(op, skip):
    """Whether ``op`` is in a ``SECOND_ORDER_SKIP`` set of op names or of op instances."""
    return op.name in skip or type(op).__name__ in skip or op in skip


def _size(arrays):
    return sum(np.asarray(a).size for a in arrays if np.asarray(a).dtype.kind == "f")


def _kind(op):
    return (type(op), getattr(op, "mode", None))


def _cases():
    cases = []
    for mod in _case_modules():
        skip = getattr(mod, "SECOND_ORDER_SKIP", set())
        large_seen = set()
        for i, (op, arrays) in enumerate(mod.CASES):
            if skipped(op, skip):
                continue
            if _size(arrays) > LARGE:
                if _kind(op) in large_seen:
                    continue
                large_seen.add(_kind(op))
            cases.append(pytest.param(op, arrays, id=f"{mod.__name__[len('test_grad_'):]}-{i}-{op.name}"))
    return cases


CASES = _cases()


def test_every_case_module_is_found():
    names = {m.__name__ for m in _case_modules()}
    assert {"test_grad_elemwise", "test_grad_nn", "test_grad_shape", "test_grad_conv"} <= names


def test_skip_sets_of_names_and_of_instances():
    from mge._core.ops import Reduce
    op = Reduce("sum", 1)
    assert skipped(op, {"Reduce.sum"}) and skipped(op, {"Reduce"}) and skipped(op, {Reduce("sum", 1)})
    assert not skipped(op, {"Reduce.max"}) and not skipped(op, {Reduce("sum", 0)}) and not skipped(op, set())


@pytest.mark.parametrize("op, arrays", CASES)
def test_second_order(op, arrays):
    def fn(*xs):
        return apply(op, *xs)

    fn.__name__ = op.name
    check_grads(fn, *arrays, order=2)
