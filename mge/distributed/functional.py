"""Collective communication (MegEngine 1.13's ``megengine.distributed.functional``).

Each collective applies MegEngine's ``CollectiveComm`` op to the tensors of one group; the ones
MegEngine differentiates through a :class:`~mge.autodiff.Function` (``reduce_sum``, ``broadcast``,
``gather``, ``scatter``, ``remote_send``/``remote_recv``) do so here too, the others by the op's
backward rule.  A group of one rank (every group of a process no launcher started) gives the rank
its own data: ``all_reduce_sum(x)`` is a copy of ``x``, ``all_gather(x)`` is ``x`` and so on, with
the same gradients.  Groups of several ranks apply mge's ``Collective`` op
(``mge/_core/ops/distributed.py``), whose CPU kernel runs the collective on MPI on the channel's
worker thread and whose backward rule is the adjoint collective; ``reduce_sum`` and ``gather``
give ``None`` on the ranks other than the root, as in MegEngine.
"""
from typing import Optional

import numpy as np

from .._core.ops.distributed import Collective
from ..autodiff.function import Function
from ..core.ops.builtin import _device as _as_device
from ..core.ops.builtin import CollectiveComm, apply
from ..tensor import Tensor
from . import group as _group
from .group import WORLD, Group, _needs_mpi, get_rank

__all__ = [
    "reduce_sum",
    "broadcast",
    "all_gather",
    "reduce_scatter_sum",
    "all_reduce_sum",
    "all_reduce_max",
    "all_reduce_min",
    "gather",
    "scatter",
    "all_to_all",
    "remote_send",
    "remote_recv",
]

_device2backend = {"gpu": "nccl", "cuda": "nccl", "rocm": "rccl"}


def _backend():
    sd = _group._sd
    if sd is None:
        return ""
    if sd.backend == "auto":
        from ..device import is_cuda_available
        return _device2backend["cuda"] if is_cuda_available() else ""
    return sd.backend


def _server_addr():
    sd = _group._sd
    if sd is None:
        return "", 0
    return sd.master_ip, sd.mm_server_port


def _mpi(mode, inp, group, device=None):
    """``Collective(mode)`` of ``inp`` over the several ranks of ``group``."""
    op = Collective.get(mode, tuple(group._ranks()), group.rank, 0, -1, 0,
                        _as_device(device, (inp,)))
    return apply(op, inp)[0]


def collective_comm(inp, mode, group, device):
    r"""Apply the collective ``mode`` (a ``CollectiveComm.Mode``) to ``inp`` over ``group``."""
    assert isinstance(group, Group)
    if group.size > 1:
        return _mpi(str.__str__(mode).lower(), inp, group, device)
    if device is None:
        device = ""
    addr, port = _server_addr()
    op = CollectiveComm(
        key=group.key + _backend(),
        nr_devices=group.size,
        rank=group.rank,
        is_root=(group.rank == 0),
        local_grad=False,
        addr=addr,
        port=port,
        mode=mode,
        dtype=inp.dtype,
        backend=_backend(),
        comp_node=device,
    )
    (result,) = apply(op, inp)
    return result


def _bcast_val(group, val):
    """The root's ``val`` on every rank of ``group`` (through the job's server)."""
    if group.size == 1:
        return val
    return _group.get_client().bcast_val(val if group.rank == 0 else None, group.key, group.size)


def _bcast_has_grad(group, grad):
    return _bcast_val(group, grad is not None)


def _non_root(what):
    # ranks other than the root take part only in a world of several processes
    raise _needs_mpi(f"{what} on a rank other than the group's root")


class _ReduceSum(Function):
    def __init__(self, group=WORLD, device=None):
        self.group = group
        self.out_device = device

    def forward(self, data):
        self.in_device = str(data.device)
        return collective_comm(data, CollectiveComm.Mode.REDUCE_SUM, self.group, self.out_device)

    def backward(self, grad):
        if _bcast_has_grad(self.group, grad):
            return broadcast(grad, self.group, self.in_device)


def reduce_sum(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
) -> Tensor:
    r"""Reduce ``inp`` across ``group`` by sum; only the root (the group's first rank) gets the
    result, the others ``None``.

    Args:
        inp: input tensor.
        group: the process group (default ``WORLD``: every process).
        device: the device to run on (default: the device of ``inp``).
    """
    if group.size > 1:
        out = _mpi("reduce_sum", inp, group, device)
        return out if group.rank == 0 else None
    return _ReduceSum(group, device)(inp)


class _Broadcast(Function):
    def __init__(self, group=WORLD, device=None):
        self.group = group
        self.out_device = device

    def forward(self, data):
        self.in_device = str(data.device)
        return collective_comm(data, CollectiveComm.Mode.BROADCAST, self.group, self.out_device)

    def backward(self, grad):
        if grad is not None:
            return reduce_sum(grad, self.group, self.in_device)


def broadcast(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
) -> Tensor:
    r"""The root's ``inp`` on every rank of ``group``.

    Args:
        inp: input tensor.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
    """
    if group.size > 1:
        return _mpi("broadcast", inp, group, device)
    return _Broadcast(group, device)(inp)


def _bcast_param(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None
) -> Tensor:
    return collective_comm(inp, CollectiveComm.Mode.BROADCAST, group, device)


def _concat_parts(out, inp, group_size, axis):
    """``out`` (the ranks' parts stacked on axis 0) with the parts concatenated on ``axis``."""
    transformed_shape = list(inp._tuple_shape)
    transformed_shape[axis] *= group_size
    n, *shp = out._tuple_shape
    index = [*range(1, axis), axis, 0, *range(axis + 1, out.ndim + 1)]
    return out.reshape(group_size, n // group_size, *shp).transpose(index).reshape(transformed_shape)


def _split_parts(inp, group_size, axis):
    """``inp`` rearranged so that its ``group_size`` parts along ``axis`` follow one another on
    axis 0 (what a scattering collective splits)."""
    k_new_shape = list(inp._tuple_shape)
    k_new_shape[axis] //= group_size
    k_new_shape[0] *= group_size
    new_shape = list(inp._tuple_shape)
    new_shape[axis] //= group_size
    new_shape.insert(axis, group_size)
    index = [axis, *range(0, axis), *range(axis + 1, inp.ndim + 1)]
    return inp.reshape(new_shape).transpose(index).reshape(k_new_shape)


def all_gather(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0,
) -> Tensor:
    r"""The tensors of every rank of ``group``, concatenated on ``axis`` in rank order.

    Args:
        inp: input tensor.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
        axis: the concatenation axis (default 0).
    """
    out = collective_comm(inp, CollectiveComm.Mode.ALL_GATHER, group, device)
    if axis == 0:
        return out
    return _concat_parts(out, inp, group.size if group is not None else 1, axis)


def reduce_scatter_sum(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0
) -> Tensor:
    r"""Sum ``inp`` across ``group`` and give rank ``i`` the ``i``-th part along ``axis``.

    Args:
        inp: input tensor; its ``axis`` must divide by the group's size.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
        axis: the split axis (default 0).
    """
    group_size = group.size if group is not None else 1
    assert (
        list(inp._tuple_shape)[axis] % group_size == 0
    ), "current axis: {} can't devided by group size".format(axis)
    if axis != 0:
        inp = _split_parts(inp, group_size, axis)
    return collective_comm(inp, CollectiveComm.Mode.REDUCE_SCATTER_SUM, group, device)


def all_reduce_sum(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
) -> Tensor:
    r"""The elementwise sum of ``inp`` over the ranks of ``group``, on every rank.

    ``inp`` must have the same shape on every rank.  For a group of one rank it is a copy of
    ``inp``.

    Args:
        inp: tensor to reduce.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
    """
    return collective_comm(inp, CollectiveComm.Mode.ALL_REDUCE_SUM, group, device)


def all_reduce_max(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
) -> Tensor:
    r"""The elementwise maximum of ``inp`` over the ranks of ``group``, on every rank.

    Args:
        inp: tensor to reduce.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
    """
    return collective_comm(inp, CollectiveComm.Mode.ALL_REDUCE_MAX, group, device)


def all_reduce_min(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None,
) -> Tensor:
    r"""The elementwise minimum of ``inp`` over the ranks of ``group``, on every rank.

    Args:
        inp: tensor to reduce.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
    """
    return collective_comm(inp, CollectiveComm.Mode.ALL_REDUCE_MIN, group, device)


class _Gather(Function):
    def __init__(self, group=WORLD, device=None):
        self.group = group
        self.out_device = device

    def forward(self, data):
        self.in_device = str(data.device)
        return collective_comm(data, CollectiveComm.Mode.GATHER, self.group, self.out_device)

    def backward(self, grad):
        if _bcast_has_grad(self.group, grad):
            return scatter(grad, self.group, self.in_device)


def gather(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0,
) -> Tensor:
    r"""The tensors of every rank of ``group`` concatenated on ``axis``, on the root only (the
    others get ``None``).

    Args:
        inp: input tensor.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
        axis: the concatenation axis (default 0).
    """
    assert (
        axis < inp.ndim
    ), "your concat_axis exceeds the dim of the tensor, the tensor shape is {}".format(inp.shape)
    if group.size > 1:
        out = _mpi("gather", inp, group, device)
        if group.rank != 0:
            return None
    else:
        out = _Gather(group, device)(inp)
    if axis == 0:
        return out
    return _concat_parts(out, inp, group.size, axis)


class _Scatter(Function):
    def __init__(self, group=WORLD, device=None):
        self.group = group
        self.out_device = device

    def forward(self, data):
        self.in_device = str(data.device)
        return collective_comm(data, CollectiveComm.Mode.SCATTER, self.group, self.out_device)

    def backward(self, grad):
        if grad is not None:
            return gather(grad, self.group, self.in_device)


def scatter(
    inp: Tensor, group: Optional[Group] = WORLD, device: Optional[str] = None, axis=0,
) -> Tensor:
    r"""Split the root's ``inp`` on ``axis`` into one part per rank; rank ``i`` gets part ``i``.

    Args:
        inp: input tensor (read on the root); its ``axis`` must divide by the group's size.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
        axis: the split axis (default 0).
    """
    assert (
        list(inp._tuple_shape)[axis] % group.size == 0
    ), "current axis: {} can't devided by group size".format(axis)
    if axis != 0:
        inp = _split_parts(inp, group.size, axis)
    if group.size > 1:
        return _mpi("scatter", inp, group, device)
    return _Scatter(group, device)(inp)


def all_to_all(
    inp: Tensor,
    group: Optional[Group] = WORLD,
    device: Optional[str] = None,
    split_axis: int = 0,
    concat_axis: int = 0,
) -> Tensor:
    r"""Split ``inp`` on ``split_axis`` into one part per rank, send part ``i`` to rank ``i`` and
    concatenate the parts received on ``concat_axis``.

    Args:
        inp: input tensor; its ``split_axis`` must divide by the group's size.
        group: the process group (default ``WORLD``).
        device: the device to run on (default: the device of ``inp``).
        split_axis: the split axis (default 0).
        concat_axis: the concatenation axis (default 0).
    """
    group_size = group.size if group is not None else 1
    assert (
        list(inp._tuple_shape)[split_axis] % group_size == 0
    ), "current axis: {} can't devided by group size".format(split_axis)
    origin_shape = inp._tuple_shape
    if split_axis != 0:
        inp = _split_parts(inp, group_size, split_axis)
    out = collective_comm(inp, CollectiveComm.Mode.ALL_TO_ALL, group, device)
    if concat_axis == 0:
        return out
    transformed_shape = list(origin_shape)
    transformed_shape[concat_axis] *= group_size
    transformed_shape[split_axis] //= group_size
    n, *shp = out._tuple_shape
    index = [*range(1, concat_axis), concat_axis, 0, *range(concat_axis + 1, out.ndim + 1)]
    return (out.reshape(group_size, n // group_size, *shp).transpose(index)
            .reshape(transformed_shape))


def _check_peer(rank, what):
    if not isinstance(rank, (int, np.integer)) or rank < 0:
        raise ValueError(f"{what}: rank must be a non-negative int, got {rank!r}")
    if int(rank) == get_rank():
        raise ValueError(f"{what}: rank {rank} is this process")
    if int(rank) >= _group.get_world_size():
        raise ValueError(f"{what}: rank {rank} is out of the world of size "
                         f"{_group.get_world_size()}")


_P2P_SEQ = {}


def _p2p_key(src, dst):
    # the n-th message from src to dst, counted alike on both sides
    n = _P2P_SEQ.get((src, dst), 0)
    _P2P_SEQ[(src, dst)] = n + 1
    return f"mge-p2p:{src}->{dst}:{n}"


def remote_send(inp: Tensor, dest_rank: int):
    r"""Send ``inp`` to the process of rank ``dest_rank`` (returns ``None``).

    The send starts on the channel's worker and does not wait for the receiver; sending to this
    process itself is a ``ValueError``.
    """
    _check_peer(dest_rank, "remote_send")
    key = _p2p_key(get_rank(), int(dest_rank))
    _group.get_client().user_set(key, np.dtype(inp.dtype).str)  # the receiver's dtype
    op = Collective.get("send", (get_rank(), int(dest_rank)), 0, 0, int(dest_rank), 0,
                        inp.device)
    apply(op, inp)


def remote_recv(src_rank: int, device: Optional[str] = None, inp=None) -> Tensor:
    r"""Receive the tensor the process of rank ``src_rank`` sends.

    The shape and dtype are the sender's (``inp``, accepted for MegEngine code, is not needed);
    receiving from this process itself is a ``ValueError``.
    """
    _check_peer(src_rank, "remote_recv")
    dtype = np.dtype(_group.get_client().user_pop(_p2p_key(int(src_rank), get_rank())))
    op = Collective.get("recv", (int(src_rank), get_rank()), 1, 0, int(src_rank), 0,
                        _as_device(device), dtype)
    return apply(op)[0]
