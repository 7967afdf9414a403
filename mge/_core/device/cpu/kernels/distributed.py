"""CPU kernels of ``Collective`` on MPI (mpi4py), and the communicators they run on.

The numpy buffers go to MPI as they are (``Allreduce(x, out)``): a contiguous input is not copied,
and an input that no other tensor or view sees (a bucket's packed gradients) takes the result in
place (``Allreduce(MPI.IN_PLACE, x)``, the in-place kernel), with no new output buffer.
Every collective first exchanges a fixed 10-int header (ndim, dtype, shape) with one small
``Allgather``, so that ranks whose shapes or dtypes differ all raise the same ``ValueError``
instead of reducing mismatched bytes.  A group of one rank (every group of a process that no MPI
launch started) never touches MPI: each mode gives the rank its own data.

mpi4py is imported only when a world of several processes is attached (:func:`transport`), with
``MPI_THREAD_MULTIPLE``: the collectives run on the channel's worker thread while the caller's
thread uses a separate duplicate of the world communicator for its control messages
(barriers, object broadcasts).
"""
import collections
import os
import sys
import threading

import numpy as np

from ....ops.distributed import Collective
from ..table import def_inplace, def_kernel

__all__ = ["mpi", "env_world", "transport"]

_MPI = None
_TRANSPORT = None
_LOCK = threading.Lock()
# environment variables by which MPI launchers (MPICH/hydra, Intel MPI, Open MPI, MVAPICH, PMIx)
# tell a process its rank and the world's size
_ENV_RANK_SIZE = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                  ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"), ("PMIX_RANK", "PMIX_SIZE"))


def env_world():
    """``(rank, size)`` announced by an MPI launcher in the environment, or ``None``."""
    for r, s in _ENV_RANK_SIZE:
        if r in os.environ and s in os.environ:
            try:
                return int(os.environ[r]), int(os.environ[s])
            except ValueError:
                continue
    return None


def mpi():
    """The ``mpi4py.MPI`` module (initialised with thread level ``multiple``)."""
    global _MPI
    if _MPI is None:
        try:
            import mpi4py
        except ImportError as e:
            raise RuntimeError(
                "mge.distributed over several processes needs mpi4py and an MPI: "
                "pip install 'mge[distributed]' (mpi4py and the mpich wheel)") from e
        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI
        _MPI = MPI
    return _MPI


class Transport:
    """The MPI communicators of this process: ``control`` (the caller's thread), ``data`` (the
    kernels), and the data communicators of subgroups, made on first use."""

    def __init__(self):
        MPI = mpi()
        world = MPI.COMM_WORLD
        self.MPI = MPI
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.control = world.Dup()
        self.data = world.Dup()
        self.comms = {tuple(range(self.size)): self.data}
        self.pending = []  # (request, buffer) of sends not known to be complete
        self.processor = MPI.Get_processor_name()

    def comm(self, ranks):
        c = self.comms.get(ranks)
        if c is None:  # collective over the group's members only (MPI-3 Comm_create_group)
            group = self.data.Get_group().Incl(list(ranks))
            c = self.data.Create_group(group, tag=sum(ranks) % 32768)
            group.Free()
            self.comms[ranks] = c
        return c

    def reap(self, wait=False):
        if self.pending:
            if wait:
                self.MPI.Request.Waitall([r for r, _ in self.pending])
                self.pending = []
            else:
                self.pending = [(r, b) for r, b in self.pending if not r.Test()]


def transport():
    """This process's :class:`Transport` (MPI initialised on the first call)."""
    global _TRANSPORT
    with _LOCK:
        if _TRANSPORT is None:
            _TRANSPORT = Transport()
        return _TRANSPORT


# -- helpers ---------------------------------------------------------------------------------------
_HDR = 10
_DTYPES = [np.dtype(t) for t in ("float32", "float64", "float16", "int8", "int16", "int32",
                                 "int64", "uint8", "uint16", "uint32", "uint64", "bool",
                                 "complex64", "complex128")]
_ARITH = {np.dtype(t) for t in ("float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                                "uint16", "uint32", "uint64")}


def _header(x):
    h = np.full(_HDR, -1, np.int64)
    if x.ndim > _HDR - 2:
        raise ValueError(f"collectives take at most {_HDR - 2} dims, got {x.ndim}")
    h[0] = x.ndim
    h[1] = _DTYPES.index(x.dtype) if x.dtype in _DTYPES else 99
    h[2:2 + x.ndim] = x.shape
    return h


def _describe(h):
    nd = int(h[0])
    dt = _DTYPES[h[1]] if 0 <= h[1] < len(_DTYPES) else "?"
    return f"{tuple(int(s) for s in h[2:2 + nd])} {dt}"


def _check_same(op, comm, x):
    """Raise ``ValueError`` on every rank when the ranks' shapes or dtypes differ."""
    h = _header(x)
    every = np.empty((comm.Get_size(), _HDR), np.int64)
    comm.Allgather(h, every)
    if not (every == h).all():
        parts = ", ".join(f"rank {op.ranks[i]}: {_describe(every[i])}"
                          for i in range(len(every)))
        raise ValueError(f"{op.name} over ranks {list(op.ranks)}: the ranks' inputs differ in "
                         f"shape or dtype ({parts})")


def _mpi_op(MPI, mode):
    return {"all_reduce_sum": MPI.SUM, "reduce_scatter_sum": MPI.SUM, "reduce_sum": MPI.SUM,
            "all_reduce_max": MPI.MAX, "all_reduce_min": MPI.MIN}[mode]


def _bytes(a):
    """``a`` (contiguous) as bytes for modes that only move data: any dtype goes."""
    return a.reshape(-1).view(np.uint8)


# Output buffers of large reductions kept for reuse: the first touch of a fresh buffer's pages
# costs as much as the reduction itself on one machine (a page fault per 4 KiB).  A kept array is
# taken again only when this list is all that still refers to it: its tensor was freed and no
# view of it (``.numpy()``), no other tensor sees it, by the same reference count as the CPU
# device's in-place reuse.  At most _POOL_MAX arrays of at least _POOL_MIN bytes are kept.
_POOL = []
_POOL_MIN = 1 << 18
_POOL_MAX = 4
_POOL_LOCK = threading.Lock()


def _refs(values, i):
    return sys.getrefcount(values[i])


_POOL_SOLE = _refs([np.empty(1)], 0)


def _fresh(shape, dtype):
    """An uninitialised array of ``shape`` and ``dtype``: a kept one nobody sees, or a new one."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < _POOL_MIN:
        return np.empty(shape, dtype)
    with _POOL_LOCK:
        pool = _POOL
        for i in range(len(pool)):
            if _refs(pool, i) <= _POOL_SOLE:
                a = pool[i]
                if a.shape == shape and a.dtype == dtype:
                    return a
        out = np.empty(shape, dtype)
        for i in range(len(pool)):  # replace a free one of another shape, else the oldest
            if _refs(pool, i) <= _POOL_SOLE:
                pool[i] = out
                return out
        pool.append(out)
        if len(pool) > _POOL_MAX:
            del pool[0]
        return out


_LOCAL = collections.defaultdict(collections.deque)  # sends of a process to itself, by tag


def _local(op, x):
    # the meaning of every mode for a group of one rank
    if op.mode == "send":
        _LOCAL[op.tag].append(np.array(x))
        return (x,)
    if op.mode == "recv":
        if not _LOCAL[op.tag]:
            raise RuntimeError(f"{op.name}: nothing was sent to this process with tag {op.tag}")
        return (_LOCAL[op.tag].popleft(),)
    return (x,)


_IN_PLACE_MODES = ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "broadcast")


@def_inplace(Collective)
def _cpu_collective_inplace(op, arrays, k):
    # The input's tensor has no other user (the packed gradients of a bucket, a temporary): the
    # result is written over it with MPI_IN_PLACE, no fresh output buffer (whose first touch of
    # every page costs as much as the reduction of a large buffer on one machine).  The
    # shape/dtype check across ranks runs first, so mismatched ranks raise before a byte changes.
    mode = op.mode
    if mode not in _IN_PLACE_MODES or len(op.ranks) == 1:
        return None
    x = arrays[0]
    if mode != "broadcast" and x.dtype not in _ARITH:
        return None  # booleans and float16 take the ordinary kernel's paths
    t = transport()
    t.reap()
    comm = t.comm(op.ranks)
    _check_same(op, comm, x)
    if mode == "broadcast":
        comm.Bcast(_bytes(x), root=op.root)
    else:
        comm.Allreduce(t.MPI.IN_PLACE, x, _mpi_op(t.MPI, mode))
    return (x,)


@def_kernel(Collective)
def _cpu_collective(op, *inputs):
    x = np.ascontiguousarray(inputs[0]) if inputs else None
    if len(op.ranks) == 1 and op.peer in (-1, op.ranks[0]):
        return _local(op, x)
    t = transport()
    t.reap()
    mode = op.mode
    MPI = t.MPI
    if mode == "send":
        hdr = _header(x)
        t.data.Send(hdr, dest=op.peer, tag=2 * op.tag)
        req = t.data.Isend(_bytes(x), dest=op.peer, tag=2 * op.tag + 1)
        t.pending.append((req, x))
        return (x,)
    if mode == "recv":
        hdr = np.empty(_HDR, np.int64)
        t.data.Recv(hdr, source=op.peer, tag=2 * op.tag)
        nd = int(hdr[0])
        dtype = _DTYPES[hdr[1]]
        if op.dtype is not None and np.dtype(op.dtype) != dtype:
            raise TypeError(f"{op.name}: rank {op.peer} sent {dtype}, expected {op.dtype}")
        out = np.empty(tuple(int(s) for s in hdr[2:2 + nd]), dtype)
        t.data.Recv(_bytes(out), source=op.peer, tag=2 * op.tag + 1)
        return (out,)
    comm = t.comm(op.ranks)
    _check_same(op, comm, x)
    n, me, root = len(op.ranks), op.rank, op.root
    if mode in ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "reduce_scatter_sum",
                "reduce_sum"):
        if x.dtype == np.bool_ and mode != "all_reduce_sum":  # max/min of booleans: or/and
            red = MPI.LOR if mode == "all_reduce_max" else MPI.LAND
            xx, cast = x, None
        else:
            red = _mpi_op(MPI, mode)
            cast = None if x.dtype in _ARITH else x.dtype
            xx = x if cast is None else x.astype(np.float64 if x.dtype.kind != "c" else x.dtype)
        if mode == "reduce_scatter_sum":
            out = np.empty((xx.shape[0] // n,) + xx.shape[1:], xx.dtype)
            comm.Reduce_scatter_block(xx, out, red)
        elif mode == "reduce_sum":
            out = np.empty_like(xx)
            comm.Reduce(xx, out, red, root=root)
            if me != root:
                out[...] = 0  # the non-root ranks' output is unused (MegEngine gives None)
        else:
            out = _fresh(xx.shape, xx.dtype)
            comm.Allreduce(xx, out, red)
        return (out if cast is None else out.astype(cast),)
    if mode == "broadcast":
        out = x if me == root else np.empty_like(x)
        comm.Bcast(_bytes(out), root=root)
        return (out,)
    if mode in ("all_gather", "gather"):
        shape = (n * x.shape[0],) + x.shape[1:] if x.ndim else (n,)
        out = np.empty(shape, x.dtype)
        if mode == "all_gather":
            comm.Allgather(_bytes(x), _bytes(out))
        else:
            comm.Gather(_bytes(x), _bytes(out), root=root)
            if me != root:
                out[...] = 0  # unused on the non-root ranks
        return (out,)
    if mode == "scatter":
        out = np.empty((x.shape[0] // n,) + x.shape[1:], x.dtype)
        comm.Scatter(_bytes(x) if me == root else None, _bytes(out), root=root)
        return (out,)
    if mode == "all_to_all":
        out = np.empty_like(x)
        comm.Alltoall(_bytes(x), _bytes(out))
        return (out,)
    raise ValueError(f"{op.name}: unknown mode")
