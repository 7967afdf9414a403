"""Train a small convolutional network on scikit-learn's handwritten digits.

    pip install -e ".[examples]" && python examples/train_digits.py

The 1797 8x8 digit images ship with scikit-learn (no download).  They are split into a training
set (80%) and a test set (20%, stratified); a network of Conv2d / BatchNorm2d / ReLU / MaxPool2d
and a Linear classifier is trained with ``GradManager`` and SGD with momentum, one tqdm progress
bar per epoch.  The run ends with the test accuracy, the time per training step and the peak
tensor memory, and writes a PNG plot of the loss and accuracy per epoch (``--plot``).

The script is written against MegEngine 1.13's public API; the one line that picks mge is
``import mge as megengine``.  ``DEMO_FW=megengine`` runs the same code on real MegEngine.

``--dtr-budget``, ``--trace`` and ``--profile`` use ``megengine.dtr``, ``megengine.jit.trace`` and
``megengine.utils.profiler.Profiler``.  Where the framework does not have one of them, the script
says so and exits with status 2 rather than silently training without it.
"""
import argparse
import contextlib
import importlib
import os
import sys
import time

import numpy as np

# The only mge-specific line is the import; DEMO_FW=megengine runs the script on MegEngine.
_FW = os.environ.get("DEMO_FW", "mge")
if _FW == "megengine":
    import megengine
elif _FW == "mge":
    import mge as megengine
else:
    sys.exit(f"train_digits: DEMO_FW must be mge or megengine, got {_FW!r}")

F = megengine.functional
M = megengine.module
optim = megengine.optimizer
GradManager = megengine.autodiff.GradManager


class UsageError(ValueError):
    """Options that cannot work together, e.g. a batch larger than the training set."""


class FeatureMissing(RuntimeError):
    """A flag asked for a feature that this framework does not provide (yet)."""


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a small CNN on scikit-learn's 8x8 handwritten digits.")
    p.add_argument("--epochs", type=_positive_int, default=8,
                   help="passes over the training set (default 8)")
    p.add_argument("--batch-size", type=_positive_int, default=32,
                   help="training batch size (default 32)")
    p.add_argument("--lr", type=float, default=0.02, help="SGD learning rate (default 0.02)")
    p.add_argument("--seed", type=int, default=0,
                   help="seeds numpy and megengine.random (default 0)")
    p.add_argument("--plot", default="train_digits.png",
                   help="where to write the loss/accuracy plot (default train_digits.png)")
    p.add_argument("--limit", type=_positive_int, default=None,
                   help="train on the first N training images only (quick checks)")
    p.add_argument("--dtr-budget", default=None, metavar="BYTES",
                   help="enable DTR with this eviction threshold, e.g. 2MB or 2097152")
    p.add_argument("--dtr-min-size", default="16KB", metavar="BYTES",
                   help="with --dtr-budget: only tensors larger than this are evicted (default "
                        "16KB: this network's activations are far below MegEngine's 1MB default)")
    p.add_argument("--trace", action="store_true",
                   help="run the training step under megengine.jit.trace(symbolic=True)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="profile the training with megengine.utils.profiler.Profiler into DIR")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bars")
    return p.parse_args(argv)


def _feature(module, flag):
    """Import ``megengine.<module>``, or raise FeatureMissing naming the flag."""
    name = f"{megengine.__name__}.{module}"
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise      # the module is there but something it imports is not: a real error
        raise FeatureMissing(
            f"{flag} needs {name}, which this version of {megengine.__name__} does not have yet "
            f"({exc}); run without {flag}") from None
    pending = getattr(mod, "_PENDING", None)  # mge's placeholder modules of features to come
    if pending:
        raise FeatureMissing(
            f"{flag} needs {name}, which this version of {megengine.__name__} does not have yet "
            f"({pending} is not implemented); run without {flag}")
    return mod


def load_data(seed, limit=None):
    """The digits as float32 NCHW images in [0, 1] and int32 labels:
    ``(x_train, y_train, x_test, y_test)``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[:, None, :, :]
    labels = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels)
    if limit is not None:
        x_train, y_train = x_train[:limit], y_train[:limit]
    return x_train, y_train, x_test, y_test


class DigitNet(M.Module):
    """Two 3x3 convolutions with batch norm, a 2x2 max pool and a linear classifier: 8x8 -> 10."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = M.Conv2d(1, 16, 3, padding=1)
        self.bn1 = M.BatchNorm2d(16)
        self.conv2 = M.Conv2d(16, 32, 3, padding=1)
        self.bn2 = M.BatchNorm2d(32)
        self.relu = M.ReLU()
        self.pool = M.MaxPool2d(2)
        self.fc = M.Linear(32 * 4 * 4, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.pool(self.relu(self.bn2(self.conv2(x))))
        return self.fc(F.flatten(x, 1))


def make_train_step(model, opt, jit=None):
    """The training step; under ``jit.trace(symbolic=True)`` when the jit module is given."""
    gm = GradManager().attach(model.parameters())

    def train_step(data, label):
        with gm:
            loss = F.nn.cross_entropy(model(data), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if jit is not None:
        train_step = jit.trace(train_step, symbolic=True)
    return train_step


def evaluate(model, x, y):
    """(mean cross-entropy, accuracy) of the model in evaluation mode on the whole set at once."""
    model.eval()
    logits = model(megengine.tensor(x))
    loss = F.nn.cross_entropy(logits, megengine.tensor(y)).item()
    acc = float((F.argmax(logits, axis=1).numpy() == y).mean())
    model.train()
    return loss, acc


def _progress(iterable, desc, total, quiet):
    if quiet:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, total=total, unit="step", dynamic_ncols=True)


def _log(msg, quiet):
    if quiet:
        return
    from tqdm import tqdm
    tqdm.write(msg)


def _bytes(size):
    # MegEngine takes bytes or a string such as "2MB" / "1.5GB".
    return int(size) if str(size).isdigit() else size


def train(epochs=8, batch_size=32, lr=0.02, seed=0, limit=None, dtr_budget=None,
          dtr_min_size="16KB", use_trace=False, profile=None, quiet=False):
    """Train DigitNet; returns the history: per-epoch losses and accuracies, per-step losses,
    the time per step (ms, median over epochs) and the peak tensor memory of the training steps
    (bytes; MegEngine reports 0 on its CPU device)."""
    # Every optional feature is looked up before any work, so that a missing one fails at once.
    dtr = _feature("dtr", "--dtr-budget") if dtr_budget is not None else None
    jit = _feature("jit", "--trace") if use_trace else None
    profiler_mod = _feature("utils.profiler", "--profile") if profile is not None else None

    np.random.seed(seed)
    megengine.random.seed(seed)
    x_train, y_train, x_test, y_test = load_data(seed, limit)
    if epochs < 1:
        raise UsageError(f"train_digits: epochs must be at least 1, got {epochs}")
    if len(x_train) < batch_size:
        raise UsageError(f"train_digits: batch size {batch_size} is larger than the "
                         f"{len(x_train)} training images")
    if dtr is not None:
        dtr.eviction_threshold = _bytes(dtr_budget)
        dtr.evictee_minimum_size = _bytes(dtr_min_size)
        dtr.enable()

    model = DigitNet()
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    sched = optim.MultiStepLR(opt, milestones=[max(1, epochs * 3 // 4)], gamma=0.1)
    train_step = make_train_step(model, opt, jit)
    profiler = profiler_mod.Profiler(path=profile) if profiler_mod is not None else None

    rng = np.random.RandomState(seed)
    steps_per_epoch = len(x_train) // batch_size   # full batches only: one shape for --trace
    history = {"epoch": [], "train_loss": [], "test_loss": [], "test_acc": [], "step_loss": [],
               "ms_per_step_epoch": []}
    peak = 0
    try:
        with profiler if profiler is not None else contextlib.nullcontext():
            for epoch in range(epochs):
                order = rng.permutation(len(x_train))
                bar = _progress(range(steps_per_epoch), f"epoch {epoch + 1}/{epochs}",
                                steps_per_epoch, quiet)
                losses = []
                # The peak is taken over the training steps only: the evaluation below runs on
                # the whole test set at once and is not what a memory budget (DTR) is about.
                megengine.device.reset_max_memory_stats()
                start = time.perf_counter()
                for i in bar:
                    idx = order[i * batch_size:(i + 1) * batch_size]
                    data, label = megengine.tensor(x_train[idx]), megengine.tensor(y_train[idx])
                    loss = train_step(data, label)
                    losses.append(loss.item())   # a sync point: the step is timed to completion
                    if not quiet:
                        bar.set_postfix(loss=f"{losses[-1]:.4f}")
                history["ms_per_step_epoch"].append(
                    (time.perf_counter() - start) / steps_per_epoch * 1e3)
                peak = max(peak, int(megengine.device.get_max_allocated_memory()))
                sched.step()
                test_loss, test_acc = evaluate(model, x_test, y_test)
                history["epoch"].append(epoch + 1)
                history["train_loss"].append(float(np.mean(losses)))
                history["test_loss"].append(test_loss)
                history["test_acc"].append(test_acc)
                history["step_loss"].extend(losses)
                _log(f"epoch {epoch + 1}: train loss {history['train_loss'][-1]:.4f}  "
                     f"test loss {test_loss:.4f}  test accuracy {test_acc:.2%}", quiet)
    finally:
        if dtr is not None:
            dtr.disable()        # DTR is process-wide: leave the process as we found it
    history["ms_per_step"] = float(np.median(history["ms_per_step_epoch"]))
    history["peak_bytes"] = peak
    return history


def save_plot(history, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(history["epoch"], history["train_loss"], "o-", label="train")
    ax_loss.plot(history["epoch"], history["test_loss"], "s-", label="test")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.set_yscale("log")
    ax_loss.legend()
    ax_acc.plot(history["epoch"], [100 * a for a in history["test_acc"]], "s-", color="C1")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy (%)")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
    fig.suptitle(f"digits, {megengine.__name__} {megengine.__version__}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    try:
        history = train(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        seed=args.seed, limit=args.limit, dtr_budget=args.dtr_budget,
                        dtr_min_size=args.dtr_min_size,
                        use_trace=args.trace, profile=args.profile, quiet=args.no_progress)
    except FeatureMissing as exc:
        print(f"train_digits: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    save_plot(history, args.plot)
    print(f"test accuracy: {history['test_acc'][-1]:.2%}")
    print(f"time per step: {history['ms_per_step']:.2f} ms (batch {args.batch_size}, "
          f"median over epochs)")
    peak = history["peak_bytes"]
    # MegEngine counts device memory on CUDA only; its CPU device reports 0.
    print(f"peak tensor memory: {peak / 2**20:.2f} MiB (training steps)" if peak else
          "peak tensor memory: not counted by this device")
    print(f"plot: {os.path.abspath(args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
