"""``AdamW``: Adam with decoupled weight decay (it shares Adam's ``AdamUpdate`` op)."""
from .adam import _AdamBase

__all__ = ["AdamW"]


class AdamW(_AdamBase):
    r"""Implements the AdamW algorithm proposed in `"Decoupled Weight Decay Regularization"
    <https://arxiv.org/abs/1711.05101>`_.

    Like :class:`Adam`, but the weight decay is not added to the gradient: it is added to the
    update, ``param = param - lr * (adam_delta + weight_decay * param)``.

    Args:
        params: iterable of parameters to optimize or dicts defining parameter groups.
        lr: learning rate.
        betas: coefficients used for computing running averages of the gradient and its square.
            Default: (0.9, 0.999)
        eps: term added to the denominator to improve numerical stability. Default: 1e-8
        weight_decay: weight decay coefficient. Default: 1e-2

    Example::

        >>> import mge, mge.optimizer as optim
        >>> w = mge.Parameter([1.0, 2.0])
        >>> opt = optim.AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = mge.tensor([0.5, -3.0])
        >>> opt.step().clear_grad()
        >>> w.numpy().round(4)
        array([0.85, 2.  ], dtype=float32)
    """

    _decoupled = True

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
