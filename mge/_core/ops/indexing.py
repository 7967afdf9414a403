"""Indexing ops with numpy semantics.

An index is described by ``items``, a tuple with one entry per index element:

* ``("int", k)`` -- an integer (negative counts from the end),
* ``("slice", start, stop, step)`` -- a slice (entries may be ``None``),
* ``("new",)`` -- ``None`` (a new axis), ``("ell",)`` -- ``...``,
* ``("arr",)`` -- an integer index array, the next tensor input,
* ``("mask",)`` -- a boolean mask, the next tensor input (the output shape then depends on values).

``Subtensor``/``SetSubtensor`` take only the first four kinds (basic indexing);
``IndexingMultiAxisVec``/``IndexingSetMultiAxisVec``/``IndexingIncrMultiAxisVec`` take all of
them; their tensor inputs are ``(x, *index_arrays)`` and ``(x, value, *index_arrays)``.  Setters
return a new array: storage is never written in place.  With repeated indices the last write wins,
as in numpy; ``IndexingIncrMultiAxisVec`` adds every repeat (``np.add.at``), which makes it the
backward of advanced indexing.

This module holds the op classes, their shape/dtype rules and the parsing of ``items`` into numpy
indices that both the rules and the kernels use.  The CPU kernels are in
``mge/_core/device/cpu/kernels/indexing.py``, the backward rules in
``mge/_core/autodiff/rules/indexing.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Subtensor", "SetSubtensor", "IndexingMultiAxisVec", "IndexingSetMultiAxisVec",
           "IndexingIncrMultiAxisVec", "numpy_index", "shape_probe"]

_intp = np.dtype(np.intp)


class Subtensor(OpDef):
    """Basic indexing ``x[items]`` (ints, slices, new axes, ellipsis)."""

    _fields = ("items",)
    long_running = False
    complex_ok = True


class SetSubtensor(OpDef):
    """``(x, value) ->`` a copy of ``x`` with ``value`` (broadcast) written at ``x[items]``."""

    _fields = ("items",)
    long_running = False
    complex_ok = True


class IndexingMultiAxisVec(OpDef):
    """Advanced indexing ``x[items]``; index arrays and masks are tensor inputs after ``x``."""

    _fields = ("items",)
    long_running = False
    complex_ok = True


class IndexingSetMultiAxisVec(OpDef):
    """``(x, value, *arrays) ->`` a copy of ``x`` with ``value`` written at ``x[items]``."""

    _fields = ("items",)
    long_running = False
    complex_ok = True


class IndexingIncrMultiAxisVec(OpDef):
    """``(x, value, *arrays) ->`` a copy of ``x`` with ``value`` added at ``x[items]``; repeated
    indices add up (``np.add.at``)."""

    _fields = ("items",)
    long_running = False


_np_index_cache = {}


def numpy_index(items, arrays=()):
    """The numpy index tuple of ``items``, with ``arrays`` in place of the array entries."""
    if not arrays:
        try:
            return _np_index_cache[items]
        except KeyError:
            pass
    it = iter(arrays)
    out = []
    has_ellipsis = False
    for item in items:
        kind = item[0]
        if kind == "int":
            out.append(item[1])
        elif kind == "slice":
            out.append(slice(item[1], item[2], item[3]))
        elif kind == "new":
            out.append(None)
        elif kind == "ell":
            out.append(Ellipsis)
            has_ellipsis = True
        else:
            out.append(next(it))
    if not has_ellipsis:
        out.append(Ellipsis)  # x[0] then gives a 0-d array, not a numpy scalar
    out = tuple(out)
    if not arrays:
        if len(_np_index_cache) > 4096:
            _np_index_cache.clear()
        _np_index_cache[items] = out
    return out


def shape_probe(shape, dtype=np.int8):
    """A zero-stride stand-in for a value of ``shape``: indexing it checks the index and gives the
    result shape without touching data."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _describe(op, descs, message):
    return op_error(IndexError, op, message, descs)


def _probe_index(op, items, xshape, probes, descs, mask_errors_only=False):
    try:
        return shape_probe(xshape)[numpy_index(items, tuple(probes))].shape
    except IndexError as e:
        if mask_errors_only and "boolean index" not in str(e):
            return None  # not a mask's own error: the second probe reports it
        raise _describe(op, descs, f"{e}; indexed shape {xshape}") from None


def _indexed_shape(op, items, xdesc, adescs, descs):
    """Shape of ``x[items]`` (``None`` when a mask makes it depend on values).

    Without masks one probe gives the shape.  With masks (numpy's rule: a mask stands for the
    integer arrays of its ``nonzero()``, which broadcast with the other index arrays) two probes
    check what the shapes alone show: the first indexes with the masks (all False) and the integer
    arrays as size-1 (or empty) probes -- a mask that does not match the axes it covers; the second
    with each mask replaced by one size-1 (empty for an empty mask) integer probe per mask axis and
    the integer arrays as they are -- everything else.  Whether the masks' counts broadcast with
    the integer arrays is known only from their values (the kernel's numpy raises then).
    """
    xshape = xdesc[0]
    if xshape is None or any(d[0] is None for d in adescs):
        return None
    arrays = []
    has_mask = False
    for item, d in zip((i for i in items if i[0] in ("arr", "mask")), adescs):
        if item[0] == "mask":
            if d[1].kind != "b":
                raise op_error(TypeError, op, f"a mask must be bool, got {d[1]}", descs)
            has_mask = True
        elif d[1].kind not in "iu":
            raise op_error(TypeError, op, f"index arrays must be integer, got {d[1]}", descs)
    if not has_mask:
        return _probe_index(op, items, xshape, [shape_probe(d[0], _intp) for d in adescs], descs)
    kinds = [i[0] for i in items if i[0] in ("arr", "mask")]
    first = [shape_probe(d[0], np.bool_) if k == "mask"
             else shape_probe(tuple(min(n, 1) for n in d[0]), _intp)
             for k, d in zip(kinds, adescs)]
    _probe_index(op, items, xshape, first, descs, mask_errors_only=True)
    items2 = []
    second = []
    it = iter(zip(kinds, adescs))
    for item in items:
        if item[0] not in ("arr", "mask"):
            items2.append(item)
            continue
        kind, d = next(it)
        if kind == "mask" and len(d[0]) > 0:
            n = 1 if all(d[0]) else 0
            items2.extend([("arr",)] * len(d[0]))
            second.extend([shape_probe((n,), _intp)] * len(d[0]))
        else:  # an integer array, or a 0-d mask (a new axis of length 0 or 1)
            items2.append(item)
            second.append(shape_probe(d[0], np.bool_ if kind == "mask" else _intp))
    _probe_index(op, tuple(items2), xshape, second, descs)
    return None


_basic_cache = {}


@def_infer(Subtensor)
def _infer_subtensor(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    shape, dtype = descs[0]
    key = (op, shape)
    try:
        return [TensorDesc(_basic_cache[key], dtype)]
    except KeyError:
        pass
    out = _indexed_shape(op, op.items, descs[0], (), descs)
    if shape is not None:
        if len(_basic_cache) > 4096:
            _basic_cache.clear()
        _basic_cache[key] = out
    return [TensorDesc(out, dtype)]


@def_infer(IndexingMultiAxisVec)
def _infer_multi(op, descs):
    n = sum(1 for i in op.items if i[0] in ("arr", "mask"))
    if len(descs) != n + 1:
        raise op_error(TypeError, op, f"expects {n + 1} inputs, got {len(descs)}", descs)
    return [TensorDesc(_indexed_shape(op, op.items, descs[0], descs[1:], descs), descs[0][1])]


def _check_value(op, target, value_shape, descs):
    if target is None or value_shape is None:
        return
    v = tuple(value_shape)
    while len(v) > len(target) and v[0] == 1:
        v = v[1:]  # numpy drops leading size-1 axes of the value
    try:
        ok = len(v) <= len(target) and np.broadcast_shapes(v, target) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise op_error(ValueError, op, f"cannot assign a value of shape {tuple(value_shape)} to "
                       f"an indexed region of shape {tuple(target)}", descs)


@def_infer(SetSubtensor)
def _infer_setsubtensor(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (x, value), got {len(descs)}", descs)
    target = _indexed_shape(op, op.items, descs[0], (), descs)
    _check_value(op, target, descs[1][0], descs)
    return [TensorDesc(descs[0][0], descs[0][1])]


@def_infer(IndexingSetMultiAxisVec)
@def_infer(IndexingIncrMultiAxisVec)
def _infer_setmulti(op, descs):
    n = sum(1 for i in op.items if i[0] in ("arr", "mask"))
    if len(descs) != n + 2:
        raise op_error(TypeError, op, f"expects {n + 2} inputs, got {len(descs)}", descs)
    target = _indexed_shape(op, op.items, descs[0], descs[2:], descs)
    _check_value(op, target, descs[1][0], descs)
    return [TensorDesc(descs[0][0], descs[0][1])]
