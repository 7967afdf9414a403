"""DataLoader with worker processes against in-process loading, feeding one training loop.

    python benchmarks/bench_dataloader.py                # about 30-60 s on 2 cores
    python benchmarks/bench_dataloader.py --rounds 3 --steps 60 --workers 2

The data: an ``ArrayDataset`` of 10,000 uint8 images (28x28x1 by default, ``--size 8`` for 8x8)
and int labels, a ``RandomSampler`` (batch 64), and ``Compose([Normalize(mean, std),
ToMode("CHW")])`` per sample. The loop: a (size*size)-256-10 MLP (``mge.module.Linear``, ReLU), softmax
cross-entropy, ``GradManager`` + SGD, the loss read back every step (so each step is timed to
completion). Each round runs ``--steps`` steps with ``num_workers=0`` and with
``num_workers=--workers``, in alternating order; a step is timed from the end of the previous step
to the end of this one, so it includes any wait for the batch. The first step of each epoch
(worker start-up) is reported apart and not in the step medians.

Reported per configuration: the median step time over all rounds, the median time to get a
batch (``next(it)``), load-only throughput (batches/s with no training), and the ratios
workers / in-process (below 1: the workers are faster). BLAS runs on one thread.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def build(size, n=10000, seed=0):
    from mge.data.dataset import ArrayDataset
    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, size=(n, size, size, 1), dtype=np.uint8)
    labels = rng.randint(0, 10, size=(n,)).astype(np.int32)
    return ArrayDataset(images, labels)


def make_loader(ds, workers, batch):
    import mge.data.transform as T
    from mge.data import DataLoader, RandomSampler
    transform = T.Compose([T.Normalize(mean=33.3, std=78.5), T.ToMode("CHW")])
    return DataLoader(ds, sampler=RandomSampler(ds, batch_size=batch, drop_last=True, seed=1),
                      transform=transform, num_workers=workers)


class Trainer:
    def __init__(self, in_features, hidden=256):
        import mge
        import mge.functional as F
        import mge.module as M
        from mge.autodiff import GradManager
        from mge.optimizer import SGD
        self.mge, self.F = mge, F
        self.model = M.Sequential(M.Linear(in_features, hidden), M.ReLU(), M.Linear(hidden, 10))
        self.gm = GradManager().attach(self.model.parameters())
        self.opt = SGD(self.model.parameters(), lr=0.01)

    def step(self, data, label):
        mge, F = self.mge, self.F
        x = mge.tensor(data.reshape(data.shape[0], -1))
        y = mge.tensor(label)
        with self.gm:
            loss = F.nn.cross_entropy(self.model(x), y)
            self.gm.backward(loss)
        self.opt.step()
        self.opt.clear_grad()
        return float(loss.item())


def train_round(trainer, loader, steps):
    """(first-step seconds, [step seconds], [next() seconds])."""
    it = iter(loader)
    step_times, wait_times = [], []
    t_prev = time.perf_counter()
    first = None
    for k in range(steps + 1):
        t0 = time.perf_counter()
        data, label = next(it)
        t1 = time.perf_counter()
        trainer.step(data, label)
        t2 = time.perf_counter()
        if k == 0:
            first = t2 - t_prev
        else:
            step_times.append(t2 - t_prev)
            wait_times.append(t1 - t0)
        t_prev = t2
    del it
    return first, step_times, wait_times


def load_only(loader, batches):
    it = iter(loader)
    next(it)  # start-up apart
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    del it
    return batches / dt


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=28, help="image side (28 or 8)")
    a = p.parse_args()

    ds = build(a.size)
    trainer = Trainer(a.size * a.size)
    configs = {"in-process": 0, "workers=%d" % a.workers: a.workers}
    loaders = {name: make_loader(ds, w, a.batch) for name, w in configs.items()}
    train_round(trainer, loaders["in-process"], 5)  # warm-up
    steps = {n: [] for n in configs}
    waits = {n: [] for n in configs}
    firsts = {n: [] for n in configs}
    rates = {n: [] for n in configs}
    round_ratios = []
    names = list(configs)
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        med = {}
        for n in order:
            first, st, wt = train_round(trainer, loaders[n], a.steps)
            steps[n] += st
            waits[n] += wt
            firsts[n].append(first)
            med[n] = statistics.median(st)
        round_ratios.append(med[names[1]] / med[names[0]])
        for n in order:
            rates[n].append(load_only(loaders[n], a.steps))

    print("DataLoader benchmark: %d images %dx%dx1 uint8, batch %d, Compose([Normalize, ToMode('CHW')])"
          ", %d-256-10 MLP step, %d rounds x %d steps, %d CPU(s), load average %.1f"
          % (len(ds), a.size, a.size, a.batch, a.size * a.size, a.rounds, a.steps, os.cpu_count(),
             os.getloadavg()[0]))
    print("%-12s %14s %14s %16s %18s" % ("config", "step ms (med)", "next() ms", "first step ms",
                                          "load-only batch/s"))
    for n in names:
        print("%-12s %14.3f %14.3f %16.1f %18.0f" % (
            n, 1e3 * statistics.median(steps[n]), 1e3 * statistics.median(waits[n]),
            1e3 * statistics.median(firsts[n]), statistics.median(rates[n])))
    base, wk = names
    print("ratio %s / %s: step %.3f (median of per-round ratios %.3f), next() %.3f, "
          "load-only throughput x%.2f" % (
              wk, base, statistics.median(steps[wk]) / statistics.median(steps[base]),
              statistics.median(round_ratios),
              statistics.median(waits[wk]) / statistics.median(waits[base]),
              statistics.median(rates[wk]) / statistics.median(rates[base])))


if __name__ == "__main__":
    main()
