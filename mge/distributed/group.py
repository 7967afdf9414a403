"""Process groups of ``mge.distributed`` (MegEngine 1.13's ``megengine.distributed.group``).

A process that never called :func:`init_process_group` (no launcher started it) is rank 0 of a world
of size 1: ``get_rank()`` is 0, ``get_world_size()`` is 1, ``WORLD`` is the group ``[0]`` and the
collectives of ``mge.distributed.functional`` run with their one-rank meaning.  A world of more than
one process needs the MPI transport of issue 15; until it exists, asking for one raises
``NotImplementedError``.
"""
from contextlib import contextmanager
from typing import List, Optional, Tuple

from .server import Client

__all__ = ["WORLD", "Group", "init_process_group", "is_distributed", "get_rank", "get_world_size",
           "get_backend", "get_client", "get_local_device_id", "get_mm_server_addr",
           "get_py_server_addr", "group_barrier", "new_group", "override_backend"]

NEEDS_MPI = ("{what} needs MPI: issue 15 (mge.distributed on MPI) is not built yet; "
             "this process is rank 0 of a world of size 1")


def _needs_mpi(what):
    return NotImplementedError(NEEDS_MPI.format(what=what))


class StaticData:
    """What :func:`init_process_group` recorded for this process."""

    server = None
    client = None
    master_ip = None
    py_server_port = None
    mm_server_port = None
    world_size = None
    proc_rank = None
    device = None
    backend = None
    device_type = None
    machine_ranks = None


_sd = None

_devices = {"gpu", "cuda", "rocm", "cambricon", "atlas", "cpu", "xpu"}
_backends = {"nccl", "rccl", "cncl", "hccl", "auto"}


class Group:
    r"""Ranked processes that run a collective together (see :mod:`~.distributed.functional`).

    By default collectives use ``WORLD``, every process of the job.

    Args:
        proc_ranks: rank list of the group, the first one is the root.
    """

    def __init__(self, proc_ranks):
        self.is_single_machine_cache = None
        if len(proc_ranks) == 0:  # the empty group: WORLD before init_process_group
            self.proc_ranks = None
            self.stream = None
        else:
            self.reset(proc_ranks)

    def reset(self, proc_ranks):
        self.check(proc_ranks)
        self.proc_ranks = list(proc_ranks)
        self.is_single_machine_cache = None
        self.stream = 0

    def check(self, proc_ranks):
        size, me = get_world_size(), get_rank()
        for rank in proc_ranks:
            assert isinstance(rank, int), f"rank must be an int, got {type(rank).__name__}"
            assert 0 <= rank < size, f"rank {rank} out of range for a world of size {size}"
        assert me in proc_ranks, f"this process (rank {me}) is not in the group {list(proc_ranks)}"

    def _ranks(self):
        if self.proc_ranks is not None:
            return self.proc_ranks
        if _sd is None:  # WORLD of a process no launcher started: itself
            return [0]
        raise AssertionError("invalid group")

    @property
    def size(self):
        return len(self._ranks())

    @property
    def key(self):
        return ",".join(map(str, self._ranks()))

    @property
    def rank(self):
        return self._ranks().index(get_rank())

    @property
    def comp_node(self):
        self._ranks()
        if _sd is None:
            from ..device import get_default_device
            return str(get_default_device())
        return "{}{}:{}".format(_sd.device_type, _sd.device, self.stream)

    @property
    def is_single_machine(self):
        if self.is_single_machine_cache is not None:
            return self.is_single_machine_cache
        if _sd is None:
            self.is_single_machine_cache = True
            return True
        ranks = _sd.machine_ranks
        self.is_single_machine_cache = ranks is not None and all(r in ranks for r in self._ranks())
        return self.is_single_machine_cache

    def __repr__(self):
        return f"Group({self._ranks() if (self.proc_ranks or _sd is None) else []})"


WORLD = Group([])


def init_process_group(
    master_ip: str,
    port: int,
    world_size: int,
    rank: int,
    device: int,
    backend: Optional[str] = "auto",
    device_type: str = "xpu",
) -> None:
    r"""Initialize the distributed process group and choose the device of this process.

    Args:
        master_ip: ip address of the master node.
        port: port of the master's :class:`~.Server`.
        world_size: total number of processes of the job.
        rank: rank of this process.
        device: the device id to bind this process to.
        backend: communicator backend ("auto", "nccl", "rccl", ...).
        device_type: device type ("xpu" is the default device's type).

    As in MegEngine, ``world_size`` must be more than 1; a world of more than one process needs
    issue 15's MPI transport and raises ``NotImplementedError`` after the arguments are checked.
    """
    if not isinstance(master_ip, str):
        raise TypeError("Expect type str but got {}".format(type(master_ip)))
    if not isinstance(port, int):
        raise TypeError("Expect type int but got {}".format(type(port)))
    if not isinstance(world_size, int):
        raise TypeError("Expect type int but got {}".format(type(world_size)))
    if not isinstance(rank, int):
        raise TypeError("Expect type int but got {}".format(type(rank)))
    if not isinstance(device, int):
        raise TypeError("Expect type int but got {}".format(type(device)))
    if backend not in _backends:
        raise ValueError("backend should be one of {} but got {}".format(_backends, backend))
    if device_type not in _devices:
        raise ValueError("{} is not a valid distributed device type".format(device_type))
    assert _sd is None, "init_process_group should be called only once"
    assert world_size > 1
    assert 0 <= rank < world_size
    assert port > 0
    raise _needs_mpi(f"init_process_group(world_size={world_size})")


def _set_machine_ranks(ranks) -> None:
    assert _sd is not None
    _sd.machine_ranks = ranks


@contextmanager
def override_backend(new_backend: str):
    r"""Use ``new_backend`` for the collectives issued inside the context."""
    assert _sd, "please call init_process_group first"
    old_backend = _sd.backend
    _sd.backend = new_backend
    try:
        yield
    finally:
        _sd.backend = old_backend


def is_distributed() -> bool:
    r"""Whether :func:`init_process_group` initialized a process group."""
    return _sd is not None


def get_rank() -> int:
    r"""The rank of this process (0 without a process group)."""
    return _sd.proc_rank if _sd is not None else 0


def get_local_device_id() -> int:
    r"""The device id of this process (0 without a process group)."""
    return _sd.device if _sd is not None else 0


def get_world_size() -> int:
    r"""The number of processes of the job (1 without a process group)."""
    return _sd.world_size if _sd is not None else 1


def get_backend() -> str:
    r"""The communicator backend."""
    assert _sd is not None, "please call init_process_group first"
    return _sd.backend


def get_py_server_addr() -> Tuple[str, int]:
    r"""Master ip and port of the Python XML-RPC server."""
    assert _sd is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.py_server_port


def get_mm_server_addr() -> Tuple[str, int]:
    r"""Master ip and port of the collective server."""
    assert _sd is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.mm_server_port


def get_client() -> Client:
    r"""The client of the Python XML-RPC server."""
    assert _sd is not None, "please call init_process_group first"
    return _sd.client


def new_group(proc_ranks: List[int]) -> Group:
    r"""A subgroup of the given ranks (the first is its root)."""
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    r"""Block until every rank of ``group`` reaches the barrier (returns at once for one rank)."""
    if _sd is None:
        return
    assert isinstance(group, Group)
    if group.size == 1:
        return
    _sd.client.group_barrier(group.key, group.size)
