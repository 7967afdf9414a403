"""Events between devices and streams (MegEngine's ``megengine._multistream``).

``record_event(device)`` returns an event (a tensor) marking the work issued so far on
``device``; ``wait_event(device, event)`` makes later work on ``device`` wait for it.  Both apply
MegEngine's ``Barrier`` op.  mge's channel runs the ops of every device and stream in the order
they were issued, so an event has always been reached when a later op runs.
"""
from .core._imperative_rt.core2 import apply
from .core.ops.builtin import Barrier
from .tensor import Tensor

__all__ = ["record_event", "wait_event"]

_dummy_tensors = {}


def _get_dummy_tensor(device):
    if device not in _dummy_tensors:
        _dummy_tensors[device] = Tensor([], device=device)
    return _dummy_tensors[device]


def record_event(device):
    """An event marking the work issued so far on ``device``."""
    (x,) = apply(Barrier(device, 1), _get_dummy_tensor(device))
    return x


def wait_event(device, event):
    """Make the work issued later on ``device`` wait for ``event``."""
    apply(Barrier(device, 0), event)
