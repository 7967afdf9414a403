"""Gradient clipping: ``clip_grad_norm`` and ``clip_grad_value`` (MegEngine's signatures)."""
# pylint: disable=redefined-builtin
from .. import functional as F
from .._core.channel import get_channel
from ..tensor import Tensor

__all__ = ["clip_grad_norm", "clip_grad_value"]


def _with_grads(tensors):
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    return [t for t in tensors if t.grad is not None]


def clip_grad_norm(tensors, max_norm, ord=2.0):
    r"""Clip the gradient norm of an iterable of parameters.

    The norm is computed over all gradients together, as if they were concatenated into a single
    vector.  When it exceeds ``max_norm``, every gradient is multiplied by
    ``max_norm / (norm + 1e-6)``.  Gradients are modified in place (the ``grad`` tensors keep
    their identity); parameters without a gradient are skipped.

    Args:
        tensors: an iterable of Tensors or a single Tensor.
        max_norm: max norm of the gradients.
        ord: type of the used p-norm. Can be ``'inf'`` for infinity norm.

    Returns:
        total norm of the gradients (viewed as a single vector), a 0-d tensor; ``Tensor(0.0)``
        when no tensor has a gradient.

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([0.0, 0.0]); w.grad = mge.tensor([3.0, 4.0])
        >>> optim.clip_grad_norm([w], max_norm=1.0).item()
        5.0
        >>> w.grad.numpy().round(4)
        array([0.6, 0.8], dtype=float32)
    """
    if isinstance(ord, str):
        ord = float(ord)  # 'inf' -> inf
    channel = get_channel()
    channel.push_scope("clip_grad_norm")
    try:
        tensors = _with_grads(tensors)
        if len(tensors) == 0:
            return Tensor(0.0)
        norms = [F.norm(t.grad.flatten(), ord=ord) for t in tensors]
        # The p-norm of the per-tensor p-norms is the p-norm of all the elements together.
        norm_ = F.norm(F.stack(norms), ord=ord) if len(norms) > 1 else norms[0]
        scale = F.minimum(max_norm / (norm_ + 1e-6), 1.0)
        for t in tensors:
            grad = t.grad
            s = scale if scale.dtype == grad.dtype else scale.astype(grad.dtype)
            grad._reset(grad * s)
        return norm_
    finally:
        channel.pop_scope("clip_grad_norm")


def clip_grad_value(tensors, lower, upper):
    r"""Clip the gradients of an iterable of parameters into ``[lower, upper]``, in place.

    Args:
        tensors: an iterable of Tensors or a single Tensor.
        lower: minimum allowed value of the gradients.
        upper: maximum allowed value of the gradients.

    Returns:
        None.

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([0.0, 0.0]); w.grad = mge.tensor([3.0, -4.0])
        >>> optim.clip_grad_value(w, -1.0, 2.0)
        >>> w.grad.numpy()
        array([ 2., -1.], dtype=float32)
    """
    channel = get_channel()
    channel.push_scope("clip_grad_value")
    try:
        for t in _with_grads(tensors):
            t.grad._reset(F.clip(t.grad, lower, upper))
    finally:
        channel.pop_scope("clip_grad_value")
