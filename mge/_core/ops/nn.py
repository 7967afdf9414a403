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
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, def_kernel, op_error
from .nn_conv import *  # noqa: F401,F403
from .nn_conv import __all__ as _conv_all
from .nn_norm import *  # noqa: F401,F403
from .nn_norm import __all__ as _norm_all
from .nn_pool import *  # noqa: F401,F403
from .nn_pool import __all__ as _pool_all

__all__ = ["Softmax", "LogSoftmax", "IndexingOneHot", "OneHot", "Dropout", "Pad", "PAD_MODES"] \
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
        m = str(mode).lower()
        m = "replicate" if m == "edge" else m
        if m not in PAD_MODES:
            raise ValueError(f"Pad: unknown mode {mode!r}; expected one of {PAD_MODES} or 'edge'")
        super().__init__(tuple(tuple(int(v) for v in p) for p in pad_width), m, constant_value)


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


# -- one-hot ---------------------------------------------------------------------------------------

@def_infer(IndexingOneHot)
def _infer_indexing_one_hot(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (src, index), got {len(descs)}", descs)
    (xs, dtype), (ixs, idt) = descs
    if idt.kind not in "iu":
        raise op_error(TypeError, op, "index must be an integer tensor", descs)
    if xs is None:
        return [TensorDesc(None, dtype)]
    if not -len(xs) <= op.axis < len(xs):
        raise op_error(ValueError, op, f"axis {op.axis} is out of range for a {len(xs)}-D input",
                       descs)
    axis = op.axis % len(xs)
    want = tuple(xs[:axis]) + tuple(xs[axis + 1:])
    if ixs is not None and tuple(ixs) != want:
        raise op_error(ValueError, op, f"index must have shape {want} (src shape without axis "
                       f"{axis}), got {ixs}", descs)
    out = tuple(xs[:axis]) + ((1,) if op.keepdims else ()) + tuple(xs[axis + 1:])
    return [TensorDesc(out, dtype)]


@def_kernel(IndexingOneHot)
def _cpu_indexing_one_hot(op, x, index):
    axis = op.axis % x.ndim
    n = x.shape[axis]
    if index.size and (index.min() < -n or index.max() >= n):
        raise IndexError(f"{op.name}: index out of range [0, {n}) along axis {axis} "
                         f"(src shape {x.shape}, index range [{index.min()}, {index.max()}])")
    y = np.take_along_axis(x, np.expand_dims(index.astype(np.intp), axis), axis)
    return (y if op.keepdims else np.squeeze(y, axis),)


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


# -- padding -------------------------------------------------------------------------------------

@def_infer(Pad)
def _infer_pad(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    xs, dtype = descs[0]
    if any(len(p) != 2 or min(p) < 0 for p in op.pad_width):
        raise op_error(ValueError, op, f"pad_width must be (before, after) pairs of non-negative "
                       f"ints, got {op.pad_width}", descs)
    if xs is None:
        return [TensorDesc(None, dtype)]
    if len(op.pad_width) > len(xs):
        raise op_error(ValueError, op, f"pad_width has {len(op.pad_width)} pairs for a "
                       f"{len(xs)}-D input", descs)
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
