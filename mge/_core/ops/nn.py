"""Neural-network ops: softmax family, one-hot indexing, dropout and padding here; convolutions in
``nn_conv``, pooling in ``nn_pool``, normalisation in ``nn_norm`` (re-exported here).

Each module holds the op classes and their shape/dtype rules.  The CPU kernels of this one are in
``mge/_core/device/cpu/kernels/nn.py``, its backward rules in ``mge/_core/autodiff/rules/nn.py``
(``conv.py``, ``pool.py`` and ``norm.py`` beside them hold the other modules').

* ``Softmax(axis)`` / ``LogSoftmax(axis)``: ``axis`` an int or a tuple of ints; max-shifted, so
  large logits do not overflow.
* ``IndexingOneHot(axis, keepdims)``: ``(src, index)`` -> ``src`` picked at ``index`` along
  ``axis`` (``index`` has ``src``'s shape without ``axis``).
* ``OneHot(num_classes)``: integer labels -> int32 one-hot rows (a new last axis).
* ``SoftmaxCrossEntropy(axis, reduction)``: ``(logits, label)`` -> the cross entropy
  ``logsumexp(logits) - logits[label]`` along ``axis`` (``label`` has ``logits``' shape without
  ``axis``), per sample or its mean or sum: ``F.nn.cross_entropy``'s common case in one op instead
  of a log-softmax, a pick, a negation and a mean -- one kernel call instead of four, and one for
  the gradient instead of eight.
* ``Dropout(drop_prob, seed)``: outputs ``(y, mask)``; ``y = x * mask / (1 - drop_prob)``, the mask
  drawn from ``numpy.random.default_rng(seed)`` (deterministic for a given seed).
* ``Pad(pad_width, mode, constant_value)``: ``pad_width`` pairs for the leading axes; modes
  ``"constant"``, ``"reflect"``, ``"replicate"`` (``"edge"``).

Backward ops (each the transpose of a linear map, so each one's own rule is the forward map again,
which makes every rule here twice differentiable):

* ``IndexingSetOneHot(axis)``: ``(src, index, value)`` -> ``src`` with ``value`` written at
  ``index`` along ``axis`` (MegEngine's op; the gradient of ``IndexingOneHot``).
* ``SoftmaxCrossEntropyBackward(axis, reduction)``: ``(logits, label, dy)`` ->
  ``(softmax(logits) - onehot(label)) * dy`` along ``axis`` (a reduced loss's scalar ``dy``
  spread over the samples), the gradient of
  ``SoftmaxCrossEntropy`` (its own rule is written with other ops, as a product rule).
* ``DropoutBackward(drop_prob)``: ``(dy, mask)`` -> ``dy * mask / (1 - drop_prob)``, the forward
  op's own mask output, so the gradient drops exactly the elements the forward pass dropped.
* ``PadBackward(pad_width, mode)``: folds the gradient of the padded border back onto the
  elements it was copied from (``constant``: a crop).
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error
from .nn_conv import *  # noqa: F401,F403
from .nn_conv import __all__ as _conv_all
from .nn_norm import *  # noqa: F401,F403
from .nn_norm import __all__ as _norm_all
from .nn_pool import *  # noqa: F401,F403
from .nn_pool import __all__ as _pool_all

__all__ = ["Softmax", "LogSoftmax", "IndexingOneHot", "IndexingSetOneHot", "OneHot", "Dropout",
           "SoftmaxCrossEntropy", "SoftmaxCrossEntropyBackward", "CROSS_ENTROPY_REDUCTIONS",
           "DropoutBackward", "Pad", "PadBackward", "PAD_MODES"] \
    + list(_conv_all) + list(_norm_all) + list(_pool_all)

PAD_MODES = ("constant", "reflect", "replicate")


class Softmax(OpDef):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (an int or a tuple of ints)."""

    _fields = ("axis",)
    long_running = False


class LogSoftmax(OpDef):
    """``x - logsumexp(x)`` along ``axis`` (an int or a tuple of ints)."""

    _fields = ("axis",)
    long_running = False


class IndexingOneHot(OpDef):
    """``out[..., 0, ...] = src[..., index[...], ...]`` along ``axis``."""

    _fields = ("axis", "keepdims")
    _defaults = {"keepdims": False}
    long_running = False


class OneHot(OpDef):
    """Integer labels to int32 one-hot vectors of length ``num_classes`` (a new last axis)."""

    _fields = ("num_classes",)
    long_running = False


class Dropout(OpDef):
    """Zero each element with probability ``drop_prob``, scale the rest by ``1/(1-drop_prob)``."""

    _fields = ("drop_prob", "seed")
    long_running = False
    never_recompute = True  # it draws random numbers
    seeded = True           # from the global handle's stream (F.nn.dropout)


class Pad(OpDef):
    """Pad the leading ``len(pad_width)`` axes; ``pad_width`` is a tuple of ``(before, after)``."""

    _fields = ("pad_width", "mode", "constant_value")
    _defaults = {"mode": "constant", "constant_value": 0.0}
    long_running = False

    def __init__(self, pad_width, mode="constant", constant_value=0.0):
        super().__init__(_pad_pairs(pad_width), _pad_mode("Pad", mode), constant_value)


class IndexingSetOneHot(OpDef):
    """``(src, index, value)`` -> a copy of ``src`` with ``value`` written at ``index`` along ``axis``.

    ``index`` has ``src``'s shape without ``axis``; ``value`` has ``index``'s shape, or that shape
    with a size-1 ``axis`` (the output of ``IndexingOneHot`` with ``keepdims``).
    """

    _fields = ("axis",)
    long_running = False


class SoftmaxCrossEntropy(OpDef):
    """``(logits, label)`` -> ``logsumexp(logits) - logits[label]`` along ``axis``, per sample
    (``reduction="none"``) or its ``"mean"`` or ``"sum"`` over every sample."""

    _fields = ("axis", "reduction")
    _defaults = {"reduction": "none"}
    long_running = False


class SoftmaxCrossEntropyBackward(OpDef):
    """``(logits, label, dy)`` -> ``(softmax(logits) - onehot(label)) * dy`` along ``axis``; with
    ``reduction`` ``"mean"``/``"sum"`` ``dy`` is the scalar gradient of the reduced loss (each
    sample gets ``dy / count`` or ``dy``)."""

    _fields = ("axis", "reduction")
    _defaults = {"reduction": "none"}
    long_running = False


CROSS_ENTROPY_REDUCTIONS = ("none", "mean", "sum")


class DropoutBackward(OpDef):
    """``(dy, mask)`` -> ``dy * mask / (1 - drop_prob)``: the gradient of ``Dropout`` given the mask
    that the forward op output."""

    _fields = ("drop_prob",)
    long_running = False


class PadBackward(OpDef):
    """The gradient of ``Pad``: a padded-shape ``dy`` folded back onto the unpadded shape."""

    _fields = ("pad_width", "mode")
    _defaults = {"mode": "constant"}
    long_running = False

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


# -- softmax -------------------------------------------------------------------------------------

def softmax_axes(op, ndim, descs=None):
    """The axes (non-negative ints) of a ``Softmax``/``LogSoftmax`` on a ``ndim``-D input."""
    axis = op.axis
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
        softmax_axes(op, len(xs), descs)
    return [TensorDesc(xs, dtype)]


def_infer(Softmax)(_infer_softmax)
def_infer(LogSoftmax)(_infer_softmax)


# -- one-hot ---------------------------------------------------------------------------------------

def _one_hot_axis(op, xs, ixs, idt, descs, index="index", src="src"):
    """``(axis, index shape)`` of ``IndexingOneHot``/``IndexingSetOneHot`` after checking ``index``
    against ``src`` (shapes ``ixs`` and ``xs``); ``(None, None)`` while ``xs`` is unknown.
    ``index`` and ``src`` are the inputs' names in messages."""
    if idt.kind not in "iu":
        raise op_error(TypeError, op, f"{index} must be an integer tensor", descs)
    if xs is None:
        return None, None
    if not -len(xs) <= op.axis < len(xs):
        raise op_error(ValueError, op, f"axis {op.axis} is out of range for a {len(xs)}-D input",
                       descs)
    axis = op.axis % len(xs)
    want = tuple(xs[:axis]) + tuple(xs[axis + 1:])
    if ixs is not None and tuple(ixs) != want:
        raise op_error(ValueError, op, f"{index} must have shape {want} ({src} shape without axis "
                       f"{axis}), got {ixs}", descs)
    return axis, want


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


@def_infer(SoftmaxCrossEntropy)
def _infer_softmax_cross_entropy(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (logits, label), got {len(descs)}", descs)
    (xs, dtype), (ixs, idt) = descs
    if dtype.kind != "f":
        raise op_error(TypeError, op, "logits must be floating point", descs)
    _check_reduction(op, descs)
    axis, want = _one_hot_axis(op, xs, ixs, idt, descs, "label", "logits")
    if op.reduction != "none":
        return [TensorDesc((), dtype)]
    return [TensorDesc(want if axis is not None else ixs, dtype)]


def _check_reduction(op, descs):
    if op.reduction not in CROSS_ENTROPY_REDUCTIONS:
        raise op_error(ValueError, op, f"reduction must be one of {CROSS_ENTROPY_REDUCTIONS}, got "
                       f"{op.reduction!r}", descs)


@def_infer(SoftmaxCrossEntropyBackward)
def _infer_softmax_cross_entropy_backward(op, descs):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"expects 3 inputs (logits, label, dy), got {len(descs)}",
                       descs)
    (xs, dtype), (ixs, idt), (gs, _) = descs
    if dtype.kind != "f":
        raise op_error(TypeError, op, "logits must be floating point", descs)
    _check_reduction(op, descs)
    axis, want = _one_hot_axis(op, xs, ixs, idt, descs, "label", "logits")
    if op.reduction != "none":
        want = ()
    if axis is not None and gs is not None and tuple(gs) != want:
        raise op_error(ValueError, op, f"dy must have shape {want} (the loss's), got {gs}", descs)
    return [TensorDesc(xs, dtype)]


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
    if not xs:
        # MegEngine 1.13's Padding takes 1 to 7 dims and asserts on a scalar whatever pad_width
        # is (imperative/src/impl/ops/padding.cpp, dnn/src/common/padding.cpp): at the call here
        raise op_error(ValueError, op, f"cannot pad a 0-D input (pad_width={op.pad_width}); "
                       f"Padding takes 1 to 7 dims", descs)
    for i, (a, b) in enumerate(op.pad_width):
        if op.mode == "reflect" and max(a, b) >= max(xs[i], 1) and max(a, b) > 0:
            raise op_error(ValueError, op, f"reflect padding {(a, b)} must be smaller than the "
                           f"size {xs[i]} of axis {i}", descs)
        if op.mode == "replicate" and xs[i] == 0 and a + b > 0:
            raise op_error(ValueError, op, f"cannot replicate-pad the empty axis {i}", descs)
    out = tuple(s + (sum(op.pad_width[i]) if i < len(op.pad_width) else 0)
                for i, s in enumerate(xs))
    return [TensorDesc(out, dtype)]


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
