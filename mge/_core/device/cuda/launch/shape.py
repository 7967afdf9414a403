"""Launchers of the shape ops that need no kernel: ``Reshape``, ``AddAxis``, ``RemoveAxis``,
``Dimshuffle``, ``Broadcast`` and ``BroadcastTo`` return *views* of their input -- a new shape and
new strides over the same block (``CudaDevice.view``), no copy, no launch.

* ``AddAxis``, ``RemoveAxis``, ``Dimshuffle`` and ``Broadcast`` are views of any input, strided
  or not: a new axis of size 1 (its stride never matters), a dropped one, permuted strides,
  stride 0 where a dim broadcasts.
* ``Reshape`` is a view of a dense input; a strided one is made dense first (one relayout
  kernel), as numpy's ``reshape`` copies when it must.
* ``BroadcastTo`` reads its target shape (a small integer tensor) back to the host first: the
  output's shape is needed to make the view.

Launchers registered without ``strided=True`` get such views made dense before they run
(``launch/__init__.py``), so a view reaches only kernels that follow strides.
"""
from ....ops.shape import (AddAxis, Broadcast, BroadcastTo, Dimshuffle, RemoveAxis, Reshape,
                           add_axis_shape, broadcast_target, reshape_target)
from . import def_launcher
from .elemwise import broadcast_strides

__all__ = []


@def_launcher(Reshape, strided=True)
def _reshape(device, op, inputs, descs):
    (x,) = inputs
    shape = descs[0].shape
    if shape is None:
        shape = reshape_target(op, x.shape, op.shape, [(x.shape, x.dtype)])
    return (device.view(device.contiguous(x), tuple(shape)),)


@def_launcher(AddAxis, strided=True)
def _addaxis(device, op, inputs, descs):
    (x,) = inputs
    shape = add_axis_shape(x.shape, op.axis)
    if shape is None:
        raise ValueError(f"{op.name}: invalid axis {op.axis} for a {x.ndim}-d input")
    ndim = len(shape)
    dims = list(zip(x.shape, x.strides))
    for a in sorted(a % ndim for a in op.axis):  # as add_axis_shape inserts them
        dims.insert(a, (1, 0))
    return (device.view(x, shape, tuple(s for _, s in dims)),)


@def_launcher(RemoveAxis, strided=True)
def _removeaxis(device, op, inputs, descs):
    (x,) = inputs
    axes = {a % x.ndim for a in op.axis}
    keep = [d for d in range(x.ndim) if d not in axes]
    return (device.view(x, tuple(x.shape[d] for d in keep), tuple(x.strides[d] for d in keep)),)


@def_launcher(Dimshuffle, strided=True)
def _dimshuffle(device, op, inputs, descs):
    (x,) = inputs
    dims = [(1, 0) if p == "x" else (x.shape[p], x.strides[p]) for p in op.pattern]
    return (device.view(x, tuple(n for n, _ in dims), tuple(s for _, s in dims)),)


@def_launcher(Broadcast, strided=True)
def _broadcast(device, op, inputs, descs):
    (x,) = inputs
    shape = tuple(op.shape)
    return (device.view(x, shape, broadcast_strides(x, shape)),)


@def_launcher(BroadcastTo, strided=True)
def _broadcast_to(device, op, inputs, descs):
    x, target = inputs
    values = device.to_host(target).reshape(-1)
    shape = broadcast_target(op, x.shape, tuple(int(v) for v in values.tolist()))
    return (device.view(x, shape, broadcast_strides(x, shape)),)
