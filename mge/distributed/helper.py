"""Helpers of data-parallel training (MegEngine 1.13's ``megengine.distributed.helper``):
parameter packing, ``bcast_list_``, the all-reduce callback of ``GradManager``, ``synchronized``."""
import functools
from typing import Callable

import numpy as np

from ..core.ops.builtin import ParamPackConcat, ParamPackSplit, apply
from ..tensor import Tensor
from .functional import _bcast_param, all_reduce_sum
from .group import WORLD, Group, group_barrier, is_distributed
from . import group as _group

__all__ = ["param_pack_split", "param_pack_concat", "get_offsets", "pack_allreduce_split",
           "synchronized", "bcast_list_", "AllreduceCallback", "make_allreduce_cb"]


def param_pack_split(inp: Tensor, offsets: list, shapes: list):
    r"""Split the flat ``inp`` into tensors of ``shapes`` at ``offsets`` (``[begin0, end0, begin1,
    end1, ...]``), as parameter packing does.

    Examples:

        >>> import mge.functional as F
        >>> import mge.distributed as dist
        >>> b, c = dist.helper.param_pack_split(F.ones(10), [0, 1, 1, 10], [(1,), (3, 3)])
        >>> c.shape
        (3, 3)
    """
    op = ParamPackSplit(offsets=list(offsets), shapes=[s or (1,) for s in shapes])
    return apply(op, inp)


def param_pack_concat(inps: list, offsets: Tensor, offsets_val: list):
    r"""Concatenate ``inps`` into one flat tensor at ``offsets_val`` (``offsets`` is the same
    list as a tensor, as MegEngine passes it)."""
    op = ParamPackConcat(offsets=list(offsets_val))
    return apply(op, *inps, offsets)[0]


def get_offsets(shapes):
    r"""The ``[begin, end, ...]`` offsets of tensors of ``shapes`` packed one after another."""
    offsets = []
    offset = 0
    for shape in shapes:
        offsets.append(offset)
        offset += int(np.prod(shape))
        offsets.append(offset)
    return offsets


def pack_allreduce_split(pack_list, shapes, group, reduce_method):
    r"""All-reduce the tensors of ``pack_list`` as one packed tensor over ``group`` ("sum" or
    "mean") and split the result back into tensors of ``shapes``."""
    offsets_val = get_offsets(shapes)
    offsets = Tensor(offsets_val)
    packed_grads = param_pack_concat(pack_list, offsets, offsets_val)
    packed_grads = all_reduce_sum(packed_grads, group, str(packed_grads.device))
    if reduce_method == "mean":
        packed_grads /= group.size
    return param_pack_split(packed_grads, offsets_val, shapes)


def synchronized(func: Callable):
    r"""Decorator: in a distributed job every process waits at a barrier after ``func``
    returns (MegEngine uses it to serialize ``hub.load``)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        ret = func(*args, **kwargs)
        if is_distributed():
            group_barrier()
        return ret

    return wrapper


def bcast_list_(inps: list, group: Group = WORLD):
    r"""Replace each tensor of ``inps`` with the root's value (in place), e.g. to start every
    process from the same parameters."""
    for inp in inps:
        inp._reset(_bcast_param(inp, group))


class AllreduceCallback:
    r"""A ``GradManager`` callback that reduces each gradient across ``group``.

    Args:
        reduce_method: "sum" or "mean" (any case).
        group: the process group (default ``WORLD``).
        backend: the communicator backend (default: the process group's).

    Examples:

        .. code-block:: python

            gm = GradManager()
            gm.attach(model.parameters(), callbacks=[dist.make_allreduce_cb("mean")])

    Each gradient is all-reduced as soon as backward produces it: the collective is an op on
    the channel, so it runs on the worker thread while backward goes on computing the next
    gradients (communication overlaps backward).  MegEngine packs gradients into buckets of
    10 MB before reducing them; mge reduces them one by one (``pack_allreduce_split`` packs
    explicitly).  In a world of one process the reduced gradient is the gradient itself.
    """

    def __init__(self, reduce_method: str, group: Group = WORLD, backend: str = None):
        reduce_method = reduce_method.lower()
        assert reduce_method in ["sum", "mean"], "reduce_method should be sum or mean"
        self._reduce_method = reduce_method
        self._group = group
        self._param_pack_thd = 10 * 1024 * 1024
        if backend is None and _group._sd is not None:
            backend = _group._sd.backend
        if backend == "auto":
            backend = "nccl"
        self._backend = backend

    def __call__(self, param, grad):
        grad = all_reduce_sum(grad, self._group)
        if self._reduce_method == "mean":
            grad = grad / self._group.size
        return grad


make_allreduce_cb = AllreduceCallback
