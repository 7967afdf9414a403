"""Process groups of ``mge.distributed`` (MegEngine 1.13's ``megengine.distributed.group``).

A process that never called :func:`init_process_group` (no launcher started it) is rank 0 of a world
of size 1: ``get_rank()`` is 0, ``get_world_size()`` is 1, ``WORLD`` is the group ``[0]`` and the
collectives of ``mge.distributed.functional`` run with their one-rank meaning.

A process started by an MPI launcher (``mpiexec -n 4 python train.py``, or :class:`~.launcher`,
which runs ``mpiexec`` itself) is attached to the MPI world on the first question about it
(``get_rank()``, ``get_world_size()``, ``is_distributed()``, a collective): rank and size are
MPI's, ``WORLD`` is every process, and rank 0 serves the job's :class:`~.server.Server` for
:func:`get_client`.  The environment tells whether MPI launched the process (``PMI_RANK``/
``PMI_SIZE`` of MPICH and Intel MPI, ``OMPI_COMM_WORLD_*`` of Open MPI, ...); mpi4py is imported
only then.
"""
import atexit
import os
import socket
import sys
import time
from contextlib import contextmanager
from typing import List, Optional, Tuple

from .server import Client, Server

__all__ = ["WORLD", "Group", "init_process_group", "is_distributed", "get_rank", "get_world_size",
           "get_backend", "get_client", "get_local_device_id", "get_mm_server_addr",
           "get_py_server_addr", "group_barrier", "new_group", "override_backend"]

NEEDS_MPI = ("{what} needs MPI: a world of several processes started by an MPI launcher "
             "(dist.launcher or mpiexec); this process is rank 0 of a world of size 1")


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
_env_checked = False


def _transport_module():
    from .._core.device.cpu.kernels import distributed as transport
    return transport


def _attach(device=None, backend="auto", device_type="xpu"):
    """Attach this process to the MPI world its launcher started (a collective over the world:
    every rank calls it, through the first question about the world)."""
    global _sd
    tm = _transport_module()
    t = tm.transport()
    sd = StaticData()
    sd.world_size, sd.proc_rank = t.size, t.rank
    local = os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
    sd.device = int(local) if device is None and local is not None else (device or 0)
    sd.backend = backend
    sd.device_type = device_type
    names = t.control.allgather(t.processor)
    sd.machine_ranks = [r for r, n in enumerate(names) if n == t.processor]
    # the job's key-value server, on rank 0 (MegEngine's launcher starts it in the parent)
    server = Server(0) if t.rank == 0 else None
    host = "localhost" if len(set(names)) == 1 else socket.gethostbyname(socket.gethostname())
    sd.master_ip, sd.py_server_port = t.control.bcast(
        (host, server.py_server_port) if server is not None else None, root=0)
    sd.mm_server_port = 0
    sd.server = server
    _sd = sd
    WORLD.reset(list(range(t.size)))
    sd.client = Client(sd.master_ip, sd.py_server_port)
    atexit.register(_detach)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _abort_on_uncaught


def _abort_on_uncaught(kind, value, tb):
    # an uncaught exception on one rank would leave its peers waiting in a collective forever:
    # print it and abort the whole MPI job
    sys.__excepthook__(kind, value, tb)
    sys.stderr.flush()
    _transport_module().mpi().COMM_WORLD.Abort(1)


def _detach():
    """At exit: finish this rank's work, wait for the others, stop rank 0's server (before
    mpi4py finalizes MPI)."""
    sd = _sd
    if sd is None:
        return
    try:
        from .._core.channel import get_channel
        get_channel().full_sync()
    except Exception:
        pass
    t = _transport_module().transport()
    t.reap(wait=True)
    t.control.Barrier()
    server, sd.server = sd.server, None
    if server is not None:
        server.close()


def _check_env():
    """Attach on the first question when an MPI launcher started this process."""
    global _env_checked
    _env_checked = True
    world = _transport_module().env_world()
    if world is not None and world[1] > 1 and _sd is None:
        _attach()


def _mpi_world():
    if _sd is None and not _env_checked:
        _check_env()
    return _sd

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
        if _mpi_world() is None:  # WORLD of a process no launcher started: itself
            return [0]
        if self.proc_ranks is not None:  # WORLD, filled by the attach just now
            return self.proc_ranks
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

    As in MegEngine, ``world_size`` must be more than 1.  The processes must have been started
    by an MPI launcher (``mpiexec -n N``, or :class:`~.launcher`): rank and world size are then
    checked against MPI's.  A process that no MPI launcher started waits up to
    ``MGE_DIST_CONNECT_TIMEOUT`` seconds (default 10) for the master at ``master_ip:port`` and
    raises ``TimeoutError`` naming the address when nothing answers there, else ``RuntimeError``
    (mge's processes meet through MPI, not through the master's port).
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
    assert world_size > 1
    assert 0 <= rank < world_size
    assert port > 0
    world = _transport_module().env_world()
    if world is None or world[1] == 1:
        _wait_for_master(master_ip, port)
        raise RuntimeError(
            f"init_process_group(world_size={world_size}, rank={rank}): this process was not "
            "started by an MPI launcher; mge's processes meet through MPI: start them with "
            f"`mpiexec -n {world_size} python ...` or dist.launcher")
    if world != (rank, world_size):
        raise ValueError(f"init_process_group(world_size={world_size}, rank={rank}): MPI "
                         f"started this process as rank {world[0]} of {world[1]}")
    global _env_checked
    _env_checked = True
    if _sd is None:
        _attach(device, backend, device_type)
    else:  # attached already (a question came first): take the caller's device and backend
        _sd.device, _sd.backend, _sd.device_type = device, backend, device_type


def _wait_for_master(master_ip, port):
    timeout = float(os.environ.get("MGE_DIST_CONNECT_TIMEOUT", "10"))
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((master_ip, port), timeout=1.0).close()
            return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"init_process_group: no master answered at {master_ip}:{port} "
                                   f"within {timeout:g} s ({e})") from None
            time.sleep(0.2)


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
    return _mpi_world() is not None


def get_rank() -> int:
    r"""The rank of this process (0 without a process group)."""
    sd = _sd if _env_checked else _mpi_world()
    return sd.proc_rank if sd is not None else 0


def get_local_device_id() -> int:
    r"""The device id of this process (0 without a process group)."""
    sd = _sd if _env_checked else _mpi_world()
    return sd.device if sd is not None else 0


def get_world_size() -> int:
    r"""The number of processes of the job (1 without a process group)."""
    sd = _sd if _env_checked else _mpi_world()
    return sd.world_size if sd is not None else 1


def get_backend() -> str:
    r"""The communicator backend."""
    assert _mpi_world() is not None, "please call init_process_group first"
    return _sd.backend


def get_py_server_addr() -> Tuple[str, int]:
    r"""Master ip and port of the Python XML-RPC server."""
    assert _mpi_world() is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.py_server_port


def get_mm_server_addr() -> Tuple[str, int]:
    r"""Master ip and port of the collective server."""
    assert _mpi_world() is not None, "please call init_process_group first"
    return _sd.master_ip, _sd.mm_server_port


def get_client() -> Client:
    r"""The client of the Python XML-RPC server."""
    assert _mpi_world() is not None, "please call init_process_group first"
    return _sd.client


def new_group(proc_ranks: List[int]) -> Group:
    r"""A subgroup of the given ranks (the first is its root)."""
    return Group(proc_ranks)


def group_barrier(group: Group = WORLD) -> None:
    r"""Block until every rank of ``group`` reaches the barrier (returns at once for one rank)."""
    if _mpi_world() is None:
        return
    assert isinstance(group, Group)
    if group.size == 1:
        return
    from .._core.channel import get_channel
    get_channel().full_sync()  # what was issued before the barrier has run
    if group.size == _sd.world_size:
        _transport_module().transport().control.Barrier()
    else:
        _sd.client.group_barrier(group.key, group.size)
