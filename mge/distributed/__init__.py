"""``mge.distributed``: data-parallel training (MegEngine 1.13's ``megengine.distributed``).

A process that no launcher started is rank 0 of a world of size 1, so single-process code that
calls ``get_world_size()``, ``make_allreduce_cb`` or the collectives of
:mod:`mge.distributed.functional` runs unchanged (a collective of one rank gives the rank its own
data).  Worlds of several processes are issue 15 (MPI); until then they raise
``NotImplementedError``.  ``docs/differences.rst`` says what differs from MegEngine.
"""
from . import functional, group, helper  # noqa: F401
from .group import (
    WORLD,
    Group,
    get_backend,
    get_client,
    get_local_device_id,
    get_mm_server_addr,
    get_py_server_addr,
    get_rank,
    get_world_size,
    group_barrier,
    init_process_group,
    is_distributed,
    new_group,
    override_backend,
)
from .helper import bcast_list_, make_allreduce_cb, synchronized
from .launcher import launcher
from .server import Client, Server

from ..functional import distributed as _F_distributed  # noqa: F401  (F.distributed)


def group_start():
    """Begin a group of collectives issued together (MegEngine's NCCL grouping); nothing to
    group for a world of one."""


def group_end():
    """End a group begun by :func:`group_start`."""


__all__ = ["WORLD", "Group", "Client", "Server", "bcast_list_", "get_backend", "get_client",
           "get_mm_server_addr", "get_py_server_addr", "get_rank", "get_world_size",
           "group_barrier", "group_start", "group_end", "init_process_group", "is_distributed",
           "launcher", "make_allreduce_cb", "new_group", "override_backend", "synchronized",
           "functional", "helper"]
