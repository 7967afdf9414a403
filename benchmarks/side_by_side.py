"""Run a yardstick script for several frameworks, alternating, and report medians and ratios.

The machines are shared and noisy: one timing means little, so each framework runs the same
script ``--rounds`` times, in turns (mge, MegEngine, numpy, mge, ...), and the report gives each
one's median and the median of the per-round ratios to mge.

    python benchmarks/side_by_side.py bench_dispatch.py --operand tensor
    python benchmarks/side_by_side.py bench_dispatch.py --operand scalar --rounds 7
    python benchmarks/side_by_side.py bench_mlp.py

The script is looked up in ``../shared/bench`` (the project's yardsticks) unless a path is given.
MegEngine runs under ``--megengine-python PATH`` (e.g. a Python 3.10 virtual environment with
``pip install megengine==1.13.0 "numpy<2"``), else ``$MGE_BENCH_MEGENGINE_PYTHON``, else this
Python if it can import ``megengine``; with none of them it is skipped with a note.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import _pythons

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "bench")
METRICS = ("us_per_op_median", "ms_per_step_median", "median_ms", "us_per_op")


def _metric(record):
    for key in METRICS:
        if key in record:
            return key, record[key]
    for key, value in record.items():
        if key.endswith("_median") and isinstance(value, (int, float)):
            return key, value
    raise SystemExit(f"side_by_side: no median in {record}")


def run(python, script, fw, extra):
    out = subprocess.run([python, script, "--fw", fw, *extra], capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"side_by_side: {fw} failed:\n{out.stderr[-2000:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("script")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--fw", default="mge,megengine,numpy")
    _pythons.add_option(p, "megengine")
    args, extra = p.parse_known_args()
    script = args.script if os.path.exists(args.script) else os.path.join(SHARED, args.script)
    fws = [f for f in args.fw.split(",") if f]
    if "megengine" in fws:
        args.megengine_python = _pythons.find("megengine", args.megengine_python, "side_by_side")
        if args.megengine_python is None:
            fws.remove("megengine")
    values = {f: [] for f in fws}
    key = None
    for _ in range(args.rounds):
        for f in fws:
            python = args.megengine_python if f == "megengine" else sys.executable
            key, v = _metric(run(python, script, f, extra))
            values[f].append(v)
    report = {"script": os.path.basename(script), "args": extra, "metric": key, "rounds": args.rounds}
    for f in fws:
        report[f] = {"median": statistics.median(values[f]), "all": values[f]}
        if f != "mge" and "mge" in values:
            report[f]["mge_over_this_median"] = statistics.median(
                m / v for m, v in zip(values["mge"], values[f]))
    width = max(len(f) for f in fws)
    print(f"{report['script']} {' '.join(extra)}  ({key}, median of {args.rounds} alternating rounds)")
    for f in fws:
        ratio = report[f].get("mge_over_this_median")
        tail = f"   mge/{f} = {ratio:.2f}" if ratio is not None else ""
        print(f"  {f:<{width}}  {report[f]['median']:10.3f}{tail}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
