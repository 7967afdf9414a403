"""All-reduce bandwidth: mge's ``F.distributed.all_reduce_sum`` against mpi4py's own
``Allreduce`` on numpy arrays, 1, 16 and 64 MB of float32, 2 processes on this machine (medians).

    python benchmarks/bench_allreduce.py [--procs 2] [--repeat 30] [--old]

Started without an MPI launch it runs itself under ``mpiexec -n PROCS``.

Like is compared with like.  An mge tensor is immutable, so ``all_reduce_sum`` writes into a new
buffer; the mpi4py side does the same (``out = np.empty_like(a); comm.Allreduce(a, out)``), so
both pay for the fresh pages of a new array.  Both sides then read the result once (its last
element: mge's ``.numpy()`` waits for the value and gives a read-only view, no copy).  The two
sides alternate in each repetition, after a barrier, so that the noise of a shared machine falls
on both; the table gives medians.  ``--old`` times the mpi4py side as this script did before
(into one output array allocated once, the result not read): the lower bound of MPI alone.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

SIZES_MB = (1, 16, 64)


def _bench(repeat, old):
    import mge
    import mge.distributed as dist
    import mge.functional as F
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = dist.get_rank()
    rows = []
    for mb in SIZES_MB:
        n = mb * (1 << 20) // 4
        a = np.ones(n, np.float32)
        reused = np.empty_like(a)
        x = mge.tensor(a)

        def mpi_side():
            if old:
                comm.Allreduce(a, reused)
                return None
            out = np.empty_like(a)
            comm.Allreduce(a, out)
            return float(out[-1])

        def mge_side():
            return float(F.distributed.all_reduce_sum(x).numpy()[-1])

        for _ in range(2):  # warm: communicators, buffers, the op's caches
            mpi_side()
            mge_side()
        t_mpi, t_mge = [], []
        for i in range(repeat):
            for side, ts in ((mpi_side, t_mpi), (mge_side, t_mge))[::1 if i % 2 else -1]:
                comm.Barrier()
                t = time.perf_counter()
                v = side()
                ts.append(time.perf_counter() - t)
                assert v is None or v == comm.Get_size()
        rows.append((mb, float(np.median(t_mpi)), float(np.median(t_mge))))
    if rank == 0:
        print(f"{'MB':>4} {'mpi4py Allreduce':>18} {'mge all_reduce_sum':>20} {'ratio':>6}")
        for mb, tm, tg in rows:
            print(f"{mb:>4} {tm * 1e3:>12.2f} ms {mb / tm / 1e3:5.2f}GB/s "
                  f"{tg * 1e3:>10.2f} ms {mb / tg / 1e3:5.2f}GB/s {tg / tm:6.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--old", action="store_true",
                    help="the mpi4py side into one reused output array, not read")
    args = ap.parse_args()
    if "PMI_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        _bench(args.repeat, args.old)
        return
    from mge.distributed.launcher import _mpiexec
    cmd = [_mpiexec(), "-n", str(args.procs), sys.executable, __file__,
           "--repeat", str(args.repeat)] + (["--old"] if args.old else [])
    sys.exit(subprocess.call(cmd))


if __name__ == "__main__":
    main()
