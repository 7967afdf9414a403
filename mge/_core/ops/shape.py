"""Shape ops: reshape, broadcast, transpose, axes, concat/stack/split, tile/repeat/roll, where,
cond_take, gather/scatter, diag -- the op classes and their shape/dtype rules.

Their CPU kernels are in ``mge/_core/device/cpu/kernels/shape.py``, their backward rules in
``mge/_core/autodiff/rules/shape.py``.  Creation ops (``Fill``, ``Arange``, ``Linspace``, ``Eye``)
live in ``creation.py``; this module re-exports them.
"""
import numpy as np

from ..dtype import common_dtype, where_dtype
from .base import OpDef, TensorDesc, def_infer, op_error
from .creation import *  # noqa: F401,F403
from .creation import __all__ as _creation_all

__all__ = [
    "Reshape", "Broadcast", "BroadcastTo", "Dimshuffle", "AddAxis", "RemoveAxis", "Concat", "Stack", "Split",
    "Tile", "Repeat", "Roll", "Where", "CondTake", "Gather", "Scatter", "ScatterAdd", "Diag",
] + list(_creation_all)

_int32 = np.dtype("int32")


def _nargs(op, descs, n):
    if len(descs) != n:
        raise op_error(TypeError, op, f"expects {n} input(s), got {len(descs)}", descs)


def _axis(op, axis, ndim, descs):
    if not -ndim <= axis < ndim:
        raise op_error(ValueError, op, f"axis {axis} is out of range for {ndim}-d input", descs)
    return axis % ndim


class Reshape(OpDef):
    """Same data, new ``shape`` (a tuple of ints; one entry may be -1)."""

    _fields = ("shape",)
    long_running = False
    complex_ok = True


class Broadcast(OpDef):
    """Numpy broadcasting of the input to ``shape``."""

    _fields = ("shape",)
    long_running = False
    complex_ok = True


class BroadcastTo(OpDef):
    """``(x, shape) ->`` ``x`` broadcast to the shape held by the 1-d integer tensor ``shape``
    (MegEngine's ``Broadcast`` with a shape input): the output shape is known once it ran, so a
    traced function may broadcast to another shape in each call."""

    long_running = False
    complex_ok = True


class Dimshuffle(OpDef):
    """Permute axes: ``pattern`` is a permutation of the input axes; ``"x"`` entries add an axis."""

    _fields = ("pattern",)
    long_running = False
    complex_ok = True


class AddAxis(OpDef):
    """Insert size-1 axes at ``axis`` (a tuple of positions in the output)."""

    _fields = ("axis",)
    long_running = False
    complex_ok = True


class RemoveAxis(OpDef):
    """Remove the size-1 axes ``axis`` (a tuple of input axes)."""

    _fields = ("axis",)
    long_running = False
    complex_ok = True


class Concat(OpDef):
    """Join n inputs along ``axis``."""

    _fields = ("axis",)
    long_running = False
    complex_ok = True


class Stack(OpDef):
    """Join n inputs along a new axis ``axis``."""

    _fields = ("axis",)
    long_running = False
    complex_ok = True


class Split(OpDef):
    """Cut the input along ``axis`` into parts of the sizes ``sections`` (one output per part)."""

    _fields = ("axis", "sections")
    long_running = False
    complex_ok = True


class Tile(OpDef):
    """Repeat the whole input ``reps`` times along each axis (``np.tile``)."""

    _fields = ("reps",)
    long_running = False


class Repeat(OpDef):
    """Repeat each element ``repeats`` times along ``axis`` (``np.repeat``)."""

    _fields = ("repeats", "axis")
    long_running = False


class Roll(OpDef):
    """Roll by ``shift`` (tuple) along ``axis`` (tuple of the same length)."""

    _fields = ("shift", "axis")
    long_running = False


class Where(OpDef):
    """``(mask, x, y) -> x where mask else y``, with broadcasting."""

    long_running = False


class CondTake(OpDef):
    """``(mask, x) -> (x[mask], flat indices of mask)``; the output length depends on values."""

    long_running = False


class Gather(OpDef):
    """``(inp, index) -> out`` with ``out[..i..] = inp[..index[..i..]..]`` along ``axis``."""

    _fields = ("axis",)
    long_running = False


class Scatter(OpDef):
    """``(inp, index, source) ->`` a copy of ``inp`` with ``source`` written at ``index``."""

    _fields = ("axis",)
    long_running = False


class ScatterAdd(OpDef):
    """``(inp, index, source) ->`` a copy of ``inp`` with ``source`` added at ``index`` (``axis``).

    Repeated indices accumulate (``np.add.at``).  It is the backward of ``Gather``: MegEngine
    gathers by advanced indexing, whose gradient accumulates through ``IndexingIncrMultiAxisVec``;
    mge's dedicated ``Gather`` gets a dedicated accumulating scatter.
    """

    _fields = ("axis",)
    long_running = False


class Diag(OpDef):
    """1-d input: a matrix with it on diagonal ``k``; 2-d input: its diagonal ``k``."""

    _fields = ("k",)
    _defaults = {"k": 0}
    long_running = False


# -- reshape and broadcast ------------------------------------------------------------------------
def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def reshape_target(op, src, target, descs):
    """Resolve one -1 in ``target`` against the input shape ``src``; ``ValueError`` on mismatch."""
    n = _prod(src)
    unknown = [i for i, s in enumerate(target) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in target):
        raise op_error(ValueError, op, f"invalid target shape {target}: at most one -1, no other "
                       "negative sizes", descs)
    if unknown:
        rest = _prod(s for s in target if s != -1)
        if rest == 0 or n % rest:
            raise op_error(ValueError, op, f"cannot reshape {n} elements into {target}", descs)
        target = tuple(n // rest if s == -1 else s for s in target)
    elif _prod(target) != n:
        raise op_error(ValueError, op, f"cannot reshape {src} ({n} elements) into {target}", descs)
    return target


@def_infer(Reshape)
def _infer_reshape(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None if -1 in op.shape else op.shape, dtype)]
    return [TensorDesc(reshape_target(op, shape, op.shape, descs), dtype)]


class BroadcastError(ValueError, RuntimeError):
    """A shape that cannot be broadcast to the target: a ``ValueError`` as in numpy and a
    ``RuntimeError`` as MegEngine raises (its shape assertion)."""


@def_infer(Broadcast)
def _infer_broadcast(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    target = op.shape
    if shape is not None:
        ok = len(shape) <= len(target) and all(
            s == t or s == 1 for s, t in zip(shape[::-1], target[::-1]))
        if not ok or any(t < 0 for t in target):
            raise op_error(BroadcastError, op, f"cannot broadcast shape {shape} to {target}",
                           descs)
    return [TensorDesc(target, dtype)]


# -- axes -----------------------------------------------------------------------------------------
@def_infer(BroadcastTo)
def _infer_broadcast_to(op, descs):
    _nargs(op, descs, 2)
    (shape, dtype), (sshape, sdtype) = descs
    if sdtype.kind not in "iu" or (sshape is not None and len(sshape) != 1):
        raise op_error(TypeError, op, "the target shape must be a 1-d integer tensor", descs)
    if sshape is not None and shape is not None and sshape[0] < len(shape):
        raise op_error(BroadcastError, op, f"cannot broadcast shape {shape} to {sshape[0]} axes",
                       descs)
    return [TensorDesc(None, dtype)]


def broadcast_target(op, shape, target):
    """``target`` (a tuple of ints) if ``shape`` broadcasts to it; ``BroadcastError`` otherwise."""
    ok = len(shape) <= len(target) and all(
        s == t or s == 1 for s, t in zip(shape[::-1], target[::-1]))
    if not ok or any(t < 0 for t in target):
        raise op_error(BroadcastError, op, f"cannot broadcast shape {shape} to {target}")
    return target


@def_infer(Dimshuffle)
def _infer_dimshuffle(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    axes = [p for p in op.pattern if p != "x"]
    if sorted(axes) != list(range(len(axes))) or (shape is not None and len(axes) != len(shape)):
        ndim = "?" if shape is None else len(shape)
        raise op_error(ValueError, op, f"pattern {op.pattern} is not a permutation of the {ndim} "
                       "input axes (plus 'x' for new axes)", descs)
    if shape is None:
        return [TensorDesc(None, dtype)]
    return [TensorDesc(tuple(1 if p == "x" else shape[p] for p in op.pattern), dtype)]


@def_infer(AddAxis)
def _infer_addaxis(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None, dtype)]
    out = add_axis_shape(shape, op.axis)
    if out is None:
        raise op_error(ValueError, op, f"invalid axis {op.axis} for a {len(shape)}-d input", descs)
    return [TensorDesc(out, dtype)]


def add_axis_shape(shape, axis):
    """``shape`` with a new axis of length 1 at each of ``axis`` (negative: from the end of the
    result), inserted one at a time in sorted order as MegEngine's ``AddAxis`` does, so a repeated
    axis adds two (``(2, 3)`` with ``(0, 0)``: ``(1, 1, 2, 3)``); None for an axis out of range."""
    ndim = len(shape) + len(axis)
    axes = sorted(a % ndim if -ndim <= a < ndim else ndim for a in axis)
    if axes and axes[-1] >= ndim:
        return None
    out = list(shape)
    for a in axes:
        out.insert(a, 1)
    return tuple(out)


@def_infer(RemoveAxis)
def _infer_removeaxis(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None, dtype)]
    axes = {_axis(op, a, len(shape), descs) for a in op.axis}
    for a in axes:
        if shape[a] != 1:
            raise op_error(ValueError, op, f"cannot remove axis {a} of size {shape[a]}: only "
                           "size-1 axes can be squeezed", descs)
    return [TensorDesc(tuple(s for i, s in enumerate(shape) if i not in axes), dtype)]


# -- joining and splitting ------------------------------------------------------------------------
@def_infer(Concat)
def _infer_concat(op, descs):
    if not descs:
        raise op_error(ValueError, op, "needs at least one input")
    dtype = common_dtype([d[1] for d in descs])
    shapes = [d[0] for d in descs]
    if any(s is None for s in shapes):
        return [TensorDesc(None, dtype)]
    ndim = len(shapes[0])
    if ndim == 0:
        raise op_error(ValueError, op, "0-d inputs cannot be concatenated", descs)
    axis = _axis(op, op.axis, ndim, descs)
    for s in shapes:
        if len(s) != ndim or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise op_error(ValueError, op, f"input shapes must match except on axis {axis}", descs)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [TensorDesc(tuple(out), dtype)]


@def_infer(Stack)
def _infer_stack(op, descs):
    if not descs:
        raise op_error(ValueError, op, "needs at least one input")
    dtype = common_dtype([d[1] for d in descs])
    shapes = [d[0] for d in descs]
    if any(s is None for s in shapes):
        return [TensorDesc(None, dtype)]
    if any(s != shapes[0] for s in shapes):
        raise op_error(ValueError, op, "all inputs must have the same shape", descs)
    axis = _axis(op, op.axis, len(shapes[0]) + 1, descs)
    out = list(shapes[0])
    out.insert(axis, len(shapes))
    return [TensorDesc(tuple(out), dtype)]


@def_infer(Split)
def _infer_split(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None, dtype) for _ in op.sections]
    axis = _axis(op, op.axis, len(shape), descs)
    if any(s < 0 for s in op.sections) or sum(op.sections) != shape[axis]:
        raise op_error(ValueError, op, f"sections {op.sections} do not add up to the size "
                       f"{shape[axis]} of axis {axis}", descs)
    out = []
    for s in op.sections:
        piece = list(shape)
        piece[axis] = s
        out.append(TensorDesc(tuple(piece), dtype))
    return out


# -- repetition -----------------------------------------------------------------------------------
@def_infer(Tile)
def _infer_tile(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    reps = op.reps
    if any(r < 0 for r in reps):
        raise op_error(ValueError, op, f"reps {reps} must be non-negative", descs)
    if shape is None:
        return [TensorDesc(None, dtype)]
    n = max(len(shape), len(reps))
    shape = (1,) * (n - len(shape)) + tuple(shape)
    reps = (1,) * (n - len(reps)) + tuple(reps)
    return [TensorDesc(tuple(s * r for s, r in zip(shape, reps)), dtype)]


@def_infer(Repeat)
def _infer_repeat(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if op.repeats < 0:
        raise op_error(ValueError, op, f"repeats must be non-negative, got {op.repeats}", descs)
    if shape is None:
        return [TensorDesc(None, dtype)]
    axis = _axis(op, op.axis, len(shape), descs)
    out = list(shape)
    out[axis] *= op.repeats
    return [TensorDesc(tuple(out), dtype)]


@def_infer(Roll)
def _infer_roll(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if len(op.shift) != len(op.axis):
        raise op_error(ValueError, op, "shift and axis must have the same length", descs)
    if shape is not None:
        for a in op.axis:
            _axis(op, a, len(shape), descs)
    return [TensorDesc(shape, dtype)]


# -- selection ------------------------------------------------------------------------------------
def _bcast(op, shapes, descs):
    if any(s is None for s in shapes):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise op_error(ValueError, op, "shapes cannot be broadcast together", descs) from None


@def_infer(Where)
def _infer_where(op, descs):
    _nargs(op, descs, 3)
    if descs[0][1].kind not in "biu" and descs[1][1] != descs[0][1]:
        raise op_error(TypeError, op, "mask must be a bool tensor", descs)
    dtype = where_dtype([descs[1][1], descs[2][1]])
    return [TensorDesc(_bcast(op, [d[0] for d in descs], descs), dtype)]


@def_infer(CondTake)
def _infer_condtake(op, descs):
    _nargs(op, descs, 2)
    (mshape, mdtype), (shape, dtype) = descs
    if mshape is not None and shape is not None and mshape != shape:
        raise op_error(ValueError, op, "mask and input must have the same shape", descs)
    if mdtype.kind != "b":
        raise op_error(TypeError, op, "mask must be a bool tensor", descs)
    return [TensorDesc(None, dtype), TensorDesc(None, _int32)]


def _check_gather(op, descs, names):
    shapes = [d[0] for d in descs]
    if any(s is None for s in shapes):
        return None
    inp, index = shapes[0], shapes[1]
    if descs[1][1].kind not in "iu":
        raise op_error(TypeError, op, "index must be an integer tensor", descs)
    if len(index) != len(inp):
        raise op_error(ValueError, op, f"{names} must have the same number of dimensions", descs)
    axis = _axis(op, op.axis, len(inp), descs)
    for d, (a, b) in enumerate(zip(inp, index)):
        if d != axis and b > a:
            raise op_error(ValueError, op, f"index size {b} exceeds the input size {a} on axis {d}",
                           descs)
    return axis


@def_infer(Gather)
def _infer_gather(op, descs):
    _nargs(op, descs, 2)
    _check_gather(op, descs, "input and index")
    return [TensorDesc(descs[1][0], descs[0][1])]


@def_infer(Scatter)
@def_infer(ScatterAdd)
def _infer_scatter(op, descs):
    _nargs(op, descs, 3)
    _check_gather(op, descs, "input and index")
    if descs[1][0] is not None and descs[2][0] is not None and descs[1][0] != descs[2][0]:
        raise op_error(ValueError, op, "index and source must have the same shape", descs)
    return [TensorDesc(descs[0][0], descs[0][1])]


@def_infer(Diag)
def _infer_diag(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None, dtype)]
    k = op.k
    if len(shape) == 1:
        n = shape[0] + abs(k)
        return [TensorDesc((n, n), dtype)]
    if len(shape) == 2:
        n = max(0, min(shape[0] + min(k, 0), shape[1] - max(k, 0)))
        return [TensorDesc((n,), dtype)]
    raise op_error(ValueError, op, "input must be 1-d or 2-d", descs)

