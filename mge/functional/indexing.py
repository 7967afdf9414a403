"""``x[index]`` and ``x[index] = value`` with numpy semantics (used by ``Tensor``).

Basic indices (ints, slices, ``None``, ``...``) become one ``Subtensor`` op whose description is
cached, so ``x[0]``, ``x[1:3]`` and ``x[:, 0]`` cost one dictionary look-up besides the op itself.
Integer arrays, lists and integer tensors are advanced indices (``IndexingMultiAxisVec``); a bool
numpy mask is turned into integer arrays on the host (so the result shape is known at once), a bool
tensor mask stays a tensor input (the result shape is then known only when the op has run).
"""
import numpy as np

from .._core.ops.indexing import (
    IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor, Subtensor,
)
from ..tensor import Tensor
from ..core import apply

__all__ = ["getitem", "setitem"]

_int32 = np.dtype("int32")


def _bound(v, what):
    if v is None or type(v) is int:
        return v
    if isinstance(v, Tensor) or isinstance(v, np.ndarray) and v.ndim == 0:
        if np.dtype(v.dtype).kind not in "iu":
            raise TypeError(f"indexing: slice {what} must be an integer, got dtype {v.dtype}")
        return int(v.item())
    if isinstance(v, (np.integer, int)):
        return int(v)
    raise TypeError(f"indexing: slice {what} must be an integer or None, got {type(v).__name__}")


def _host_array(item, device):
    a = np.asarray(item)
    if a.dtype.kind == "b":
        return [Tensor(i.astype(_int32), dtype=_int32, device=device) for i in np.nonzero(a)]
    if a.size == 0 and a.dtype.kind == "f":  # [] parses as float64
        a = a.astype(_int32)
    if a.dtype.kind not in "iu":
        raise TypeError(f"indexing: index arrays must be integer or bool, got {a.dtype}")
    return [Tensor(a, dtype=_int32, device=device)]


def _parse(x, index):
    """``(items, arrays)`` for ``index``: a hashable description and the index tensors."""
    if type(index) is not tuple:
        index = (index,)
    items = []
    arrays = []
    for it in index:
        t = type(it)
        if t is int:
            items.append(("int", it))
        elif t is slice:
            a, b, c = it.start, it.stop, it.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int)
                    and (c is None or type(c) is int)):
                a, b, c = _bound(a, "start"), _bound(b, "stop"), _bound(c, "step")
            if c == 0:
                raise ValueError("indexing: slice step cannot be zero")
            items.append(("slice", a, b, c))
        elif it is None:
            items.append(("new",))
        elif it is Ellipsis:
            items.append(("ell",))
        elif isinstance(it, Tensor):
            kind = it.dtype.kind
            if kind == "b":
                items.append(("mask",))
            elif kind in "iu":
                items.append(("arr",))
            else:
                raise TypeError(f"indexing: index tensors must be integer or bool, got {it.dtype}")
            arrays.append(it if it.device == x.device else it.to(x.device))
        elif isinstance(it, (bool, np.bool_)):
            raise TypeError("indexing: a scalar bool index is not supported; use None for a new "
                            "axis or a bool array as a mask")
        elif isinstance(it, np.integer):
            items.append(("int", int(it)))
        elif isinstance(it, (list, tuple, range, np.ndarray)):
            parts = _host_array(it, x.device)
            items.extend([("arr",)] * len(parts))
            arrays.extend(parts)
        else:
            raise TypeError(f"indexing: unsupported index element {it!r} of type {t.__name__}; "
                            "use ints, slices, None, ..., integer/bool arrays or tensors")
    return tuple(items), arrays


def getitem(x, index):
    """``x[index]`` with numpy semantics; returns a new tensor.

    Signature: ``getitem(x, index)`` (what ``Tensor.__getitem__`` calls).
    """
    if type(index) is int:
        return apply(Subtensor.get((("int", index),)), x)[0]
    items, arrays = _parse(x, index)
    if arrays:
        cls, args = IndexingMultiAxisVec, (x, *arrays)
    else:
        cls, args = Subtensor, (x,)
    return apply(cls.get(items), *args)[0]


def setitem(x, index, value):
    """A new tensor equal to ``x`` with ``value`` (broadcast, cast to ``x.dtype``) at ``x[index]``.

    Signature: ``setitem(x, index, value)``; ``Tensor.__setitem__`` makes the tensor take the
    result.  With repeated indices the last write wins.
    """
    dtype = x.dtype
    if isinstance(value, Tensor):
        if value.dtype != dtype:
            value = value.astype(dtype)
        if value.device != x.device:
            value = value.to(x.device)
    else:
        value = Tensor(np.asarray(value), dtype=dtype, device=x.device)
    items, arrays = _parse(x, index)
    if arrays:
        cls, args = IndexingSetMultiAxisVec, (x, value, *arrays)
    else:
        cls, args = SetSubtensor, (x, value)
    return apply(cls.get(items), *args)[0]
