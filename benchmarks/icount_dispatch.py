"""Instructions per tiny op, counted by callgrind: a deterministic companion of the timings.

    python benchmarks/icount_dispatch.py                 # tensor operands, shape 4
    python benchmarks/icount_dispatch.py --operand float --shape 16
    python benchmarks/icount_dispatch.py --profile       # with a profiler recording
    python benchmarks/icount_dispatch.py --trace         # a 1,000-op chain replayed by jit.trace

Wall-clock timings on a shared machine move by 2x between runs; instruction counts do not.  The
script runs itself twice under ``valgrind --tool=callgrind`` -- ``x = x * a + b`` for N and for
3N iterations -- and divides the difference of the two totals by the 4N extra ops, so start-up and
imports cancel out.  ``--fw numpy`` counts the same chain on ndarrays, the floor;
``--fw megengine`` counts MegEngine 1.13 (all threads: its worker's instructions are included, as
mge's are) under ``--megengine-python PATH``, else ``$MGE_BENCH_MEGENGINE_PYTHON``, else this
Python if it can import ``megengine`` (with none of them it is skipped with a note).  ``--python``
is the interpreter for mge and numpy (default: this one).  Needs valgrind.
"""
import argparse
import os
import re
import subprocess
import sys

import _pythons


def chain(fw, operand, shape, n, profile=False):
    import numpy as np
    x0 = np.ones(shape, "float32")
    if fw == "numpy":
        x, a, b = x0, np.full(shape, 1.0001, "float32"), np.full(shape, 0.5, "float32")
    else:
        import importlib
        mge = importlib.import_module(fw)  # mge, or MegEngine itself
        x = mge.tensor(x0)
        a, b = (1.0001, 0.5) if operand == "float" else (
            mge.tensor(np.full(shape, 1.0001, "float32")), mge.tensor(np.full(shape, 0.5, "float32")))
    if profile:  # a running profile's recording (writing the files is not counted)
        from mge._core import profiler
        profiler.start({})
    for _ in range(n):
        x = x * a + b
    if fw != "numpy":
        x.numpy()
    if profile:
        profiler.stop()


TRACE_OPS = 1000  # ops per call of the traced chain (--trace)


def traced_chain(fw, operand, shape, calls):
    # ``--trace``: ``calls`` replays of a 1,000-op chain under ``jit.trace(symbolic=True)``
    # (numpy: the same chain, plain), after three calls that record and compile it
    import numpy as np
    x0 = np.arange(shape[0], dtype="float32")

    def chain(x):
        for _ in range(TRACE_OPS // 2):
            x = x * 1.0001 + 0.5
        return x

    if fw == "numpy":
        for _ in range(calls):
            chain(x0)
        return
    import importlib
    mge = importlib.import_module(fw)
    jit = importlib.import_module(fw + ".jit")
    traced = jit.trace(symbolic=True)(chain)
    x = mge.tensor(x0)
    for _ in range(3 + calls):
        traced(x).numpy()


def count(args, n):
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", args.python,
           __file__, "--run", str(n), "--fw", args.fw, "--operand", args.operand,
           "--shape", str(args.shape)] + (["--profile"] if args.profile else []) + \
        (["--trace"] if args.trace else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fw", default="mge", choices=["mge", "megengine", "numpy"])
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter that runs mge or numpy (default: this one)")
    _pythons.add_option(p, "megengine")
    p.add_argument("--operand", default="tensor", choices=["tensor", "float"])
    p.add_argument("--shape", type=int, default=4)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--profile", action="store_true",
                   help="mge with a profiler recording (mge.utils.profiler's cost per op)")
    p.add_argument("--trace", action="store_true",
                   help=f"a {TRACE_OPS}-op chain (x * 1.0001 + 0.5) replayed by jit.trace; --n "
                        "counts calls (default 10)")
    p.add_argument("--run", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.run is not None:
        if args.trace:
            traced_chain(args.fw, args.operand, (args.shape,), args.run)
        else:
            chain(args.fw, args.operand, (args.shape,), args.run, args.profile)
        return
    if args.trace:
        n = args.n if args.n != 1000 else 10
        small, large = count(args, n), count(args, 3 * n)
        per_op = (large - small) / (2 * n * TRACE_OPS)
        print(f"{args.fw} traced {TRACE_OPS}-op chain, shape ({args.shape},): "
              f"{per_op / 1000:.2f} k instructions per replayed op")
        return
    if args.fw == "megengine":
        args.python = _pythons.find("megengine", args.megengine_python, "icount_dispatch")
        if args.python is None:
            return
    small, large = count(args, args.n), count(args, 3 * args.n)
    per_op = (large - small) / (4 * args.n)
    what = " (profiling)" if args.profile else ""
    print(f"{args.fw}{what} {args.operand} shape ({args.shape},): {per_op / 1000:.2f} k "
          "instructions per op")


if __name__ == "__main__":
    main()
