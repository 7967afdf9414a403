"""ONNX export of a traced function: a ``trace`` recording turned into an ONNX ``ModelProto``.

``trace.dump(file, format="onnx")`` and :func:`export_onnx` write the last call's recording as an
ONNX model (what MegEngine cannot do: it writes its own ``.mge`` format only).  The walk is
``mge/jit/dump.py``'s: the ops the outputs depend on, in execution order, each reading vars that
are arguments (the graph inputs), captured tensors (initializers, with their recorded values) or
earlier ops' outputs.  Every dim is the recorded one: the model takes inputs of the traced shapes.

Each op class has one rule in ``_RULES`` (a small function per op family, as ``dump`` keeps one
entry per op): ``rule(g, op, ins, outs) -> [name, ...]``, with ``ins`` and ``outs`` the op's
values (``_Value``: ONNX name, recorded shape and dtype; an output's name is ``None``), emitting
ONNX nodes through the :class:`_Graph` ``g`` and returning the name of each output.  An op without
a rule, or with parameters its rule cannot express, is an :class:`OnnxExportError` naming the op,
its parameters and its index in the recording.

``onnx`` is the optional extra ``mge[onnx]``; it is imported on the first export only, so
``import mge.jit`` works without it.
"""
import json
import math
import os

import numpy as np

from .._core.errors import TraceError
from .._core.ops.creation import Arange, Eye, Fill, Linspace
from .._core.ops.elemwise import Elemwise, TypeCvt
from .._core.ops.indexing import IndexingMultiAxisVec, Subtensor
from .._core.ops.matmul import BatchedMatrixMul, Dot, MatrixMul
from .._core.ops.misc import Copy, Detach, Identity
from .._core.ops.nn import (IndexingOneHot, LogSoftmax, Pad, Softmax, SoftmaxCrossEntropy,
                             softmax_axes)
from .._core.ops.nn_conv import Convolution, ConvolutionBackwardData
from .._core.ops.nn_norm import BatchNorm, LayerNorm, layer_norm_range
from .._core.ops.nn_pool import AdaptivePooling, Pooling
from .._core.ops.reduce import Argmax, Argmin, CumSum, Reduce, normalize_axes, reduced_shape
from .._core.ops.shape import (AddAxis, Broadcast, Concat, Dimshuffle, Gather, RemoveAxis, Repeat,
                               Reshape, Split, Stack, Tile, Where)
from .dump import FORMATS, _check_names, _mge_version, _needed_ops, dump_names

__all__ = ["export_onnx", "to_onnx", "save_onnx", "OnnxExportError", "DEFAULT_OPSET",
           "MIN_OPSET"]

#: The opset written when none is asked for.
DEFAULT_OPSET = 17
#: The oldest opset the rules can write (Softmax over one axis, Split/Squeeze with tensor inputs).
MIN_OPSET = 13
#: ``trace.dump`` keywords that only ``format="onnx"`` takes.
DUMP_OPTIONS = ("opset",)
_INSTALL = 'pip install "mge[onnx]"'
_INT64_MIN = -(1 << 63)


class OnnxExportError(TraceError, NotImplementedError):
    """An op of the recording that ONNX export cannot write (no mapping, or parameters the mapping
    cannot express).  The message names the op's index in the recording, its type and parameters.
    """


class _Unsupported(Exception):
    """Raised by a rule: this op's parameters have no ONNX form (the reason is the message)."""


def _onnx():
    """The ``onnx`` module, imported on first use (the optional extra ``mge[onnx]``)."""
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401  (a submodule the export uses)
    except ImportError as e:
        raise ImportError(f"ONNX export needs the onnx package: {_INSTALL}") from e
    return onnx


class _Value:
    """A value an op reads or writes: its ONNX ``name``, recorded ``shape`` and numpy ``dtype``."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)

    @property
    def ndim(self):
        return len(self.shape)


# -- the graph being built -------------------------------------------------------------------------
class _Graph:
    """ONNX nodes and initializers in the making, with helpers the rules share."""

    def __init__(self, onnx, opset, taken):
        self.onnx, self.helper, self.opset = onnx, onnx.helper, opset
        self.nodes, self.initializers = [], []
        self._taken = set(taken)  # user-given names: internal names never collide with them
        self._count = 0

    def fresh(self, hint):
        """A name no other value has."""
        while True:
            self._count += 1
            name = f"{hint}_{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def node(self, op_type, inputs, n_outputs=1, **attrs):
        """Emit one node; its output name (a list of names when ``n_outputs`` is not 1)."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self.helper.make_node(op_type, list(inputs), outs,
                                                name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0] if n_outputs == 1 else outs

    def initializer(self, value, name=None):
        """Add ``value`` (an array) as an initializer; its name."""
        name = name or self.fresh("const")
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def scalar(self, value, dtype):
        """A 0-d constant of ``dtype`` (the operand type of the op that reads it)."""
        return self.initializer(np.array(value, dtype=dtype))

    def ints(self, values):
        """A 1-d int64 constant (shapes, axes, pads, split sizes)."""
        return self.initializer(np.array(list(values), dtype=np.int64))

    def cast(self, v, dtype):
        """``v``'s name, converted to ``dtype`` when it is of another dtype."""
        dtype = np.dtype(dtype)
        if v.dtype == dtype:
            return v.name
        return self.node("Cast", [v.name], to=self.helper.np_dtype_to_tensor_dtype(dtype))

    def reshape(self, name, shape):
        """``name`` reshaped to the static ``shape`` (zero dims kept as zeros, not copied)."""
        zero = 0 in shape and self.opset >= 14
        return self.node("Reshape", [name, self.ints(shape)], allowzero=1 if zero else None)

    def reduce(self, op_type, name, axes, keepdims):
        """A Reduce* node over ``axes``: an attribute before opset 18, an input from then on
        (ReduceSum: from 13)."""
        keep = int(bool(keepdims))
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.node(op_type, [name, self.ints(axes)], keepdims=keep)
        return self.node(op_type, [name], axes=list(axes), keepdims=keep)


def _finish(g, name, got_shape, out):
    """``name`` (of shape ``got_shape``) as the recorded output ``out``: reshaped if needed."""
    if tuple(got_shape) == out.shape:
        return name
    return g.reshape(name, out.shape)


# -- elementwise -----------------------------------------------------------------------------------
_UNARY = {
    "neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sign": "Sign",
    "sin": "Sin", "cos": "Cos", "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan",
    "sinh": "Sinh", "cosh": "Cosh", "tanh": "Tanh", "asinh": "Asinh", "acosh": "Acosh",
    "atanh": "Atanh", "sigmoid": "Sigmoid", "softplus": "Softplus", "erf": "Erf",
    "isnan": "IsNaN", "isinf": "IsInf", "not": "Not",
}
_BINARY = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "true_div": "Div", "pow": "Pow", "max": "Max",
    "min": "Min", "lt": "Less", "leq": "LessOrEqual", "gt": "Greater", "geq": "GreaterOrEqual",
    "eq": "Equal", "and": "And", "or": "Or", "xor": "Xor",
}
_COMPARE = frozenset(["lt", "leq", "gt", "geq", "eq", "neq"])
_LOGIC = frozenset(["and", "or", "xor", "not"])
_KEEP_INPUT = frozenset(["isnan", "isinf"])


def _elemwise_operands(g, mode, ins, out):
    """The inputs as the ONNX op wants them: one dtype, the mode's computing dtype."""
    if mode in _KEEP_INPUT:
        return [v.name for v in ins], ins[0].dtype
    if mode in _LOGIC:
        dtype = np.dtype(bool)
    elif mode in _COMPARE:
        dtype = np.result_type(*[v.dtype for v in ins])
    elif mode in ("clip", "cond_leq_mov", "cond_lt_mov"):
        # the bounds (or the compared pair) meet in their common dtype; the result keeps x's
        dtype = np.result_type(*[v.dtype for v in ins])
    else:
        dtype = out.dtype
    return [g.cast(v, dtype) for v in ins], dtype


def _mode_gelu(g, x, dt):
    # MegEngine's exact gelu: x * (1 + erf(x / sqrt(2))) / 2
    erf = g.node("Erf", [g.node("Div", [x, g.scalar(math.sqrt(2.0), dt)])])
    return g.node("Mul", [g.node("Mul", [x, g.node("Add", [g.scalar(1, dt), erf])]),
                          g.scalar(0.5, dt)])


def _mode_hswish(g, x, dt):
    if g.opset >= 14:
        return g.node("HardSwish", [x])
    return g.node("Mul", [x, _mode_hsigmoid(g, x, dt)])


def _mode_hsigmoid(g, x, dt):
    # clip(x + 3, 0, 6) / 6 == clip(x / 6 + 1 / 2, 0, 1)
    return g.node("HardSigmoid", [x], alpha=1.0 / 6, beta=0.5)


def _mode_floor_div(g, a, b, dt):
    if dt.kind == "f":
        return g.node("Floor", [g.node("Div", [a, b])])
    # integers: ONNX Div truncates, numpy floors; a - (a mod b) (Python's mod, sign of b) divides
    # exactly
    rem = g.node("Mod", [a, b], fmod=0)
    return g.node("Div", [g.node("Sub", [a, rem]), b])


def _mode_round(g, x, dt):
    # halves away from zero (C's round), as MegEngine; ONNX Round goes to even
    if dt.kind != "f":
        return g.node("Identity", [x])
    mag = g.node("Floor", [g.node("Add", [g.node("Abs", [x]), g.scalar(0.5, dt)])])
    return g.node("Mul", [g.node("Sign", [x]), mag])


def _mode_clip(g, x, lo, hi, dt):
    # MegEngine's CLIP: x < lo gives lo, else x > hi gives hi (lo wins when lo > hi), NaN stays
    upper = g.node("Where", [g.node("Greater", [x, hi]), hi, x])
    return g.node("Where", [g.node("Less", [x, lo]), lo, upper])


def _mode_cond_mov(compare):
    def rule(g, a, b, c, dt):
        return g.node("Where", [g.node(compare, [a, b]), c, g.scalar(0, dt)])
    return rule


def _mode_relu(g, x, dt):
    if dt.kind == "f":
        return g.node("Relu", [x])
    return g.node("Max", [x, g.scalar(0, dt)])


_SPECIAL = {
    "square": lambda g, x, dt: g.node("Mul", [x, x]),
    "neq": lambda g, a, b, dt: g.node("Not", [g.node("Equal", [a, b])]),
    "mod": lambda g, a, b, dt: g.node("Mod", [a, b], fmod=1 if dt.kind == "f" else 0),
    "floor_div": _mode_floor_div,
    "expm1": lambda g, x, dt: g.node("Sub", [g.node("Exp", [x]), g.scalar(1, dt)]),
    "log1p": lambda g, x, dt: g.node("Log", [g.node("Add", [x, g.scalar(1, dt)])]),
    "rsqrt": lambda g, x, dt: g.node("Reciprocal", [g.node("Sqrt", [x])]),
    "logaddexp": lambda g, a, b, dt: g.node("Add", [
        g.node("Max", [a, b]),
        g.node("Softplus", [g.node("Neg", [g.node("Abs", [g.node("Sub", [a, b])])])])]),
    "ceil": lambda g, x, dt: g.node("Ceil" if dt.kind == "f" else "Identity", [x]),
    "floor": lambda g, x, dt: g.node("Floor" if dt.kind == "f" else "Identity", [x]),
    "round": _mode_round,
    "clip": _mode_clip,
    "relu": _mode_relu,
    "relu6": lambda g, x, dt: g.node("Min", [g.node("Max", [x, g.scalar(0, dt)]),
                                             g.scalar(6, dt)]),
    "hsigmoid": _mode_hsigmoid,
    "hswish": _mode_hswish,
    "gelu": _mode_gelu,
    "silu": lambda g, x, dt: g.node("Mul", [x, g.node("Sigmoid", [x])]),
    "logsigmoid": lambda g, x, dt: g.node("Neg", [g.node("Softplus", [g.node("Neg", [x])])]),
    "fuse_add_relu": lambda g, a, b, dt: g.node("Relu", [g.node("Add", [a, b])]),
    "switch_gt0": lambda g, x, dy, dt: g.node("Where", [
        g.node("Greater", [x, g.scalar(0, dt)]), dy, g.scalar(0, dt)]),
    "cond_leq_mov": _mode_cond_mov("LessOrEqual"),
    "cond_lt_mov": _mode_cond_mov("Less"),
}
_BOOL_BINARY = {"max": "Or", "min": "And"}  # max/min of bools (ONNX Max/Min take numbers only)


def _elemwise(g, op, ins, outs):
    mode, out = op.mode, outs[0]
    if mode not in _UNARY and mode not in _BINARY and mode not in _SPECIAL:
        raise _Unsupported(f"elementwise mode {mode!r} has no ONNX mapping")
    names, dtype = _elemwise_operands(g, mode, ins, out)
    if mode in _SPECIAL:
        y = _SPECIAL[mode](g, *names, dtype)
    elif mode in _BINARY and dtype.kind == "b" and mode in _BOOL_BINARY:
        y = g.node(_BOOL_BINARY[mode], names)
    else:
        y = g.node(_UNARY.get(mode) or _BINARY[mode], names)
    if mode in ("clip", "cond_leq_mov", "cond_lt_mov"):  # computed in the operands' common dtype
        y = g.cast(_Value(y, out.shape, dtype), out.dtype)
    return [y]


def _typecvt(g, op, ins, outs):
    return [g.node("Cast", [ins[0].name], to=g.helper.np_dtype_to_tensor_dtype(outs[0].dtype))]


def _identity(g, op, ins, outs):
    return [g.node("Identity", [ins[0].name])]


# -- matrix products -------------------------------------------------------------------------------
def _last_two_swapped(g, v, flag):
    if not flag or v.ndim < 2:
        return v.name
    perm = list(range(v.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return g.node("Transpose", [v.name], perm=perm)


def _matmul(g, op, ins, outs):
    # MatrixMul (2-D) and BatchedMatrixMul (numpy matmul: 1-D operands, broadcast batches) are
    # ONNX MatMul after the transposes; a Dot is MatMul of two vectors
    out = outs[0]
    a, b = (_Value(g.cast(v, out.dtype), v.shape, out.dtype) for v in ins)
    ta, tb = getattr(op, "transposeA", False), getattr(op, "transposeB", False)
    y = g.node("MatMul", [_last_two_swapped(g, a, ta), _last_two_swapped(g, b, tb)])
    return [_finish(g, y, _matmul_shape(a, b, ta, tb), out)]


def _matmul_shape(a, b, ta, tb):
    sa, sb = list(a.shape), list(b.shape)
    if ta and len(sa) >= 2:
        sa[-2:] = sa[-1], sa[-2]
    if tb and len(sb) >= 2:
        sb[-2:] = sb[-1], sb[-2]
    batch = tuple(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))
    return batch + tuple(sa[-2:-1] if len(sa) >= 2 else ()) + tuple(sb[-1:] if len(sb) >= 2
                                                                    else ())


# -- convolution and pooling -----------------------------------------------------------------------
def _dense_weight(g, w, groups):
    """The ONNX weight of an mge convolution weight: a grouped ``(G, A, B, *kernel)`` becomes
    ``(G * A, B, *kernel)``; a dense one is already in ONNX's layout."""
    if groups == 1:
        return w.name
    shape = (w.shape[0] * w.shape[1],) + tuple(w.shape[2:])
    return g.reshape(w.name, shape)


def _conv_attrs(op, kernel):
    return dict(strides=list(op.stride), pads=list(op.padding) * 2, dilations=list(op.dilation),
                group=op.groups, kernel_shape=list(kernel))


def _conv(g, op, ins, outs):
    x, w = ins
    kernel = w.shape[-len(op.stride):]
    return [g.node("Conv", [x.name, _dense_weight(g, w, op.groups)],
                   **_conv_attrs(op, kernel))]


def _deconv(g, op, ins, outs):
    # (weight, dy): the weight of the forward conv, (C_in of the transposed conv, C_out / G,
    # *kernel), which is ONNX ConvTranspose's layout
    w, y = ins
    kernel = w.shape[-len(op.stride):]
    return [g.node("ConvTranspose", [y.name, _dense_weight(g, w, op.groups)],
                   output_padding=list(op.output_padding), **_conv_attrs(op, kernel))]


def _pool_node(g, pool, x):
    attrs = dict(kernel_shape=list(pool.kernel), strides=list(pool.stride),
                 pads=list(pool.padding) * 2)  # floor output sizes: ceil_mode 0, the default
    if pool.mode == "max":
        return g.node("MaxPool", [x], **attrs)
    # "average" divides by the whole window (padding counts), as count_include_pad=1
    return g.node("AveragePool", [x], count_include_pad=int(pool.mode == "average"), **attrs)


def _pooling(g, op, ins, outs):
    return [_pool_node(g, op, ins[0].name)]


def _adaptive_pooling(g, op, ins, outs):
    # MegEngine's adaptive pooling is a plain pooling with stride in // out, kernel
    # in - (out - 1) * stride: always expressible
    return [_pool_node(g, op.as_pooling(ins[0].shape), ins[0].name)]


# -- normalisation ---------------------------------------------------------------------------------
def _batch_norm(g, op, ins, outs):
    if op.fwd_mode != "inference":
        raise _Unsupported("batch normalisation in training mode (batch statistics) has no "
                           "ONNX inference form; call module.eval() before tracing")
    x = ins[0]
    c = x.shape[1]
    params = [g.reshape(g.cast(v, x.dtype), (c,)) for v in ins[1:]]  # (1, C, 1, 1) -> (C,)
    return [g.node("BatchNormalization", [x.name] + params, epsilon=op.epsilon)]


def _layer_norm(g, op, ins, outs):
    x = ins[0]
    start, end = layer_norm_range(op, x.ndim)
    if end != x.ndim:
        raise _Unsupported("ONNX LayerNormalization normalises up to the last axis; this op "
                           f"stops at axis {end} of a {x.ndim}-d input")
    if g.opset < 17:
        raise _Unsupported(f"LayerNormalization needs opset 17 or later (asked: {g.opset})")
    shape = x.shape[start:]
    if op.affine:
        scale, bias = (g.reshape(g.cast(v, x.dtype), shape) for v in ins[1:3])
        inputs = [x.name, scale, bias]
    else:
        inputs = [x.name, g.initializer(np.ones(shape, x.dtype))]
    return g.node("LayerNormalization", inputs, n_outputs=3, axis=start, epsilon=op.eps)


def _softmax(log):
    def rule(g, op, ins, outs):
        x = ins[0]
        axes = softmax_axes(op, x.ndim)
        if len(axes) == 1:
            return [g.node("LogSoftmax" if log else "Softmax", [x.name], axis=axes[0])]
        # several axes: the stable formula, reducing over all of them
        shifted = g.node("Sub", [x.name, g.reduce("ReduceMax", x.name, axes, True)])
        e = g.node("Exp", [shifted])
        total = g.reduce("ReduceSum", e, axes, True)
        if log:
            return [g.node("Sub", [shifted, g.node("Log", [total])])]
        return [g.node("Div", [e, total])]
    return rule


# -- reductions ------------------------------------------------------------------------------------
_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
           "prod": "ReduceProd", "sum_sqr": "ReduceSumSquare"}


def _reduction(g, op, ins, outs):
    x, out = ins[0], outs[0]
    name = g.cast(x, out.dtype)  # mean of integers is float32, a sum of bools int32
    axes = normalize_axes(op.axis, x.ndim)
    if not axes:  # a 0-d input: the value itself
        return [_finish(g, g.node("Identity", [name]), x.shape, out)]
    y = g.reduce(_REDUCE[op.mode], name, axes, op.keepdims)
    return [_finish(g, y, reduced_shape(x.shape, axes, op.keepdims), out)]


def _arg_reduce(onnx_op):
    def rule(g, op, ins, outs):
        x, out = ins[0], outs[0]
        axes = normalize_axes(op.axis, x.ndim)
        name = x.name
        if len(axes) == x.ndim and x.ndim != 1:  # all axes: an index into the flattened input
            name, axis = g.reshape(name, (int(np.prod(x.shape)),)), 0
        elif len(axes) == 1:
            axis = axes[0]
        else:
            raise _Unsupported(f"an arg-reduction over the axes {op.axis} (several, not all) "
                               "has no ONNX form")
        y = g.node(onnx_op, [name], axis=axis, keepdims=1)
        y = g.node("Cast", [y], to=g.helper.np_dtype_to_tensor_dtype(out.dtype))
        return [g.reshape(y, out.shape)]
    return rule


def _cumsum(g, op, ins, outs):
    x, out = ins[0], outs[0]
    return [g.node("CumSum", [g.cast(x, out.dtype), g.initializer(np.array(op.axis, np.int64))],
                   exclusive=int(op.exclusive), reverse=int(op.reverse))]


# -- shapes ----------------------------------------------------------------------------------------
def _reshape_to_output(g, op, ins, outs):
    # Reshape, AddAxis, RemoveAxis: the recorded output shape says it all
    return [g.reshape(ins[0].name, outs[0].shape)]


def _broadcast(g, op, ins, outs):
    return [g.node("Expand", [ins[0].name, g.ints(outs[0].shape)])]


def _dimshuffle(g, op, ins, outs):
    perm = [p for p in op.pattern if p != "x"]
    y = g.node("Transpose", [ins[0].name], perm=perm)
    return [_finish(g, y, tuple(ins[0].shape[p] for p in perm), outs[0])]


def _concat(g, op, ins, outs):
    out = outs[0]
    return [g.node("Concat", [g.cast(v, out.dtype) for v in ins], axis=op.axis % out.ndim)]


def _stack(g, op, ins, outs):
    out = outs[0]
    axis = op.axis % out.ndim
    parts = [g.node("Unsqueeze", [g.cast(v, out.dtype), g.ints([axis])]) for v in ins]
    return [g.node("Concat", parts, axis=axis)]


def _split(g, op, ins, outs):
    x = ins[0]
    names = g.node("Split", [x.name, g.ints(op.sections)], n_outputs=len(op.sections),
                   axis=op.axis % x.ndim)
    return [names] if len(op.sections) == 1 else names


def _where(g, op, ins, outs):
    mask, x, y = ins
    out = outs[0]
    return [g.node("Where", [g.cast(mask, bool), g.cast(x, out.dtype), g.cast(y, out.dtype)])]


def _tile(g, op, ins, outs):
    x = ins[0]
    n = max(x.ndim, len(op.reps))
    shape = (1,) * (n - x.ndim) + x.shape  # np.tile: the shorter of the two gets leading 1s
    name = x.name if n == x.ndim else g.reshape(x.name, shape)
    reps = (1,) * (n - len(op.reps)) + tuple(op.reps)
    return [g.node("Tile", [name, g.ints(reps)])]


def _repeat(g, op, ins, outs):
    # np.repeat(x, r, axis): a new axis after ``axis``, expanded to r, merged back
    x = ins[0]
    if not isinstance(op.repeats, int):
        raise _Unsupported("repeat with one count per element has no ONNX form here")
    axis = op.axis % x.ndim
    grown = x.shape[:axis + 1] + (1,) + x.shape[axis + 1:]
    wide = x.shape[:axis + 1] + (op.repeats,) + x.shape[axis + 1:]
    y = g.node("Expand", [g.reshape(x.name, grown), g.ints(wide)])
    return [g.reshape(y, outs[0].shape)]


def _pad(g, op, ins, outs):
    x = ins[0]
    widths = list(op.pad_width) + [(0, 0)] * (x.ndim - len(op.pad_width))
    pads = [p[0] for p in widths] + [p[1] for p in widths]
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[op.mode]
    inputs = [x.name, g.ints(pads)]
    if mode == "constant":
        inputs.append(g.scalar(op.constant_value, x.dtype))
    return [g.node("Pad", inputs, mode=mode)]


# -- indexing --------------------------------------------------------------------------------------
def _slices(items, shape):
    """``(starts, ends, axes, steps)`` of the basic index ``items`` on ``shape``: each int
    becomes a one-element slice (the reshape to the output shape drops its axis)."""
    used = sum(1 for it in items if it[0] in ("int", "slice"))
    starts, ends, axes, steps = [], [], [], []
    axis = 0
    for it in items:
        kind = it[0]
        if kind == "ell":
            axis += len(shape) - used
            continue
        if kind == "new":
            continue
        dim = shape[axis]
        if kind == "int":
            k = it[1] + dim if it[1] < 0 else it[1]
            start, stop, step = k, k + 1, 1
        else:
            start, stop, step = slice(*it[1:]).indices(dim)
            if (start, stop, step) == (0, dim, 1):
                axis += 1
                continue
            if step < 0 and stop < 0:
                stop = _INT64_MIN  # "before the first element" (-1 would count from the end)
        starts.append(start)
        ends.append(stop)
        axes.append(axis)
        steps.append(step)
        axis += 1
    return starts, ends, axes, steps


def _subtensor(g, op, ins, outs):
    x = ins[0]
    starts, ends, axes, steps = _slices(op.items, x.shape)
    name = x.name
    if axes:
        name = g.node("Slice", [name, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps)])
    # ints drop their axes, None adds one: the output shape is the recorded one
    return [g.reshape(name, outs[0].shape)]


def _advanced_index(g, op, ins, outs):
    # x[..., idx, ...] with one integer array and full slices elsewhere: Gather on that axis
    items = op.items
    full = ("slice", None, None, None)
    kinds = [it[0] for it in items]
    if kinds.count("arr") != 1 or any(it != full for it in items if it[0] != "arr"):
        raise _Unsupported("only one integer index array among full slices (x[:, idx]) has an "
                           "ONNX form (Gather)")
    x, idx = ins
    return [g.node("Gather", [x.name, idx.name], axis=kinds.index("arr"))]


def _gather(g, op, ins, outs):
    x, idx = ins
    return [g.node("GatherElements", [x.name, idx.name], axis=op.axis % x.ndim)]


def _indexing_one_hot(g, op, ins, outs):
    # out[..i..] = x[..i.., index[..i..], ..]: GatherElements with the index given the axis back
    x, idx = ins
    axis = op.axis % x.ndim
    index = g.node("Unsqueeze", [idx.name, g.ints([axis])])
    y = g.node("GatherElements", [x.name, index], axis=axis)
    return [g.reshape(y, outs[0].shape)]


def _softmax_cross_entropy(g, op, ins, outs):
    # nll = -(LogSoftmax(x)[label]) along the axis, reduced or not: the composite the fused
    # op stands for
    x, idx = ins
    axis = op.axis % x.ndim
    logp = g.node("LogSoftmax", [x.name], axis=axis)
    index = g.node("Unsqueeze", [idx.name, g.ints([axis])])
    picked = g.node("GatherElements", [logp, index], axis=axis)
    if op.reduction == "none":
        return [g.node("Neg", [g.reshape(picked, outs[0].shape)])]
    kind = "ReduceMean" if op.reduction == "mean" else "ReduceSum"
    return [g.node("Neg", [g.reduce(kind, picked, list(range(x.ndim)), False)])]


# -- creation --------------------------------------------------------------------------------------
def _fill(g, op, ins, outs):
    out = outs[0]
    value = g.onnx.numpy_helper.from_array(np.array([op.value], dtype=out.dtype), "value")
    return [g.node("ConstantOfShape", [g.ints(out.shape)], value=value)]


def _evaluated(g, op, ins, outs):
    # Arange, Linspace, Eye: values from the parameters alone, computed by mge's own kernel at
    # export time (exactly what the traced function had) and stored as an initializer
    from ..core import apply
    value = np.asarray(apply(op)[0].numpy())
    return [g.node("Identity", [g.initializer(value)])]


_RULES = {
    Elemwise: _elemwise,
    TypeCvt: _typecvt,
    Identity: _identity,
    Detach: _identity,
    Copy: _identity,
    MatrixMul: _matmul,
    BatchedMatrixMul: _matmul,
    Dot: _matmul,
    Convolution: _conv,
    ConvolutionBackwardData: _deconv,
    Pooling: _pooling,
    AdaptivePooling: _adaptive_pooling,
    BatchNorm: _batch_norm,
    LayerNorm: _layer_norm,
    Softmax: _softmax(False),
    LogSoftmax: _softmax(True),
    Pad: _pad,
    IndexingOneHot: _indexing_one_hot,
    SoftmaxCrossEntropy: _softmax_cross_entropy,
    Reduce: _reduction,
    Argmax: _arg_reduce("ArgMax"),
    Argmin: _arg_reduce("ArgMin"),
    CumSum: _cumsum,
    Reshape: _reshape_to_output,
    AddAxis: _reshape_to_output,
    RemoveAxis: _reshape_to_output,
    Broadcast: _broadcast,
    Dimshuffle: _dimshuffle,
    Concat: _concat,
    Stack: _stack,
    Split: _split,
    Where: _where,
    Tile: _tile,
    Repeat: _repeat,
    Gather: _gather,
    Subtensor: _subtensor,
    IndexingMultiAxisVec: _advanced_index,
    Fill: _fill,
    Arange: _evaluated,
    Linspace: _evaluated,
    Eye: _evaluated,
}


# -- the walk --------------------------------------------------------------------------------------
def _tensor_type(onnx, name, shape, dtype):
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return onnx.helper.make_tensor_value_info(name, elem, list(shape))


def _check_opset(onnx, opset):
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or isinstance(opset, bool) or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"ONNX export: opset must be an int from {MIN_OPSET} to {newest} (the "
                         f"installed onnx's newest), got {opset!r}")


def _check_unique(arg_names, output_names):
    clash = set(arg_names) & set(output_names)
    if clash:
        name = sorted(clash)[0]
        raise ValueError(f"ONNX export: {name!r} names both an input and an output (ONNX values "
                         "have one name each)")


def to_onnx(recording, arg_names=None, output_names=None, opset=DEFAULT_OPSET, *,
            user_info=None, graph_name="mge_trace"):
    """The ONNX ``ModelProto`` of ``recording`` (a finished ``trace`` plugin ``Recording``).

    Args:
        recording: the last call's recording of a trace (``trace._last.recording``), normally
            with ``capture_as_const=True``: captured tensors become initializers holding their
            recorded values.
        arg_names: one name per tensor argument (default ``arg_0``, ...).
        output_names: one name per tensor result (default ``output_0``, ...).
        opset: the ONNX opset to write (``MIN_OPSET`` to the installed onnx's newest).
        user_info: JSON data (``None``, bools, numbers, strings, lists, tuples, dicts with string
            keys), kept as JSON text in the model's ``metadata_props["mge.user_info"]``.
        graph_name: the ONNX graph's name.

    Only the ops the outputs depend on are exported.  Raises :class:`OnnxExportError` for an op
    that has no ONNX form, ``ValueError`` for wrong names or opset, ``ImportError`` without onnx.
    """
    onnx = _onnx()
    _check_opset(onnx, opset)
    rec = recording
    if getattr(rec, "_var_of", None) is not None:
        raise ValueError("ONNX export: the recording is not finished (the traced function is "
                         "running)")
    n_args, n_outs = len(rec.args), len(rec.outputs)
    arg_names = _check_names(arg_names or [f"arg_{i}" for i in range(n_args)], n_args,
                                   "ONNX export: arg_names")
    output_names = _check_names(output_names or [f"output_{i}" for i in range(n_outs)],
                                      n_outs, "ONNX export: output_names")
    _check_unique(arg_names, output_names)
    g = _Graph(onnx, opset, list(arg_names) + list(output_names))

    names = {}  # var -> ONNX name
    for name, v in zip(arg_names, rec.args):
        names.setdefault(v, name)
    keep = _needed_ops(rec, rec.outputs)
    value_info = []
    for k in keep:
        op, ins, outs = rec.ops[k]
        for v in ins:
            if v not in names:
                names[v] = _constant(g, rec, v)
        got = _apply_rule(g, k, op, [_value(rec, v, names[v]) for v in ins],
                          [_value(rec, v, None) for v in outs])
        for v, name in zip(outs, got):
            names[v] = name
            shape, dtype, _ = rec.descs[v]
            value_info.append(_tensor_type(onnx, name, shape, dtype))
    for v in rec.outputs:
        if v not in names:  # an output that is a captured tensor, read by no op
            names[v] = _constant(g, rec, v)
    for name, v in zip(output_names, rec.outputs):
        g.nodes.append(onnx.helper.make_node("Identity", [names[v]], [name],
                                             name=g.fresh("n_output")))

    inputs = [_tensor_type(onnx, n, rec.descs[v][0], rec.descs[v][1])
              for n, v in zip(arg_names, rec.args)]
    outputs = [_tensor_type(onnx, n, rec.descs[v][0], rec.descs[v][1])
               for n, v in zip(output_names, rec.outputs)]
    graph = onnx.helper.make_graph(g.nodes, graph_name, inputs, outputs, g.initializers,
                                   value_info=value_info)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="mge",
                                   producer_version=_mge_version(),
                                   ir_version=onnx.helper.find_min_ir_version_for(opsets))
    if user_info is not None:
        onnx.helper.set_model_props(model, {"mge.user_info": _json_text(user_info)})
    return model


def _json_text(user_info):
    # plain JSON (tuples become lists), so any ONNX runtime's user can read it back
    try:
        return json.dumps(user_info, allow_nan=False, sort_keys=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"ONNX export: user_info must be JSON data ({e})") from None


def _value(rec, v, name):
    shape, dtype, _ = rec.descs[v]
    return _Value(name, shape, dtype)


def _constant(g, rec, v):
    # a var read before anything defined it: a captured tensor (as dump.save checks)
    if v not in rec.externals:
        raise ValueError(f"ONNX export: the recording's var {v} has no value (not an argument, a "
                         "captured tensor or an op's output)")
    value = np.asarray(rec.snapshots.get(v, rec.externals[v]).numpy())
    return g.initializer(value, g.fresh(f"const_v{v}"))


def _apply_rule(g, k, op, ins, outs):
    rule = _RULES.get(type(op))
    where = f"ONNX export: op #{k} of the recording, {op!r}"
    if rule is None:
        raise OnnxExportError(f"{where}: {type(op).__name__} has no ONNX mapping")
    try:
        got = rule(g, op, ins, outs)
    except _Unsupported as e:
        raise OnnxExportError(f"{where}: {e}") from None
    if len(got) != len(outs):  # a rule's contract; never a user's error
        raise AssertionError(f"{where}: the rule gave {len(got)} outputs for {len(outs)}")
    return got


def save_onnx(recording, file, arg_names=None, output_names=None, opset=DEFAULT_OPSET, *,
              user_info=None):
    """Write :func:`to_onnx`'s model of ``recording`` to ``file`` (a path or a binary file
    object); returns the ``ModelProto``.  Nothing is written when the export fails."""
    model = to_onnx(recording, arg_names, output_names, opset, user_info=user_info)
    data = model.SerializeToString()
    if isinstance(file, (str, os.PathLike)):
        with open(file, "wb") as f:
            f.write(data)
    elif file is not None:
        file.write(data)
    return model


def export_onnx(traced, file, arg_names=None, output_names=None, opset=DEFAULT_OPSET, *,
                user_info=None):
    """Write the last call of the traced function ``traced`` as an ONNX model; return it.

    ``trace.dump(file, format="onnx", ...)`` does the same.  The function must have been traced
    with ``capture_as_const=True`` and called once (with inputs of the shapes to export).

    Args:
        traced: an ``mge.jit.trace``.
        file: a path, a binary file object open for writing, or ``None`` (only return the model).
        arg_names: names of the positional tensor arguments (default ``arg_0``, ...; keyword
            tensors are named by their keyword), as ``trace.dump`` names them.
        output_names: names of the tensor results (default ``output_0``, ...; a dict of
            tensors is named by its keys).
        opset: the ONNX opset (default ``DEFAULT_OPSET``, 17).
        user_info: JSON data kept as JSON text in the model's
            ``metadata_props["mge.user_info"]``.

    Returns the ``onnx.ModelProto``.  Raises :class:`OnnxExportError` (a ``TraceError`` and a
    ``NotImplementedError``) naming the first op without an ONNX form, ``ImportError`` without
    the ``mge[onnx]`` extra, and ``trace.dump``'s errors for a trace that cannot be dumped.
    """
    if not getattr(traced, "capture_as_const", False):
        raise ValueError("you must specify capture_as_const=True at __init__ to use dump")
    rec, names, out_names, _ = dump_names(traced, arg_names, output_names)
    return save_onnx(rec, file, names, out_names, opset, user_info=user_info)


FORMATS["onnx"] = (DUMP_OPTIONS, save_onnx)  # trace.dump(format="onnx")
