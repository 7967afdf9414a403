"""The demo's training (``examples/train_digits.py``: DigitNet on scikit-learn's digits, SGD with
momentum) on 2 processes with ``make_allreduce_cb("mean")`` side by side with 1 process, on the
same total batch (median time per step over several epochs).

    OMP_NUM_THREADS=1 python benchmarks/bench_dp_demo.py [--epochs 4] [--batch-size 64]

Each process of the data-parallel run takes half of every batch of ``--batch-size`` images
(``dist.get_rank()``'s half), starts from rank 0's parameters (``bcast_list_``) and averages the
gradients across the 2 processes (bucketed all-reduce) before its optimizer step; the 1-process
run takes the whole batch.  A step's time is its wall time to completion (each step reads its
loss); an epoch's time per step is the sum over its steps divided by their number, and the table
gives the median over the epochs after the first (the first warms caches and MPI).  Both runs see
the same batches in the same order, and the test accuracy at the end is printed for each.
The 2-process run is started through ``dist.launcher`` (``mpiexec``).
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))


def run(epochs, batch_size, seed=0, reduce=True):
    """Train on this process's share of each batch; ``(median s/step, step times per epoch,
    test accuracy, world size)``."""
    import mge
    import mge.distributed as dist
    import mge.functional as F
    from mge.autodiff import GradManager
    import train_digits as demo

    n, r = dist.get_world_size(), dist.get_rank()
    mge.random.seed(seed)
    np.random.seed(seed)
    x_train, y_train, x_test, y_test = demo.load_data(seed)
    model = demo.DigitNet()
    if n > 1:
        dist.bcast_list_(list(model.parameters()) + list(model.buffers()))
    cbs = [dist.make_allreduce_cb("mean")] if n > 1 and reduce else []
    gm = GradManager().attach(model.parameters(), callbacks=cbs)
    opt = mge.optimizer.SGD(model.parameters(), lr=0.02 * batch_size / 32, momentum=0.9,
                            weight_decay=1e-4)
    rng = np.random.RandomState(seed)
    k = batch_size // n
    per_epoch = []
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        steps = len(order) // batch_size
        total = 0.0
        for s in range(steps):
            idx = order[s * batch_size:(s + 1) * batch_size][r * k:(r + 1) * k]
            data, label = mge.tensor(x_train[idx]), mge.tensor(y_train[idx])
            t = time.perf_counter()
            with gm:
                loss = F.nn.cross_entropy(model(data), label)
                gm.backward(loss)
            opt.step().clear_grad()
            loss.item()
            total += time.perf_counter() - t
        per_epoch.append(total / steps)
    _, acc = demo.evaluate(model, x_test, y_test)
    rest = per_epoch[1:] or per_epoch
    return float(np.median(rest)), per_epoch, acc, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64, help="the total batch (default 64)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--no-reduce", action="store_true",
                    help="diagnosis: the processes do not all-reduce (each trains alone)")
    args = ap.parse_args()
    import mge.distributed as dist

    one = run(args.epochs, args.batch_size, 0,
                                                         not args.no_reduce)
    many = dist.launcher(run, n_gpus=args.procs, timeout=1800)(args.epochs, args.batch_size, 0,
                                                         not args.no_reduce)
    worst = max(m[0] for m in many)  # a step ends when the slowest rank has its gradients
    print(f"total batch {args.batch_size}, {args.epochs} epochs, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"{os.cpu_count()} cores")
    print(f"{'processes':>9} {'batch/process':>13} {'ms/step':>8} {'images/s':>9} "
          f"{'test acc':>8} {'speed-up':>8}")
    print(f"{1:>9} {args.batch_size:>13} {one[0] * 1e3:>8.2f} "
          f"{args.batch_size / one[0]:>9.0f} {one[2] * 100:>7.2f}% {1.0:>8.2f}")
    print(f"{args.procs:>9} {args.batch_size // args.procs:>13} {worst * 1e3:>8.2f} "
          f"{args.batch_size / worst:>9.0f} {many[0][2] * 100:>7.2f}% {one[0] / worst:>8.2f}")
    for m in [one] + list(many):
        print("  ms/step per epoch:", " ".join(f"{t * 1e3:.2f}" for t in m[1]))


if __name__ == "__main__":
    main()
