"""The program each rank of a :class:`~mge.distributed.launcher` job runs:
``python -m mge.distributed._bootstrap DIR`` reads ``DIR/payload.pkl``, attaches to the MPI world,
calls the function, and writes ``DIR/result.RANK`` (its return value, pickled) or
``DIR/error.RANK`` (the traceback; then the MPI job is aborted, so no peer waits forever)."""
import os
import pickle
import sys
import traceback


def main(tmp):
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
