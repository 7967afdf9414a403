"""DTR side by side: peak memory and step time without DTR and under budgets of 60/40/25 %.

Trains a deep MLP whose activations dominate memory (``--depth`` x [Linear(width, width) + ReLU]
-> Linear(width, 10) -> cross-entropy, SGD; the network of ``shared/bench/bench_dtr.py``), first
without DTR to measure its peak of live tensor bytes, then with ``mge.dtr`` at budgets of
``--fractions`` of that peak.  All settings run in one process, taking turns round by round (off,
60 %, 40 %, 25 %, off, ...), each on its own copy of the network (same initial weights), so that a
slow moment of the machine hits them all.  Reported per setting:

* ``peak_mb``: the peak of live tensor bytes during its steps (``mge.device.get_max_allocated_memory``;
  exact on the CPU) and its ratio to the no-DTR peak;
* ``step_ms``: the median step time, and the median over rounds of the ratio to the no-DTR step
  of the same round;
* ``evictions``/``recomputations`` per step (``mge.dtr.stats()``);
* whether its losses and final parameters are bit-identical to the no-DTR run's.

    python benchmarks/bench_dtr_budgets.py                    # depth 20, width 128, batch 4096
    python benchmarks/bench_dtr_budgets.py --rounds 7 --steps 2
    MGE_PUREPYTHON=1 python benchmarks/bench_dtr_budgets.py   # the pure-Python policy

Prints a table, then one JSON line.
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=5, help="turns of every setting (default 5)")
    p.add_argument("--steps", type=int, default=2, help="training steps per setting and round")
    p.add_argument("--fractions", default="0.6,0.4,0.25", help="budgets, as fractions of the peak")
    p.add_argument("--evictee-min-mb", type=float, default=1.0,
                   help="mge.dtr.evictee_minimum_size in MB (default 1, MegEngine's default)")
    p.add_argument("--sqrt-sampling", action="store_true", help="mge.dtr.enable_sqrt_sampling")
    return p.parse_args()


def main():
    args = parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import mge
    import mge.functional as F
    import mge.module as M
    import mge.optimizer as optim
    from mge.autodiff import GradManager

    class DeepMLP(M.Module):
        def __init__(self, depth, width):
            super().__init__()
            self.layers = [M.Linear(width, width) for _ in range(depth)]
            self.head = M.Linear(width, 10)

        def forward(self, x):
            for layer in self.layers:
                x = F.relu(layer(x))
            return self.head(x)

    rng = np.random.RandomState(0)
    data = mge.tensor(rng.randn(args.batch, args.width).astype("float32"))
    label = mge.tensor(rng.randint(0, 10, size=(args.batch,)).astype("int32"))

    def make():
        mge.random.seed(0)
        net = DeepMLP(args.depth, args.width)
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.01)
        return net, gm, opt

    def step(model):
        net, gm, opt = model
        with gm:
            loss = F.nn.cross_entropy(net(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss.numpy().copy()

    def dtr_on(budget):
        mge.dtr.eviction_threshold = int(budget)
        mge.dtr.evictee_minimum_size = int(args.evictee_min_mb * 2 ** 20)
        mge.dtr.enable_sqrt_sampling = args.sqrt_sampling
        mge.dtr.enable()

    # The no-DTR peak (after a warm-up step) sets the budgets.
    probe = make()
    step(probe)
    mge.device.reset_max_memory_stats()
    step(probe)
    base_peak = mge.device.get_max_allocated_memory()
    del probe

    fractions = [float(f) for f in args.fractions.split(",") if f]
    settings = [("off", None)] + [(f"{round(f * 100)}%", f * base_peak) for f in fractions]
    models = {name: make() for name, _ in settings}
    losses = {name: [] for name, _ in settings}
    times = {name: [] for name, _ in settings}
    ratios = {name: [] for name, _ in settings}
    peaks = {name: 0 for name, _ in settings}
    counts = {name: {"evictions": 0, "recomputations": 0, "recompute_time": 0.0}
              for name, _ in settings}
    for name, budget in settings:  # one warm-up step each, not timed (and checked like the rest)
        if budget is not None:
            dtr_on(budget)
        losses[name].append(step(models[name]))
        mge.dtr.disable()
    for _ in range(args.rounds):
        this_round = {}
        for name, budget in settings:
            if budget is not None:
                dtr_on(budget)
            mge._full_sync()
            mge.dtr.reset_stats()
            mge.device.reset_max_memory_stats()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                losses[name].append(step(models[name]))
            mge._full_sync()  # the backward and the update run on after the loss is read
            ms = (time.perf_counter() - t0) * 1e3 / args.steps
            peaks[name] = max(peaks[name], mge.device.get_max_allocated_memory())
            st = mge.dtr.stats()
            for k in counts[name]:
                counts[name][k] += st[k]
            mge.dtr.disable()
            times[name].append(ms)
            this_round[name] = ms
        for name, _ in settings:
            ratios[name].append(this_round[name] / this_round["off"])

    ref_params = [p.numpy() for p in models["off"][0].parameters()]
    results = {}
    mb = 2.0 ** 20
    n_steps = args.rounds * args.steps
    for name, budget in settings:
        params = [p.numpy() for p in models[name][0].parameters()]
        identical = (all(np.array_equal(a, b) for a, b in zip(losses[name], losses["off"]))
                     and all(np.array_equal(a, b) for a, b in zip(params, ref_params)))
        results[name] = {
            "budget_mb": None if budget is None else round(budget / mb, 2),
            "peak_mb": round(peaks[name] / mb, 2),
            "peak_vs_off": round(peaks[name] / peaks["off"], 3),
            "step_ms_median": round(statistics.median(times[name]), 1),
            "step_vs_off_median": round(statistics.median(ratios[name]), 3),
            "evictions_per_step": round(counts[name]["evictions"] / n_steps, 1),
            "recomputations_per_step": round(counts[name]["recomputations"] / n_steps, 1),
            "recompute_ms_per_step": round(counts[name]["recompute_time"] * 1e3 / n_steps, 1),
            "bit_identical": bool(identical),
        }

    head = (f"{'setting':>8} {'budget MB':>10} {'peak MB':>9} {'peak/off':>9} {'step ms':>8} "
            f"{'step/off':>9} {'evict/step':>11} {'recomp/step':>12} {'identical':>10}")
    print(head)
    print("-" * len(head))
    for name, _ in settings:
        r = results[name]
        budget = "-" if r["budget_mb"] is None else f"{r['budget_mb']:.1f}"
        print(f"{name:>8} {budget:>10} {r['peak_mb']:>9.1f} {r['peak_vs_off']:>9.2f} "
              f"{r['step_ms_median']:>8.1f} {r['step_vs_off_median']:>9.2f} "
              f"{r['evictions_per_step']:>11.1f} {r['recomputations_per_step']:>12.1f} "
              f"{str(r['bit_identical']):>10}")
    print(json.dumps({
        "bench": "dtr_budgets", "depth": args.depth, "width": args.width, "batch": args.batch,
        "rounds": args.rounds, "steps": args.steps, "evictee_min_mb": args.evictee_min_mb,
        "sqrt_sampling": args.sqrt_sampling,
        "one_activation_mb": round(args.batch * args.width * 4 / mb, 2),
        "mge_modules": mge.core.compiled_modules(), "results": results,
    }))


if __name__ == "__main__":
    main()
