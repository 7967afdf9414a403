"""Collective communication: one op, ``Collective``, for every collective of ``mge.distributed``
(the seed's GroupComm segment: MegEngine's ``CollectiveComm`` modes plus ``RemoteSend`` and
``RemoteRecv``), and its shape/dtype rule.

``ranks`` are the world ranks of the group in group order, ``rank`` this process's index in it and
``root`` the index of the root; ``peer`` and ``tag`` name the other process of a send or receive.
The rule is this process's half: the other ranks' shapes are checked by the kernel
(``device/cpu/kernels/distributed.py``, on MPI), which raises ``ValueError`` on every rank when they
differ.  Axes other than 0 are the functional layer's reshapes; the op works on axis 0.
Backward rules: ``autodiff/rules/distributed.py``.
"""
from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Collective", "COLLECTIVE_MODES"]

COLLECTIVE_MODES = (
    "all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather", "reduce_scatter_sum",
    "broadcast", "reduce_sum", "gather", "scatter", "all_to_all", "send", "recv",
)


class Collective(OpDef):
    """``mode`` over the processes ``ranks`` (this process is ``ranks[rank]``)."""

    _fields = ("mode", "ranks", "rank", "root", "peer", "tag", "device", "dtype")
    _defaults = {"root": 0, "peer": -1, "tag": 0, "dtype": None}  # dtype: of a recv
    sets_device = True
    long_running = True  # blocks on the other processes: the worker thread's job
    never_recompute = True  # DTR must not replay a collective on one rank alone


@def_infer(Collective)
def _infer_collective(op, descs):
    mode, n = op.mode, len(op.ranks)
    if mode not in COLLECTIVE_MODES:
        raise op_error(ValueError, op, f"unknown mode {mode!r}", descs)
    if mode == "recv":
        if descs:
            raise op_error(TypeError, op, "recv takes no tensor input", descs)
        return [TensorDesc(None, op.dtype)]  # the sender's shape, known when it arrives
    if len(descs) != 1:
        raise op_error(TypeError, op, f"takes 1 input, got {len(descs)}", descs)
    shape, dtype = descs[0]
    if shape is None or mode in ("all_reduce_sum", "all_reduce_max", "all_reduce_min",
                                 "broadcast", "reduce_sum", "all_to_all", "send"):
        if mode == "all_to_all" and shape is not None and (not shape or shape[0] % n):
            raise op_error(ValueError, op, f"axis 0 must divide by the group size {n}", descs)
        return [TensorDesc(shape, dtype)]
    shape = tuple(shape)
    if mode in ("all_gather", "gather"):
        return [TensorDesc((n * shape[0],) + shape[1:] if shape else (n,), dtype)]
    # reduce_scatter_sum, scatter: rank i gets part i of axis 0
    if not shape or shape[0] % n:
        raise op_error(ValueError, op, f"axis 0 must divide by the group size {n}", descs)
    return [TensorDesc((shape[0] // n,) + shape[1:], dtype)]
