"""jit.trace side by side: traced, eager and numpy, alternating repetitions in one process.

    python benchmarks/bench_trace.py                 # both cases
    python benchmarks/bench_trace.py --case chain --reps 15
    python benchmarks/bench_trace.py --case mlp --pipeline 50   # steps read every 50, as bench_mlp

Variants: ``traced`` (the function's Python runs again, ops matched), ``without_host``
(``trace(..., without_host=True)``: only the compiled program runs), ``eager``, ``numpy``.
Cases: ``chain`` -- 1,000 tiny elementwise ops (``x = x * 1.0001 + 0.5`` on 4 floats), read at
the end; ``mlp`` -- an MLP training step (784-512-512-10, batch 64, SGD, cross entropy), numpy's
hand-written step as the reference.  Prints medians and the medians of per-repetition ratios
(traced/numpy, eager/numpy), plus the time to record (the first call) and one JSON line.
"""
import argparse
import json
import os
import statistics
import time

# one BLAS thread, as the yardsticks run (set before numpy loads its BLAS)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import mge  # noqa: E402
import mge.functional as F
import mge.module as M
from mge.autodiff import GradManager
from mge.jit import trace
from mge.optimizer import SGD

SIZES = (784, 512, 512, 10)


def chain_case(n=500):
    x0 = np.arange(4, dtype="float32")

    def chain(x):
        for _ in range(n):
            x = x * 1.0001 + 0.5
        return x

    traced = trace(chain, symbolic=True)
    no_host = trace(chain, symbolic=True, without_host=True)
    xt = mge.tensor(x0)
    t = time.perf_counter()
    traced(xt).numpy()
    record = time.perf_counter() - t
    np.testing.assert_array_equal(traced(xt).numpy(), chain(xt).numpy())
    no_host(xt)
    np.testing.assert_array_equal(no_host(xt).numpy(), chain(xt).numpy())
    return {"traced": lambda: traced(xt).numpy(), "without_host": lambda: no_host(xt).numpy(),
            "eager": lambda: chain(xt).numpy(), "numpy": lambda: chain(x0)}, record, 2 * n


def _weights(rng):
    return [((rng.randn(i, o) * np.sqrt(2.0 / i)).astype("float32"), np.zeros(o, "float32"))
            for i, o in zip(SIZES[:-1], SIZES[1:])]


def _mge_step(weights, data, label, lr, traced, without_host=False):
    layers = []
    for w, b in weights:
        lin = M.Linear(w.shape[0], w.shape[1])
        lin.weight._reset(mge.tensor(w.T.copy()))
        lin.bias._reset(mge.tensor(b))
        layers.append(lin)
    params = [p for lin in layers for p in lin.parameters()]
    gm = GradManager().attach(params)
    opt = SGD(params, lr=lr)

    def step(x, y):
        with gm:
            h = x
            for i, lin in enumerate(layers):
                h = lin(h)
                if i < len(layers) - 1:
                    h = F.relu(h)
            loss = F.nn.cross_entropy(h, y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    f = trace(step, symbolic=True, without_host=without_host) if traced else step
    x, y = mge.tensor(data), mge.tensor(label)

    def steps():
        # PIPELINE steps, the loss read after the last (as ../shared/bench/bench_mlp.py does:
        # an asynchronous runtime may overlap a step's Python with the previous steps' kernels)
        for _ in range(PIPELINE - 1):
            f(x, y)
        return f(x, y).numpy()
    return steps


def _numpy_step(weights, x, y, lr):
    Ws = [w.copy() for w, _ in weights]
    bs = [b.copy() for _, b in weights]
    rows = np.arange(x.shape[0])
    lr = np.float32(lr)

    def step():
        acts, h = [x], x
        for i, (W, b) in enumerate(zip(Ws, bs)):
            h = h @ W + b
            if i < len(Ws) - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        z = h - h.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = np.mean(np.log(s[:, 0]) - z[rows, y])
        g = e / s
        g[rows, y] -= 1
        g /= x.shape[0]
        for i in range(len(Ws) - 1, -1, -1):
            gW = acts[i].T @ g
            gb = g.sum(axis=0)
            if i:
                g = (g @ Ws[i].T) * (acts[i] > 0)
            Ws[i] -= lr * gW
            bs[i] -= lr * gb
        return loss

    def steps():
        for _ in range(PIPELINE - 1):
            step()
        return step()
    return steps


PIPELINE = 1  # MLP steps per timed call (--pipeline)


def mlp_case(batch=64, lr=0.01):
    rng = np.random.RandomState(1)
    weights = _weights(rng)
    x = rng.rand(batch, SIZES[0]).astype("float32")
    y = rng.randint(0, SIZES[-1], size=batch).astype("int32")
    traced = _mge_step(weights, x, y, lr, True)
    t = time.perf_counter()
    traced()
    record = time.perf_counter() - t
    return {"traced": traced, "without_host": _mge_step(weights, x, y, lr, True, True),
            "eager": _mge_step(weights, x, y, lr, False),
            "numpy": _numpy_step(weights, x, y, lr)}, record, 1


def measure(fns, reps, inner):
    for f in fns.values():  # warm-up (the traced one compiles its programs here)
        for _ in range(3):
            f()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t = time.perf_counter()
            for _ in range(inner):
                f()
            times[k].append((time.perf_counter() - t) / inner)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="chain,mlp")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--pipeline", type=int, default=1,
                   help="MLP steps per timed call, the loss read after the last (the yardstick "
                        "bench_mlp.py runs 50)")
    args = p.parse_args(argv)
    global PIPELINE
    PIPELINE = args.pipeline
    report = {}
    for case in args.case.split(","):
        fns, record, per = {"chain": chain_case, "mlp": mlp_case}[case]()
        inner = 5 if case == "chain" else max(1, 20 // PIPELINE)
        times = measure(fns, args.reps, inner)
        unit, scale = ("us/op", 1e6 / per) if case == "chain" else ("ms/step", 1e3 / PIPELINE)
        med = {k: statistics.median(v) * scale for k, v in times.items()}
        ratio = {k: statistics.median([a / b for a, b in zip(times[k], times["numpy"])])
                 for k in ("traced", "without_host", "eager")}
        print(f"{case}: traced {med['traced']:.3f} {unit}, without_host "
              f"{med['without_host']:.3f}, eager {med['eager']:.3f}, numpy {med['numpy']:.3f}; "
              f"traced/numpy {ratio['traced']:.2f}, without_host/numpy "
              f"{ratio['without_host']:.2f}, eager/numpy {ratio['eager']:.2f}; recording "
              f"{record * 1e3:.1f} ms")
        report[case] = {"unit": unit, "median": med, "ratio_vs_numpy": ratio,
                        "record_ms": record * 1e3}
    print(json.dumps({"bench": "trace", "results": report}))


if __name__ == "__main__":
    main()
