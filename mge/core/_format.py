"""Tensor formats (MegEngine's ``Tensor(..., format="nhwc")``): a label carried from op to op.

MegEngine can keep a 4-D tensor in NHWC memory order while it shows the NCHW shape; its format
transformation makes ops on such tensors produce NHWC results.  mge keeps every tensor in its
logical (NCHW) layout, so values and shapes are the same either way; what remains is the label:
``x.format``.  This layer carries it as MegEngine does: an op that has an ``"nhwc"`` input labels
its 4-D outputs ``"nhwc"`` (elementwise ops, conversions, concat, convolution, pooling, batch
norm, reshapes and broadcasts that stay 4-D, indexing, ...), except the ops MegEngine's
transformation does not handle and those that reorder axes (``transpose``, ``pad``, ``where``),
whose outputs are ``"default"``; writing a value over a whole tensor (``x[...] = v``) gives
the result, and through the in-place update ``x`` itself, the format of ``v``.

The layer goes on the stack (above ``grad``) the first time a tensor gets a format other than
``"default"``, so programs that never use formats pay nothing per op.
"""
from .._core.ops.assign import Assign
from .._core.ops.indexing import IndexingSetMultiAxisVec, SetSubtensor
from .._core.ops.nn import Pad
from .._core.ops.shape import Dimshuffle, Where
from . import Transformation

__all__ = ["FormatTransformation", "ensure_installed", "uninstall"]

#: ops whose outputs never keep the format (they reorder axes, or MegEngine's format
#: transformation passes them by)
_DEFAULT_OUT = (Dimshuffle, Pad, Where)

#: ops that write a value into a tensor: when the value covers the whole result (``x[...] = v``),
#: the result has the value's format
_SETS = (SetSubtensor, IndexingSetMultiAxisVec)

_installed = None


class FormatTransformation(Transformation):
    """Carries the ``"nhwc"`` format label from inputs to 4-D outputs (see the module's doc)."""

    name = "format"
    position = "before:grad"

    def apply(self, op, inputs, next):
        outputs = next(op, inputs)
        cls = type(op)
        if cls is Assign:
            target, value = inputs
            fmt = value.__dict__.get("_format") if hasattr(value, "__dict__") else None
            if fmt is None:
                target.__dict__.pop("_format", None)
            else:
                target.__dict__["_format"] = fmt
            return outputs
        if cls in _SETS:
            value = inputs[1]
            shape = outputs[0]._info.shape
            if shape is not None and value._info.shape == shape:
                fmt = value.__dict__.get("_format")
                if fmt is not None:
                    outputs[0].__dict__["_format"] = fmt
                return outputs
        for x in inputs:
            d = getattr(x, "__dict__", None)
            if d and d.get("_format") == "nhwc":
                break
        else:
            return outputs
        if cls in _DEFAULT_OUT:
            return outputs
        for y in outputs:
            shape = y._info.shape
            if shape is not None and len(shape) == 4:
                y.__dict__["_format"] = "nhwc"
        return outputs


def ensure_installed():
    """Put the format layer on the stack (once)."""
    global _installed
    if _installed is None:
        from .._core.plugins import stack
        layer = FormatTransformation()
        stack.register(layer)
        _installed = layer
    return _installed


def uninstall():
    """Take the format layer off the stack (tests; labels already set stay on their tensors, and
    the next ``"nhwc"`` label puts the layer back)."""
    global _installed
    if _installed is not None:
        from .._core.plugins import stack
        stack.unregister(_installed)
        _installed = None
