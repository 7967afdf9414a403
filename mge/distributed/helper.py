"""Helpers of data-parallel training (MegEngine 1.13's ``megengine.distributed.helper``):
parameter packing, ``bcast_list_``, the all-reduce callback of ``GradManager``, ``synchronized``."""
import functools
import weakref
from collections import defaultdict
from typing import Callable

import numpy as np

from ..core.ops.builtin import ParamPackConcat, ParamPackSplit, apply
from ..tensor import Tensor
from .functional import _bcast_param, all_reduce_sum
from .group import WORLD, Group, group_barrier, is_distributed
from . import group as _group

__all__ = ["param_pack_split", "param_pack_concat", "get_offsets", "pack_allreduce_split",
           "synchronized", "bcast_list_", "AllreduceCallback", "make_allreduce_cb",
           "TensorFuture"]


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


class TensorFuture:
    r"""The gradient a bucketed :class:`AllreduceCallback` gives ``GradManager`` for a parameter
    whose bucket is not reduced yet (MegEngine's ``TensorFuture``); the callback puts the reduced
    gradient in its place when backward ends.  :meth:`get` gives the reduced gradient once it is
    :meth:`set`."""

    __slots__ = ("_value", "_set")

    def __init__(self, ack=False):
        self._value = None
        self._set = False

    def set(self, value):
        self._value, self._set = value, True

    def get(self):
        if not self._set:
            raise RuntimeError("Sorry, this tensor is not ready: its bucket is all-reduced when "
                               "backward ends")
        return self._value


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

    As MegEngine does, the gradients are packed into buckets, one list per dtype, in the order
    backward produces them: when a bucket holds more than ``_param_pack_thd`` bytes (10 MiB,
    MegEngine 1.13's default) it is reduced at once as one tensor (:func:`pack_allreduce_split`:
    ``param_pack_concat``, ``all_reduce_sum``, divided by the group's size for "mean",
    ``param_pack_split``).  The all-reduce is an op on the channel, so it runs on the worker
    thread while backward goes on computing the next gradients: communication overlaps backward.
    The buckets left when backward ends are reduced then, by dtype, and each parameter's
    gradient becomes its reduced part before ``GradManager`` accumulates it into ``.grad``.  A
    bucket's sum is the sum of the same numbers as the gradients' one by one, so the results are
    the unbucketed ones.

    Until then the callback's result for a parameter is a :class:`TensorFuture` (as in MegEngine):
    a callback attached after this one gets that future.  Outside a ``GradManager.backward``, and
    in a world of one process, each gradient is reduced at once (in a world of one process the
    reduced gradient is the gradient itself).
    """

    def __init__(self, reduce_method: str, group: Group = WORLD, backend: str = None):
        reduce_method = reduce_method.lower()
        assert reduce_method in ["sum", "mean"], "reduce_method should be sum or mean"
        self._reduce_method = reduce_method
        self._group = group
        self._marked_gm = weakref.WeakSet()
        self._param_pack_thd = 10 * 1024 * 1024
        if backend is None and _group._sd is not None:
            backend = _group._sd.backend
        if backend == "auto":
            backend = "nccl"
        self._backend = backend
        self._packed = []  # (dtype, number of gradients) of each bucket reduced, for inspection
        self._reset()

    def _reset(self):
        self._gm = None
        self._params = []
        self._gradients_dict = dict()
        self._futures_dict = dict()
        self._packing_list = defaultdict(list)
        self._packing_size = defaultdict(int)

    def _reduce_one(self, grad):
        grad = all_reduce_sum(grad, self._group)
        if self._reduce_method == "mean":
            grad = grad / self._group.size
        return grad

    def _pack(self, dtype):
        params = self._packing_list[dtype]
        if not params:
            return
        grads = [self._gradients_dict[id(p)] for p in params]
        shapes = [tuple(g.shape) for g in grads]
        reduced = pack_allreduce_split(grads, shapes, self._group, self._reduce_method)
        for p, g in zip(params, reduced):
            self._gradients_dict[id(p)] = g
        self._packed.append((dtype, len(params)))
        self._packing_list[dtype] = []
        self._packing_size[dtype] = 0

    def __call__(self, param, grad):
        from ..autodiff.grad_manager import get_backwarding_grad_manager

        if self._group.size == 1:
            return grad
        gm = get_backwarding_grad_manager()
        if gm is None or not hasattr(gm, "_gradients"):
            return self._reduce_one(grad)
        if gm is not self._gm:  # a new backward (or one that failed before its end)
            self._reset()
            self._gm = gm
        if gm not in self._marked_gm:
            gm._register_after_backward_callback(functools.partial(self._flush, weakref.ref(gm)))
            self._marked_gm.add(gm)
        key = id(param)
        if key in self._futures_dict:  # the same tensor twice in one backward: reduce alone
            return self._reduce_one(grad)
        fut = TensorFuture(ack=False)
        self._params.append(param)
        self._futures_dict[key] = fut
        self._gradients_dict[key] = grad
        dtype = str(np.dtype(grad.dtype))
        self._packing_list[dtype].append(param)
        self._packing_size[dtype] += int(np.prod(grad.shape)) * np.dtype(grad.dtype).itemsize
        if self._packing_size[dtype] > self._param_pack_thd:
            self._pack(dtype)  # all its gradients exist: its all-reduce starts now
        return fut

    def _flush(self, gm_ref):
        gm = gm_ref()
        if gm is None or gm is not self._gm:
            return
        try:
            for dtype in sorted(self._packing_list.keys()):
                self._pack(dtype)
            for p in self._params:
                key = id(p)
                grad, fut = self._gradients_dict[key], self._futures_dict[key]
                fut.set(grad)
                if gm._gradients.get(key) is fut:
                    gm._gradients[key] = grad
        finally:
            self._reset()


make_allreduce_cb = AllreduceCallback
