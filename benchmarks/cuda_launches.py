"""Kernel launches of the ResNet-18-style training step (``gpu/bench_gpu.py``'s ``convnet``) on
the CUDA device's code, eager against ``jit.trace``, counted on the host emulation of a GPU (no
GPU needed: the launch counts are the device's, the times are the host's and say nothing of a
GPU).

    python benchmarks/cuda_launches.py [--batch 2] [--steps 3]

Prints, per step: the kernel launches, the cuBLAS GEMMs and the kernel-door calls (a traced
step's program counts once, and each of its steps once more), and checks that the traced
steps' losses are the eager steps' bit for bit.
"""
import argparse
import os
import sys

import mge
from mge.core import set_option
from mge._core.device import register_device_kind
from mge._core.device.cuda.device import CudaDevice
from mge._core.device.cuda.host_backend import HostBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import bench_gpu  # noqa: E402  (the step and its weights)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    register_device_kind("cudaemu", lambda i: CudaDevice(
        i, backend=HostBackend(3 << 30, index=i, asynchronous=True), kind="cudaemu"))
    set_option("enable_host_compute", 0)  # every op on the device's kernels
    mge.set_default_device("cudaemu0")
    bench_gpu.DEVICE = "cudaemu0"
    dev = mge._core.device.as_device("cudaemu0").impl
    weights = bench_gpu.conv_weights()
    losses = {}
    print(f"ResNet-18-style step, batch {args.batch}, 3x64x64, on the host emulation")
    print(f"{'mode':8} {'step':>4} {'launches':>9} {'gemms':>6} {'door calls':>11}")
    for mode in ("eager", "traced"):
        step = bench_gpu.MgeConvStep(mge, args.batch, weights, traced=mode == "traced")
        losses[mode] = []
        for i in range(args.steps):
            n0, g0 = sum(dev.backend.launches.values()), len(dev.backend.gemms)
            e0 = sum(dev.executed.values())
            losses[mode].append(step.loss_value(step.run()))
            mge._full_sync()
            print(f"{mode:8} {i:4d} {sum(dev.backend.launches.values()) - n0:9d} "
                  f"{len(dev.backend.gemms) - g0:6d} {sum(dev.executed.values()) - e0:11d}")
    same = losses["eager"] == losses["traced"]
    print(f"losses {losses['eager']}; traced bit-identical: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
