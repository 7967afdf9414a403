"""Chains of elementwise ops, timed side by side in one process: mge against numpy.

Three workloads, each ``x = x * a + b`` repeated (two ops per step):

* ``small_tensor`` -- shape ``(4,)`` float32, ``a`` and ``b`` tensors: the per-op overhead of the
  runtime (dispatch, the transformation stack, the channel), since the arithmetic itself is nothing;
* ``small_float`` -- the same with ``a`` and ``b`` Python floats (the constant-conversion path);
* ``large`` -- shape ``(256, 256)`` float32: the overhead should vanish next to the kernels.

numpy runs the same chain as the reference.  Frameworks alternate, one repetition each in turn, so
that drift of the machine hits them alike; the report gives the median time per op and the median
of the per-repetition ratios to numpy.  torch is included when it can be imported.  MegEngine
(which needs its own Python: 3.10 with ``numpy<2``) runs under ``--megengine-python PATH``, else
``$MGE_BENCH_MEGENGINE_PYTHON``, else in this process if ``megengine`` can be imported here, and is
skipped with a note otherwise.  Under another Python it is timed by this script in a second
process, after the others, against that process's own numpy.

Output: a readable table, then one JSON line (starting with ``{"bench": "chain"``).
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import _pythons

OPTIONAL = ("megengine", "torch")


# -- frameworks: each is make(shape, a, b, use_floats) -> run(steps) -> seconds ---------------------

def _numpy_setup(shape, a, b, floats):
    x0 = np.full(shape, 0.5, dtype=np.float32)
    if floats:
        a_, b_ = a, b
    else:
        a_ = np.full(shape, a, dtype=np.float32)
        b_ = np.full(shape, b, dtype=np.float32)

    def run(steps):
        x = x0
        t0 = time.perf_counter()
        for _ in range(steps):
            x = x * a_ + b_
        t1 = time.perf_counter()
        return t1 - t0, np.asarray(x)
    return run


def _tensor_setup(module, shape, a, b, floats):
    """mge and MegEngine share the API: ``module.tensor``; results are read with ``.numpy()``."""
    x0 = module.tensor(np.full(shape, 0.5, dtype=np.float32))
    if floats:
        a_, b_ = a, b
    else:
        a_ = module.tensor(np.full(shape, a, dtype=np.float32))
        b_ = module.tensor(np.full(shape, b, dtype=np.float32))

    def run(steps):
        x = x0
        t0 = time.perf_counter()
        for _ in range(steps):
            x = x * a_ + b_
        value = x.numpy()  # waits for the chain: async runtimes are timed to completion
        t1 = time.perf_counter()
        return t1 - t0, value
    return run


def _torch_setup(shape, a, b, floats):
    import torch
    x0 = torch.full(shape, 0.5, dtype=torch.float32)
    if floats:
        a_, b_ = a, b
    else:
        a_ = torch.full(shape, a, dtype=torch.float32)
        b_ = torch.full(shape, b, dtype=torch.float32)

    def run(steps):
        x = x0
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                x = x * a_ + b_
        value = x.numpy()
        t1 = time.perf_counter()
        return t1 - t0, value
    return run


def load_frameworks(names, async_level):
    """name -> setup function, for the frameworks in ``names`` that can be imported."""
    fws = {}
    for name in names:
        if name == "numpy":
            fws[name] = _numpy_setup
        elif name in ("mge", "megengine"):
            try:
                module = __import__(name)
            except ImportError as e:
                if name == "mge" or name in _explicit:
                    raise SystemExit(f"bench_chain: cannot import {name}: {e}")
                continue
            if async_level is not None:
                module.config.async_level = async_level
            fws[name] = (lambda m: lambda *args: _tensor_setup(m, *args))(module)
        elif name == "torch":
            try:
                import torch  # noqa: F401
            except ImportError as e:
                if name in _explicit:
                    raise SystemExit(f"bench_chain: cannot import torch: {e}")
                continue
            fws[name] = _torch_setup
        else:
            raise SystemExit(f"bench_chain: unknown framework {name!r} (mge, numpy, megengine, torch)")
    return fws


_explicit = set()

WORKLOADS = {
    # name: (shape, use Python floats for a and b)
    "small_tensor": ((4,), False),   # at most 7 elements: computed on the host at dispatch
    "small_float": ((4,), True),
    "mid_tensor": ((16,), False),    # tiny, but past the host-compute limit: the worker runs it
    "large": ((256, 256), False),
}


def bench(fws, workload, steps, reps):
    shape, floats = WORKLOADS[workload]
    a, b = 0.5, 0.25
    runners = {name: setup(shape, a, b, floats) for name, setup in fws.items()}
    ops = 2 * steps
    reference = None
    for name, run in runners.items():  # warm-up, and a check that all compute the same thing
        _, value = run(min(steps, 50))
        if reference is None:
            reference = value
        elif not np.allclose(value, reference, rtol=1e-5):
            raise SystemExit(f"bench_chain: {name} computed a different result on {workload}")
    times = {name: [] for name in runners}
    for _ in range(reps):
        for name, run in runners.items():
            seconds, _ = run(steps)
            times[name].append(seconds)
    out = {}
    for name, ts in times.items():
        entry = {"us_per_op": statistics.median(ts) / ops * 1e6, "ops": ops, "reps": reps}
        if "numpy" in times and name != "numpy":
            entry["ratio_vs_numpy"] = statistics.median(
                t / n for t, n in zip(ts, times["numpy"]))
        out[name] = entry
    return out


def _at_level(module, level, setup):
    """A runner that times mge at ``config.async_level = level`` (variants share one process)."""
    def make(*args):
        run = setup(*args)

        def run_at(steps):
            old = module.config.async_level
            module.config.async_level = level
            try:
                return run(steps)
            finally:
                module.config.async_level = old
        return run_at
    return make


def run_elsewhere(python, name, args):
    """This script under another Python for framework ``name`` (and numpy, its reference), with
    the same sizes; its JSON record."""
    cmd = [python, __file__, "--in-this-process", "--fw", name, "--reps", str(args.reps),
           "--small-ops", str(args.small_ops), "--large-steps", str(args.large_steps),
           "--workloads", args.workloads]
    if args.async_level is not None:
        cmd += ["--async-level", str(args.async_level)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench_chain: {name} under {python} failed:\n{out.stderr[-2000:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('{"bench": "chain"')]
    return json.loads(lines[-1])


def mode_of(fws):
    info = {}
    if any(n.startswith("mge") for n in fws):
        import mge
        import mge.core
        info["mge_modules"] = mge.core.compiled_modules()
        info["mge_async_level"] = mge.config.async_level
    if "megengine" in fws:
        import megengine
        info["megengine_version"] = megengine.__version__
    if "torch" in fws:
        import torch
        info["torch_version"] = torch.__version__
    return info


def table(results, fws):
    names = list(fws)
    lines = []
    head = f"{'workload':<14}" + "".join(f"{n + ' us/op':>16}" for n in names)
    head += "".join(f"{n + '/numpy':>16}" for n in names if n != "numpy")
    lines.append(head)
    lines.append("-" * len(head))
    for workload, res in results.items():
        row = f"{workload:<14}" + "".join(f"{res[n]['us_per_op']:>16.3f}" for n in names)
        row += "".join(f"{res[n].get('ratio_vs_numpy', float('nan')):>16.2f}"
                       for n in names if n != "numpy")
        lines.append(row)
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fw", default=None,
                   help="comma-separated frameworks: mge, numpy, megengine, torch (numpy, the "
                        "reference, is always added); default: mge, numpy and whichever of "
                        "megengine/torch import")
    p.add_argument("--reps", type=int, default=7, help="repetitions per framework (default 7)")
    p.add_argument("--small-ops", type=int, default=20000,
                   help="ops in each small chain (two per step; default 20000)")
    p.add_argument("--large-steps", type=int, default=200,
                   help="steps of the 256x256 chain (two ops each; default 200)")
    p.add_argument("--async-level", type=int, choices=(0, 1, 2), default=None,
                   help="set mge.config.async_level (and MegEngine's) before timing")
    p.add_argument("--async-levels", default=None,
                   help="comma-separated mge async levels timed side by side, e.g. 2,0 "
                        "(mge appears once per level, as mge@2, mge@0)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated subset of {', '.join(WORKLOADS)}")
    _pythons.add_option(p, "megengine")
    p.add_argument("--in-this-process", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.fw:
        names = [n.strip() for n in args.fw.split(",") if n.strip()]
        _explicit.update(names)
    else:
        names = ["mge"] + list(OPTIONAL)
    if "numpy" not in names:
        names.append("numpy")
    megengine_python = None      # set when MegEngine runs under another Python
    if "megengine" in names and not args.in_this_process:
        python = _pythons.find("megengine", args.megengine_python, "bench_chain",
                               required="megengine" in _explicit)
        if python is None or not _pythons.is_this_python(python):
            names.remove("megengine")
            megengine_python = python
    fws = load_frameworks(names, args.async_level)
    if args.async_levels and "mge" in fws:
        import mge
        setup = fws.pop("mge")
        levels = [int(x) for x in args.async_levels.split(",")]
        fws = {**{f"mge@{lvl}": _at_level(mge, lvl, setup) for lvl in levels}, **fws}

    results = {}
    for workload in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        if workload not in WORKLOADS:
            raise SystemExit(f"bench_chain: unknown workload {workload!r}")
        steps = max(1, args.small_ops // 2) if workload != "large" else args.large_steps
        results[workload] = bench(fws, workload, steps, args.reps)
    info = mode_of(fws)
    if megengine_python is not None:
        other = run_elsewhere(megengine_python, "megengine", args)
        for workload, res in results.items():
            res["megengine"] = other["results"][workload]["megengine"]
        fws = {**{n: f for n, f in fws.items() if n != "numpy"}, "megengine": None,
               "numpy": fws["numpy"]}
        info["megengine_version"] = other.get("megengine_version")
        info["megengine_python"] = megengine_python

    print(table(results, fws))
    record = {
        "bench": "chain",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "frameworks": list(fws),
        **info,
        "results": results,
    }
    print(json.dumps(record, sort_keys=False))
    return record


if __name__ == "__main__":
    sys.exit(main() and 0)
