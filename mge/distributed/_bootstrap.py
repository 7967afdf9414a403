"""The program each rank of a :class:`~mge.distributed.launcher` job runs:
``python -m mge.distributed._bootstrap DIR`` reads ``DIR/payload.pkl``, attaches to the MPI world,
calls the function, and writes ``DIR/result.RANK`` (its return value, pickled) or
``DIR/error.RANK`` (the traceback; then the MPI job is aborted, so no peer waits forever).  A
rank whose launcher process is gone exits (``MGE_LAUNCHER_PID``): no job outlives its launcher."""
import os
import pickle
import sys
import threading
import time
import traceback

PARENT_POLL_S = 0.5


def _watch_launcher(pid):
    # The launcher's process may die without killing the job (SIGKILL, a killed pytest): the
    # ranks must not live on.  (mpiexec ends when its ranks do.)
    while True:
        time.sleep(PARENT_POLL_S)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except OSError:
            pass


def main(tmp):
    pid = os.environ.get("MGE_LAUNCHER_PID")
    if pid:
        threading.Thread(target=_watch_launcher, args=(int(pid),), daemon=True,
                         name="mge-launcher-watch").start()
    with open(os.path.join(tmp, "payload.pkl"), "rb") as f:
        meta = pickle.load(f)
        sys.path[:] = meta["sys_path"]
        os.chdir(meta["cwd"])
        blob = f.read()
    from mge.distributed import group
    from mge._core.device.cpu.kernels import distributed as transport
    rank = transport.env_world()[0]
    try:
        func, args, kwargs = pickle.loads(blob)
        if group._sd is None:
            group._env_checked = True
            group._attach(None, meta["backend"], meta["device_type"])
        ret = func(*args, **kwargs)
        from mge._core.channel import get_channel
        get_channel().full_sync()
        transport.transport().reap(wait=True)
        with open(os.path.join(tmp, f"result.{rank}.part"), "wb") as f:
            pickle.dump(ret, f)
        os.replace(os.path.join(tmp, f"result.{rank}.part"), os.path.join(tmp, f"result.{rank}"))
    except BaseException:
        with open(os.path.join(tmp, f"error.{rank}"), "w") as f:
            f.write(traceback.format_exc())
        sys.stderr.flush()
        transport.mpi().COMM_WORLD.Abort(1)
        os._exit(1)
    # every rank has its result before any leaves: a peer's late collective still finds us
    transport.transport().control.Barrier()


if __name__ == "__main__":
    main(sys.argv[1])
