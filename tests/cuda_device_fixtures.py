"""What the tests of ops on ``cudahost0`` share: the device with host compute off, the async
levels, a tensor on a device, a function run on ``cudahost0`` and on ``cpu0``.

``cudahost0`` (``tests/devices/cuda_host.py``) is the CUDA device's code over the host backend;
its kernels are built with g++, whose absence skips the tests with the reason, except under
``CI`` (which has g++), where it is a failure.  A test module imports the fixtures by name.
"""
import numpy as np
import pytest

import mge
from mge.core import get_option, set_option

from cuda_toolchain import missing
from devices import cuda_host
from mge._core.device.cuda import hostbuild

__all__ = ["DEV", "cuda", "level", "on", "at", "both"]

DEV = "cudahost0"


@pytest.fixture(scope="module")
def cuda():
    """``cudahost0``'s ``CudaDevice``; host compute off (every op runs the device's kernels)."""
    why = hostbuild.why_unavailable()
    if why:
        missing(f"g++ is needed to run the CUDA kernels on the host: {why}")
    dev = cuda_host.device(DEV)
    saved = get_option("enable_host_compute")
    set_option("enable_host_compute", 0)
    yield dev
    set_option("enable_host_compute", saved)


@pytest.fixture(params=[2, 0], ids=["async2", "async0"])
def level(request):
    """The channel's async level: 2 reports a kernel's error at the next read, 0 at the call."""
    old = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = old


def on(d, a):
    """``a`` on device ``d`` with its own dtype."""
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=d)


def at(d, fn):
    """``fn()`` with ``d`` the default device (the functional layer's own host tensors -- a
    loss's lengths, a sort's indices, a resize matrix -- land there too)."""
    old = mge.get_default_device()
    mge.set_default_device(d)
    try:
        return fn()
    finally:
        mge.set_default_device(old)


def both(fn):
    """``fn(device)`` on cudahost0 and cpu0 (each the default device): two lists of host
    arrays, of the same dtypes and shapes."""
    outs = list(at(DEV, lambda: fn(DEV)))
    assert all(o.device == DEV for o in outs)
    got = [o.numpy() for o in outs]
    ref = [o.numpy() for o in at("cpu0", lambda: fn("cpu0"))]
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
    return got, ref
