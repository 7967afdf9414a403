"""``launcher``: run a function as the processes of a data-parallel job (MegEngine 1.13's
``megengine.distributed.launcher``)."""
import functools

from ..device import get_device_count

__all__ = ["launcher"]


class launcher:
    r"""Decorator that runs ``func`` as the ranks of a distributed job and returns the list of
    their results (rank order).

    Args:
        func: the function each rank runs.
        n_gpus: processes on this machine (default: the device count of ``device_type``).
        world_size: processes in all (default: ``n_gpus``).
        rank_start: the rank of this machine's first process (0 on the master).
        master_ip: address of the master node.
        port: port of the master's server (0: any free port).
        device_type: device type of the processes.
        backend: the collective communication backend.

    A job of one process (``world_size == n_gpus == 1``, the default on a machine with one
    device) runs ``func`` here, in this process, as rank 0 of a world of size 1, and returns
    ``[result]``.  More processes need issue 15's MPI transport: calling the decorated function
    raises ``NotImplementedError``.
    """

    def __new__(cls, *args, **kwargs):
        if not args:
            return functools.partial(cls, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        func,
        n_gpus=None,
        world_size=None,
        rank_start=0,
        master_ip="localhost",
        port=0,
        device_type="xpu",
        backend="nccl",
    ):
        self.func = func
        self.n_gpus = n_gpus if n_gpus is not None else get_device_count(
            "cpu" if device_type == "xpu" else device_type)
        self.world_size = world_size if world_size is not None else self.n_gpus
        self.rank_start = rank_start
        self.master_ip = master_ip
        self.port = port
        self.device_type = device_type
        self.backend = backend
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        if self.world_size > 1 or self.n_gpus > 1:
            from .group import _needs_mpi
            raise _needs_mpi(f"launcher(n_gpus={self.n_gpus}, world_size={self.world_size})")
        assert self.n_gpus == 1 and self.world_size == 1 and self.rank_start == 0, (
            f"launcher: n_gpus={self.n_gpus}, world_size={self.world_size}, "
            f"rank_start={self.rank_start} is no job")
        from .._core.channel import get_channel
        ret = self.func(*args, **kwargs)
        get_channel().full_sync()
        return [ret]
