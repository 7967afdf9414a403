"""``x[index]`` and ``x[index] = value`` with numpy semantics (used by ``Tensor``).

Basic indices (ints, slices, ``None``, ``...``) become one ``Subtensor`` op whose description is
cached, so ``x[0]``, ``x[1:3]`` and ``x[:, 0]`` cost one dictionary look-up besides the op itself.
Integer arrays, lists and integer tensors are advanced indices (``IndexingMultiAxisVec``); a bool
numpy mask is turned into integer arrays on the host (so the result shape is known at once) once
its shape has been checked against the axes it covers (numpy's IndexError otherwise; while ``x``'s
shape is not known yet it stays a bool tensor instead, checked by the op); a bool tensor mask stays
a tensor input (the result shape is then known only when the op has run).  Masks and integer arrays
mix as in numpy: a mask stands for its ``nonzero()`` arrays, which broadcast with the others.
"""
import numpy as np

from .._core.ops.indexing import (
    IndexingMultiAxisVec, IndexingSetMultiAxisVec, SetSubtensor, Subtensor, shape_probe,
)
from ..tensor import Tensor
from ..core import apply
from .utils import _is_graph_var

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


def _host_array(item, device, as_mask=False):
    a = np.asarray(item)
    if a.dtype.kind == "b":
        if as_mask:
            return [Tensor(a, dtype=np.bool_, device=device)]
        return [Tensor(i.astype(_int32), dtype=_int32, device=device) for i in np.nonzero(a)]
    if a.size == 0 and a.dtype.kind == "f":  # [] parses as float64
        a = a.astype(_int32)
    if a.dtype.kind not in "iu":
        raise TypeError(f"indexing: index arrays must be integer or bool, got {a.dtype}")
    return [Tensor(a, dtype=_int32, device=device)]


_one = np.zeros((1,), np.intp)


def _check_host_masks(x, index, opname):
    """Raise numpy's IndexError for a numpy/list mask that does not match the axes it covers.

    Such a mask becomes integer arrays here, so the op cannot see its shape: the index is probed
    now on a zero-stride stand-in of ``x`` (the masks as they are, tensor masks by their shapes,
    integer arrays by size-1 probes).  False when a shape is not known yet (the masks then stay
    bool tensors, checked by the op).
    """
    xshape = getattr(x, "_info", x).shape  # (a graph var's static shape)
    if xshape is None:
        return False
    probe = []
    for it in index:
        if isinstance(it, Tensor) or _is_graph_var(it):
            if it.dtype.kind == "b":
                shape = getattr(it, "_info", it).shape
                if shape is None:
                    return False
                probe.append(shape_probe(shape, np.bool_))
            else:
                probe.append(_one)
        elif isinstance(it, (list, tuple, range, np.ndarray)):
            a = np.asarray(it)
            probe.append(a if a.dtype.kind == "b" else _one)
        elif isinstance(it, np.integer):
            probe.append(int(it))
        elif type(it) is slice:
            probe.append(slice(None))
        else:
            probe.append(it)
    try:
        shape_probe(xshape)[tuple(probe)]
    except IndexError as e:
        if "boolean index" in str(e):
            raise IndexError(f"{opname}: {e}; indexed shape {tuple(xshape)}") from None
    return True


def _parse(x, index, opname, host_masks_as_tensors=False):
    """``(items, arrays)`` for ``index``: a hashable description and the index tensors."""
    if type(index) is not tuple:
        index = (index,)
    items = []
    arrays = []
    host_mask = False
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
        elif isinstance(it, Tensor) or _is_graph_var(it):
            kind = it.dtype.kind
            if kind == "b":
                items.append(("mask",))
            elif kind in "iu":
                items.append(("arr",))
            else:
                raise TypeError(f"indexing: index tensors must be integer or bool, got {it.dtype}")
            arrays.append(it if it.device == x.device else it.to(x.device))
        elif isinstance(it, (bool, np.bool_)):
            # a 0-d mask, as in numpy and MegEngine: a new axis of length 1 (True) or 0 (False)
            items.append(("mask",))
            arrays.append(Tensor(np.array(bool(it)), device=x.device))
        elif isinstance(it, np.integer):
            items.append(("int", int(it)))
        elif isinstance(it, (list, tuple, range, np.ndarray)):
            it = np.asarray(it)
            if it.dtype.kind == "b":
                host_mask = True
            parts = _host_array(it, x.device, host_masks_as_tensors)
            if host_masks_as_tensors and parts[0].dtype.kind == "b":
                items.append(("mask",))
            else:
                items.extend([("arr",)] * len(parts))
            arrays.extend(parts)
        else:
            raise TypeError(f"indexing: unsupported index element {it!r} of type {t.__name__}; "
                            "use ints, slices, None, ..., integer/bool arrays or tensors")
    if host_mask and not host_masks_as_tensors and not _check_host_masks(x, index, opname):
        return _parse(x, index, opname, host_masks_as_tensors=True)
    return tuple(items), arrays


def getitem(x, index):
    """``x[index]`` with numpy semantics; returns a new tensor.

    Signature: ``getitem(x, index)`` (what ``Tensor.__getitem__`` calls).
    """
    if type(index) is int:
        return apply(Subtensor.get((("int", index),)), x)[0]
    items, arrays = _parse(x, index, "IndexingMultiAxisVec")
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
    items, arrays = _parse(x, index, "IndexingSetMultiAxisVec")
    if arrays:
        cls, args = IndexingSetMultiAxisVec, (x, value, *arrays)
    else:
        cls, args = SetSubtensor, (x, value)
    return apply(cls.get(items), *args)[0]
