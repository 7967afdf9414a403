"""Shape ops: reshape, broadcast, transpose, axes, concat/stack/split, tile/repeat/roll, where,
cond_take, gather/scatter, diag; their backward rules are at the end of the file.

Kernels may return numpy views of their inputs: the storage of a tensor is never written in place.
Creation ops (``Fill``, ``Arange``, ``Linspace``, ``Eye``) live in ``creation.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .creation import *  # noqa: F401,F403
from .creation import __all__ as _creation_all

__all__ = [
    "Reshape", "Broadcast", "Dimshuffle", "AddAxis", "RemoveAxis", "Concat", "Stack", "Split",
    "Tile", "Repeat", "Roll", "Where", "CondTake", "Gather", "Scatter", "ScatterAdd", "Diag",
    "common_dtype",
] + list(_creation_all)

_float32 = np.dtype("float32")
_int32 = np.dtype("int32")
_bool = np.dtype("bool")


def common_dtype(dtypes):
    """The dtype mixed inputs compute in (numpy promotion without widening to float64)."""
    d = dtypes[0]
    for x in dtypes[1:]:
        if x != d:
            d = np.promote_types(d, x)
    if d == np.float64 and all(x != np.float64 for x in dtypes):
        d = _float32
    return d


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


class Broadcast(OpDef):
    """Numpy broadcasting of the input to ``shape``."""

    _fields = ("shape",)


class Dimshuffle(OpDef):
    """Permute axes: ``pattern`` is a permutation of the input axes; ``"x"`` entries add an axis."""

    _fields = ("pattern",)


class AddAxis(OpDef):
    """Insert size-1 axes at ``axis`` (a tuple of positions in the output)."""

    _fields = ("axis",)


class RemoveAxis(OpDef):
    """Remove the size-1 axes ``axis`` (a tuple of input axes)."""

    _fields = ("axis",)


class Concat(OpDef):
    """Join n inputs along ``axis``."""

    _fields = ("axis",)


class Stack(OpDef):
    """Join n inputs along a new axis ``axis``."""

    _fields = ("axis",)


class Split(OpDef):
    """Cut the input along ``axis`` into parts of the sizes ``sections`` (one output per part)."""

    _fields = ("axis", "sections")


class Tile(OpDef):
    """Repeat the whole input ``reps`` times along each axis (``np.tile``)."""

    _fields = ("reps",)


class Repeat(OpDef):
    """Repeat each element ``repeats`` times along ``axis`` (``np.repeat``)."""

    _fields = ("repeats", "axis")


class Roll(OpDef):
    """Roll by ``shift`` (tuple) along ``axis`` (tuple of the same length)."""

    _fields = ("shift", "axis")


class Where(OpDef):
    """``(mask, x, y) -> x where mask else y``, with broadcasting."""


class CondTake(OpDef):
    """``(mask, x) -> (x[mask], flat indices of mask)``; the output length depends on values."""


class Gather(OpDef):
    """``(inp, index) -> out`` with ``out[..i..] = inp[..index[..i..]..]`` along ``axis``."""

    _fields = ("axis",)


class Scatter(OpDef):
    """``(inp, index, source) ->`` a copy of ``inp`` with ``source`` written at ``index``."""

    _fields = ("axis",)


class ScatterAdd(OpDef):
    """``(inp, index, source) ->`` a copy of ``inp`` with ``source`` added at ``index`` (``axis``).

    Repeated indices accumulate (``np.add.at``).  It is the backward of ``Gather``: MegEngine
    gathers by advanced indexing, whose gradient accumulates through ``IndexingIncrMultiAxisVec``;
    mge's dedicated ``Gather`` gets a dedicated accumulating scatter.
    """

    _fields = ("axis",)


class Diag(OpDef):
    """1-d input: a matrix with it on diagonal ``k``; 2-d input: its diagonal ``k``."""

    _fields = ("k",)
    _defaults = {"k": 0}


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


@def_kernel(Reshape)
def _cpu_reshape(op, x):
    return (x.reshape(op.shape),)


@def_infer(Broadcast)
def _infer_broadcast(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    target = op.shape
    if shape is not None:
        ok = len(shape) <= len(target) and all(
            s == t or s == 1 for s, t in zip(shape[::-1], target[::-1]))
        if not ok or any(t < 0 for t in target):
            raise op_error(ValueError, op, f"cannot broadcast shape {shape} to {target}", descs)
    return [TensorDesc(target, dtype)]


@def_kernel(Broadcast)
def _cpu_broadcast(op, x):
    return (np.broadcast_to(x, op.shape),)


# -- axes -----------------------------------------------------------------------------------------
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


@def_kernel(Dimshuffle)
def _cpu_dimshuffle(op, x):
    pattern = op.pattern
    if "x" not in pattern:
        return (x.transpose(pattern),)
    y = x.transpose([p for p in pattern if p != "x"])
    return (y.reshape(tuple(1 if p == "x" else x.shape[p] for p in pattern)),)


@def_infer(AddAxis)
def _infer_addaxis(op, descs):
    _nargs(op, descs, 1)
    shape, dtype = descs[0]
    if shape is None:
        return [TensorDesc(None, dtype)]
    ndim = len(shape) + len(op.axis)
    axes = sorted(a % ndim if -ndim <= a < ndim else ndim for a in op.axis)
    if axes and (axes[-1] >= ndim or len(set(axes)) != len(axes)):
        raise op_error(ValueError, op, f"invalid axis {op.axis} for a {len(shape)}-d input", descs)
    out = list(shape)
    for a in axes:
        out.insert(a, 1)
    return [TensorDesc(tuple(out), dtype)]


@def_kernel(AddAxis)
def _cpu_addaxis(op, x):
    return (np.expand_dims(x, op.axis),)


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


@def_kernel(RemoveAxis)
def _cpu_removeaxis(op, x):
    return (np.squeeze(x, op.axis),)


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


@def_kernel(Concat)
def _cpu_concat(op, *xs):
    return (np.concatenate(xs, axis=op.axis),)


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


@def_kernel(Stack)
def _cpu_stack(op, *xs):
    return (np.stack(xs, axis=op.axis),)


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


@def_kernel(Split)
def _cpu_split(op, x):
    points = np.cumsum(op.sections[:-1])
    return tuple(np.split(x, points, axis=op.axis))


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


@def_kernel(Tile)
def _cpu_tile(op, x):
    return (np.tile(x, op.reps),)


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


@def_kernel(Repeat)
def _cpu_repeat(op, x):
    return (np.repeat(x, op.repeats, axis=op.axis),)


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


@def_kernel(Roll)
def _cpu_roll(op, x):
    return (np.roll(x, op.shift, axis=op.axis),)


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
    dtype = common_dtype([descs[1][1], descs[2][1]])
    return [TensorDesc(_bcast(op, [d[0] for d in descs], descs), dtype)]


@def_kernel(Where)
def _cpu_where(op, mask, x, y):
    # dtype promotion may have cast the mask to the dtype of x and y: nonzero is true.
    if mask.dtype != _bool:
        mask = mask != 0
    return (np.where(mask, x, y),)


@def_infer(CondTake)
def _infer_condtake(op, descs):
    _nargs(op, descs, 2)
    (mshape, mdtype), (shape, dtype) = descs
    if mshape is not None and shape is not None and mshape != shape:
        raise op_error(ValueError, op, "mask and input must have the same shape", descs)
    if mdtype.kind != "b":
        raise op_error(TypeError, op, "mask must be a bool tensor", descs)
    return [TensorDesc(None, dtype), TensorDesc(None, _int32)]


@def_kernel(CondTake)
def _cpu_condtake(op, mask, x):
    idx = np.flatnonzero(mask)
    return (x.reshape(-1)[idx], idx.astype(_int32))


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


def _crop(x, shape, axis):
    # The part of x that lines up with an index of ``shape`` (all of x along ``axis``).
    if all(a == b for d, (a, b) in enumerate(zip(x.shape, shape)) if d != axis):
        return x
    return x[tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(shape))]


@def_kernel(Gather)
def _cpu_gather(op, x, index):
    axis = op.axis % x.ndim
    src = _crop(x, index.shape, axis)
    n = x.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"Gather: index out of range for axis {axis} of size {n} "
                         f"(input shape {x.shape})")
    return (np.take_along_axis(src, index, axis=axis),)


@def_infer(Scatter)
@def_infer(ScatterAdd)
def _infer_scatter(op, descs):
    _nargs(op, descs, 3)
    _check_gather(op, descs, "input and index")
    if descs[1][0] is not None and descs[2][0] is not None and descs[1][0] != descs[2][0]:
        raise op_error(ValueError, op, "index and source must have the same shape", descs)
    return [TensorDesc(descs[0][0], descs[0][1])]


@def_kernel(Scatter)
def _cpu_scatter(op, x, index, source):
    axis = op.axis % x.ndim
    out = x.copy()
    n = x.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"Scatter: index out of range for axis {axis} of size {n} "
                         f"(input shape {x.shape})")
    np.put_along_axis(_crop(out, index.shape, axis), index, source.astype(x.dtype, copy=False),
                      axis=axis)
    return (out,)


@def_kernel(ScatterAdd)
def _cpu_scatter_add(op, x, index, source):
    axis = op.axis % x.ndim
    out = x.copy()
    n = x.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"ScatterAdd: index out of range for axis {axis} of size {n} "
                         f"(input shape {x.shape})")
    # The full coordinates of every source element: index along ``axis``, its own position on the
    # other axes (np.add.at needs them spelled out to accumulate repeated targets).
    coords = tuple(index if d == axis else
                   np.arange(s).reshape([-1 if e == d else 1 for e in range(index.ndim)])
                   for d, s in enumerate(index.shape))
    np.add.at(_crop(out, index.shape, axis), coords, source.astype(x.dtype, copy=False))
    return (out,)


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


@def_kernel(Diag)
def _cpu_diag(op, x):
    return (np.diag(x, op.k).copy(),)


# -- backward rules -------------------------------------------------------------------------------
# Rules compute with ``apply`` (through ``gradutil``) so that a grad key recording above the running
# one sees them: higher-order gradients.  Shapes come from the forward tensors, which know them.
# ``gradutil`` is imported here, at the end: it imports this module's ``Reshape``/``Broadcast``
# while the package loads, and its functions are looked up only when a rule runs.
from . import gradutil as gu  # noqa: E402


def grad_rule(cls):
    """``def_backward`` for rules that may assume some input gradient is wanted and some output
    gradient is not zero: the wrapper answers all-``None`` otherwise."""
    def deco(fn):
        def rule(op, inputs, outputs, grads, needs):
            if not any(needs) or all(g is None for g in grads):
                return [None] * len(inputs)
            return fn(op, inputs, outputs, grads, needs)
        rule.__name__ = rule.__qualname__ = fn.__name__
        rule.__doc__ = fn.__doc__
        return def_backward(cls)(rule)
    return deco


def grad_like(g, x):
    """``g`` as the gradient of ``x``: ``None`` for an input that is not float (indices, masks),
    else in ``x``'s dtype."""
    if x.dtype.kind not in "fc":
        return None
    return gu.cast(g, x.dtype)


def zeros(shape, like):
    """A zero tensor of ``shape`` with ``like``'s dtype and device."""
    return gu.run(gu.cached_op(Fill, tuple(shape), 0, like.dtype, like.device))


def reshape(g, shape):
    """``g`` reshaped to ``shape`` (no op when it has it)."""
    shape = tuple(shape)
    return g if g.shape == shape else gu.run(gu.cached_op(Reshape, shape), g)


def reduce_sum(g, axes, keepdims):
    from .reduce import Reduce  # reduce.py imports this module
    return gu.run(gu.cached_op(Reduce, "sum", axes, keepdims), g)


def sum_to_value(g, shape):
    """``g`` (a gradient of an indexed region) summed to the ``shape`` of the value assigned there.

    Like ``gu.sum_to``, and the value may also have extra leading size-1 axes, which numpy drops
    when it assigns.
    """
    shape = tuple(shape)
    core = shape
    while len(core) > g.ndim and core[0] == 1:
        core = core[1:]
    return reshape(gu.sum_to(g, core), shape)


@grad_rule(Reshape)
def _grad_reshape(op, inputs, outputs, grads, needs):
    return [grad_like(reshape(grads[0], inputs[0].shape), inputs[0])]


@grad_rule(Broadcast)
def _grad_broadcast(op, inputs, outputs, grads, needs):
    return [grad_like(gu.sum_to(grads[0], inputs[0].shape), inputs[0])]


@grad_rule(Dimshuffle)
def _grad_dimshuffle(op, inputs, outputs, grads, needs):
    g = grads[0]
    axes = [p for p in op.pattern if p != "x"]
    if len(axes) != len(op.pattern):  # drop the new axes first
        g = reshape(g, tuple(s for s, p in zip(g.shape, op.pattern) if p != "x"))
    inverse = tuple(int(a) for a in np.argsort(axes))
    if inverse != tuple(range(len(axes))):
        g = gu.run(gu.cached_op(Dimshuffle, inverse), g)
    return [grad_like(g, inputs[0])]


def _grad_as_reshape(op, inputs, outputs, grads, needs):
    return [grad_like(reshape(grads[0], inputs[0].shape), inputs[0])]


grad_rule(AddAxis)(_grad_as_reshape)
grad_rule(RemoveAxis)(_grad_as_reshape)


@grad_rule(Concat)
def _grad_concat(op, inputs, outputs, grads, needs):
    g = grads[0]
    if len(inputs) == 1:
        parts = [g]
    else:
        # 0-d inputs are concatenated as one-element vectors (the scalar plugin sits below grad).
        sections = tuple(x.shape[op.axis] if x.ndim else 1 for x in inputs)
        parts = gu.runs(gu.cached_op(Split, op.axis, sections), g)
    return [grad_like(reshape(p, x.shape), x) if need else None
            for p, x, need in zip(parts, inputs, needs)]


@grad_rule(Stack)
def _grad_stack(op, inputs, outputs, grads, needs):
    from .indexing import Subtensor  # indexing.py imports this module
    g = grads[0]
    axis = op.axis % (inputs[0].ndim + 1)
    lead = (("slice", None, None, None),) * axis
    return [grad_like(gu.run(gu.cached_op(Subtensor, lead + (("int", i),)), g), x) if need else None
            for i, (x, need) in enumerate(zip(inputs, needs))]


@grad_rule(Split)
def _grad_split(op, inputs, outputs, grads, needs):
    # Outputs without a gradient contribute zeros.
    like = next(g for g in grads if g is not None)
    parts = [zeros(y.shape, like) if g is None else g for g, y in zip(grads, outputs)]
    g = parts[0] if len(parts) == 1 else gu.run(gu.cached_op(Concat, op.axis), *parts)
    return [grad_like(g, inputs[0])]


@grad_rule(Tile)
def _grad_tile(op, inputs, outputs, grads, needs):
    # Output axis d holds reps[d] copies of input axis d, copy-major: view it as (reps, size)
    # pairs and sum over the copies.
    g, x = grads[0], inputs[0]
    n = max(x.ndim, len(op.reps))
    shape = (1,) * (n - x.ndim) + tuple(x.shape)
    reps = (1,) * (n - len(op.reps)) + tuple(op.reps)
    axes = tuple(2 * d for d in range(n) if reps[d] != 1)
    if axes:
        pairs = tuple(v for r, s in zip(reps, shape) for v in (r, s))
        g = reduce_sum(reshape(g, pairs), axes, True)
    return [grad_like(reshape(g, x.shape), x)]


@grad_rule(Repeat)
def _grad_repeat(op, inputs, outputs, grads, needs):
    # Each input element became ``repeats`` neighbours along the axis: sum them.
    g, x = grads[0], inputs[0]
    if op.repeats != 1:
        axis = op.axis % x.ndim
        shape = tuple(x.shape)
        g = reshape(g, shape[:axis + 1] + (op.repeats,) + shape[axis + 1:])
        g = reduce_sum(g, axis + 1, False)
    return [grad_like(g, x)]


@grad_rule(Roll)
def _grad_roll(op, inputs, outputs, grads, needs):
    back = gu.cached_op(Roll, tuple(-s for s in op.shift), op.axis)
    return [grad_like(gu.run(back, grads[0]), inputs[0])]


_where = Where()


@grad_rule(Where)
def _grad_where(op, inputs, outputs, grads, needs):
    mask, x, y = inputs
    g = grads[0]
    zero = zeros((), g)
    gx = gy = None
    if needs[1]:
        gx = grad_like(gu.sum_to(gu.run(_where, mask, g, zero), x.shape), x)
    if needs[2]:
        gy = grad_like(gu.sum_to(gu.run(_where, mask, zero, g), y.shape), y)
    return [None, gx, gy]


@grad_rule(CondTake)
def _grad_condtake(op, inputs, outputs, grads, needs):
    # The values came from distinct positions: write their gradient back under the mask.
    from .indexing import IndexingSetMultiAxisVec  # indexing.py imports this module
    mask, x = inputs
    g = grads[0]
    if g is None or not needs[1]:
        return [None, None]
    put = gu.cached_op(IndexingSetMultiAxisVec, (("mask",),))
    return [None, grad_like(gu.run(put, zeros(x.shape, g), g, mask), x)]


@grad_rule(Gather)
def _grad_gather(op, inputs, outputs, grads, needs):
    # An element gathered several times collects every copy's gradient.
    x, index = inputs
    g = grads[0]
    gx = gu.run(gu.cached_op(ScatterAdd, op.axis), zeros(x.shape, g), index, g)
    return [grad_like(gx, x), None]


@grad_rule(Scatter)
def _grad_scatter(op, inputs, outputs, grads, needs):
    # As in MegEngine (and torch's scatter): with repeated indices every source element that aims
    # at a position gets its gradient, though only one of them was written.
    x, index, source = inputs
    g = grads[0]
    gx = gs = None
    if needs[0]:
        gx = grad_like(gu.run(gu.cached_op(Scatter, op.axis), g, index, zeros(index.shape, g)), x)
    if needs[2]:
        gs = grad_like(gu.run(gu.cached_op(Gather, op.axis), g, index), source)
    return [gx, None, gs]


@grad_rule(ScatterAdd)
def _grad_scatter_add(op, inputs, outputs, grads, needs):
    x, index, source = inputs
    g = grads[0]
    gs = grad_like(gu.run(gu.cached_op(Gather, op.axis), g, index), source) if needs[2] else None
    return [grad_like(g, x) if needs[0] else None, None, gs]


@grad_rule(Diag)
def _grad_diag(op, inputs, outputs, grads, needs):
    g, x = grads[0], inputs[0]
    if x.ndim == 1:  # the vector went onto diagonal k: read it back
        return [grad_like(gu.run(gu.cached_op(Diag, op.k), g), x)]
    # The diagonal of an (r, c) matrix is a strided slice of its flat form: write g there.
    from .indexing import SetSubtensor  # indexing.py imports this module
    r, c = x.shape
    n = g.shape[0]  # the output's length (a single output may reach the rule as None)
    start = op.k if op.k >= 0 else -op.k * c
    stop = start + (n - 1) * (c + 1) + 1 if n else start
    put = gu.cached_op(SetSubtensor, (("slice", start, stop, c + 1),))
    return [grad_like(reshape(gu.run(put, zeros((r * c,), g), g), (r, c)), x)]
