"""The profiler's cost on the tiny-op chain (``x = x * a + b``, shape 4), side by side in one run:
no profiler, then a running ``Profiler`` (recording only; writing the files is not timed).

    python benchmarks/bench_profiler.py [--n 20000] [--reps 5]

Prints the best time per op of each and their ratio.  With no profiler the event sites cost one
pointer comparison each: ``benchmarks/icount_dispatch.py`` counts that deterministically.
"""
import argparse
import time

import numpy as np

import mge
from mge._core import profiler as _rec


def chain(n):
    x = mge.tensor(np.ones(4, "float32"))
    a = mge.tensor(np.full(4, 1.0001, "float32"))
    b = mge.tensor(np.full(4, 0.5, "float32"))
    t = time.perf_counter()
    for _ in range(n):
        x = x * a + b
    x.numpy()
    return (time.perf_counter() - t) / (2 * n)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    chain(1000)
    off, on = [], []
    for _ in range(args.reps):  # interleaved: drift on a shared machine hits both
        off.append(chain(args.n))
        _rec.start({})
        try:
            on.append(chain(args.n))
        finally:
            _rec.stop()
    o, r = min(off), min(on)
    print(f"no profiler: {o * 1e6:.2f} us/op; profiling: {r * 1e6:.2f} us/op; ratio {r / o:.2f}")


if __name__ == "__main__":
    main()
