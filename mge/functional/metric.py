"""``megengine.functional.metric``: ``topk_accuracy``."""
from typing import Iterable, Union

import numpy as np

from ..tensor import Tensor
from .math import topk as _topk
from .tensor import broadcast_to, transpose

__all__ = ["topk_accuracy"]


def topk_accuracy(
    logits: Tensor, target: Tensor, topk: Union[int, Iterable[int]] = 1
) -> Union[Tensor, Iterable[Tensor]]:
    """Classification accuracy of ``logits`` (``(batch, classes)``) against ``target`` labels.

    MegEngine signature: ``topk_accuracy(logits, target, topk=1)``.  ``topk`` is an int or a
    tuple of ints; the result is one float32 scalar tensor per ``k`` (a list when ``topk`` is a
    tuple), the fraction of rows whose label is among the ``k`` highest logits.

    Examples:
        >>> logits = mge.tensor([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]])
        >>> F.topk_accuracy(logits, mge.tensor([1, 2]), topk=(1, 2))[1].item()
        0.5
    """
    if isinstance(topk, int):
        topk = (topk,)
    _, pred = _topk(logits, k=max(topk), descending=True)
    if not isinstance(target, Tensor):
        target = Tensor(target)
    accs = []
    for k in topk:
        correct = pred[:, :k].detach() == broadcast_to(
            transpose(target, (0, "x")), (target.shape[0], k))
        accs.append(correct.astype(np.float32).sum() / target.shape[0])
    if len(topk) == 1:
        accs = accs[0]
    return accs
