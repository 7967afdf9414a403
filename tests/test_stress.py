"""A bounded stress test: four Python threads use mge at once -- elementwise ops and reads,
matrix products (which run on mge's worker thread), reductions, indexing get/set, small models
trained with their own ``GradManager`` and ``SGD``, and ``mge._full_sync()`` -- while the main
thread forks the process in the middle of their work.

It proves, at ``async_level`` 2 and 0, that

* every value each thread reads equals the numpy reference it computes itself (float32
  tolerances), and every model trained in a thread equals the same model trained sequentially
  beforehand in the main thread (bit for bit), so threads sharing the channel do not disturb
  each other's results;
* a fork while the other threads are busy leaves a child that can use mge: values the threads
  computed before the fork read back in the child, and a matmul, elementwise ops and a
  ``GradManager`` + ``SGD`` step there give numpy's results;
* the parent keeps working after the fork: the threads finish and check everything.

The iteration counts are fixed (not a time budget); the fork happens at a point fixed by a
barrier, not by sleeping: every thread has done half its iterations, has a product queued and
unread, and goes on working through the fork (none gets past three quarters before it is done).
The threads' own numpy matrix products (their references) are computed before the fork: OpenBLAS
cannot be forked while a thread is inside it, mge or not (plain numpy threads doing ``a @ a``
hang ``os.fork()`` or the child), while mge's products may run through it (the before-fork
handler lets the worker finish its queue first).  Every thread is joined, and the child waited for, with a timeout, and
``faulthandler`` bounds the whole test, so a regression fails instead of hanging CI.
"""
import faulthandler
import os
import signal
import threading
import time
import traceback

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.autodiff import GradManager
from mge.optimizer import SGD

from helpers import check, close

N_THREADS = 4
ITERATIONS = 64                     # per thread
FORK_AT = ITERATIONS // 2           # every thread has done this many iterations at the fork
RESUME_AT = 3 * ITERATIONS // 4     # no thread gets past this one before the fork is done
TRAIN_EVERY = 4                     # iterations between a thread's training runs
SYNC_EVERY = 3                      # iterations between a thread's mge._full_sync() calls
TIMEOUT = 30                        # seconds: the barrier, the child, the joins (together)
WATCHDOG = 120                      # seconds: the whole test (dumps every thread's stack, exits)
LR, MOMENTUM, TRAIN_STEPS = 0.05, 0.9, 3


@pytest.fixture(params=[2, 0], ids=["async2", "async0"])
def level(request):
    saved = mge.config.async_level
    mge.config.async_level = request.param
    yield request.param
    mge.config.async_level = saved


# -- the small model and its numpy twin --------------------------------------------------------
def _init(seed):
    """The model's initial parameters and its data, from ``seed`` (numpy only)."""
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.standard_normal(shape).astype("float32")  # noqa: E731
    params = {"w1": f32(16, 8) * 0.5, "b1": f32(16) * 0.1,
              "w2": f32(4, 16) * 0.5, "b2": f32(4) * 0.1}
    return params, f32(32, 8)


class _Net(M.Module):
    def __init__(self, params):
        super().__init__()
        self.fc1 = M.Linear(8, 16)
        self.fc2 = M.Linear(16, 4)
        # set from numpy (not mge.random's shared generator: the threads' draws would interleave)
        self.fc1.weight._reset(mge.tensor(params["w1"]))
        self.fc1.bias._reset(mge.tensor(params["b1"]))
        self.fc2.weight._reset(mge.tensor(params["w2"]))
        self.fc2.bias._reset(mge.tensor(params["b2"]))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def _train(seed, steps=TRAIN_STEPS):
    """Train the model of ``seed`` with its own GradManager and SGD: the final parameters and the
    loss of every step, as numpy values."""
    params, data = _init(seed)
    model = _Net(params)
    gm = GradManager().attach(model.parameters())
    opt = SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x = mge.tensor(data)
    losses = []
    for _ in range(steps):
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    weights = [p.numpy().copy() for p in (model.fc1.weight, model.fc1.bias,
                                          model.fc2.weight, model.fc2.bias)]
    return weights, losses


def _train_numpy(seed, steps=TRAIN_STEPS):
    """``_train`` in float64 numpy: the same forward pass, gradients and SGD-with-momentum steps."""
    params, data = _init(seed)
    p = {k: v.astype("float64") for k, v in params.items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    x = data.astype("float64")
    losses = []
    for _ in range(steps):
        h = x @ p["w1"].T + p["b1"]
        r = np.maximum(h, 0)
        y = r @ p["w2"].T + p["b2"]
        losses.append(float((y ** 2).mean()))
        dy = 2 * y / y.size
        dr = dy @ p["w2"]
        dh = dr * (h > 0)
        grads = {"w2": dy.T @ r, "b2": dy.sum(0), "w1": dh.T @ x, "b1": dh.sum(0)}
        for k in p:
            v[k] = MOMENTUM * v[k] + grads[k]
            p[k] = p[k] - LR * v[k]
    return [p["w1"], p["b1"], p["w2"], p["b2"]], losses


def _check_training(got, expected, exact=True):
    (weights, losses), (ref_weights, ref_losses) = got, expected
    for w, ref in zip(weights, ref_weights):
        if exact:
            np.testing.assert_array_equal(w, ref)
        else:
            np.testing.assert_allclose(w, ref, rtol=1e-4, atol=1e-5)
    if exact:
        assert losses == ref_losses
    else:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)


def _train_seed(thread, i):
    return 1000 * (thread + 1) + i


# -- one thread's mixed work ---------------------------------------------------------------------
def _elementwise(rng):
    # small tensors: below and above the host-compute size, so both paths are taken
    n = int(rng.integers(1, 33))
    a = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    x, y = mge.tensor(a), mge.tensor(b)
    z = (x * y + 1) / (F.abs(y) + 1) - F.relu(x)
    close(z, (a * b + 1) / (np.abs(b) + 1) - np.maximum(a, 0))
    e = F.exp(x * 0.5) + F.sqrt(F.abs(y))
    close(e, np.exp(a * 0.5) + np.sqrt(np.abs(b)))
    s = (x * x).sum().item()
    assert abs(s - float((a.astype("float64") ** 2).sum())) <= 1e-4 * max(1.0, s), s
    k = int(rng.integers(0, n))
    assert x[k].item() == float(a[k])


def _matmul_case(rng):
    """Inputs of a 64..128-sized product and numpy's result (computed before any fork: numpy's
    own BLAS must not be running in a thread when the process forks, see ``_worker``)."""
    m, k, n = (int(d) for d in rng.integers(64, 129, size=3))
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    return a, b, a.astype("float64") @ b.astype("float64")


def _matmul_and_reductions(case):
    a, b, ref = case
    k = a.shape[1]
    c = F.matmul(mge.tensor(a), mge.tensor(b))      # queued on the worker at async_level 2
    # reductions of the pending product, read afterwards
    sums, means = c.sum(axis=0), F.mean(c, axis=1)
    big, small = c.max(), F.min(c, axis=0, keepdims=True)
    tol = dict(rtol=1e-4, atol=1e-4 * k)
    np.testing.assert_allclose(c.numpy(), ref, **tol)
    np.testing.assert_allclose(sums.numpy(), ref.sum(0), rtol=1e-4, atol=1e-3 * k)
    np.testing.assert_allclose(means.numpy(), ref.mean(1), **tol)
    np.testing.assert_allclose(small.numpy(), ref.min(0, keepdims=True), **tol)
    assert abs(big.item() - ref.max()) <= 1e-4 * k
    return c, ref


def _indexing(rng):
    rows, cols = (int(d) for d in rng.integers(4, 12, size=2))
    a = rng.standard_normal((rows, cols)).astype("float32")
    x = mge.tensor(a)
    idx = rng.integers(0, rows, size=3).astype("int32")
    check(x[1::2, -1], a[1::2, -1])
    check(x[mge.tensor(idx)], a[idx])
    check(x[:, 1:3].sum(axis=1), a[:, 1:3].sum(axis=1))
    # set: a row slice to a scalar, a column to values (done on the numpy copy the same way)
    v = rng.standard_normal(rows).astype("float32")
    x[1:3] = 7.0
    x[:, 0] = mge.tensor(v)
    expect = a.copy()
    expect[1:3] = 7.0
    expect[:, 0] = v
    check(x, expect)
    check(x * 2 - 1, expect * 2 - 1)


def _worker(thread, expected, published, barrier, forked):
    rng = np.random.default_rng(7 + thread)     # each thread its own generator
    # Every numpy matrix product this thread needs, computed now.  The fork below happens while
    # the threads keep working, and OpenBLAS cannot be forked while a thread is inside it (plain
    # numpy threads doing ``a @ a`` hang os.fork() or the child); mge's own products are safe
    # there (its before-fork handler lets the worker finish first), so only numpy's are moved.
    cases = [_matmul_case(rng) for _ in range(ITERATIONS)]
    m = rng.standard_normal((96, 96)).astype("float32")
    pending_ref = m.astype("float64") @ m.astype("float64") + 1
    trained = 0
    for i in range(ITERATIONS):
        if i == FORK_AT:
            # a product issued but not read before the fork: the fork lets it run first, so the
            # child reads its value; this thread reads it afterwards too
            published[thread] = (F.matmul(mge.tensor(m), mge.tensor(m)) + 1, pending_ref)
            barrier.wait(TIMEOUT)               # the main thread forks now, while we go on
        if i == RESUME_AT:
            assert forked.wait(TIMEOUT), "the main thread never forked"
        _elementwise(rng)
        c, ref = _matmul_and_reductions(cases[i])
        _indexing(rng)
        if i % TRAIN_EVERY == thread % TRAIN_EVERY:
            seed = _train_seed(thread, i)
            _check_training(_train(seed), expected[seed])
            trained += 1
        if i % SYNC_EVERY == 0:
            mge._full_sync()
        # a product read after the other work: it stayed valid meanwhile
        np.testing.assert_allclose((c * 2).numpy(), ref * 2, rtol=1e-4, atol=2e-4 * c.shape[1])
    pending, ref = published[thread]
    np.testing.assert_allclose(pending.numpy(), ref, rtol=1e-4, atol=1e-2)
    mge._full_sync()
    assert trained == ITERATIONS // TRAIN_EVERY


# -- the child of the fork -----------------------------------------------------------------------
def _child(published, expected):
    """Runs in the forked child (only this thread exists there); never returns."""
    # The child's own bound.  Not faulthandler.dump_traceback_later: the parent's armed watchdog
    # leaves its locks held in the child, where arming a new one waits for them forever.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    faulthandler.register(signal.SIGALRM, chain=True)  # dump the stack, then die of SIGALRM
    signal.alarm(TIMEOUT // 2)
    try:
        # values the threads computed before the fork (the before-fork handler ran them)
        assert sorted(published) == list(range(N_THREADS)), sorted(published)
        for pending, ref in published.values():
            np.testing.assert_allclose(pending.numpy(), ref, rtol=1e-4, atol=1e-2)
        # new work: a matmul on the (fresh) worker, elementwise ops, a reduction
        rng = np.random.default_rng(99)
        a = rng.standard_normal((128, 64)).astype("float32")
        b = rng.standard_normal((64, 96)).astype("float32")
        c = F.matmul(mge.tensor(a), mge.tensor(b))
        ref = a.astype("float64") @ b.astype("float64")
        np.testing.assert_allclose(c.numpy(), ref, rtol=1e-4, atol=1e-2)
        x = mge.tensor(a[0, :10])
        close(F.relu(x) * 3 - x, np.maximum(a[0, :10], 0) * 3 - a[0, :10])
        assert abs(c.sum().item() - ref.sum()) <= 1e-2 * abs(ref).sum() / ref.size + 1.0
        # GradManager + SGD steps: the parent's sequential result and numpy's
        seed = _train_seed(0, 0)
        got = _train(seed)
        _check_training(got, expected[seed])
        _check_training(got, _train_numpy(seed), exact=False)
        mge._full_sync()
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _wait_child(pid):
    """The child's exit code, waited for at most TIMEOUT seconds (then the child is killed)."""
    status = {}

    def waiter():
        status["s"] = os.waitpid(pid, 0)[1]

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    t.join(TIMEOUT)
    if t.is_alive():
        os.kill(pid, signal.SIGKILL)
        t.join(TIMEOUT)
        raise AssertionError("the forked child hung (killed)")
    return os.waitstatus_to_exitcode(status["s"])


# -- the test ------------------------------------------------------------------------------------
@pytest.fixture
def watchdog(capfd):
    """``faulthandler`` bounds the test: past ``WATCHDOG`` seconds it prints every thread's stack
    to the real stderr (a dup taken with pytest's capture off: captured output would be lost
    when it exits) and exits the process."""
    with capfd.disabled():
        fd = os.dup(2)
    faulthandler.dump_traceback_later(WATCHDOG, exit=True, file=fd)
    yield
    faulthandler.cancel_dump_traceback_later()
    os.close(fd)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_four_threads_mixing_work_with_a_fork_in_the_middle(level, watchdog):
    _stress()


def _stress():
    # the sequential run every thread's training must equal, and a check of it against numpy
    seeds = [_train_seed(t, i) for t in range(N_THREADS) for i in range(ITERATIONS)
             if i % TRAIN_EVERY == t % TRAIN_EVERY]
    expected = {seed: _train(seed) for seed in seeds}
    _check_training(expected[seeds[0]], _train_numpy(seeds[0]), exact=False)

    published = {}
    barrier = threading.Barrier(N_THREADS + 1)
    forked = threading.Event()
    errors = []

    def guarded(thread):
        def run():
            try:
                _worker(thread, expected, published, barrier, forked)
            except BaseException as e:  # reported by the test, not lost in the thread
                errors.append((thread, e))
                barrier.abort()         # nobody waits for this thread at the barrier
        return run

    threads = [threading.Thread(target=guarded(t), name=f"stress-{t}")
               for t in range(N_THREADS)]
    for t in threads:
        t.start()
    child_status = None
    try:
        barrier.wait(TIMEOUT)           # every thread is mid-run and keeps going
        pid = os.fork()
        if pid == 0:
            _child(published, expected)
        forked.set()                    # the threads go on while the child runs
        child_status = _wait_child(pid)
    except threading.BrokenBarrierError:
        pass                            # a thread failed first: its error is raised below
    finally:
        forked.set()
        deadline = time.monotonic() + TIMEOUT   # one bound for all the joins
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        thread, e = errors[0]
        raise AssertionError(f"thread {thread} failed: {e!r}") from e
    assert child_status == 0, f"the forked child exited with {child_status}"
    # the parent's channel still works after it all
    x = mge.tensor(np.arange(16, dtype="float32"))
    check(F.matmul(x.reshape(4, 4), x.reshape(4, 4)).sum(),
          np.float32((np.arange(16.0).reshape(4, 4) @ np.arange(16.0).reshape(4, 4)).sum()))
    mge._full_sync()
