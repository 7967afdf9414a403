"""One MLP training step, mge against plain numpy (and PyTorch if importable), in one process.

    python benchmarks/bench_mlp_step.py                 # ratios, about 20 s
    python benchmarks/bench_mlp_step.py --breakdown     # also: where mge's step time goes

The step: a 784-512-512-10 MLP (Linear, ReLU, Linear, ReLU, Linear), softmax cross-entropy,
plain SGD (lr 0.01), batch 64, float32, one fixed random batch -- the step of the project's
yardstick ``shared/bench/bench_mlp.py``.  mge runs it as a MegEngine user writes it
(``GradManager`` + ``mge.module.Linear`` + ``F.nn.cross_entropy`` + ``optimizer.SGD``); numpy
runs a hand-written forward, backward and in-place SGD update; PyTorch ``nn.Linear`` +
``optim.SGD``.  All start from the same weights, and their losses are checked to agree.

The machine is shared and noisy, so no figure comes from one timing: after a warm-up, each round
times ``--steps`` steps of every framework in turn (the order alternates between rounds), ending
with a read of the loss so that asynchronous work is timed to completion.  Reported: each
framework's median ms/step over the rounds, the ratio of the medians to numpy (the figure the
issue asks for) and the median of the per-round ratios (steadier).  BLAS and OpenMP run on one
thread (set before numpy is imported) so that the frameworks compete for the same core.

``--breakdown`` then times mge's step in phases (forward, backward, optimizer step, the sync
that waits for the worker) at async levels 2 and 0, numpy's in the same phases, and measures the
time spent inside mge's CPU kernels (by wrapping the kernel table's entries, in this process
only) to split mge's step into kernel time and runtime overhead per op.  ``--cprofile N`` prints
the N functions with the most own time in mge's step at async level 0 (kernels on the caller's
thread, so cProfile sees them).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SIZES = (784, 512, 512, 10)
PHASES = ("forward", "backward", "optimizer", "sync")


def make_batch(batch, seed=0):
    rng = np.random.RandomState(seed)
    data = rng.randn(batch, SIZES[0]).astype("float32")
    label = rng.randint(0, SIZES[-1], size=(batch,)).astype("int32")
    return data, label


def init_weights(seed=1):
    """He-initialised weights, (in, out) layout, and zero biases -- shared by every framework."""
    rng = np.random.RandomState(seed)
    ws = [(rng.randn(i, o) * np.sqrt(2.0 / i)).astype("float32")
          for i, o in zip(SIZES[:-1], SIZES[1:])]
    bs = [np.zeros(o, "float32") for o in SIZES[1:]]
    return ws, bs


def _now(kernel_time=None):
    """(wall, process CPU, kernels' running total) at this moment."""
    return time.perf_counter(), time.process_time(), kernel_time() if kernel_time else 0.0


def _phase_times(marks):
    """Seconds per phase from the marks between them: wall, CPU ("<phase> cpu") and kernel time
    ("<phase> kernels")."""
    out = {}
    for k, name in enumerate(PHASES):
        (w0, c0, k0), (w1, c1, k1) = marks[k], marks[k + 1]
        out[name], out[name + " cpu"], out[name + " kernels"] = w1 - w0, c1 - c0, k1 - k0
    return out


class Step:
    """A framework's training step: ``run()`` returns a loss handle, ``fetch(handle)`` a float
    (the sync point).  ``phases()`` runs one step timing its phases (seconds per phase)."""

    name = "?"
    version = "?"

    def run(self):
        raise NotImplementedError

    def fetch(self, loss):
        return float(loss)


class NumpyStep(Step):
    name = "numpy"

    def __init__(self, batch, lr):
        self.version = np.__version__
        ws, bs = init_weights()
        self.ws, self.bs = ws, bs
        self.x, self.y = make_batch(batch)
        self.lr = np.float32(lr)
        self.rows = np.arange(batch)
        self.matmul = np.matmul     # the breakdown swaps in a timed one

    def _forward(self):
        acts, h = [self.x], self.x
        mm = self.matmul
        for i, (w, b) in enumerate(zip(self.ws, self.bs)):
            h = mm(h, w) + b
            if i < len(self.ws) - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        z = h - h.max(axis=1, keepdims=True)        # softmax cross-entropy, stable
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = np.mean(np.log(s[:, 0]) - z[self.rows, self.y])
        return loss, acts, e / s

    def _backward(self, acts, probs):
        g = probs
        g[self.rows, self.y] -= 1
        g /= len(self.rows)
        grads = []
        mm = self.matmul
        for i in reversed(range(len(self.ws))):
            grads.append((i, mm(acts[i].T, g), g.sum(axis=0)))
            if i > 0:
                g = mm(g, self.ws[i].T) * (acts[i] > 0)
        return grads

    def _update(self, grads):
        for i, gw, gb in grads:
            self.ws[i] -= self.lr * gw
            self.bs[i] -= self.lr * gb

    def run(self):
        loss, acts, probs = self._forward()
        self._update(self._backward(acts, probs))
        return loss

    def phases(self):
        marks = [_now()]
        loss, acts, probs = self._forward()
        marks.append(_now())
        grads = self._backward(acts, probs)
        marks.append(_now())
        self._update(grads)
        marks.append(_now())
        float(loss)
        marks.append(_now())
        return _phase_times(marks)


class MgeStep(Step):
    """The step as a MegEngine user writes it (``megengine`` may be mge or MegEngine itself)."""

    def __init__(self, megengine, batch, lr):
        self.name = megengine.__name__
        self.version = megengine.__version__
        self.mge = megengine
        M, F = megengine.module, megengine.functional
        self.F = F

        class MLP(M.Module):
            def __init__(self):
                super().__init__()
                self.fc0 = M.Linear(SIZES[0], SIZES[1])
                self.fc1 = M.Linear(SIZES[1], SIZES[2])
                self.fc2 = M.Linear(SIZES[2], SIZES[3])

            def forward(self, x):
                x = F.relu(self.fc0(x))
                x = F.relu(self.fc1(x))
                return self.fc2(x)

        self.net = MLP()
        ws, bs = init_weights()
        # MegEngine's Linear keeps its weight as (out, in).
        self.net.load_state_dict({f"fc{i}.{k}": v for i in range(3)
                                  for k, v in (("weight", ws[i].T.copy()), ("bias", bs[i]))})
        self.gm = megengine.autodiff.GradManager().attach(self.net.parameters())
        self.opt = megengine.optimizer.SGD(self.net.parameters(), lr=lr)
        data, label = make_batch(batch)
        self.data, self.label = megengine.tensor(data), megengine.tensor(label)

    def run(self):
        with self.gm:
            loss = self.F.nn.cross_entropy(self.net(self.data), self.label)
            self.gm.backward(loss)
        self.opt.step().clear_grad()
        return loss

    def fetch(self, loss):
        return float(loss.numpy())

    def phases(self, kernel_time=None):
        """Times the phases; with ``kernel_time`` (a function returning the kernels' running
        total), also the kernel time inside each phase (meaningful at async level 0, where the
        kernels run inside the phase that issues them)."""
        marks = [_now(kernel_time)]
        with self.gm:
            loss = self.F.nn.cross_entropy(self.net(self.data), self.label)
            marks.append(_now(kernel_time))
            self.gm.backward(loss)
        marks.append(_now(kernel_time))
        self.opt.step().clear_grad()
        marks.append(_now(kernel_time))
        self.fetch(loss)
        self.mge._full_sync()     # the parameter updates too, so that the next step starts idle
        marks.append(_now(kernel_time))
        return _phase_times(marks)


class TorchStep(Step):
    name = "torch"

    def __init__(self, torch, batch, lr):
        self.version = torch.__version__
        torch.set_num_threads(1)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
            torch.nn.Linear(SIZES[1], SIZES[2]), torch.nn.ReLU(),
            torch.nn.Linear(SIZES[2], SIZES[3]))
        ws, bs = init_weights()
        with torch.no_grad():
            for layer, w, b in zip(self.net[::2], ws, bs):
                layer.weight.copy_(torch.from_numpy(w.T.copy()))
                layer.bias.copy_(torch.from_numpy(b))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
        data, label = make_batch(batch)
        self.data, self.label = torch.from_numpy(data), torch.from_numpy(label).long()
        self.ce = torch.nn.functional.cross_entropy

    def run(self):
        loss = self.ce(self.net(self.data), self.label)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def fetch(self, loss):
        return loss.item()


def torch_or_none(args):
    if args.no_torch:
        return None
    try:
        import torch
    except ImportError:
        print("bench_mlp_step: torch is not importable; timing mge and numpy", file=sys.stderr)
        return None
    return torch


def make_steps(args, torch):
    import mge
    if args.async_level is not None:
        mge.config.async_level = args.async_level
    steps = [MgeStep(mge, args.batch, args.lr), NumpyStep(args.batch, args.lr)]
    if torch is not None:
        steps.append(TorchStep(torch, args.batch, args.lr))
    return steps


def check_agree(args, torch):
    """Fresh copies of every step, a few steps each from the same weights: the losses agree."""
    losses = {}
    for s in make_steps(args, torch):
        losses[s.name] = [s.fetch(s.run()) for _ in range(3)]
    ref = losses["numpy"]
    for name, vals in losses.items():
        if not np.allclose(vals, ref, rtol=2e-3, atol=2e-4):
            raise SystemExit(f"bench_mlp_step: {name}'s losses {vals} differ from numpy's {ref}")
    return losses


def time_round(step, n):
    """ms per step over ``n`` steps, wall and process CPU (all threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        loss = step.run()
    step.fetch(loss)            # waits for the queued kernels (each step needs the previous one's)
    return (time.perf_counter() - t0) / n * 1e3, (time.process_time() - c0) / n * 1e3


def bench(args, torch):
    steps = make_steps(args, torch)
    for s in steps:
        for _ in range(args.warmup):
            loss = s.run()
        s.fetch(loss)
    ms = {s.name: [] for s in steps}
    cpu = {s.name: [] for s in steps}
    for r in range(args.rounds):
        for s in (steps if r % 2 == 0 else steps[::-1]):
            wall, proc = time_round(s, args.steps)
            ms[s.name].append(wall)
            cpu[s.name].append(proc)
    return steps, ms, cpu


def report(steps, ms, cpu, args):
    med = {name: statistics.median(v) for name, v in ms.items()}
    cpu_med = {name: statistics.median(v) for name, v in cpu.items()}
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {args.batch}, SGD lr {args.lr}: "
          f"{args.rounds} alternating rounds of {args.steps} steps, 1 BLAS thread")
    print(f"{'':<8}{'ms/step':>9}{'min':>8}{'/numpy':>8}{'/numpy':>8}{'cpu ms':>8}{'/numpy':>8}")
    print(f"{'':<8}{'median':>9}{'':>8}{'medians':>8}{'rounds':>8}{'median':>8}{'cpu':>8}")
    result = {}
    for s in steps:
        name = s.name
        per_round = [a / b for a, b in zip(ms[name], ms["numpy"])]
        entry = {"version": s.version, "ms_per_step_median": round(med[name], 3),
                 "ms_per_step_all": [round(v, 3) for v in ms[name]],
                 "cpu_ms_per_step_median": round(cpu_med[name], 3),
                 "ratio_vs_numpy_of_medians": round(med[name] / med["numpy"], 3),
                 "ratio_vs_numpy_per_round_median": round(statistics.median(per_round), 3),
                 "cpu_ratio_vs_numpy": round(cpu_med[name] / cpu_med["numpy"], 3)}
        result[name] = entry
        print(f"{name:<8}{med[name]:9.3f}{min(ms[name]):8.3f}"
              f"{entry['ratio_vs_numpy_of_medians']:8.2f}"
              f"{entry['ratio_vs_numpy_per_round_median']:8.2f}"
              f"{cpu_med[name]:8.3f}{entry['cpu_ratio_vs_numpy']:8.2f}")
    print(f"mge/numpy = {result['mge']['ratio_vs_numpy_of_medians']:.2f} (ratio of the medians; "
          "the issue's target is <= 1.25, MegEngine 1.13 measured 2.7)")
    return result


# -- where mge's time goes --------------------------------------------------------------------
class KernelClock:
    """Wraps the CPU kernel table's entries (in this process only) to add up, per op, the calls and
    the time spent inside kernels: wall time, and the running thread's CPU time (which leaves out
    the waits for the GIL while the caller's thread holds it, so it is the kernels' own work)."""

    def __init__(self):
        from mge._core.device.cpu import KERNELS
        self.table = KERNELS
        self.saved = dict(self.table)
        self.wall, self.cpu, self.calls = {}, {}, {}

    def __enter__(self):
        for cls, fn in self.saved.items():
            self.table[cls] = self._wrap(cls.__name__, fn)
        return self

    def __exit__(self, *exc):
        self.table.update(self.saved)

    def _wrap(self, name, fn):
        wall, cpu, calls = self.wall, self.cpu, self.calls
        clock, thread_clock = time.perf_counter, time.thread_time

        def timed(op, *args):
            t0, c0 = clock(), thread_clock()
            try:
                return fn(op, *args)
            finally:
                key = getattr(op, "name", name)
                cpu[key] = cpu.get(key, 0.0) + thread_clock() - c0
                wall[key] = wall.get(key, 0.0) + clock() - t0
                calls[key] = calls.get(key, 0) + 1
        return timed

    def totals(self):
        return sum(self.wall.values()), sum(self.cpu.values()), sum(self.calls.values())



def breakdown(args):
    """numpy, mge at async level 2 and mge at level 0, one step each in turn (the order alternates),
    each step timed by phase and synced; medians over the steps.  The kernel table is wrapped
    throughout (about 1 us per op).  Wall times move with the machine's load; the CPU times of
    this process (numpy and mge@0 run on one thread) move much less, so the split of mge@0's step
    into kernels and the rest is given in CPU time."""
    import mge

    n = max(40, args.steps)
    npy = NumpyStep(args.batch, args.lr)
    mges = {}
    for level in (2, 0):
        mge.config.async_level = level
        mges[level] = MgeStep(mge, args.batch, args.lr)
        for _ in range(args.warmup):
            mges[level].fetch(mges[level].run())
    for _ in range(args.warmup):
        npy.run()
    npy_mm = [0.0]

    def timed_matmul(a, b, _mm=np.matmul, _clock=time.thread_time):
        t0 = _clock()
        try:
            return _mm(a, b)
        finally:
            npy_mm[0] += _clock() - t0
    npy.matmul = timed_matmul
    chan = mge.device.get_channel()
    names = ["numpy", "mge@2", "mge@0"]
    rows = {name: [] for name in names}
    with KernelClock() as clock:
        kernel_cpu = lambda: clock.totals()[1]  # noqa: E731
        for i in range(n):
            for name in (names if i % 2 == 0 else names[::-1]):
                if name == "numpy":
                    mm0 = npy_mm[0]
                    ph = npy.phases()
                    ph["matmul"] = npy_mm[0] - mm0
                else:
                    mge.config.async_level = int(name[-1])
                    calls0, inplace0 = clock.totals()[2], chan.stats.get("inplace", 0)
                    ph = mges[int(name[-1])].phases(kernel_cpu)
                    # in-place ufunc kernels bypass the table: count them from the channel's stats
                    ph["ops"] = clock.totals()[2] - calls0 + chan.stats.get("inplace", 0) - inplace0
                for suffix in ("", " cpu", " kernels"):
                    ph["step" + suffix] = sum(ph[k + suffix] for k in PHASES)
                rows[name].append(ph)
    mge.config.async_level = 2 if args.async_level is None else args.async_level
    out = {name: {k: statistics.median(r[k] for r in rows[name]) * (1 if k == "ops" else 1e3)
                  for k in rows[name][0]} for name in names}
    out["top kernels (cpu ms/step, calls/step)"] = sorted(
        ((k, clock.cpu[k] / (2 * n) * 1e3, clock.calls[k] / (2 * n)) for k in clock.cpu),
        key=lambda kv: -kv[1])[:8]

    print(f"\nWhere the step's time goes (ms per step; median over {n} steps of each, interleaved,"
          " every step synced):")
    print(f"{'':<7}" + "".join(f"{c:>10}" for c in PHASES)
          + f"{'step':>9}{'step cpu':>10}{'kernels':>9}{'ops':>5}")
    for name in names:
        ph = out[name]
        print(f"{name:<7}" + "".join(f"{ph[c]:10.3f}" for c in PHASES)
              + f"{ph['step']:9.3f}{ph['step cpu']:10.3f}"
              + (f"{ph['step kernels']:9.3f}{ph['ops']:5.0f}" if name != "numpy" else ""))
    ph0, base = out["mge@0"], out["numpy"]
    print("mge@0 (one thread: the kernels run inside the phase that issues them), CPU ms per step:")
    print(f"  {'phase':<10}{'mge@0':>8}{'kernels':>9}{'the rest':>10}{'numpy':>8}{'mge-numpy':>11}")
    for c in PHASES + ("step",):
        k = ph0[c + " kernels"]
        print(f"  {c:<10}{ph0[c + ' cpu']:8.3f}{k:9.3f}{ph0[c + ' cpu'] - k:10.3f}"
              f"{base[c + ' cpu']:8.3f}{ph0[c + ' cpu'] - base[c + ' cpu']:11.3f}")
    rest = ph0["step cpu"] - ph0["step kernels"]
    per_op = rest / max(ph0["ops"], 1) * 1e3
    print(f"  the rest = {per_op:.1f} us per op over {ph0['ops']:.0f} ops; "
          f"kernels = {ph0['step kernels'] / base['step cpu']:.2f} x numpy's whole step")
    print(f"  numpy's 8 matmuls take {base['matmul']:.3f} CPU ms of its step")
    print("  costliest kernels (CPU ms/step, calls/step): " + ", ".join(
        f"{k} {v:.3f} ({c:.0f})" for k, v, c in out["top kernels (cpu ms/step, calls/step)"]))
    return out


def cprofile(args, top):
    import cProfile
    import pstats
    import mge

    mge.config.async_level = 0
    step = MgeStep(mge, args.batch, args.lr)
    for _ in range(args.warmup):
        step.fetch(step.run())
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step.fetch(step.run())
    prof.disable()
    mge.config.async_level = 2
    stats = pstats.Stats(prof)
    print(f"\ncProfile of {args.steps} mge steps at async level 0 (own time):")
    stats.sort_stats("tottime").print_stats(top)
    # Own time per source file: which layer of the runtime the time is spent in.  The compiled
    # modules are invisible to cProfile; their time counts as their Python caller's.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    per_file = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        key = filename[len(root):] if filename.startswith(root) else (
            "numpy" if "numpy" in filename else "builtins" if filename == "~" else
            "other: " + os.path.basename(filename))
        per_file[key] = per_file.get(key, 0.0) + tottime
    total = sum(per_file.values())
    print(f"own time per file, ms per step (of {total / args.steps * 1e3:.3f} under cProfile):")
    for key, t in sorted(per_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {t / args.steps * 1e3:8.3f}  {key}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=30, help="steps per round (default 30)")
    p.add_argument("--rounds", type=int, default=9, help="alternating rounds (default 9)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--async-level", type=int, default=None, help="mge's async level (default 2)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out even if importable")
    p.add_argument("--breakdown", action="store_true", help="also time mge's step by phase")
    p.add_argument("--cprofile", type=int, default=0, metavar="N",
                   help="also print the N costliest functions of mge's step (cProfile)")
    args = p.parse_args(argv)

    import mge
    from mge.core import compiled_modules

    torch = torch_or_none(args)
    losses = check_agree(args, torch)
    steps, ms, cpu = bench(args, torch)
    result = report(steps, ms, cpu, args)
    record = {"bench": "mlp_step", "python": platform.python_version(), "batch": args.batch,
              "sizes": SIZES, "steps": args.steps, "rounds": args.rounds,
              "first_losses": {k: [round(v, 5) for v in vals] for k, vals in losses.items()},
              "mge_async_level": mge.config.async_level,
              "mge_modules": compiled_modules(), "results": result}
    if args.breakdown:
        record["breakdown"] = breakdown(args)
    if args.cprofile:
        cprofile(args, args.cprofile)
    print(json.dumps(record, default=str))


if __name__ == "__main__":
    main()
