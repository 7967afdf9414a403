"""The kernel families' ops on the CUDA device, through the public functional API, against cpu0.

``cudahost0`` (``tests/devices/cuda_host.py``) is the CUDA device's code over the host backend:
every op below runs the family's launch plan (``kernels/<family>.py``'s ``PLANS``) through the
device's one executor, ``cuda/launch/plans.py``'s ``run_plan`` -- the pool's outputs and
workspace, the checks' words, the kernels built with g++ and launched with the plan's grid,
block and arguments -- and its result is compared with the CPU device's:

* the executor itself on hand-made plans (every kind of step, checks with one and two
  parameters, a readback, a ``Buf`` outside its buffer, an in-place alias) and the registration
  of every family's table;
* per family (``conv``, ``pool``, ``norm``...): the functional ops, forward and, where the op has
  a gradient, backward through ``GradManager``; bit for bit where the kernels compute in the
  CPU's order, else within the family's ``DIFFERENCES`` tolerance;
* a small conv net's training step.

Without g++ the tests are skipped with the reason, except under ``CI``.  Host compute is off, so
every op runs the device's kernels.  Each family's kernels are built once per process (the
host backend's build cache): the first test of a family pays its g++ runs.
"""
import os

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.autodiff import GradManager
from mge.core import AsyncError, get_option, set_option

from devices import cuda_host
from mge._core.device.cuda import hostbuild
from mge._core.device.cuda.kernels import elemwise as ek
from mge._core.device.cuda.kernels import launch as lk
from mge._core.device.cuda.launch import CUDA_KERNELS, lookup, plans
from mge._core.ops.base import TensorDesc

DEV = "cudahost0"
F32 = np.dtype("float32")


def _missing(message):
    if os.environ.get("CI"):  # CI installs g++: there a missing one fails
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def cuda():
    """``cudahost0``'s ``CudaDevice``; host compute off (every op runs the device's kernels)."""
    why = hostbuild.why_unavailable()
    if why:
        _missing(f"g++ is needed to run the CUDA kernels on the host: {why}")
    dev = cuda_host.device(DEV)
    saved = get_option("enable_host_compute")
    set_option("enable_host_compute", 0)
    yield dev
    set_option("enable_host_compute", saved)


def on(d, a):
    """``a`` on device ``d`` with its own dtype."""
    a = np.asarray(a)
    return mge.tensor(a, dtype=a.dtype, device=d)


def rng(seed=0):
    return np.random.default_rng(seed)


def both(fn):
    """``fn(device)`` on cudahost0 and cpu0: two lists of host arrays (same dtypes and shapes,
    and every cudahost0 result on cudahost0)."""
    outs = list(fn(DEV))
    assert all(o.device == DEV for o in outs)
    got = [o.numpy() for o in outs]
    ref = [o.numpy() for o in fn("cpu0")]
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
    return got, ref


def close(fn, rtol=1e-5, atol=1e-6):
    """``both(fn)``, each pair equal within ``rtol``/``atol`` (exact for integers)."""
    got, ref = both(fn)
    for g, r in zip(got, ref):
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, r)
    return got, ref


def ran(dev, fn):
    """``fn()`` run, and the op names the device executed meanwhile."""
    before = dict(dev.executed)
    fn()
    return {k for k, v in dev.executed.items() if v > before.get(k, 0)}


def family(name):
    """The kernels module ``name`` if its ``PLANS`` table is in launch.py's format (registered)."""
    for m in plans.family_modules():
        if m.__name__.rsplit(".", 1)[-1] == name:
            return m
    return None


# == the executor on hand-made plans ===============================================================
def _add():
    return ek.elemwise_kernel("add", (F32, F32), contiguous=True)


def _copy_i32():
    return ek.typecvt_kernel(np.dtype("int32"), np.dtype("int32"), contiguous=True)


def _n(v):
    return np.int64(v)


def test_a_plan_of_launches_gemms_and_memsets_runs_on_the_device(cuda):
    """Outputs allocated dense, the workspace laid out and freed, every step in stream order: a
    kernel into the workspace, a GEMM reading it, a memset of a second output."""
    r = rng(1)
    a = r.standard_normal((6, 4)).astype(F32)
    b = r.standard_normal((6, 4)).astype(F32)
    ws = lk.Workspace()
    tmp = ws.add(a.nbytes)
    # tmp = a + b (row-major 6 x 4 = column-major 4 x 6); out0 (4 x 4) = (a + b)^T (a + b):
    # column-major C = op(A) @ op(B) with A = tmp^T stored (transa) ... C^T = C (symmetric)
    steps = (lk.Launch(_add(), lk.grid_for(a.size), lk.THREADS,
                       (tmp, lk.Buf("in0"), lk.Buf("in1"), _n(a.size))),
             lk.Gemm(False, True, 4, 4, 6, tmp, 4, 0, tmp, 4, 0, lk.Buf("out0"), 4, 0, 1,
                     F32, F32, F32, F32),
             lk.Memset(lk.Buf("out1"), 12, 0))
    plan = lk.Plan(steps, ws.size)
    dev = cuda
    x, y = dev.from_host(a), dev.from_host(b)
    before = dev.pool.stats()["allocated"]
    out, zero = plans.run_plan(dev, plan, [x, y], [TensorDesc((4, 4), F32),
                                                   TensorDesc((3,), F32)])
    s = (a + b).astype(np.float64)
    np.testing.assert_allclose(dev.to_host(out), s.T @ s, rtol=1e-5, atol=1e-5)
    assert (dev.to_host(zero) == 0).all()
    # only the outputs stay allocated: the workspace went back to the pool
    assert dev.pool.stats()["allocated"] == before + out.block.size + zero.block.size


def _flag_plan(value, error):
    # a kernel writes ``value`` (read from in0) into the check's word in the workspace
    ws = lk.Workspace()
    flag = ws.add(4)
    step = lk.Launch(_copy_i32(), (1, 1, 1), (32, 1, 1), (flag, lk.Buf("in0"), _n(1)))
    return lk.Plan((step,), ws.size, (lk.Check(flag, error),)), flag


def test_a_check_raises_its_error_and_may_read_the_device(cuda):
    dev = cuda
    plan, _ = _flag_plan(7, lambda v: IndexError(f"bad {v}"))
    seven = dev.from_host(np.array([7], np.int32))
    with pytest.raises(IndexError, match="bad 7"):
        plans.run_plan(dev, plan, [seven], [])
    zero = dev.from_host(np.array([0], np.int32))
    assert plans.run_plan(dev, plan, [zero], []) == ()
    # an error of two parameters reads the device's memory for its message
    plan2, _ = _flag_plan(7, lambda v, read: ValueError(
        f"bad {v}: {read(lk.Buf('in0'), np.int32, 1).tolist()}"))
    with pytest.raises(ValueError, match=r"bad 7: \[7\]"):
        plans.run_plan(dev, plan2, [seven], [])
    # the word is zeroed before the steps: a plan that does not write it raises nothing
    quiet = lk.Plan((), 256, (lk.Check(lk.Buf("ws"), lambda v: AssertionError(v)),))
    assert plans.run_plan(dev, quiet, [], []) == ()


def test_a_readback_continues_with_the_plan_its_value_chooses(cuda):
    dev = cuda
    seen = []
    ws = lk.Workspace()
    word = ws.add(4)
    fill = lk.Plan((lk.Memset(lk.Buf("out0"), 8, 0),))
    first = lk.Plan((lk.Launch(_copy_i32(), (1, 1, 1), (32, 1, 1), (word, lk.Buf("in0"), _n(1))),),
                    ws.size, readback=lk.Readback(word, np.dtype("int32"),
                                                  lambda v: seen.append(v) or fill))
    x = dev.from_host(np.array([5], np.int32))
    (out,) = plans.run_plan(dev, first, [x], [TensorDesc((2,), F32)])
    assert seen == [5] and (dev.to_host(out) == 0).all()


def test_a_buffer_outside_the_plan_is_refused_by_name(cuda):
    dev = cuda
    x = dev.from_host(np.zeros(4, F32))
    far = lk.Plan((lk.Memset(lk.Buf("in0", 8), 16, 0),))
    with pytest.raises(ValueError, match="outside 'in0'"):
        plans.run_plan(dev, far, [x], [])
    nowhere = lk.Plan((lk.Memset(lk.Buf("out3"), 4, 0),))
    with pytest.raises(ValueError, match="'out3'"):
        plans.run_plan(dev, nowhere, [x], [])
    assert (dev.to_host(x) == 0).all()


def test_an_alias_writes_the_output_into_the_input(cuda):
    dev = cuda
    a = np.arange(8, dtype=F32)
    x = dev.from_host(a)
    plan = lk.Plan((lk.Launch(_add(), lk.grid_for(8), lk.THREADS,
                              (lk.Buf("out0"), lk.Buf("in0"), lk.Buf("in0"), _n(8))),))
    (out,) = plans.run_plan(dev, plan, [x], [TensorDesc((8,), F32)], {0: x})
    assert out is x
    np.testing.assert_array_equal(dev.to_host(x), 2 * a)


def test_every_family_table_in_the_plan_format_is_registered(cuda):
    """Each op class of a ported family's ``PLANS`` has a launcher: the plan one, or an explicit
    one from ``cuda/launch/*.py``; ``STRIDED`` ops take views."""
    for m in plans.family_modules():
        for cls in m.PLANS:
            launcher = lookup(cls)
            assert launcher is not None, (m.__name__, cls)
            if plans.REGISTERED.get(cls) is m:
                assert launcher.fn.__module__ == plans.__name__
                assert launcher.strided == (cls in getattr(m, "STRIDED", ()))
                assert launcher.reuse == bool(getattr(m, "INPLACE", {}).get(cls))
    assert set(plans.REGISTERED) <= set(CUDA_KERNELS)
