"""The dtype rule of ``Elemwise`` (``ops/elemwise.py``) against its CPU kernel.

The rule describes dtypes without running the kernels; these tests run every mode's kernel on
every dtype the rule accepts (all inputs of one dtype, and every pair of dtypes for the binary
modes) and check that it returns the declared dtype, so that the two cannot drift apart.
"""
import itertools
import warnings

import numpy as np
import pytest

from mge._core.device.cpu import INPLACE, KERNELS
from mge._core.ops.base import INFER, TensorDesc
from mge._core.ops.elemwise import ELEMWISE_ARITY, ELEMWISE_MODES, Elemwise, elemwise_op

DTYPES = [np.dtype(d) for d in ("float16", "float32", "float64", "int8", "int32", "uint8", "bool")]
# Values every mode accepts for every dtype (logs of negatives give nan, which is fine here).
_VALUES = np.array([0, 1, 2, 5])


def _combos(mode):
    n = ELEMWISE_ARITY[mode]
    if n == 2:
        return list(itertools.product(DTYPES, repeat=2))
    return [(d,) * n for d in DTYPES]


def _declared(op, dtypes):
    try:
        return INFER[Elemwise](op, [TensorDesc((4,), d) for d in dtypes])[0].dtype
    except TypeError:
        return None  # the mode does not take these dtypes




@pytest.mark.parametrize("mode", sorted(ELEMWISE_MODES))
def test_the_kernel_returns_the_declared_dtype(mode):
    op = elemwise_op(mode)
    kernel = KERNELS[Elemwise]
    accepted = 0
    for dtypes in _combos(mode):
        want = _declared(op, dtypes)
        if want is None:
            continue
        accepted += 1
        arrays = [_VALUES.astype(d) for d in dtypes]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            (got,) = kernel(op, *arrays)
        assert np.asarray(got).dtype == want, (mode, [str(d) for d in dtypes])
    assert accepted, f"{mode} accepts none of {[str(d) for d in DTYPES]}"


def test_every_mode_has_an_arity_and_a_kernel():
    assert set(ELEMWISE_ARITY) == ELEMWISE_MODES
    op = elemwise_op("add")
    assert KERNELS[Elemwise](op, np.ones(2, "float32"), np.ones(2, "float32"))[0].dtype == np.float32


def test_elemwise_op_is_the_shared_instance():
    assert elemwise_op("add") is elemwise_op("add") is Elemwise.get("add")
    assert elemwise_op("ADD") == elemwise_op("add")
    assert "fn" not in vars(elemwise_op("add"))  # the op describes; the device computes


def test_the_in_place_kernel_writes_ufunc_modes_into_the_input_and_declines_the_others():
    inplace = INPLACE[Elemwise]
    a, b = np.arange(4.0, dtype="float32"), np.ones(4, "float32")
    (out,) = inplace(elemwise_op("add"), [a, b], 0)
    assert out is a and a.tolist() == [1.0, 2.0, 3.0, 4.0]
    (out,) = inplace(elemwise_op("mul"), [a, b * 2], 1)
    assert out.tolist() == [2.0, 4.0, 6.0, 8.0]
    assert inplace(elemwise_op("relu"), [a], 0) is None
    assert inplace(elemwise_op("clip"), [a, b, b], 0) is None
