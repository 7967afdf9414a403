"""Neural-network ops: softmax family, one-hot indexing, dropout and padding here; convolutions in
``nn_conv``, pooling in ``nn_pool``, normalisation in ``nn_norm``.

* ``Softmax(axis)`` / ``LogSoftmax(axis)``: ``axis`` an int or a tuple of ints; max-shifted, so
  large logits do not overflow.
* ``IndexingOneHot(axis, keepdims)``: ``(src, index)`` -> ``src`` picked at ``index`` along
  ``axis`` (``index`` has ``src``'s shape without ``axis``).
* ``OneHot(num_classes)``: integer labels -> int32 one-hot rows (a new last axis).
* ``Dropout(drop_prob, seed)``: outputs ``(y, mask)``; ``y = x * mask / (1 - drop_prob)``, the mask
  drawn from ``numpy.random.default_rng(seed)`` (deterministic for a given seed).
* ``Pad(pad_width, mode, constant_value)``: ``pad_width`` pairs for the leading axes; modes
  ``"constant"``, ``"reflect"``, ``"replicate"`` (``"edge"``).

Backward ops (each the transpose of a linear map, so each one's own rule is the forward map again,
which makes every rule here twice differentiable):

* ``IndexingSetOneHot(axis)``: ``(src, index, value)`` -> ``src`` with ``value`` written at
  ``index`` along ``axis`` (MegEngine's op; the gradient of ``IndexingOneHot``).
* ``DropoutBackward(drop_prob)``: ``(dy, mask)`` -> ``dy * mask / (1 - drop_prob)``, the forward
  op's own mask output, so the gradient drops exactly the elements the forward pass dropped.
* ``PadBackward(pad_width, mode)``: folds the gradient of the padded border back onto the
  elements it was copied from (``constant``: a crop).
"""
import numpy as np

from .base import OpDef, TensorDesc, def_backward, def_infer, def_kernel, op_error
from .creation import Fill
from .gradutil import cached_op, ew, output, run
from .reduce import Reduce
from .nn_conv import *  # noqa: F401,F403
from .nn_conv import __all__ as _conv_all
from .nn_norm import *  # noqa: F401,F403
from .nn_norm import __all__ as _norm_all
from .nn_pool import *  # noqa: F401,F403
from .nn_pool import __all__ as _pool_all

__all__ = ["Softmax", "LogSoftmax", "IndexingOneHot", "IndexingSetOneHot", "OneHot", "Dropout",
           "DropoutBackward", "Pad", "PadBackward", "PAD_MODES"] \
    + list(_conv_all) + list(_norm_all) + list(_pool_all)

PAD_MODES = ("constant", "reflect", "replicate")


class Softmax(OpDef):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (an int or a tuple of ints)."""

    _fields = ("axis",)


class LogSoftmax(OpDef):
    """``x - logsumexp(x)`` along ``axis`` (an int or a tuple of ints)."""

    _fields = ("axis",)


class IndexingOneHot(OpDef):
    """``out[..., 0, ...] = src[..., index[...], ...]`` along ``axis``."""

    _fields = ("axis", "keepdims")
    _defaults = {"keepdims": False}


class OneHot(OpDef):
    """Integer labels to int32 one-hot vectors of length ``num_classes`` (a new last axis)."""

    _fields = ("num_classes",)


class Dropout(OpDef):
    """Zero each element with probability ``drop_prob``, scale the rest by ``1/(1-drop_prob)``."""

    _fields = ("drop_prob", "seed")


class Pad(OpDef):
    """Pad the leading ``len(pad_width)`` axes; ``pad_width`` is a tuple of ``(before, after)``."""

    _fields = ("pad_width", "mode", "constant_value")
    _defaults = {"mode": "constant", "constant_value": 0.0}

    def __init__(self, pad_width, mode="constant", constant_value=0.0):
        super().__init__(_pad_pairs(pad_width), _pad_mode("Pad", mode), constant_value)


class IndexingSetOneHot(OpDef):
    """``(src, index, value)`` -> a copy of ``src`` with ``value`` written at ``index`` along ``axis``.

    ``index`` has ``src``'s shape without ``axis``; ``value`` has ``index``'s shape, or that shape
    with a size-1 ``axis`` (the output of ``IndexingOneHot`` with ``keepdims``).
    """

    _fields = ("axis",)


class DropoutBackward(OpDef):
    """``(dy, mask)`` -> ``dy * mask / (1 - drop_prob)``: the gradient of ``Dropout`` given the mask
    that the forward op output."""

    _fields = ("drop_prob",)


class PadBackward(OpDef):
    """The gradient of ``Pad``: a padded-shape ``dy`` folded back onto the unpadded shape."""

    _fields = ("pad_width", "mode")
    _defaults = {"mode": "constant"}

    def __init__(self, pad_width, mode="constant"):
        super().__init__(_pad_pairs(pad_width), _pad_mode("PadBackward", mode))


def _pad_pairs(pad_width):
    return tuple(tuple(int(v) for v in p) for p in pad_width)


def _pad_mode(name, mode):
    m = str(mode).lower()
    m = "replicate" if m == "edge" else m
    if m not in PAD_MODES:
        raise ValueError(f"{name}: unknown mode {mode!r}; expected one of {PAD_MODES} or 'edge'")
    return m


def _zeros_like(t):
    return run(cached_op(Fill, tuple(t.shape), 0, t.dtype, t.device))


def _sum_keepdims(t, axis):
    return run(cached_op(Reduce, "sum", axis, True), t)


# -- softmax -------------------------------------------------------------------------------------

def _norm_axes(op, axis, ndim, descs):
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in axes:
        if not isinstance(a, int) or not -max(ndim, 1) <= a < max(ndim, 1):
            raise op_error(ValueError, op, f"axis {axis} is out of range for a {ndim}-D input", descs)
        out.append(a % ndim if ndim else 0)
    return tuple(out)


def _infer_softmax(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    xs, dtype = descs[0]
    if dtype.kind != "f":
        raise op_error(TypeError, op, "input must be floating point", descs)
    if xs is not None:
        _norm_axes(op, op.axis, len(xs), descs)
    return [TensorDesc(xs, dtype)]


def_infer(Softmax)(_infer_softmax)
def_infer(LogSoftmax)(_infer_softmax)


def _shifted(op, x):
    axes = _norm_axes(op, op.axis, x.ndim, None) if x.ndim else None
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xa = x.astype(acc, copy=False)
    if x.size == 0:
        return xa, axes
    return xa - xa.max(axis=axes, keepdims=True), axes


@def_kernel(Softmax)
def _cpu_softmax(op, x):
    z, axes = _shifted(op, x)
    e = np.exp(z)
    return ((e / e.sum(axis=axes, keepdims=True)).astype(x.dtype, copy=False),)


@def_kernel(LogSoftmax)
def _cpu_logsoftmax(op, x):
    z, axes = _shifted(op, x)
    return ((z - np.log(np.exp(z).sum(axis=axes, keepdims=True))).astype(x.dtype, copy=False),)


@def_backward(Softmax, keeps_outputs=True)
def _softmax_grad(op, inputs, outputs, grads, needs):
    # dx = y * (dy - sum(dy * y)) along the softmax axes
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    y = output(op, inputs, outputs)
    gy = g * y
    return [gy - y * _sum_keepdims(gy, op.axis)]


@def_backward(LogSoftmax, keeps_outputs=True)
def _logsoftmax_grad(op, inputs, outputs, grads, needs):
    # dx = dy - softmax(x) * sum(dy), with softmax(x) = exp(y)
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    y = output(op, inputs, outputs)
    return [g - ew("exp", y) * _sum_keepdims(g, op.axis)]


# -- one-hot ---------------------------------------------------------------------------------------

def _one_hot_axis(op, xs, ixs, idt, descs):
    """``(axis, index shape)`` of ``IndexingOneHot``/``IndexingSetOneHot`` after checking ``index``
    against ``src`` (shapes ``ixs`` and ``xs``); ``(None, None)`` while ``xs`` is unknown."""
    if idt.kind not in "iu":
        raise op_error(TypeError, op, "index must be an integer tensor", descs)
    if xs is None:
        return None, None
    if not -len(xs) <= op.axis < len(xs):
        raise op_error(ValueError, op, f"axis {op.axis} is out of range for a {len(xs)}-D input",
                       descs)
    axis = op.axis % len(xs)
    want = tuple(xs[:axis]) + tuple(xs[axis + 1:])
    if ixs is not None and tuple(ixs) != want:
        raise op_error(ValueError, op, f"index must have shape {want} (src shape without axis "
                       f"{axis}), got {ixs}", descs)
    return axis, want


def _one_hot_index_axis(op, x, index):
    """The axis the kernels of the one-hot ops index along, once ``index``'s values are in range."""
    axis = op.axis % x.ndim
    n = x.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"{op.name}: index out of range [0, {n}) along axis {axis} "
                         f"(src shape {x.shape}, index range [{index.min()}, {index.max()}])")
    return axis


@def_infer(IndexingOneHot)
def _infer_indexing_one_hot(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (src, index), got {len(descs)}", descs)
    (xs, dtype), (ixs, idt) = descs
    axis, _ = _one_hot_axis(op, xs, ixs, idt, descs)
    if axis is None:
        return [TensorDesc(None, dtype)]
    out = tuple(xs[:axis]) + ((1,) if op.keepdims else ()) + tuple(xs[axis + 1:])
    return [TensorDesc(out, dtype)]


@def_kernel(IndexingOneHot)
def _cpu_indexing_one_hot(op, x, index):
    axis = _one_hot_index_axis(op, x, index)
    if x.ndim == 2 and axis == 1:  # (batch, classes), the loss's case: one fancy index
        y = x[np.arange(x.shape[0]), index]
        return (y[:, None] if op.keepdims else y,)
    y = np.take_along_axis(x, np.expand_dims(index.astype(np.intp), axis), axis)
    return (y if op.keepdims else np.squeeze(y, axis),)


@def_infer(IndexingSetOneHot)
def _infer_indexing_set_one_hot(op, descs):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"expects 3 inputs (src, index, value), got {len(descs)}",
                       descs)
    (xs, dtype), (ixs, idt), (vs, _) = descs
    axis, want = _one_hot_axis(op, xs, ixs, idt, descs)
    if axis is None:
        return [TensorDesc(None, dtype)]
    kept = tuple(xs[:axis]) + (1,) + tuple(xs[axis + 1:])
    if vs is not None and tuple(vs) not in (want, kept):
        raise op_error(ValueError, op, f"value must have shape {want} or {kept}, got {vs}", descs)
    return [TensorDesc(xs, dtype)]


@def_kernel(IndexingSetOneHot)
def _cpu_indexing_set_one_hot(op, x, index, value):
    axis = _one_hot_index_axis(op, x, index)
    out = x.copy()
    if x.ndim == 2 and axis == 1:
        out[np.arange(x.shape[0]), index] = value.reshape(index.shape)
        return (out,)
    idx = np.expand_dims(index.astype(np.intp), axis)
    np.put_along_axis(out, idx, value.reshape(idx.shape).astype(x.dtype, copy=False), axis)
    return (out,)


@def_backward(IndexingOneHot)
def _indexing_one_hot_grad(op, inputs, outputs, grads, needs):
    # The picked elements get the gradient, every other element of src none; index gets none.
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None]
    src, index = inputs
    return [run(cached_op(IndexingSetOneHot, op.axis), _zeros_like(src), index, g), None]


@def_backward(IndexingSetOneHot)
def _indexing_set_one_hot_grad(op, inputs, outputs, grads, needs):
    # Overwritten elements of src get no gradient; value gets the gradient at the written places.
    g = grads[0]
    src, index, value = inputs
    if g is None:
        return [None, None, None]
    dsrc = dvalue = None
    if needs[0]:
        dsrc = run(op, g, index, _zeros_like(value))
    if needs[2]:
        dvalue = run(cached_op(IndexingOneHot, op.axis, value.ndim == src.ndim), g, index)
    return [dsrc, None, dvalue]


@def_infer(OneHot)
def _infer_one_hot(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    xs, dtype = descs[0]
    if dtype.kind not in "iu":
        raise op_error(TypeError, op, "labels must be an integer tensor", descs)
    if not isinstance(op.num_classes, int) or op.num_classes < 1:
        raise op_error(ValueError, op, f"num_classes must be a positive int, got {op.num_classes!r}",
                       descs)
    return [TensorDesc(None if xs is None else tuple(xs) + (op.num_classes,), np.dtype(np.int32))]


@def_kernel(OneHot)
def _cpu_one_hot(op, x):
    n = op.num_classes
    if x.size and (x.min() < 0 or x.max() >= n):
        raise IndexError(f"{op.name}: labels must be in [0, {n}), got range [{x.min()}, {x.max()}]")
    return ((x[..., None] == np.arange(n)).astype(np.int32),)


# -- dropout -------------------------------------------------------------------------------------

@def_infer(Dropout)
def _infer_dropout(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    if not 0 <= op.drop_prob < 1:
        raise op_error(ValueError, op, f"drop_prob must be in [0, 1), got {op.drop_prob}", descs)
    xs, dtype = descs[0]
    if dtype.kind != "f":
        raise op_error(TypeError, op, "input must be floating point", descs)
    return [TensorDesc(xs, dtype), TensorDesc(xs, np.dtype(bool))]


@def_kernel(Dropout)
def _cpu_dropout(op, x):
    mask = np.random.default_rng(op.seed).random(x.shape, dtype=np.float32) >= op.drop_prob
    scale = np.asarray(1 / (1 - op.drop_prob), x.dtype)
    return ((x * mask * scale).astype(x.dtype, copy=False), mask)


@def_infer(DropoutBackward)
def _infer_dropout_backward(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (dy, mask), got {len(descs)}", descs)
    (gs, dtype), (ms, mdt) = descs
    if dtype.kind != "f" or mdt.kind != "b":
        raise op_error(TypeError, op, "dy must be floating point and mask bool", descs)
    if gs is not None and ms is not None and tuple(gs) != tuple(ms):
        raise op_error(ValueError, op, "dy and mask must have the same shape", descs)
    return [TensorDesc(gs, dtype)]


@def_kernel(DropoutBackward)
def _cpu_dropout_backward(op, dy, mask):
    scale = np.asarray(1 / (1 - op.drop_prob), dy.dtype)
    out = np.multiply(dy, mask, dtype=dy.dtype)
    out *= scale
    return (out,)


@def_backward(Dropout)
def _dropout_grad(op, inputs, outputs, grads, needs):
    # The forward op's mask output, not a second draw: the same elements are dropped.
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(cached_op(DropoutBackward, op.drop_prob), g, outputs[1])]


@def_backward(DropoutBackward)
def _dropout_backward_grad(op, inputs, outputs, grads, needs):
    # Linear in dy and symmetric: its transpose is itself.
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None]
    return [run(op, g, inputs[1]), None]


# -- padding -------------------------------------------------------------------------------------

def _pad_input(op, descs, what):
    """The one input's ``(shape, dtype)`` of ``Pad``/``PadBackward``, after the checks of
    ``pad_width`` they share; ``what`` names the input in messages."""
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    shape, dtype = descs[0]
    if any(len(p) != 2 or min(p) < 0 for p in op.pad_width):
        raise op_error(ValueError, op, f"pad_width must be (before, after) pairs of non-negative "
                       f"ints, got {op.pad_width}", descs)
    if shape is not None and len(op.pad_width) > len(shape):
        raise op_error(ValueError, op, f"pad_width has {len(op.pad_width)} pairs for a "
                       f"{len(shape)}-D {what}", descs)
    return shape, dtype


@def_infer(Pad)
def _infer_pad(op, descs):
    xs, dtype = _pad_input(op, descs, "input")
    if xs is None:
        return [TensorDesc(None, dtype)]
    for i, (a, b) in enumerate(op.pad_width):
        if op.mode == "reflect" and max(a, b) >= max(xs[i], 1) and max(a, b) > 0:
            raise op_error(ValueError, op, f"reflect padding {(a, b)} must be smaller than the "
                           f"size {xs[i]} of axis {i}", descs)
        if op.mode == "replicate" and xs[i] == 0 and a + b > 0:
            raise op_error(ValueError, op, f"cannot replicate-pad the empty axis {i}", descs)
    out = tuple(s + (sum(op.pad_width[i]) if i < len(op.pad_width) else 0)
                for i, s in enumerate(xs))
    return [TensorDesc(out, dtype)]


@def_kernel(Pad)
def _cpu_pad(op, x):
    width = tuple(op.pad_width) + ((0, 0),) * (x.ndim - len(op.pad_width))
    if op.mode == "constant":
        return (np.pad(x, width, constant_values=np.asarray(op.constant_value).astype(x.dtype)),)
    return (np.pad(x, width, mode="reflect" if op.mode == "reflect" else "edge"),)


@def_infer(PadBackward)
def _infer_pad_backward(op, descs):
    gs, dtype = _pad_input(op, descs, "gradient")
    if gs is None:
        return [TensorDesc(None, dtype)]
    out = list(gs)
    for i, (a, b) in enumerate(op.pad_width):
        n = gs[i] - a - b
        if n < 0 or (op.mode == "reflect" and 0 < max(a, b) and max(a, b) >= n) or (
                op.mode == "replicate" and n == 0 and a + b > 0):
            raise op_error(ValueError, op, f"axis {i} of size {gs[i]} cannot be the {op.mode} "
                           f"padding {(a, b)} of an input", descs)
        out[i] = n
    return [TensorDesc(tuple(out), dtype)]


@def_kernel(PadBackward)
def _cpu_pad_backward(op, g):
    if op.mode == "constant":
        return (g[tuple(slice(a, g.shape[i] - b) for i, (a, b) in enumerate(op.pad_width))],)
    # np.pad pads one axis after another, so the gradient folds one axis at a time.
    out = g
    for axis, (a, b) in enumerate(op.pad_width):
        if not (a or b):
            continue
        t = np.moveaxis(out, axis, 0)
        n = t.shape[0] - a - b
        core = t[a:a + n].copy()
        if op.mode == "replicate":      # the border repeats the edge element
            if a:
                core[0] += t[:a].sum(axis=0)
            if b:
                core[-1] += t[a + n:].sum(axis=0)
        else:                           # reflect: border j mirrors element a - j (n - 2 - j after)
            if a:
                core[1:a + 1] += t[:a][::-1]
            if b:
                core[n - 1 - b:n - 1] += t[a + n:][::-1]
        out = np.moveaxis(core, 0, axis)
    return (out,)


@def_backward(Pad)
def _pad_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(cached_op(PadBackward, op.pad_width, op.mode), g)]


@def_backward(PadBackward)
def _pad_backward_grad(op, inputs, outputs, grads, needs):
    # PadBackward is the transpose of padding with zeros, so its transpose is that padding.
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(cached_op(Pad, op.pad_width, op.mode, 0.0), g)]
