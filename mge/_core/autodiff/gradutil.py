"""The helpers backward rules compute with (``rules/``).

A rule's ops go to the layer *below* the grad transformation that runs the backward (its
``next``), not back to the top of the stack: the running key's own layer is not walked again, and
a key recording further down (an outer ``GradManager``) records them, which gives higher-order
gradients.  The grad transformation says where that is with ``below(next)`` around each rule;
outside a backward (a rule called directly) the ops go through ``apply``.  Python numbers among
the inputs become tensors as ``apply`` makes them.

Rules get their ops with ``cls.get(*args)``, one shared instance per parameter set, so a backward
pass builds no new ``OpDef`` objects once warm.
"""
import threading

from .. import _accel
from ..ops.elemwise import TypeCvt as _TypeCvt, elemwise_op as _elemwise_op
from ..ops.reduce import Reduce as _Reduce
from ..ops.shape import Broadcast as _Broadcast, Reshape as _Reshape

__all__ = [
    "below", "run", "runs", "ew", "cached_op", "sum_to", "fit", "cast", "unreduce",
    "keepdims_shape", "broadcast", "reshape", "output",
]

_dispatch = _accel.load("mge._core.dispatch")
_apply = _dispatch.apply
_convert = _dispatch.convert_inputs
_local = threading.local()  # .next: where the running rule's ops go (per thread)


class below:
    """``with below(next):`` -- the ops of the rules run inside go to ``next(op, inputs)``."""

    __slots__ = ("next", "saved")

    def __init__(self, next):
        self.next = next

    def __enter__(self):
        self.saved = getattr(_local, "next", None)
        _local.next = self.next
        return self

    def __exit__(self, *exc):
        _local.next = self.saved
        return False


def runs(op, *inputs):
    """``op`` applied to ``inputs`` by the layer below the running grad transformation: every
    output, as a tuple."""
    nxt = getattr(_local, "next", None)
    if nxt is None:
        return _apply(op, *inputs)
    return nxt(op, _convert(inputs))


def run(op, *inputs):
    """``runs(op, *inputs)[0]``: the first (usually only) output."""
    return runs(op, *inputs)[0]


def ew(mode, *inputs):
    """The ``Elemwise(mode)`` of ``inputs`` (Python numbers take the tensors' dtype)."""
    return runs(_elemwise_op(mode), *inputs)[0]


def output(op, inputs, outputs, i=0):
    """The forward output ``i`` of ``op``, recomputed from ``inputs`` when it is ``None``.

    The grad transformation keeps a single output alive only for rules registered with
    ``keeps_outputs``; a rule that reads an output gets it through here, so that it still works
    when called with ``None`` for an output (e.g. by a custom caller).
    """
    y = outputs[i]
    if y is None:
        y = runs(op, *inputs)[i]
    return y


def cached_op(cls, *args):
    """``cls.get(*args)``: the shared ``cls(*args)`` (kept for rules not yet using ``get``)."""
    return cls.get(*args)


def cast(g, dtype):
    """``g`` converted to ``dtype`` (no op when it already has it)."""
    if g.dtype == dtype:
        return g
    return run(_TypeCvt.get(dtype), g)


def reshape(g, shape):
    """``g`` reshaped to ``shape`` (no op when it has it)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    return run(_Reshape.get(shape), g)


def sum_to(g, shape):
    """Sum a gradient of a broadcast result back to the input's ``shape``.

    One ``Reduce`` in the usual cases (only leading axes added, or only size-1 axes stretched);
    a ``Reduce`` and a ``Reshape`` when both happened.
    """
    gshape = g.shape
    shape = tuple(shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    if lead < 0:  # e.g. a 0-d gradient of a one-element input: same values, other shape
        return run(_Reshape.get(shape), g)
    stretched = tuple(i + lead for i, s in enumerate(shape) if s == 1 and gshape[i + lead] != 1)
    if not stretched:  # only leading axes were added
        return run(_Reduce.get("sum", tuple(range(lead)), False), g)
    if lead == 0:
        return run(_Reduce.get("sum", stretched, True), g)
    r = run(_Reduce.get("sum", tuple(range(lead)) + stretched, False), g)
    return run(_Reshape.get(shape), r)


def fit(g, x):
    """``g`` made a gradient of ``x``: summed over broadcast axes, in ``x``'s dtype."""
    shape = x.shape
    if g.shape != shape:
        g = sum_to(g, shape)
    dtype = x.dtype
    if g.dtype != dtype:
        g = cast(g, dtype)
    return g


def keepdims_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as size 1."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def unreduce(g, shape, axes, keepdims):
    """A gradient of a reduction over ``axes`` made broadcastable against the input's ``shape``.

    Without ``keepdims`` the reduced axes are put back as size 1 (a ``Reshape``), except when they
    are all leading axes: numpy broadcasting adds those by itself.
    """
    if keepdims or not axes or axes == tuple(range(len(axes))):
        return g
    return reshape(g, keepdims_shape(shape, axes))


def broadcast(g, shape):
    """``g`` broadcast to ``shape`` (no op when it has it)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    return run(_Broadcast.get(shape), g)
