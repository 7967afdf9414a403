"""The CUDA device's asynchronous side, on the host: the emulated stream and its events
(``cuda/host_stream.py``), ``HostBackend(asynchronous=True)``, and what the runtime does with
them -- the caller goes on while the stream still runs its work, ``numpy()`` waits for the
value, ``mge._full_sync`` waits for the devices and reports what failed there, and the profiler
times kernels on the device's timeline.

No sleeps: a ``threading.Event`` inside submitted work, or the stream's ``hold()``, decides
what has run when.  The runtime tests need g++ (``cudahost0`` builds its kernels with it).
"""
import os
import threading
import time

import numpy as np
import pytest

import mge
import mge.functional as F
from mge.core import AsyncError
from mge._core.device.cuda.backend import Event
from mge._core.device.cuda.host_backend import HostBackend, HostModule, LaunchError
from mge._core.device.cuda.host_stream import AsyncKernelError, HostEvent, HostStream

from cuda_device_fixtures import DEV, cuda  # noqa: F401 (the fixture is used by name)

_WAIT = 30  # seconds a gate waits at most (a hang fails instead of blocking the suite)


def _gate(stream):
    """Queue work that blocks the stream until the returned event is set."""
    opened = threading.Event()
    stream.submit(lambda: opened.wait(_WAIT), "a gate")
    return opened


# -- the stream ------------------------------------------------------------------------------------

def test_work_runs_later_in_issue_order():
    s = HostStream("test")
    opened = _gate(s)
    ran = []
    tickets = [s.submit(lambda k=k: ran.append(k), f"item {k}") for k in range(20)]
    assert ran == [] and not s.query() and not s.done(tickets[0])  # the host went on
    assert s.pending == 21
    opened.set()
    s.wait_for(tickets[4])
    assert ran[:5] == [0, 1, 2, 3, 4]
    s.synchronize()
    assert ran == list(range(20)) and s.query() and s.pending == 0


def test_a_failure_is_raised_once_at_the_next_wait_and_later_work_still_runs():
    s = HostStream("test")
    ran = []
    s.submit(lambda: 1 / 0, "kernel mge_divide")
    last = s.submit(lambda: ran.append("after"), "kernel after")
    with pytest.raises(AsyncKernelError) as err:
        s.wait_for(last)
    assert "kernel mge_divide failed asynchronously on test" in str(err.value)
    assert "ZeroDivisionError" in str(err.value) and err.value.what == "kernel mge_divide"
    assert isinstance(err.value.__cause__, ZeroDivisionError)
    assert ran == ["after"]
    s.synchronize()  # reported: not again
    s.submit(lambda: ran.append("again"))
    s.synchronize()
    assert ran == ["after", "again"]


def test_only_the_first_failure_before_a_wait_is_kept():
    s = HostStream("test")
    s.submit(lambda: 1 / 0, "first")
    s.submit(lambda: [][1], "second")
    with pytest.raises(AsyncKernelError, match="first failed"):
        s.synchronize()
    s.synchronize()


def test_hold_starts_nothing_until_released_and_a_wait_inside_it_is_an_error():
    s = HostStream("test")
    ran = []
    with s.hold():
        t = s.submit(lambda: ran.append(1))
        assert not s.done(t)
        with pytest.raises(RuntimeError, match="held"):
            s.wait_for(t)  # would never return: an error, not a hang
        assert ran == []
    s.wait_for(t)
    assert ran == [1]


def test_a_wait_from_the_streams_own_thread_is_an_error():
    s = HostStream("test")
    s.submit(lambda: s.synchronize(), "a waiting kernel")
    with pytest.raises(AsyncKernelError, match="own thread"):
        s.synchronize()


def test_events_mark_points_of_the_stream():
    s = HostStream("test")
    opened = _gate(s)
    before = HostEvent(s).record()
    s.submit(lambda: None)
    after = HostEvent(s).record()
    assert not before.query() and not after.query()
    assert HostEvent(s).query()  # an event never recorded has nothing to wait for
    opened.set()
    after.synchronize()
    assert before.query() and after.query()
    assert 0 <= before.elapsed_ms(after)


def test_event_times_are_the_streams_not_the_issuers():
    s = HostStream("test")
    opened = _gate(s)
    start = HostEvent(s).record()
    gate2 = threading.Event()
    s.submit(lambda: gate2.wait(_WAIT))
    end = HostEvent(s).record()
    opened.set()
    issued_by = time.perf_counter_ns()  # both events were issued before this ...
    gate2.set()
    end.synchronize()
    assert end.time_ns >= issued_by  # ... and the end is stamped when the stream got there
    assert start.elapsed_ms(end) >= 0


def test_an_event_records_on_another_stream_and_immediate_events_time_too():
    a, b = HostStream("a"), HostStream("b")
    opened = _gate(b)
    ev = HostEvent(a).record(b)
    assert not ev.query()
    opened.set()
    ev.synchronize()
    assert ev.query()
    first, second = Event().record(), Event().record()
    assert first.query() and first.elapsed_ms(second) >= 0
    with pytest.raises(RuntimeError, match="recorded"):
        Event().elapsed_ms(second)


def test_a_forked_child_gets_an_empty_stream():
    s = HostStream("test")
    opened = _gate(s)
    s.submit(lambda: None)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's queue and thread are not here
        try:
            ok = s.pending == 0 and s.query()
            ran = []
            s.submit(lambda: ran.append(1))
            s.synchronize()
            os.write(write, b"ok" if ok and ran == [1] else b"bad")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert s.pending == 2
    opened.set()
    s.synchronize()


# -- the backend -----------------------------------------------------------------------------------

def _backend():
    return HostBackend(capacity=1 << 20, asynchronous=True)


def test_copies_and_memsets_run_in_stream_order_and_copies_take_the_bytes_at_once():
    be = _backend()
    address, handle = be.reserve(64)
    src = np.arange(16, dtype=np.int32)
    with be.stream.hold():
        be.copy_htod(address, src)
        src[:] = -7                   # the caller may reuse its array at once
        be.memset(address + 8, 0, 8)  # after the copy, in order
        assert be.stream.pending == 2
    out = np.empty(16, np.int32)
    be.copy_dtoh(out, address)  # waits for the work before it
    assert out.tolist() == [0, 1, 0, 0] + list(range(4, 16))
    be.release(handle)


def test_release_waits_for_the_work_that_uses_the_segment():
    be = _backend()
    address, handle = be.reserve(1024)
    opened = _gate(be.stream)
    be.memset(address, 1, 1024)
    done = []
    t = threading.Thread(target=lambda: (be.release(handle), done.append(True)))
    t.start()
    opened.set()
    t.join(_WAIT)
    assert done == [True] and be.stream.query()


def test_a_launch_the_driver_refuses_raises_at_the_call():
    be = _backend()
    with pytest.raises(LaunchError, match="no such kernel"):
        be.launch(HostModule({}), "mge_missing", (1, 1, 1), (1, 1, 1), [])
    assert be.stream.pending == 0


def test_an_asynchronous_backend_says_so_and_gives_stream_events():
    be = _backend()
    assert be.asynchronous and isinstance(be.event(), HostEvent)
    sync = HostBackend(capacity=1 << 20)
    assert not sync.asynchronous and type(sync.event()) is Event


# -- the runtime on cudahost0 ------------------------------------------------------------------------

def test_the_caller_goes_on_while_the_stream_runs(cuda):
    assert cuda.asynchronous
    x = mge.tensor(np.linspace(0, 1, 1000, dtype=np.float32), device=DEV)
    x.numpy()
    ref = np.linspace(0, 1, 1000, dtype=np.float32)
    with cuda.backend.stream.hold():
        y = x
        for _ in range(30):
            y = y * 1.5 - 0.25
            ref = ref * np.float32(1.5) - np.float32(0.25)
        mge._sync()  # the interpreter has issued every op ...
        assert cuda.backend.stream.pending >= 30  # ... and the device has run none of them
    np.testing.assert_array_equal(y.numpy(), ref)


def test_a_value_is_read_when_its_event_has_passed_not_after_later_work(cuda):
    x = mge.tensor(np.arange(6, dtype=np.float32), device=DEV)
    loss = x * 3 + 1
    np.testing.assert_array_equal(loss.numpy(), np.arange(6) * 3 + 1)
    with cuda.backend.stream.hold():
        step = loss * 0.5 - x  # queued on the stream after loss's producer ...
        mge._sync()
        assert cuda.backend.stream.pending > 0
        np.testing.assert_array_equal(loss.numpy(), np.arange(6) * 3 + 1)  # ... not waited for
        assert cuda.backend.stream.pending > 0
    np.testing.assert_array_equal(step.numpy(), (np.arange(6) * 3 + 1) * 0.5 - np.arange(6))


def test_a_kernels_failure_is_the_next_reads_async_error_and_nothing_is_lost(cuda):
    x = mge.tensor(np.ones(8, np.float32), device=DEV)
    y = x + 1
    mge._sync()

    def fault():
        raise ValueError("an out-of-bounds write (emulated)")

    cuda.backend.stream.submit(fault, "kernel mge_bad")
    z = y * 2  # its event is after the failure: reading it waits past it
    with pytest.raises(AsyncError) as err:
        z.numpy()
    assert "kernel mge_bad failed asynchronously" in str(err.value)
    assert isinstance(err.value.__cause__, AsyncKernelError)
    assert isinstance(err.value.__cause__.__cause__, ValueError)
    np.testing.assert_array_equal(z.numpy(), 4.0)  # reported once; the values are still there
    np.testing.assert_array_equal(y.numpy(), 2.0)
    mge._full_sync()


def test_full_sync_waits_for_the_device(cuda):
    x = mge.tensor(np.ones(4096, np.float32), device=DEV)
    opened = _gate(cuda.backend.stream)
    y = F.exp(x) + x
    mge._sync()
    assert not cuda.backend.stream.query()
    t = threading.Thread(target=mge._full_sync)
    t.start()
    opened.set()
    t.join(_WAIT)
    assert not t.is_alive() and cuda.backend.stream.query()
    np.testing.assert_allclose(y.numpy(), np.e + 1, rtol=1e-6)


def test_full_sync_reports_a_devices_asynchronous_failure_once(cuda):
    def fault():
        raise MemoryError("an illegal address (emulated)")

    cuda.backend.stream.submit(fault, "kernel mge_faulty")
    with pytest.raises(AsyncError) as err:
        mge._full_sync()
    assert "kernel mge_faulty failed asynchronously" in str(err.value)
    assert isinstance(err.value.__cause__, AsyncKernelError)
    mge._full_sync()  # reported once
    x = mge.tensor([1.0, 2.0], device=DEV)  # and the device keeps working
    np.testing.assert_array_equal((x * 2).numpy(), [2.0, 4.0])


def test_the_profiler_times_kernels_on_the_devices_timeline(cuda, tmp_path):
    from mge.utils.profiler import Profiler
    x = mge.tensor(np.ones((64, 64), np.float32), device=DEV)
    (F.matmul(x, x) * 2 + 1).numpy()  # kernels built before the profile
    with Profiler(path=str(tmp_path)) as prof:
        with cuda.backend.stream.hold():
            y = F.matmul(x, x) * 2 + 1
            mge._sync()
            released = time.perf_counter_ns()
        y.numpy()
    rec = prof.recorder
    track = ("device", DEV)
    spans = [e for e in rec.events if e[2] == track]
    assert rec.thread_names[track] == f"{DEV} (device time)"
    assert [e[4] for e in spans if e[0] == "B"] == ["MatrixMul", "Elemwise.mul", "Elemwise.add"]
    assert all(e[3] == "device" for e in spans)
    assert all(e[5] == {"device": DEV} for e in spans if e[0] == "B")
    times = [e[1] for e in spans]
    assert times == sorted(times)  # begin, end, begin, end... in order
    # the spans are when the device ran the kernels -- after the hold was released -- not when
    # the worker issued them (inside the hold); the anchor ties the clocks within microseconds
    assert times[0] >= released - 100_000
    host = [e for e in rec.events if e[3] == "kernel" and e[0] == "B"]
    assert host and max(e[1] for e in host) < released  # issued inside the hold
    timeline = _timeline(tmp_path)
    named = [e["args"]["name"] for e in timeline["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"]
    assert f"{DEV} (device time)" in named


def test_a_synchronous_device_gets_no_device_track(tmp_path):
    from mge.utils.profiler import Profiler
    x = mge.tensor(np.ones(8, np.float32))
    with Profiler(path=str(tmp_path)) as prof:
        (x + 1).numpy()
    assert not [e for e in prof.recorder.events if e[3] == "device"]


def _timeline(path):
    import json
    [f] = [p for p in path.iterdir() if p.name.endswith("chrome_timeline.json")]
    return json.loads(f.read_text())
