"""Loss functions (``megengine.functional.loss``; also reachable as ``F.nn.<name>``).

Every loss takes ``reduction``: ``"mean"`` (default), ``"sum"`` or ``"none"`` (the per-element or
per-sample loss).
"""
import functools

import numpy as np

from .._core.ops import IndexingOneHot, LogSoftmax, Reduce, SoftmaxCrossEntropy, elemwise_op
from ..core import apply

__all__ = ["l1_loss", "square_loss", "cross_entropy", "binary_cross_entropy", "hinge_loss",
           "ctc_loss"]

_REDUCTIONS = ("mean", "sum", "none")


def _reduced(fn):
    @functools.wraps(fn)
    def wrapper(*args, reduction="mean", **kwargs):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{fn.__name__}: {reduction!r} is not a valid value for reduction; "
                             f"expected one of {_REDUCTIONS}")
        return _reduce(fn(*args, **kwargs), reduction)
    return wrapper


def _e(mode, *xs):
    return apply(elemwise_op(mode), *xs)[0]


@_reduced
def l1_loss(pred, label, reduction="mean"):
    """Mean absolute error: ``|pred - label|``, reduced.

    ``l1_loss(pred, label, reduction='mean')``.
    """
    return _e("abs", pred - label)


@_reduced
def square_loss(pred, label, reduction="mean"):
    """Mean squared error: ``(pred - label) ** 2``, reduced.

    ``square_loss(pred, label, reduction='mean')``.
    """
    return _e("square", pred - label)


def cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0, reduction="mean"):
    """Cross entropy of class scores ``pred`` against integer class labels ``label``.

    ``cross_entropy(pred, label, axis=1, with_logits=True, label_smooth=0, reduction='mean')``.

    Args:
        pred: scores; classes along ``axis``.  Logits when ``with_logits``, else probabilities.
        label: integer labels, ``pred``'s shape without ``axis``.
        label_smooth: mixes the one-hot target with the uniform distribution:
            ``loss = (1 - ls) * nll + ls * mean_over_classes(-log p)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (the per-sample loss).

    With logits the log-probabilities come from a max-shifted log-softmax, so large logits do not
    overflow.  With logits and no smoothing the loss (reduced too, in float32 and float64) is one
    op, ``SoftmaxCrossEntropy``, and its gradient one more.
    """
    from ..tensor import Tensor

    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: {reduction!r} is not a valid value for reduction; "
                         f"expected one of {_REDUCTIONS}")
    if not isinstance(pred, Tensor):
        pred = Tensor(pred)
    if not isinstance(label, Tensor):  # numpy labels: int64 becomes int32, as mge.tensor does
        label = Tensor(label)
    if pred.ndim != label.ndim + 1:
        raise ValueError(f"cross_entropy: label must have one dim less than pred; pred shape "
                         f"{pred.shape}, label shape {label.shape}")
    ls = label_smooth
    no_smoothing = ls is None or (isinstance(ls, (int, float)) and ls == 0)
    if with_logits and no_smoothing:  # one op (and one for its gradient): the common case
        inside = reduction if pred.dtype in _REDUCED_INSIDE else "none"
        loss = apply(SoftmaxCrossEntropy.get(int(axis), inside), pred, label)[0]
        return loss if inside == reduction else _reduce(loss, reduction)
    if with_logits:
        logp = apply(LogSoftmax.get(int(axis)), pred)[0]
    else:
        logp = _e("log", pred)
    nll = -apply(IndexingOneHot.get(int(axis), False), logp, label)[0]
    if no_smoothing:
        return _reduce(nll, reduction)
    smooth = -apply(Reduce("mean", int(axis), False), logp)[0]
    return _reduce(nll * (1 - ls) + smooth * ls, reduction)


# the dtypes whose mean keeps them (float16's is float32: reduced by Reduce, as before)
_REDUCED_INSIDE = (np.dtype(np.float32), np.dtype(np.float64))


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return apply(Reduce.get(reduction, None, False), loss)[0]


@_reduced
def binary_cross_entropy(pred, label, with_logits=True, reduction="mean"):
    """Binary cross entropy, elementwise, reduced.

    ``binary_cross_entropy(pred, label, with_logits=True, reduction='mean')``: with logits it is
    ``-(label * logsigmoid(pred) + (1 - label) * logsigmoid(-pred))`` (stable for large logits),
    else ``-(label * log(pred) + (1 - label) * log(1 - pred))``.
    """
    if not with_logits:
        return -(label * _e("log", pred) + (1 - label) * _e("log", 1 - pred))
    return -(label * _e("logsigmoid", pred) + (1 - label) * _e("logsigmoid", -pred))


@_reduced
def hinge_loss(pred, label, norm="L1", reduction="mean"):
    """Hinge loss of ``(N, C)`` scores against ``-1/+1`` labels: per sample
    ``sum_c relu(1 - pred * label)`` (``norm='L1'``) or its square summed (``norm='L2'``).

    ``hinge_loss(pred, label, norm='L1', reduction='mean')``.
    """
    n = str(norm).upper()
    if n not in ("L1", "L2"):
        raise ValueError(f"hinge_loss: norm must be 'L1' or 'L2', got {norm!r}")
    loss = _e("relu", 1 - pred * label)
    if n == "L2":
        loss = _e("square", loss)
    return apply(Reduce("sum", 1, False), loss)[0]


def ctc_loss(pred, pred_lengths, label, label_lengths, blank=0, reduction="mean"):
    """The connectionist temporal classification loss (MegEngine's ``F.nn.ctc_loss``).

    ``ctc_loss(pred, pred_lengths, label, label_lengths, blank=0, reduction='mean')``.

    Args:
        pred: ``(T, N, C)`` probabilities (after a softmax, blank included), not logits.
        pred_lengths: ``(N,)`` number of time steps of each sequence.
        label: ``(N, S)`` padded labels, or their concatenation ``(sum(label_lengths),)``;
            no blanks.
        label_lengths: ``(N,)`` label lengths (positive).
        blank: the blank class.
        reduction: ``'none'`` (per sample, ``(N,)``), ``'sum'``, or ``'mean'`` (MegEngine's:
            the mean over samples of each loss divided by its label length).

    Returns:
        float32 loss.  Computed in float64 log-space (probabilities floored at float32's ``tiny``,
        as MegEngine's ``_safelog``); differentiable with respect to ``pred``.
    """
    import numpy as np
    from .._core.ops.nn_extra import CTCLoss
    from ..tensor import Tensor

    def host(x):
        return np.asarray(x.numpy() if isinstance(x, Tensor) else x)

    if not isinstance(pred, Tensor):
        pred = Tensor(np.asarray(pred, np.float32))
    if pred.ndim != 3:  # (MegEngine fails on the unpacking below with no word of what is wrong)
        raise ValueError(f"ctc_loss: pred must be 3-D (T, N, C), got shape {pred.shape}")
    T, N, C = (int(s) for s in pred.shape)
    plen, llen, lab = host(pred_lengths).reshape(-1), host(label_lengths).reshape(-1), host(label)
    assert plen.size == N, \
        "pred_lengths must be equal to batch_size {}, but got {}".format(N, plen.size)
    assert llen.size == N, \
        "label_lengths must be euqal to batch_size {}, but got {}".format(N, llen.size)
    assert 0 <= blank < C, "blank must be in label range [0, {}), but got {}".format(C, blank)
    assert plen.min() > 0 and plen.max() <= T, \
        "pred_lengths must be in range ({}, {}], bug got min {}, max {}".format(
            0, T, plen.min(), plen.max())
    if lab.ndim == 1:  # concatenated labels -> (N, max length), padded with blanks
        assert llen.min() > 0, "label lengths muse be positive"
        assert lab.size == llen.sum(), "label size must be equal to sum(label_lengths)"
        padded = np.full((N, int(llen.max())), blank, np.int32)
        padded[np.arange(int(llen.max()))[None, :] < llen[:, None]] = lab
        lab = padded
    else:
        S = lab.shape[1]
        assert llen.min() > 0 and llen.max() <= S, \
            "label_lengths must be in range ({}, {}], bug got min {}, max {}".format(
                0, S, llen.min(), llen.max())
    if reduction not in _REDUCTIONS:
        raise ValueError("{} is not a valid value for reduction".format(reduction))
    if pred.dtype != np.float32:
        pred = pred.astype("float32")
    loss = apply(CTCLoss(int(blank)), pred, Tensor(plen.astype(np.int32)),
                 Tensor(lab.astype(np.int32)), Tensor(llen.astype(np.int32)))[0]
    if reduction == "mean":
        return apply(Reduce("mean", None, False),
                     loss / Tensor(llen.astype(np.float32)))[0]
    if reduction == "sum":
        return apply(Reduce("sum", None, False), loss)[0]
    return loss
