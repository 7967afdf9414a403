"""Optimizers, learning-rate schedulers and gradient clipping (MegEngine's
``megengine.optimizer``).

    >>> import mge, mge.optimizer as optim
    >>> w = mge.Parameter([1.0, 2.0])
    >>> opt = optim.SGD([w], lr=0.1, momentum=0.9)
    >>> w.grad = mge.tensor([1.0, 1.0])
    >>> opt.step().clear_grad()
    >>> w.numpy()
    array([0.9, 1.9], dtype=float32)

``RMSprop`` and ``CosineAnnealingLR`` are not in MegEngine 1.13; they follow PyTorch.
"""
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamw import AdamW
from .clip_grad import clip_grad_norm, clip_grad_value
from .cosine_annealing_lr import CosineAnnealingLR
from .lamb import LAMB, LAMBFp16
from .lr_scheduler import LRScheduler
from .multi_step_lr import MultiStepLR
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "RMSprop", "LAMB",
           "LAMBFp16", "LRScheduler",
           "MultiStepLR", "CosineAnnealingLR", "clip_grad_norm", "clip_grad_value"]
