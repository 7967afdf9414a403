"""CPU kernels of the shape ops (``mge/_core/ops/shape.py``).

Kernels may return numpy views of their inputs: the storage of a tensor is never written in place.
"""
import numpy as np

from ....ops.shape import (
    AddAxis, Broadcast, BroadcastTo, Concat, CondTake, Diag, Dimshuffle, Gather, RemoveAxis, Repeat, Reshape,
    Roll, Scatter, ScatterAdd, Split, Stack, Tile, Where,
)
from ....ops.shape import add_axis_shape, broadcast_target
from ..table import def_kernel

_int32 = np.dtype("int32")
_bool = np.dtype("bool")


@def_kernel(Reshape)
def _cpu_reshape(op, x):
    return (x.reshape(op.shape),)


@def_kernel(Broadcast)
def _cpu_broadcast(op, x):
    return (np.broadcast_to(x, op.shape),)


@def_kernel(BroadcastTo)
def _cpu_broadcast_to(op, x, shape):
    target = broadcast_target(op, x.shape, tuple(int(v) for v in shape.reshape(-1).tolist()))
    return (np.broadcast_to(x, target),)


@def_kernel(Dimshuffle)
def _cpu_dimshuffle(op, x):
    pattern = op.pattern
    if "x" not in pattern:
        return (x.transpose(pattern),)
    y = x.transpose([p for p in pattern if p != "x"])
    return (y.reshape(tuple(1 if p == "x" else x.shape[p] for p in pattern)),)


@def_kernel(AddAxis)
def _cpu_addaxis(op, x):
    # a reshape: repeated axes add one axis each (np.expand_dims refuses them)
    return (x.reshape(add_axis_shape(x.shape, op.axis)),)


@def_kernel(RemoveAxis)
def _cpu_removeaxis(op, x):
    return (np.squeeze(x, op.axis),)


@def_kernel(Concat)
def _cpu_concat(op, *xs):
    return (np.concatenate(xs, axis=op.axis),)


@def_kernel(Stack)
def _cpu_stack(op, *xs):
    return (np.stack(xs, axis=op.axis),)


@def_kernel(Split)
def _cpu_split(op, x):
    points = np.cumsum(op.sections[:-1])
    return tuple(np.split(x, points, axis=op.axis))


@def_kernel(Tile)
def _cpu_tile(op, x):
    return (np.tile(x, op.reps),)


@def_kernel(Repeat)
def _cpu_repeat(op, x):
    return (np.repeat(x, op.repeats, axis=op.axis),)


@def_kernel(Roll)
def _cpu_roll(op, x):
    return (np.roll(x, op.shift, axis=op.axis),)


@def_kernel(Where)
def _cpu_where(op, mask, x, y):
    # dtype promotion may have cast the mask to the dtype of x and y: nonzero is true.
    if mask.dtype != _bool:
        mask = mask != 0
    return (np.where(mask, x, y),)


@def_kernel(CondTake)
def _cpu_condtake(op, mask, x):
    idx = np.flatnonzero(mask)
    return (x.reshape(-1)[idx], idx.astype(_int32))


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


@def_kernel(Diag)
def _cpu_diag(op, x):
    return (np.diag(x, op.k).copy(),)
