"""mge's CUDA device against PyTorch on the same GPU, in one process per benchmark.

    python benchmarks/gpu/bench_gpu.py --bench matmul            # one benchmark, one JSON line
    python benchmarks/gpu/bench_gpu.py --bench all --json r.jsonl
    python benchmarks/gpu/bench_gpu.py --table r.jsonl --out results.md   # the markdown table

Benchmarks (each mge through its public API -- ``mge.tensor(..., device=DEVICE)``,
``mge.functional``, ``mge.module``, ``mge.optimizer``, ``mge.autodiff.GradManager``, ``mge.dtr``
-- side by side with the same computation in PyTorch, from the same weights and data):

* ``mlp``: the training step of ``benchmarks/bench_mlp_step.py`` (784-512-512-10, batch 64,
  softmax cross-entropy, SGD lr 0.01), whose step classes this file reuses.
* ``convnet``: a ResNet-18-style training step: batch 32 of 3x64x64 inputs, a 3x3 stem (64
  channels, stride 1: the usual stem for 64x64 images, no max-pool), the 4 stages of 2 basic
  blocks each (64, 128, 256, 512 channels; strides 1, 2, 2, 2; 3x3 convs without bias, BatchNorm
  in training mode, ReLU, 1x1 projection shortcuts), global average pooling, a 10-way linear
  layer, cross-entropy, SGD (lr 0.05, momentum 0.9).  The issue's bar: mge within 1.5x of PyTorch.
* ``convnet_trace``: the same with mge's step under ``mge.jit.trace(symbolic=True)`` (a replay
  is one program per step, runs of elementwise ops one kernel each); its first losses must be
  the eager step's bit for bit.
* ``matmul``: 8192^3 float32 products, TFLOP/s (2 N^3 per product), TF32 off in PyTorch (mge's
  float32 product is float32).  The bar: mge at least 80% of cuBLAS through PyTorch.  Both
  results are checked against a float64 product of a few rows.
* ``dtr``: the conv-net step on mge without DTR (its peak of allocated GPU memory measured with
  ``mge.device.get_max_allocated_memory("gpu0")``), then on a fresh copy of the same network with
  ``mge.dtr`` at 40% of that peak; both step times, the peak under DTR, evictions and
  recomputations, and whether the losses and final parameters are bit-identical (the bar).

Timing: no figure comes from one timing.  After a warm-up (which also compiles mge's kernels),
each round times ``--steps`` iterations of each framework in turn (the order alternates between
rounds), ending with a full synchronisation (``mge._full_sync()`` after reading the loss;
``torch.cuda.synchronize()``).  Reported: each framework's median per iteration over the rounds
and the median of the per-round ratios mge/PyTorch (steadier than the ratio of the medians).
TF32 is off in PyTorch for every benchmark (cuDNN and cuBLAS), so both compute in float32;
``torch.backends.cudnn.benchmark`` stays at PyTorch's default (off) unless
``--cudnn-benchmark``.

Without a usable GPU for mge (``mge.is_cuda_available()`` False) or without PyTorch, the side
that can run still runs, and the record says why the other did not; the process exits 0 so that
``run.sh`` goes on.  A failure inside a benchmark is recorded with its traceback (also on stderr).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: bench_mlp_step's step classes
sys.path.insert(0, ROOT)                    # mge itself when run from a checkout

BENCHES = ("matmul", "mlp", "convnet", "convnet_trace", "dtr")
DEVICE = "gpu0"  # mge's device; --mge-device cpu0 checks this script where there is no GPU
NUM_CLASSES = 10


# -- the frameworks ---------------------------------------------------------------------------
def load_mge():
    """``(mge, None)`` when gpu0 can hold tensors, else ``(mge or None, reason)``."""
    try:
        import mge
    except Exception as e:  # a broken build: say so, do not die
        return None, f"import mge failed: {type(e).__name__}: {e}"
    if DEVICE.startswith("cpu"):
        mge.set_default_device(DEVICE)
        return mge, None
    if not mge.is_cuda_available():
        try:  # the device's own error names what is missing (pycuda, the driver, the device)
            mge.tensor([0.0], device=DEVICE).numpy()
            reason = "mge.is_cuda_available() is False"
        except Exception as e:
            reason = f"mge.is_cuda_available() is False: {type(e).__name__}: {e}"
        return mge, reason
    mge.set_default_device(DEVICE)  # modules' parameters and optimizer states on the GPU
    return mge, None


def load_torch():
    """``(torch, None)`` with TF32 off when PyTorch sees a GPU, else ``(torch or None, reason)``."""
    try:
        import torch
    except Exception as e:
        return None, f"import torch failed: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return torch, "torch.cuda.is_available() is False"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch, None


def mge_sync(mge, value=None):
    """Wait for everything mge issued (reading ``value`` first, as a user would)."""
    if value is not None:
        value.numpy()
    mge._full_sync()


def torch_sync(torch, value=None):
    """Wait for everything PyTorch issued on the GPU."""
    torch.cuda.synchronize()


# -- timing -----------------------------------------------------------------------------------
def alternate(runners, rounds):
    """``runners``: name -> fn() returning seconds per iteration of one round.  Runs every
    runner once per round, the order alternating; returns name -> list of ms per iteration."""
    names = list(runners)
    out = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            out[n].append(runners[n]() * 1e3)
    return out


def summarize(ms, base="torch", other="mge"):
    """Medians, minima and the median of per-round ratios other/base."""
    res = {n: {"ms_median": round(statistics.median(v), 4), "ms_min": round(min(v), 4),
               "ms_all": [round(x, 4) for x in v]} for n, v in ms.items()}
    if base in ms and other in ms:
        res["ratio_per_round_median"] = round(statistics.median(
            a / b for a, b in zip(ms[other], ms[base])), 3)
        res["ratio_of_medians"] = round(res[other]["ms_median"] / res[base]["ms_median"], 3)
    return res


def timed(step, sync, n):
    """Seconds per iteration of ``n`` calls of ``step()``, synchronised at the end."""
    sync()
    t0 = time.perf_counter()
    last = None
    for _ in range(n):
        last = step()
    sync(last)
    return (time.perf_counter() - t0) / n


# -- matmul -----------------------------------------------------------------------------------
def bench_matmul(args, mge, torch):
    n = args.matmul_n
    rng = np.random.default_rng(0)  # float32 directly: 2 x 256 MB in well under a second
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    rows = 4
    ref = a[:rows].astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a[:rows]).astype(np.float64) @ np.abs(b).astype(np.float64)
    flop = 2.0 * n ** 3
    runners, rec = {}, {"n": n, "dtype": "float32", "reps_per_round": args.matmul_reps}

    def rel_err(c_rows):  # error relative to sum |a||b|, the scale of float32 rounding
        return float(np.max(np.abs(c_rows.astype(np.float64) - ref) / scale))

    if mge is not None:
        import mge.functional as F
        ma, mb = mge.tensor(a, device=DEVICE), mge.tensor(b, device=DEVICE)
        c = F.matmul(ma, mb)
        rec["mge_rel_err"] = rel_err(c[:rows].numpy())
        del c

        def run_mge():
            # synchronised without reading the 256 MB product back
            return timed(lambda: F.matmul(ma, mb), lambda v=None: mge._full_sync(),
                         args.matmul_reps)
        run_mge()  # warm-up: kernel selection, the pool holding the output's block
        runners["mge"] = run_mge
    if torch is not None:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        c = ta @ tb
        rec["torch_rel_err"] = rel_err(c[:rows].cpu().numpy())
        del c

        def run_torch():
            return timed(lambda: ta @ tb, lambda v=None: torch_sync(torch), args.matmul_reps)
        run_torch()
        runners["torch"] = run_torch
    ms = alternate(runners, args.matmul_rounds)
    rec.update(summarize(ms))
    for name in ms:
        rec[name]["tflops_median"] = round(flop / (rec[name]["ms_median"] * 1e-3) / 1e12, 2)
    if "mge" in ms and "torch" in ms:
        # throughput ratio = inverse time ratio; per round, then the median
        rec["tflops_ratio"] = round(statistics.median(
            b / a for a, b in zip(ms["mge"], ms["torch"])), 3)
        rec["target"] = "mge >= 0.8 x torch's TFLOP/s"
        rec["target_met"] = rec["tflops_ratio"] >= 0.8
    if "mge_rel_err" in rec:
        rec["check"] = "mge's rows within 1e-5 of float64 (relative to sum abs(a) abs(b))"
        rec["check_ok"] = rec["mge_rel_err"] < 1e-5
    return rec


# -- the MLP step (benchmarks/bench_mlp_step.py's classes) ------------------------------------
def bench_mlp(args, mge, torch):
    from bench_mlp_step import MgeStep, TorchStep

    runners, steps, rec = {}, {}, {"sizes": "784-512-512-10", "batch": 64, "lr": 0.01}
    if mge is not None:
        steps["mge"] = (MgeStep(mge, 64, 0.01), lambda v=None: mge_sync(mge, v))
    if torch is not None:
        ts = TorchStep(torch, 64, 0.01)
        torch.set_num_threads(max(1, os.cpu_count() or 1))  # TorchStep pins 1 for the CPU runs
        ts.net.cuda()
        ts.opt = torch.optim.SGD(ts.net.parameters(), lr=0.01)
        ts.data, ts.label = ts.data.cuda(), ts.label.cuda()
        steps["torch"] = (ts, lambda v=None: torch_sync(torch))
    losses = {name: [float(s.fetch(s.run())) for _ in range(3)] for name, (s, _) in steps.items()}
    rec["first_losses"] = losses
    if len(losses) == 2:
        rec["check"] = "first 3 losses agree (rtol 1e-3)"
        rec["check_ok"] = bool(np.allclose(losses["mge"], losses["torch"], rtol=1e-3, atol=1e-4))
    for name, (s, sync) in steps.items():
        for _ in range(args.warmup):
            s.run()
        runners[name] = (lambda s=s, sync=sync: timed(s.run, sync, args.steps))
    rec.update(summarize(alternate(runners, args.rounds)))
    return rec


# -- the ResNet-18-style step -----------------------------------------------------------------
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


def mge_resnet(mge):
    """The ResNet-18-style net in mge (attribute names match :func:`torch_resnet`'s)."""
    M, F = mge.module, mge.functional

    class Block(M.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = M.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = M.BatchNorm2d(cout)
            self.conv2 = M.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = M.BatchNorm2d(cout)
            self.proj = stride != 1 or cin != cout
            if self.proj:
                self.down_conv = M.Conv2d(cin, cout, 1, stride, 0, bias=False)
                self.down_bn = M.BatchNorm2d(cout)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            short = self.down_bn(self.down_conv(x)) if self.proj else x
            return F.relu(out + short)

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = M.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = M.BatchNorm2d(64)
            cin = 64
            for i, (cout, stride) in enumerate(STAGES, 1):
                setattr(self, f"layer{i}", [Block(cin, cout, stride), Block(cout, cout, 1)])
                cin = cout
            self.fc = M.Linear(512, NUM_CLASSES)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            for i in range(1, len(STAGES) + 1):
                for block in getattr(self, f"layer{i}"):
                    x = block(x)
            return self.fc(F.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))

    return Net()


def torch_resnet(torch):
    """The same net in PyTorch (BatchNorm momentum 0.1 = MegEngine's 0.9)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.proj = stride != 1 or cin != cout
            if self.proj:
                self.down_conv = nn.Conv2d(cin, cout, 1, stride, 0, bias=False)
                self.down_bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            short = self.down_bn(self.down_conv(x)) if self.proj else x
            return torch.relu(out + short)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            cin = 64
            for i, (cout, stride) in enumerate(STAGES, 1):
                setattr(self, f"layer{i}", nn.ModuleList([Block(cin, cout, stride),
                                                          Block(cout, cout, 1)]))
                cin = cout
            self.fc = nn.Linear(512, NUM_CLASSES)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            for i in range(1, len(STAGES) + 1):
                for block in getattr(self, f"layer{i}"):
                    x = block(x)
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return Net()


def conv_weights(seed=3):
    """The initial weights, by name in PyTorch's shapes (He-initialised convs, BatchNorm at 1 and
    0, a small linear layer), as numpy arrays; both frameworks start from these."""
    rng = np.random.RandomState(seed)
    w = {}

    def conv(name, cout, cin, k):
        w[name + ".weight"] = (rng.randn(cout, cin, k, k) * np.sqrt(2.0 / (cin * k * k))
                               ).astype("float32")

    def bn(name, c):
        w.update({name + ".weight": np.ones(c, "float32"), name + ".bias": np.zeros(c, "float32"),
                  name + ".running_mean": np.zeros(c, "float32"),
                  name + ".running_var": np.ones(c, "float32")})

    conv("conv1", 64, 3, 3)
    bn("bn1", 64)
    cin = 64
    for i, (cout, stride) in enumerate(STAGES, 1):
        for j, (ci, s) in enumerate(((cin, stride), (cout, 1))):
            p = f"layer{i}.{j}."
            conv(p + "conv1", cout, ci, 3)
            bn(p + "bn1", cout)
            conv(p + "conv2", cout, cout, 3)
            bn(p + "bn2", cout)
            if s != 1 or ci != cout:
                conv(p + "down_conv", cout, ci, 1)
                bn(p + "down_bn", cout)
        cin = cout
    w["fc.weight"] = (rng.randn(NUM_CLASSES, 512) * 0.01).astype("float32")
    w["fc.bias"] = np.zeros(NUM_CLASSES, "float32")
    return w


def conv_batch(batch, seed=4):
    rng = np.random.RandomState(seed)
    return (rng.randn(batch, 3, 64, 64).astype("float32"),
            rng.randint(0, NUM_CLASSES, size=(batch,)).astype("int32"))


class MgeConvStep:
    """The conv-net step in mge, from :func:`conv_weights`; ``traced``: under
    ``mge.jit.trace(symbolic=True)`` (one program per step, elementwise chains fused)."""

    def __init__(self, mge, batch, weights, traced=False):
        self.mge, self.F = mge, mge.functional
        self.net = mge_resnet(mge)
        own = self.net.state_dict()
        missing = sorted(set(own) - set(weights))
        if missing:
            raise RuntimeError(f"bench_gpu: no initial weights for mge's {missing[:5]}")
        self.net.load_state_dict({k: weights[k].reshape(own[k].shape) for k in own})
        self.gm = mge.autodiff.GradManager().attach(self.net.parameters())
        self.opt = mge.optimizer.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        x, y = conv_batch(batch)
        self.x, self.y = mge.tensor(x, device=DEVICE), mge.tensor(y, device=DEVICE)
        self.run = self._step
        if traced:
            from mge.jit import trace
            self.run = trace(symbolic=True)(self._step)

    def _step(self):
        with self.gm:
            loss = self.F.nn.cross_entropy(self.net(self.x), self.y)
            self.gm.backward(loss)
        self.opt.step().clear_grad()
        return loss

    def sync(self, value=None):
        mge_sync(self.mge, value)

    def loss_value(self, loss):
        return float(loss.numpy())

    def state(self):
        """Every parameter and buffer, as numpy arrays (for the bit-identity check)."""
        return {k: np.array(v.numpy() if hasattr(v, "numpy") else v)
                for k, v in self.net.state_dict().items()}


class TorchConvStep:
    """The conv-net step in PyTorch, from :func:`conv_weights`."""

    def __init__(self, torch, batch, weights, cudnn_benchmark=False):
        torch.backends.cudnn.benchmark = cudnn_benchmark
        self.torch = torch
        self.net = torch_resnet(torch).cuda()
        sd = self.net.state_dict()
        with torch.no_grad():
            for k, v in sd.items():
                if not k.endswith("num_batches_tracked"):
                    v.copy_(torch.from_numpy(weights[k].reshape(tuple(v.shape))))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        x, y = conv_batch(batch)
        self.x, self.y = torch.from_numpy(x).cuda(), torch.from_numpy(y).long().cuda()

    def run(self):
        loss = self.torch.nn.functional.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def sync(self, value=None):
        torch_sync(self.torch)

    def loss_value(self, loss):
        return loss.item()


def bench_convnet(args, mge, torch, traced=False):
    weights = conv_weights()
    rec = {"net": "ResNet-18-style, 3x3 stem stride 1, stages 64/128/256/512 x 2 basic blocks",
           "batch": args.batch, "input": "3x64x64", "optimizer": "SGD lr 0.05 momentum 0.9",
           "cudnn_benchmark": args.cudnn_benchmark, "mge_traced": traced}
    steps = {}
    if mge is not None:
        steps["mge"] = MgeConvStep(mge, args.batch, weights, traced)
    if torch is not None:
        steps["torch"] = TorchConvStep(torch, args.batch, weights, args.cudnn_benchmark)
    losses = {}
    for name, s in steps.items():
        t0 = time.perf_counter()
        losses[name] = [s.loss_value(s.run()) for _ in range(2)]
        s.sync()
        rec[f"{name}_first_steps_s"] = round(time.perf_counter() - t0, 3)  # incl. compilation
    rec["first_losses"] = losses
    if traced and mge is not None:  # a trace's steps are the eager steps' bits
        eager = MgeConvStep(mge, args.batch, weights)
        rec["traced_equals_eager"] = losses["mge"] == [eager.loss_value(eager.run())
                                                       for _ in range(2)]
        del eager
    if len(losses) == 2:
        rec["check"] = "first 2 losses agree (rtol 2e-3)"
        rec["check_ok"] = bool(np.allclose(losses["mge"], losses["torch"], rtol=2e-3, atol=1e-4))
    runners = {}
    for name, s in steps.items():
        for _ in range(args.warmup):
            s.run()
        runners[name] = (lambda s=s: timed(s.run, s.sync, args.steps))
    rec.update(summarize(alternate(runners, args.rounds)))
    if "ratio_per_round_median" in rec:
        rec["target"] = "mge <= 1.5 x torch's step time"
        rec["target_met"] = rec["ratio_per_round_median"] <= 1.5
    return rec


# -- DTR at 40% of the conv-net step's peak ---------------------------------------------------
def bench_dtr(args, mge, torch):
    if mge is None:
        raise RuntimeError("the DTR benchmark runs mge only")
    weights = conv_weights()
    dev = DEVICE
    n = args.dtr_steps
    rec = {"fraction": args.dtr_fraction, "steps": n, "batch": args.batch}

    def train(step):
        losses, ms = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            loss = step.run()
            losses.append(np.array(loss.numpy()))
            mge._full_sync()
            ms.append((time.perf_counter() - t0) * 1e3)
        return losses, ms

    off = MgeConvStep(mge, args.batch, weights)
    off.run()  # a warm-up step on a throwaway copy: kernels compiled, pool warm
    mge._full_sync()
    del off
    off = MgeConvStep(mge, args.batch, weights)
    mge._full_sync()
    mge.device.reset_max_memory_stats(dev)
    losses_off, ms_off = train(off)
    peak = mge.device.get_max_allocated_memory(dev)
    state_off = off.state()
    del off
    mge._full_sync()
    budget = int(peak * args.dtr_fraction)
    on = MgeConvStep(mge, args.batch, weights)
    mge._full_sync()
    mge.dtr.eviction_threshold = budget
    mge.dtr.evictee_minimum_size = 1 << 20
    mge.dtr.reset_stats()
    mge.dtr.enable()
    mge.device.reset_max_memory_stats(dev)
    try:
        losses_on, ms_on = train(on)
        peak_on = mge.device.get_max_allocated_memory(dev)
        st = mge.dtr.stats()
    finally:
        mge.dtr.disable()
    state_on = on.state()
    identical = (all(np.array_equal(a, b) for a, b in zip(losses_off, losses_on))
                 and state_off.keys() == state_on.keys()
                 and all(np.array_equal(state_off[k], state_on[k]) for k in state_off))
    # the first step of each run is kept out of the medians (the DTR one records paths afresh)
    rec.update({
        "peak_off_mb": round(peak / 2 ** 20, 1), "budget_mb": round(budget / 2 ** 20, 1),
        "peak_on_mb": round(peak_on / 2 ** 20, 1),
        "peak_on_vs_off": round(peak_on / peak, 3) if peak else None,
        "ms_off_median": round(statistics.median(ms_off[1:] or ms_off), 2),
        "ms_on_median": round(statistics.median(ms_on[1:] or ms_on), 2),
        "ms_off_all": [round(x, 2) for x in ms_off], "ms_on_all": [round(x, 2) for x in ms_on],
        "evictions": st.get("evictions"), "recomputations": st.get("recomputations"),
        "losses_off": [float(x) for x in losses_off], "losses_on": [float(x) for x in losses_on],
        "bit_identical": bool(identical),
        "check": "losses and final parameters and BN statistics bit-identical",
        "check_ok": bool(identical),
    })
    rec["on_vs_off"] = round(rec["ms_on_median"] / rec["ms_off_median"], 3)
    rec["target"] = "bit-identical at 40% of the peak"
    rec["target_met"] = bool(identical) and peak_on <= budget * 1.05
    return rec


def bench_convnet_trace(args, mge, torch):
    """``convnet`` with mge's step under ``jit.trace(symbolic=True)``."""
    return bench_convnet(args, mge, torch, traced=True)


RUNNERS = {"matmul": bench_matmul, "mlp": bench_mlp, "convnet": bench_convnet,
           "convnet_trace": bench_convnet_trace, "dtr": bench_dtr}


def run_one(name, args):
    """One benchmark's record: always a dict, with the reasons a side did not run."""
    rec = {"bench": name, "python": platform.python_version(), "time": time.strftime("%F %T")}
    mge, mge_reason = load_mge()
    torch, torch_reason = (None, "--no-torch") if args.no_torch or name == "dtr" else load_torch()
    if mge_reason:
        rec["mge_unavailable"] = mge_reason
    if torch_reason and name != "dtr":
        rec["torch_unavailable"] = torch_reason
    if mge is not None and not mge_reason:
        from mge.core import compiled_modules
        rec["mge_version"] = mge.__version__
        rec["mge_modules_compiled"] = all(v == "compiled" for v in compiled_modules().values())
    if torch is not None and not torch_reason:
        rec["torch_version"] = torch.__version__
        rec["gpu"] = torch.cuda.get_device_name(0)
    use_mge = mge if not mge_reason else None
    use_torch = torch if not torch_reason else None
    if use_mge is None and use_torch is None:
        rec["error"] = "neither mge nor PyTorch can use a GPU here"
        return rec
    t0 = time.perf_counter()
    try:
        rec.update(RUNNERS[name](args, use_mge, use_torch))
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-3000:]
        print(rec["traceback"], file=sys.stderr)
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


# -- the table --------------------------------------------------------------------------------
def _fmt(v, digits=2):
    return "—" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def _side(rec, name, key="ms_median"):
    if name in rec and isinstance(rec[name], dict):
        return rec[name].get(key)
    return None


def table(records, machine=""):
    """The markdown table of the benchmark records (the last record of each benchmark)."""
    last = {}
    for r in records:
        last[r["bench"]] = r
    lines = ["# mge on the GPU against PyTorch", ""]
    if machine:
        lines += [machine.strip(), ""]
    about = {}
    for r in records:  # versions as the benchmarks saw them
        for key in ("gpu", "torch_version", "mge_version", "mge_modules_compiled"):
            if key in r:
                about.setdefault(key, r[key])
    if about:
        lines += ["; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in about.items()), ""]
    lines += ["| benchmark | mge | PyTorch | mge / PyTorch | bar | met | check |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    notes = []

    def row(label, m, t, ratio, bar, rec):
        met = rec.get("target_met")
        check = rec.get("check")
        check = f"{check}: {'ok' if rec.get('check_ok') else 'FAILED'}" if check else ""
        lines.append(f"| {label} | {m} | {t} | {ratio} | {bar} | "
                     f"{'—' if met is None else ('yes' if met else 'NO')} | {check} |")

    for name in BENCHES:
        r = last.get(name)
        if r is None:
            lines.append(f"| {name} | not run | | | | | |")
            continue
        for key in ("mge_unavailable", "torch_unavailable", "error"):
            if key in r:
                notes.append(f"- {name}: {key.replace('_', ' ')}: {r[key]}")
        if name == "matmul":
            row(f"matmul {r.get('n', 8192)}^3 float32, TFLOP/s (median)",
                _fmt(_side(r, "mge", "tflops_median")), _fmt(_side(r, "torch", "tflops_median")),
                _fmt(r.get("tflops_ratio"), 3), ">= 0.8", r)
        elif name in ("mlp", "convnet", "convnet_trace"):
            label = ("MLP 784-512-512-10 step, batch 64, ms (median)" if name == "mlp" else
                     f"ResNet-18-style step, batch {r.get('batch', 32)}, 3x64x64, ms (median)"
                     + (", mge traced" if name == "convnet_trace" else ""))
            row(label, _fmt(_side(r, "mge"), 3), _fmt(_side(r, "torch"), 3),
                _fmt(r.get("ratio_per_round_median"), 3),
                "<= 1.5" if name.startswith("convnet") else "", r)
            if "traced_equals_eager" in r:
                notes.append(f"- {name}: traced losses bit-identical to eager: "
                             f"{'yes' if r['traced_equals_eager'] else 'NO'}")
        else:
            m = (f"off {_fmt(r.get('ms_off_median'))} ms, on {_fmt(r.get('ms_on_median'))} ms; "
                 f"peak {_fmt(r.get('peak_off_mb'), 1)} -> {_fmt(r.get('peak_on_mb'), 1)} MB "
                 f"(budget {_fmt(r.get('budget_mb'), 1)}); {r.get('evictions', '—')} evictions"
                 if "ms_on_median" in r else "not measured")
            row(f"DTR at {int(100 * r.get('fraction', 0.4))}% of the conv-net peak", m, "—",
                f"on/off {_fmt(r.get('on_vs_off'), 3)}", "bit-identical", r)
    lines += ["", "Medians over alternating rounds; the ratio is the median of per-round ratios "
              "(for matmul, of throughputs). TF32 off in PyTorch."]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", default="all", help=f"one of {', '.join(BENCHES)} or all")
    p.add_argument("--json", help="append each record (one JSON line) to this file")
    p.add_argument("--table", nargs="*", help="write the table of these JSON-lines files")
    p.add_argument("--machine", help="a file whose text heads the table (machine, versions)")
    p.add_argument("--out", help="the table's file (default: stdout)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=10, help="steps per round (mlp, convnet)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="conv-net batch (default 32)")
    p.add_argument("--matmul-n", type=int, default=8192)
    p.add_argument("--matmul-reps", type=int, default=5, help="products per round")
    p.add_argument("--matmul-rounds", type=int, default=5)
    p.add_argument("--dtr-fraction", type=float, default=0.4)
    p.add_argument("--dtr-steps", type=int, default=4)
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--mge-device", default="gpu0",
                   help="mge's device (cpu0: check this script on a machine without a GPU)")
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.mge_device

    if args.table is not None:
        records = []
        for path in args.table:
            if os.path.exists(path):
                with open(path) as f:
                    records += [json.loads(ln) for ln in f if ln.startswith("{")]
        machine = open(args.machine).read() if args.machine and os.path.exists(args.machine) else ""
        text = table(records, machine)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        print(text)
        return 0

    names = BENCHES if args.bench == "all" else tuple(args.bench.split(","))
    for name in names:
        if name not in RUNNERS:
            p.error(f"unknown benchmark {name!r} (choose from {', '.join(BENCHES)} or all)")
    for name in names:
        rec = run_one(name, args)
        line = json.dumps(rec, default=str)
        print(line, flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
