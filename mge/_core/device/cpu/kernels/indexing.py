"""CPU kernels of the indexing ops (``mge/_core/ops/indexing.py``).

Setters copy their input and write the copy: the storage of a tensor is never written in place.
"""
import numpy as np

from ....ops.indexing import (
    IndexingIncrMultiAxisVec, IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor,
    Subtensor, numpy_index, shape_probe,
)
from ..table import def_kernel

_op_index = {}  # op -> its numpy index: one look-up per basic-indexing kernel


@def_kernel(Subtensor)
def _cpu_subtensor(op, x):
    idx = _op_index.get(op)
    if idx is None:
        if len(_op_index) > 4096:
            _op_index.clear()
        idx = _op_index[op] = numpy_index(op.items)
    return (x[idx],)


def _run(op, x, arrays, fn):
    try:
        return fn(numpy_index(op.items, arrays))
    except IndexError as e:
        raise IndexError(f"{op.name}: {e} (indexed shape {x.shape})") from None


@def_kernel(IndexingMultiAxisVec)
def _cpu_multi(op, x, *arrays):
    return (_run(op, x, arrays, lambda idx: x[idx]),)


def _assign(op, x, value, arrays):
    out = x.copy()

    def store(idx):
        try:
            out[idx] = value
        except ValueError as e:  # a value that does not fit a mask's selection
            raise ValueError(f"{op.name}: {e} (indexed shape {x.shape})") from None
    _run(op, x, arrays, store)
    return (out,)


@def_kernel(SetSubtensor)
def _cpu_setsubtensor(op, x, value):
    return _assign(op, x, value, ())


@def_kernel(IndexingSetMultiAxisVec)
def _cpu_setmulti(op, x, value, *arrays):
    return _assign(op, x, value, arrays)


def _strip_leading_ones(value, ndim):
    # numpy drops leading size-1 axes of an assigned value; np.add.at does not, so drop them here.
    while value.ndim > ndim and value.shape[0] == 1:
        value = value[0]
    return value


@def_kernel(IndexingIncrMultiAxisVec)
def _cpu_incrmulti(op, x, value, *arrays):
    out = x.copy()

    def add(idx):
        region = shape_probe(x.shape)[idx].ndim  # the indexed region's rank, without copying x
        try:
            np.add.at(out, idx, _strip_leading_ones(value, region).astype(x.dtype, copy=False))
        except ValueError as e:
            raise ValueError(f"{op.name}: {e} (indexed shape {x.shape}, value shape "
                             f"{value.shape})") from None
    _run(op, x, arrays, add)
    return (out,)
