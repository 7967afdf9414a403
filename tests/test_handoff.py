"""The GIL hand-off between the caller and the worker, numpy's CBLAS without the GIL, and the C
loop of the SGD update (``mge/_core/device/cpu/handoff.py``, ``mge/_core/device/cpu/blas.py``).

In the pure-Python twin nothing runs without the GIL: ``CPU.gemm`` and ``CPU.add_scaled``
decline (kernels use numpy) and the hand-off never waits; the tests check that too.
"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mge
import mge.functional as F
import mge.module as M
import mge.optimizer as optim
from mge._core import _accel
from mge._core.channel import get_channel
from mge._core.device.cpu import blas as cpu_blas
from mge.autodiff import GradManager
from mge.core import OpDef, apply, def_infer, def_kernel
from helpers import same_desc

_handoff = _accel.load("mge._core.device.cpu.handoff")
CPU = _handoff.CPU
COMPILED = _accel.MODES.get("mge._core.device.cpu.handoff") == "compiled"
ch = get_channel()


def _operand(rng, shape, trans, order, dtype):
    rows, cols = shape[::-1] if trans else shape
    return rng.standard_normal((rows, cols)).astype(dtype, order=order)


# -- finding numpy's BLAS ------------------------------------------------------------------------
def test_numpy_blas_is_found_where_it_can_be_and_checked():
    info = cpu_blas.INFO
    if not COMPILED:
        assert not CPU.has_blas
        assert info["reason"] in ("pure-Python modules", "no CBLAS found", "MGE_CPU_BLAS=0")
        return
    if info["library"] is None:  # another platform or BLAS naming: numpy does the products
        assert not CPU.has_blas and info["reason"] == "no CBLAS found"
        return
    assert info["reason"] == "in use" and CPU.has_blas
    assert "gemm" in info["sgemm"] and isinstance(info["ilp64"], bool)


def test_mge_cpu_blas_0_turns_it_off():
    code = textwrap.dedent("""
        import numpy as np, mge
        from mge._core.device.cpu import blas as cpu_blas
        from mge._core import _accel
        blas = _accel.load("mge._core.device.cpu.handoff").CPU
        a = np.ones((64, 64), np.float32)
        print(cpu_blas.INFO["reason"], blas.has_blas, blas.gemm(a, a, False, False) is None)
        x = mge.tensor(a)
        print(float((x @ x).numpy()[0, 0]))
    """)
    env = dict(os.environ, MGE_CPU_BLAS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["MGE_CPU_BLAS=0", "False", "True", "64.0"]


# -- gemm ----------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70),
       ta=st.booleans(), tb=st.booleans(), order_a=st.sampled_from("CF"),
       order_b=st.sampled_from("CF"), dtype=st.sampled_from([np.float32, np.float64]))
def test_gemm_matches_np_matmul_in_every_layout(m, n, k, ta, tb, order_a, order_b, dtype):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a = _operand(rng, (m, k), ta, order_a, dtype)
    b = _operand(rng, (k, n), tb, order_b, dtype)
    want = np.matmul(a.T if ta else a, b.T if tb else b)
    got = CPU.gemm(a, b, ta, tb)
    if not CPU.has_blas or m * n * k < _handoff.MIN_GEMM_WORK:
        assert got is None  # the kernel then uses np.matmul
        return
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_gemm_reads_strided_rows_and_declines_what_blas_cannot_take():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((80, 100)).astype(np.float32)
    a, b = big[:64, :50], big[:50, 10:90]  # row-major with a leading dimension of 100
    got = CPU.gemm(a, b, False, False)
    if CPU.has_blas:
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    else:
        assert got is None
    # every other column, float16, ints, mixed dtypes, 3-D: numpy's job
    assert CPU.gemm(big[:, ::2], big[:50, :40], False, False) is None
    h = big.astype(np.float16)
    assert CPU.gemm(h[:64, :50], h[:50, :80], False, False) is None
    i = big.astype(np.int32)
    assert CPU.gemm(i[:64, :50], i[:50, :80], False, False) is None
    assert CPU.gemm(a, b.astype(np.float64), False, False) is None
    assert CPU.gemm(big.reshape(8, 10, 100), big[:100, :80], False, False) is None


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_op_gives_np_matmul_results_through_blas(ta, tb):
    rng = np.random.default_rng(1)
    a = _operand(rng, (64, 96), ta, "C", np.float32)
    b = _operand(rng, (96, 80), tb, "C", np.float32)
    before = CPU.gemms
    got = F.matmul(mge.tensor(a), mge.tensor(b), transpose_a=ta, transpose_b=tb).numpy()
    np.testing.assert_allclose(got, np.matmul(a.T if ta else a, b.T if tb else b),
                               rtol=1e-5, atol=1e-4)
    assert CPU.gemms == before + (1 if CPU.has_blas else 0)


# -- add_scaled (the SGD update) -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 1000, (1 << 15) + 3])  # the last runs without the GIL
@pytest.mark.parametrize("in_place", [False, True])
def test_add_scaled_gives_numpy_bits(dtype, n, in_place):
    rng = np.random.default_rng(n)
    y, x = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    a = -0.0123456789
    want = y + np.multiply(x, a, dtype=dtype)   # numpy: a rounded to the dtype, two roundings
    out = y if in_place else np.empty_like(y)
    assert _handoff.add_scaled(out, y, x, a) is out
    np.testing.assert_array_equal(out, want)


def test_add_scaled_falls_back_to_numpy_where_c_cannot():
    y = np.arange(20, dtype=np.float32)
    x = np.ones(40, dtype=np.float32)[::2]  # not contiguous
    assert not CPU.add_scaled(y.copy(), y, x, 2.0)
    out = np.empty_like(y)
    np.testing.assert_array_equal(_handoff.add_scaled(out, y, x, 2.0), y + 2.0)
    h = np.ones(5, np.float16)
    assert not CPU.add_scaled(h.copy(), h, h, 1.0)
    np.testing.assert_array_equal(_handoff.add_scaled(np.empty_like(h), h, h, 1.0), h * 2)


def _train(level, steps=3):
    mge.config.async_level = level
    try:
        mge.random.seed(5)
        net = M.Sequential(M.Linear(300, 200), M.ReLU(), M.Linear(200, 10))
        gm = GradManager().attach(net.parameters())
        opt = optim.SGD(net.parameters(), lr=0.05)
        rng = np.random.default_rng(2)
        x = mge.tensor(rng.standard_normal((32, 300)).astype("float32"))
        y = mge.tensor(rng.integers(0, 10, 32).astype("int32"))
        losses = []
        for _ in range(steps):
            with gm:
                loss = F.nn.cross_entropy(net(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(float(loss.numpy()))
        return losses, [p.numpy().copy() for p in net.parameters()]
    finally:
        mge.config.async_level = 2


def test_sgd_writes_parameters_in_place_with_the_same_bits():
    # At level 2 the Del of a parameter's old value is fused into its update, which then writes
    # the new value over the old buffer; at level 0 nothing is fused (a new buffer each step).
    before = ch.counters()["inplace"]
    fused_losses, fused = _train(2)
    assert ch.counters()["inplace"] - before >= 3 * 4  # four parameters, three steps
    plain_losses, plain = _train(0)
    assert fused_losses == plain_losses
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_sgd_does_not_write_over_a_parameter_the_user_still_sees():
    p = mge.Parameter(np.ones(50000, np.float32))
    view = p.numpy()  # a read-only view of the current buffer
    opt = optim.SGD([p], lr=0.5)
    p.grad = mge.tensor(np.ones(50000, np.float32))
    opt.step()
    np.testing.assert_array_equal(p.numpy(), np.full(50000, 0.5, np.float32))
    np.testing.assert_array_equal(view, np.ones(50000, np.float32))  # untouched


# -- the hand-off ----------------------------------------------------------------------------------
class _WaitForCaller(OpDef):
    """Identity whose kernel waits (in Python, GIL released) until the test sets its event."""
    _fields = ("key",)


_EVENTS = {}


def_infer(_WaitForCaller)(same_desc)


@def_kernel(_WaitForCaller)
def _wait_kernel(op, x):
    started, go = _EVENTS[op.key]
    started.set()
    go.wait(30)
    return (x.copy(),)


def test_the_caller_does_not_hang_on_a_worker_that_waits_for_it():
    # The worker runs Python (state RUNNING) and waits for the caller: the caller's yield must
    # time out instead of waiting for a hand-off that cannot come.
    started, go = threading.Event(), threading.Event()
    _EVENTS["w"] = (started, go)
    try:
        h = ch.handoff
        x = mge.tensor(np.arange(100, dtype=np.float32))
        y = apply(_WaitForCaller("w"), x)[0]
        ch.flush()
        assert started.wait(30)
        t0 = h.timeouts
        z = x * 2  # the caller yields to the RUNNING worker, which does not let go
        if COMPILED:
            assert h.timeouts == t0 + 1
        go.set()
        np.testing.assert_array_equal(y.numpy(), np.arange(100))
        np.testing.assert_array_equal(z.numpy(), np.arange(100) * 2)
    finally:
        go.set()
        del _EVENTS["w"]


@pytest.mark.parametrize("state, waits", [("RUNNING", True), ("PAIR", True), ("NOGIL", False),
                                           ("IDLE", False)])
def test_the_caller_waits_for_a_running_worker_and_for_a_pair(state, waits):
    # A hand-off of its own (no worker behind it): the caller's yield waits (and times out) while
    # the worker runs Python or a pair of products, and returns at once otherwise.
    h = _handoff.Handoff()
    h.yield_timeout_us = 200
    h.state = getattr(_handoff, state)
    h.yield_to_worker()
    expect = int(waits and COMPILED)
    assert (h.yields, h.timeouts) == (expect, expect)
    assert not h.caller_waiting


@pytest.mark.parametrize("caller_blocked", [False, True])
def test_a_worker_pairs_products_only_while_its_caller_is_blocked(caller_blocked):
    # gemm2 on a worker's thread: two threads at once only when the caller waits in the
    # channel (its core is free); while the caller's Python runs, one after the other
    h = _handoff.Handoff()
    h.caller_blocked = caller_blocked
    rng = np.random.RandomState(4)
    a1, b1 = rng.randn(64, 200).astype("float32"), rng.randn(200, 150).astype("float32")
    a2, b2 = rng.randn(200, 64).astype("float32"), rng.randn(200, 90).astype("float32")
    got = {}

    def worker():
        h.bind()
        before = (CPU.pairs, CPU.gemms)
        got["out"] = CPU.gemm2(a1, b1, False, False, a2, b2, True, False)
        got["counts"] = (CPU.pairs - before[0], CPU.gemms - before[1])

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if not CPU.has_blas:
        assert got["out"] is None
        return
    assert got["counts"] == ((1 if caller_blocked else 0), 2)
    np.testing.assert_array_equal(got["out"][0], CPU.gemm(a1, b1, False, False))
    np.testing.assert_array_equal(got["out"][1], CPU.gemm(a2, b2, True, False))
    assert h.state == _handoff.IDLE


def test_worker_sleeps_and_wakes_through_the_handoff():
    h = ch.handoff
    mge._full_sync()
    assert ch.idle() and h.state == _handoff.IDLE
    x = mge.tensor(np.ones(1 << 15, np.float32))  # big: the worker is woken at once
    y = x + 1
    np.testing.assert_array_equal(y.numpy(), np.full(1 << 15, 2, np.float32))
    mge._full_sync()
    assert ch.idle() and h.state == _handoff.IDLE and not h.caller_waiting


def test_gemms_run_without_the_gil_on_the_worker():
    h = ch.handoff
    before = h.nogil_runs
    a = mge.tensor(np.ones((64, 128), np.float32))
    w = mge.tensor(np.ones((128, 128), np.float32))
    for _ in range(3):
        a = F.matmul(a, w) * (1 / 128)
    np.testing.assert_allclose(a.numpy(), np.ones((64, 128)), rtol=1e-6)
    assert h.nogil_runs - before == (3 if CPU.has_blas else 0)


# -- who runs a queued kernel ------------------------------------------------------------------
class _WhereAmI(OpDef):
    """Identity that records the thread its kernel runs on (an op from outside mge)."""


_THREADS = []


def_infer(_WhereAmI)(same_desc)


@def_kernel(_WhereAmI)
def _where_kernel(op, x):
    _THREADS.append(threading.get_ident())
    return (x.copy(),)


def test_short_kernels_run_on_the_caller_and_long_ones_on_the_worker():
    from mge._core.device.cpu import KERNELS as kernels
    from mge._core.ops.elemwise import Elemwise
    from mge._core.ops.matmul import MatrixMul
    seen = {}
    saved = {cls: kernels[cls] for cls in (Elemwise, MatrixMul)}

    def spy(cls):
        def kernel(op, *arrays):
            seen.setdefault(cls.__name__, set()).add(threading.get_ident())
            return saved[cls](op, *arrays)
        return kernel

    try:
        for cls in saved:
            kernels[cls] = spy(cls)
        _THREADS.clear()
        main = threading.get_ident()
        a = mge.tensor(np.ones((128, 128), np.float32))
        b = F.matmul(a, a)           # 128**3 multiply-adds: long enough for the worker
        b.numpy()
        c = b
        for _ in range(6):           # short kernels: once out of the command buffer, the
            c = c + 1                # caller runs them itself (the worker is idle)
        assert seen["Elemwise"] == {main}
        d = apply(_WhereAmI(), c)[0]  # a user's op: the worker's, as in MegEngine
        np.testing.assert_array_equal(d.numpy(), np.full((128, 128), 134, np.float32))
    finally:
        kernels.update(saved)
    worker = ch.worker_thread()
    assert worker is not None and worker != threading.get_ident()
    assert seen["MatrixMul"] == {worker} and _THREADS == [worker]


def test_a_small_product_runs_on_the_caller():
    from mge._core.ops.matmul import MIN_WORKER_WORK, BatchedMatrixMul, MatrixMul
    assert 8 * 8 * 8 < MIN_WORKER_WORK
    info = type("I", (), {"shape": (8, 8)})
    big = type("I", (), {"shape": (128, 128)})
    unknown = type("I", (), {"shape": None})
    for op in (MatrixMul(), BatchedMatrixMul()):
        # the op's own fact, a plain function of (op, inputs, outputs)
        assert type(op).long_running is op.long_running
        assert not op.long_running(op, [info, info], [info])
        assert op.long_running(op, [big, big], [big])
        assert op.long_running(op, [big, big], [unknown])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_grad_is_a_select_like_np_where(dtype):
    from mge._core.device.cpu.kernels.elemwise import _switch_gt0
    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((64, 50)).astype(dtype), rng.standard_normal((64, 50)).astype(dtype)
    x[0, :5] = [0.0, -0.0, np.nan, 1.0, -1.0]
    dy[0, :5] = [np.inf, np.nan, 5.0, np.inf, np.nan]
    want = np.where(x > 0, dy, 0).astype(dtype)
    got = _switch_gt0(x, dy)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # nan == nan here
    direct = CPU.relu_grad(x, dy)
    assert (direct is None) == (not COMPILED)
    assert CPU.relu_grad(x, dy.astype(np.float16)) is None          # dtypes differ: numpy's
    assert CPU.relu_grad(x[:, ::2], dy[:, ::2]) is None              # strided: numpy's


def test_a_failing_blas_search_leaves_numpy_in_charge(monkeypatch):
    def broken():
        raise OSError("no /proc here")
    monkeypatch.setattr(cpu_blas, "find", broken)
    saved = dict(cpu_blas.INFO)
    try:
        info = cpu_blas.install(_handoff.CpuKernels())
        assert info["reason"].startswith("search failed") and "no /proc here" in info["reason"]
    finally:
        cpu_blas.INFO.clear()
        cpu_blas.INFO.update(saved)
