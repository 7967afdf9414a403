"""The callers' lock: one reentrant lock serialises the threads that call the channel.

A channel call, its waits included, runs as if it were the only one; another thread's call waits
for it with the GIL free.  The worker thread never takes it: everything the worker waits for is
the callers', so a worker waiting for this lock could wait for a caller that waits for the worker.
``enter`` therefore answers ``False`` on the worker's thread (``bind_worker``) instead of taking
the lock, and the channel refuses the call with a clear error.

``threading.RLock`` has the semantics; the compiled twin has them at the cost of a few C field
reads (the owner's thread id and a count), which matters because every op and every freed tensor
takes this lock twice.  A thread blocked on it wakes every 50 ms to let signal handlers run, so
Ctrl-C reaches a thread waiting for another thread's call.

The C layout is in ``caller_lock.pxd`` (``caller_lock_c.pxd`` includes it for cimports).
"""
from __future__ import annotations  # C types in signatures are for Cython only

import threading
import time

import cython

from .. import _accel

_accel.guard(__name__)

if cython.compiled:
    from cython.cimports.cpython.exc import PyErr_CheckSignals
    from cython.cimports.cpython.pythread import (NOWAIT_LOCK, PY_LOCK_ACQUIRED,
                                                  PyThread_acquire_lock,
                                                  PyThread_allocate_lock, PyThread_free_lock,
                                                  PyThread_release_lock)
    # mge_thread_ident (PyThread_get_thread_ident) and PyThread_acquire_lock_timed: caller_lock.pxd

__all__ = ["CallerLock"]

_POLL_US = 50_000  # a blocked thread checks for signals this often


@cython.cclass
class CallerLock:
    """A reentrant lock the worker thread may not take (see the module docstring).

    ``enter``/``exit`` are the per-op path; ``acquire(timeout=-1)``/``release`` and ``with`` are
    ``threading.RLock``'s API for the rest.  ``worker_tid`` is the worker's thread id (0: none).
    """

    def __init__(self):
        self.worker_tid = 0
        if cython.compiled:
            self._lock = PyThread_allocate_lock()
            if self._lock == cython.NULL:
                raise MemoryError("CallerLock: cannot allocate a lock")
            self._owner = 0
            self._count = 0
        else:
            self._rlock = threading.RLock()

    def __dealloc__(self):
        if cython.compiled and self._lock != cython.NULL:
            PyThread_free_lock(self._lock)

    def bind_worker(self):
        """Called on the worker's thread: ``enter`` refuses this thread from now on."""
        self.worker_tid = threading.get_ident()

    @cython.ccall
    def enter(self) -> cython.bint:
        """Take the lock for this thread (again, if it holds it); ``False`` on the worker's
        thread, without taking it."""
        if not cython.compiled:
            if threading.get_ident() == self.worker_tid:
                return False
            self._rlock.acquire()
            return True
        tid: cython.ulong = mge_thread_ident()  # noqa: F821
        if tid == self._owner:
            self._count += 1
            return True
        if tid == self.worker_tid:
            return False
        return self._take(tid, -1.0)

    @cython.ccall
    def exit(self):
        """Release one level of this thread's hold."""
        if not cython.compiled:
            self._rlock.release()
            return
        if self._owner != mge_thread_ident():  # noqa: F821
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            self._owner = 0
            PyThread_release_lock(self._lock)

    @cython.cfunc
    def _take(self, tid: cython.ulong, timeout: cython.double) -> cython.bint:
        # Uncontended: one C call.  Else wait without the GIL, in slices, running signal handlers
        # in between (a KeyboardInterrupt propagates); ``timeout`` < 0: for good.
        got: cython.int = PyThread_acquire_lock(self._lock, NOWAIT_LOCK)
        deadline: cython.double = time.monotonic() + timeout if timeout >= 0 else 0.0
        while got != PY_LOCK_ACQUIRED:
            wait: cython.longlong = _POLL_US
            if timeout >= 0:
                left: cython.double = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait = min(wait, cython.cast(cython.longlong, left * 1e6) + 1)
            with cython.nogil:
                got = PyThread_acquire_lock_timed(self._lock, wait, 0)  # noqa: F821
            if got != PY_LOCK_ACQUIRED:
                PyErr_CheckSignals()
        self._owner = tid
        self._count = 1
        return True

    # -- threading.RLock's API -----------------------------------------------------------------
    def acquire(self, blocking=True, timeout=-1):
        """As ``threading.RLock.acquire`` (the worker thread is not refused here)."""
        if not cython.compiled:
            return self._rlock.acquire(blocking, timeout)
        tid: cython.ulong = mge_thread_ident()  # noqa: F821
        if tid == self._owner:
            self._count += 1
            return True
        return self._take(tid, float(timeout) if blocking else 0.0)

    def release(self):
        """As ``threading.RLock.release``."""
        self.exit()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.exit()
