"""The channel's lifecycle: close, exit (with queued work and unread errors), fork, calls into the
channel from the worker thread, and tensors finalized by the GC on the worker."""
import gc
import threading

import numpy as np
import pytest

import mge
from mge.core import AsyncError, apply
from mge._core.channel import Channel
from mge._core.device import as_device
from helpers import (  # noqa: F401 (clean_channel: a fixture)
    CallsChannel, Fail, SECOND, allocated_bytes as _mem, big, busy_worker, run_script,
    WORKER_N as N, clean_channel,
)

pytestmark = pytest.mark.usefixtures("clean_channel")


def test_close_is_idempotent_finishes_queued_work_and_refuses_more():
    c = Channel()
    cpu = as_device("cpu0")
    a = c.put(np.arange(N, dtype="float32"), cpu)
    outs = [c.apply_op(mge.core.ops.Elemwise("mul"), [a, a])[0] for _ in range(10)]
    c.close()
    assert all(o.value is not None for o in outs)  # queued work ran before the worker stopped
    np.testing.assert_array_equal(outs[-1].value, np.arange(N) ** 2)
    c.close()
    tid = c.worker_thread()
    assert tid is not None and tid not in {t.ident for t in threading.enumerate()}  # stopped
    for call in (lambda: c.put(np.ones(1), cpu), lambda: c.sync(),
                 lambda: c.apply_op(mge.core.ops.Elemwise("neg"), [a])):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    c.del_(a)  # deleting after close is a no-op (tensors die after the channel at exit)


def test_close_reports_unread_errors(capfd):
    c = Channel()
    a = c.put(np.ones(N, "float32"), as_device("cpu0"))
    c.apply_op(Fail(), [a])
    c.close()
    assert "boom" in capfd.readouterr().err


def test_subprocess_using_mge_exits_cleanly():
    out = run_script("""
        import numpy as np, mge, mge.functional as F
        from mge.core import set_option
        set_option("enable_swap", 1); set_option("enable_drop", 1)
        set_option("record_computing_path", 1)
        x = mge.tensor(np.arange(64, dtype="float32"))
        e = F.exp(x / 64)
        y = e * 2
        y._drop(); x._swap_out()
        z = (y + x).sum()
        print("value", round(float(z.numpy()), 3))
        w = x * 3                   # still queued at exit
        y._drop()
        print("done")
    """)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.strip() == "", out.stderr
    assert "done" in out.stdout


def test_subprocess_with_an_unread_error_exits_without_traceback():
    out = run_script("""
        import numpy as np, mge, mge.functional as F
        x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))
        y = F.nn.indexing_one_hot(x, mge.tensor([0, 1, 7, 2]))
        print("done")
    """)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "out of range" in out.stderr  # unread errors are reported at exit


_FORK = """
import os, numpy as np, mge
x = mge.tensor(np.arange(16, dtype="float32"))
y = x * 2
print("parent-before", y.numpy()[3], flush=True)
pending = [x + k for k in range(5)]
pid = os.fork()
if pid == 0:
    try:
        z = (x * 3 + 1)
        ok = z.numpy()[5] == 16.0 and (y + 1).numpy()[1] == 3.0
        t = mge.tensor(np.ones(32, "float32")).sum()
        ok = ok and t.item() == 32.0
        mge._full_sync()
        print("child", ok, flush=True)
        os._exit(0 if ok else 1)
    except BaseException as e:
        print("child-error", repr(e), flush=True)
        os._exit(2)
_, status = os.waitpid(pid, 0)
print("child-status", os.waitstatus_to_exitcode(status))
print("parent-after", float((y + x).numpy()[2]), [float(p.numpy()[0]) for p in pending])
"""


def test_forked_child_gets_a_fresh_channel_and_parent_keeps_working():
    out = run_script(_FORK)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child True" in out.stdout, out.stdout + out.stderr
    assert "child-status 0" in out.stdout
    assert "parent-after 6.0 [0.0, 1.0, 2.0, 3.0, 4.0]" in out.stdout, out.stdout


_FORK_IN_BLAS = """
import os, numpy as np, mge, mge.functional as F
a = mge.tensor(np.random.RandomState(0).rand(512, 512).astype("float32") / 512)
x = a
for _ in range(200):          # a queue of products: the worker is inside BLAS when we fork
    x = F.matmul(x, a)
pid = os.fork()
if pid == 0:
    y = (mge.tensor(np.ones(64, "float32")) * 2).sum().item()
    z = F.matmul(a, a).numpy()
    os._exit(0 if y == 128.0 and z.shape == (512, 512) else 1)
_, status = os.waitpid(pid, 0)
expect = np.linalg.matrix_power(a.numpy().astype("float64"), 201)
print("child-status", os.waitstatus_to_exitcode(status),
      "parent", bool(np.allclose(x.numpy(), expect, rtol=1e-3, atol=1e-30)))
"""


def test_a_fork_while_the_worker_is_inside_blas_leaves_both_processes_working():
    # the fork waits for the queued work (a before-fork handler); bounded by the subprocess timeout
    out = run_script(_FORK_IN_BLAS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child-status 0 parent True" in out.stdout, out.stdout + out.stderr


def test_calling_the_channel_from_the_worker_raises_instead_of_deadlocking():
    for what in ("sync", "tensor"):
        y = apply(CallsChannel(what), big())[0]
        with pytest.raises(AsyncError) as info:
            y.numpy()
        cause = info.value.__cause__
        assert isinstance(cause, RuntimeError) and "worker thread" in str(cause), cause


def test_reading_a_pending_value_or_closing_from_the_worker_raises():
    c = Channel()
    SECOND["channel"] = c
    try:
        cpu = as_device("cpu0")
        a = c.put(np.ones(N, "float32"), cpu)
        (out,) = c.apply_op(CallsChannel("close"), [a])
        with pytest.raises(AsyncError) as info:
            c.get_value(out)
        assert "worker thread" in str(info.value.__cause__)
        assert not c.closed
        with busy_worker():
            # the kernel reads q, which is queued after it: it would wait for its own thread
            p = apply(CallsChannel("get_value"), big())[0]
            q = big() * 2
            SECOND["pending"] = q._info
        with pytest.raises(AsyncError) as info:
            p.numpy()
        assert "worker thread" in str(info.value.__cause__)
        np.testing.assert_array_equal(q.numpy(), np.arange(N) * 2)
    finally:
        SECOND.clear()
        c.close()


def test_tensor_finalized_by_the_gc_on_the_worker_thread_is_freed_later():
    x = mge.tensor(np.ones(1000, "float32"))
    gc.collect()                                    # only our cycle is left for the kernel's gc
    mge._full_sync()
    before = _mem()
    cycle = [x]
    cycle.append(cycle)
    info = x._info
    gc.disable()
    try:
        del x, cycle
        y = apply(CallsChannel("gc"), big())[0]   # the collection happens inside this kernel
        np.testing.assert_array_equal(y.numpy(), np.arange(N))
    finally:
        gc.enable()
    assert info.deleted
    mge._full_sync()                                # the deferred Del has run now
    assert info.value is None and _mem() == before - 4000 + N * 4

