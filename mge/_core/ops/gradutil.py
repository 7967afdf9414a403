"""Helpers shared by the backward rules of the op files.

Rules compute with ``apply`` so that they walk the transformation stack (a grad key recording
above the one running backward sees them: higher-order gradients).  ``mge.core.apply`` is imported
on first use, because the op files are imported before the dispatcher exists.

The helpers keep one op instance per parameter set, so a backward pass builds no new ``OpDef``
objects once warm.
"""
__all__ = [
    "run", "runs", "ew", "cached_op", "sum_to", "fit", "cast", "unreduce", "keepdims_shape",
    "broadcast", "reshape", "output",
]

# Bound on first use by _init: the op modules import this one, and each other, while loading.
_apply = None
_elemwise_op = _TypeCvt = _Reduce = _Reshape = _Broadcast = None
_ops = {}


def _init():
    global _apply, _elemwise_op, _TypeCvt, _Reduce, _Reshape, _Broadcast
    from mge.core import apply
    from .elemwise import TypeCvt, elemwise_op
    from .reduce import Reduce
    from .shape import Broadcast, Reshape
    _elemwise_op, _TypeCvt, _Reduce, _Reshape, _Broadcast = (
        elemwise_op, TypeCvt, Reduce, Reshape, Broadcast)
    _apply = apply


def runs(op, *inputs):
    """``apply(op, *inputs)``: every output, as a tuple."""
    if _apply is None:
        _init()
    return _apply(op, *inputs)


def run(op, *inputs):
    """``apply(op, *inputs)[0]``: the first (usually only) output."""
    if _apply is None:
        _init()
    return _apply(op, *inputs)[0]


def ew(mode, *inputs):
    """The ``Elemwise(mode)`` of ``inputs`` (Python numbers take the tensors' dtype)."""
    if _apply is None:
        _init()
    return _apply(_elemwise_op(mode), *inputs)[0]


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
    """One shared ``cls(*args)`` per parameter set (ops are immutable)."""
    key = (cls, args)
    op = _ops.get(key)
    if op is None:
        if len(_ops) > 4096:
            _ops.clear()
        op = _ops[key] = cls(*args)
    return op


def cast(g, dtype):
    """``g`` converted to ``dtype`` (no op when it already has it)."""
    if g.dtype == dtype:
        return g
    if _apply is None:
        _init()
    return run(cached_op(_TypeCvt, dtype), g)


def reshape(g, shape):
    """``g`` reshaped to ``shape`` (no op when it has it)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    if _apply is None:
        _init()
    return run(cached_op(_Reshape, shape), g)


def sum_to(g, shape):
    """Sum a gradient of a broadcast result back to the input's ``shape``.

    One ``Reduce`` in the usual cases (only leading axes added, or only size-1 axes stretched);
    a ``Reduce`` and a ``Reshape`` when both happened.
    """
    gshape = g.shape
    shape = tuple(shape)
    if gshape == shape:
        return g
    if _apply is None:
        _init()
    lead = len(gshape) - len(shape)
    if lead < 0:  # e.g. a 0-d gradient of a one-element input: same values, other shape
        return run(cached_op(_Reshape, shape), g)
    stretched = tuple(i + lead for i, s in enumerate(shape) if s == 1 and gshape[i + lead] != 1)
    if not stretched:  # only leading axes were added
        return run(cached_op(_Reduce, "sum", tuple(range(lead)), False), g)
    if lead == 0:
        return run(cached_op(_Reduce, "sum", stretched, True), g)
    r = run(cached_op(_Reduce, "sum", tuple(range(lead)) + stretched, False), g)
    return run(cached_op(_Reshape, shape), r)


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
    if _apply is None:
        _init()
    return run(cached_op(_Broadcast, shape), g)
