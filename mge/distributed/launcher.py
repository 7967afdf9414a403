"""``launcher``: run a function as the processes of a data-parallel job (MegEngine 1.13's
``megengine.distributed.launcher``).

On the CPU the ranks are processes started by ``mpiexec`` (the one beside ``sys.executable``, as
the ``mpich`` wheel installs it, else the first on ``PATH``; ``MGE_MPIEXEC`` overrides), each
running :mod:`mge.distributed._bootstrap`, which unpickles the function (``cloudpickle``, so
closures and functions defined in a test go too), attaches to the MPI world, calls it and writes
its result or its traceback beside the payload.  A rank that raises aborts the MPI job, and the
launcher raises ``RuntimeError`` with that rank's traceback; a job that runs past
``MGE_DIST_TIMEOUT`` seconds (or ``timeout=``) is killed and raises ``TimeoutError``; a rank that
dies without a word raises ``RuntimeError`` naming it.  A process that an MPI launch started
already (``mpiexec -n 4 python train.py``) runs the function itself as its rank and gets every
rank's result.
"""
import functools
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ..device import get_device_count

__all__ = ["launcher"]


def _mpiexec():
    env = os.environ.get("MGE_MPIEXEC")
    if env:
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise RuntimeError("launcher: no mpiexec beside the Python nor on PATH; "
                           "pip install 'mge[distributed]' (mpi4py and the mpich wheel)")
    return found


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
        timeout: seconds the whole job may take (default ``MGE_DIST_TIMEOUT``, else none).

    A job of one process runs ``func`` here, in this process, as rank 0 of a world of size 1.
    More processes on this machine run through ``mpiexec``; a job over several machines is
    started by ``mpiexec -f hosts -n N python train.py`` (see the distributed guide).
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
        timeout=None,
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
        if timeout is None and os.environ.get("MGE_DIST_TIMEOUT"):
            timeout = float(os.environ["MGE_DIST_TIMEOUT"])
        self.timeout = timeout
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        from .._core.channel import get_channel
        from . import group
        env = group._transport_module().env_world()
        if env is not None and env[1] > 1:  # inside an MPI launch: this process is its rank
            if group._mpi_world() is None:
                group._check_env()
            ret = self.func(*args, **kwargs)
            get_channel().full_sync()
            return group._transport_module().transport().control.allgather(ret)
        if self.world_size == 1 and self.n_gpus == 1:
            assert self.rank_start == 0, f"launcher: rank_start={self.rank_start} is no job"
            ret = self.func(*args, **kwargs)
            get_channel().full_sync()
            return [ret]
        if self.world_size != self.n_gpus or self.rank_start != 0:
            raise NotImplementedError(
                f"launcher(n_gpus={self.n_gpus}, world_size={self.world_size}, rank_start="
                f"{self.rank_start}): a job over several machines is started by mpiexec with a "
                "host file (`mpiexec -f hosts -n N python train.py`), not by one launcher per "
                "machine")
        return _run_mpiexec(self, args, kwargs)


def _run_mpiexec(self, args, kwargs):
    import cloudpickle

    n = self.n_gpus
    tmp = tempfile.mkdtemp(prefix="mge-launch-")
    try:
        with open(os.path.join(tmp, "payload.pkl"), "wb") as f:
            pickle.dump({"sys_path": list(sys.path), "cwd": os.getcwd(),
                         "backend": self.backend, "device_type": self.device_type}, f)
            f.write(cloudpickle.dumps((self.func, args, kwargs)))
        cmd = [_mpiexec(), "-n", str(n), sys.executable, "-m", "mge.distributed._bootstrap", tmp]
        env = dict(os.environ)
        env.setdefault("MGE_DIST_LAUNCHED", "1")
        env["MGE_LAUNCHER_PID"] = str(os.getpid())  # the ranks exit if this process dies
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            done = [r for r in range(n) if os.path.exists(os.path.join(tmp, f"result.{r}"))]
            raise TimeoutError(
                f"launcher: the job of {n} processes ran past its timeout of {self.timeout:g} s "
                f"(ranks finished: {done}; the others hung or wait for a peer)") from None
        except BaseException:
            _kill(proc)
            raise
        errors = sorted(f for f in os.listdir(tmp) if f.startswith("error."))
        if errors:
            first = min(errors, key=lambda f: os.path.getmtime(os.path.join(tmp, f)))
            with open(os.path.join(tmp, first)) as f:
                tb = f.read()
            rank = int(first.split(".")[1])
            raise RuntimeError(f"launcher: rank {rank} of {n} raised an exception "
                               f"(the job was aborted):\n{tb}")
        results = []
        missing = []
        for r in range(n):
            path = os.path.join(tmp, f"result.{r}")
            if not os.path.exists(path):
                missing.append(r)
                continue
            with open(path, "rb") as f:
                results.append(pickle.load(f))
        if missing or rc != 0:
            raise RuntimeError(f"launcher: rank(s) {missing} of {n} died without a result "
                               f"(mpiexec exit status {rc}, after {time.monotonic() - start:.1f} s)")
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
