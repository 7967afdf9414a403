"""The callers' lock of the channel (``mge/_core/channel/caller_lock.py``): reentrant, refuses the
worker's thread, and has ``threading.RLock``'s API, compiled and pure alike."""
import threading

import pytest

from mge._core import _accel

CallerLock = _accel.load("mge._core.channel.caller_lock").CallerLock
TIMEOUT = 30


def _in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(TIMEOUT)
    assert not t.is_alive()
    return out[0]


def test_reentrant_and_exclusive():
    lock = CallerLock()
    assert lock.enter() and lock.enter()
    assert _in_thread(lambda: lock.acquire(timeout=0.01)) is False
    lock.exit()
    assert _in_thread(lambda: lock.acquire(blocking=False)) is False  # still held once
    lock.exit()
    assert _in_thread(lambda: (lock.acquire(timeout=1), lock.release())[0]) is True


def test_the_bound_worker_thread_is_refused_without_taking_the_lock():
    lock = CallerLock()

    def worker():
        lock.bind_worker()
        return lock.enter()

    assert _in_thread(worker) is False
    assert lock.enter()  # the worker took nothing
    lock.exit()


def test_a_waiting_thread_gets_the_lock_when_it_is_released():
    lock = CallerLock()
    lock.acquire()
    got = []
    started = threading.Event()

    def waiter():
        started.set()
        got.append(lock.enter())
        lock.exit()

    t = threading.Thread(target=waiter)
    t.start()
    started.wait(TIMEOUT)
    lock.release()
    t.join(TIMEOUT)
    assert not t.is_alive() and got == [True]


def test_release_by_a_thread_that_does_not_hold_it_is_an_error():
    lock = CallerLock()
    with pytest.raises(RuntimeError):
        lock.release()

    def release_elsewhere():
        try:
            lock.release()
        except RuntimeError:
            return "refused"

    with lock:
        assert _in_thread(release_elsewhere) == "refused"
