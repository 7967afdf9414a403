"""All-reduce bandwidth: mge's ``F.distributed.all_reduce_sum`` against mpi4py's own
``Allreduce`` on numpy arrays, 1, 16 and 64 MB of float32, 2 processes on this machine (medians).

    python benchmarks/bench_allreduce.py [--procs 2] [--repeat 10]

Started without an MPI launch it runs itself under ``mpiexec -n PROCS``.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

SIZES_MB = (1, 16, 64)


def _bench(repeat):
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
        out = np.empty_like(a)
        x = mge.tensor(a)
        F.distributed.all_reduce_sum(x).numpy()  # warm: communicators, buffers
        comm.Allreduce(a, out)
        t_mpi, t_mge = [], []
        for _ in range(repeat):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(a, out)
            t_mpi.append(time.perf_counter() - t)
            comm.Barrier()
            t = time.perf_counter()
            y = F.distributed.all_reduce_sum(x)
            y.numpy()
            t_mge.append(time.perf_counter() - t)
        rows.append((mb, float(np.median(t_mpi)), float(np.median(t_mge))))
    if rank == 0:
        print(f"{'MB':>4} {'mpi4py Allreduce':>18} {'mge all_reduce_sum':>20} {'ratio':>6}")
        for mb, tm, tg in rows:
            print(f"{mb:>4} {tm * 1e3:>12.2f} ms {mb / tm / 1e3:5.2f}GB/s "
                  f"{tg * 1e3:>10.2f} ms {mb / tg / 1e3:5.2f}GB/s {tg / tm:6.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if "PMI_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        _bench(args.repeat)
        return
    from mge.distributed.launcher import _mpiexec
    sys.exit(subprocess.call([_mpiexec(), "-n", str(args.procs), sys.executable, __file__,
                              "--repeat", str(args.repeat)]))


if __name__ == "__main__":
    main()
