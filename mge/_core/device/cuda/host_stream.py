"""``HostStream`` and ``HostEvent``: a CUDA stream and its events emulated on the host, with a
GPU's timing -- work runs later, on another thread, in the order it was issued.

A GPU runs a stream's kernels and copies after the host has issued them; the host goes on at
once and waits only where it asks to (a device-to-host copy, an event, ``synchronize``).  A
runtime written for that must never read device memory before the work that writes it has run,
never reuse a host buffer a copy still reads, and must report a kernel's failure at a later
wait.  ``HostBackend(asynchronous=True)`` issues everything to a ``HostStream``, so the CUDA
device and the whole runtime above it run under those rules on a machine without a GPU: a
missing wait shows as a wrong value or a race in the tests, not first on real hardware.

* **Order.**  ``submit(fn, what)`` queues ``fn()``; one thread per stream runs the queue in
  order.  ``submit`` returns a ticket (the item's position); ``wait_for(ticket)`` waits until
  that item has run, ``synchronize()`` until everything issued has, ``query()`` says whether it
  has (``cuStreamQuery``).
* **Errors** of queued work are asynchronous, as a kernel's fault on a GPU: the first one is
  kept and raised, once, from the next wait on the stream (``wait_for``, ``synchronize``, an
  event's ``synchronize``) as an ``AsyncKernelError`` naming the work that failed, with the
  original exception as its cause.  Later work still runs (a GPU context would be lost; the
  emulation stays usable, as the runtime above must after any error).
* **``hold()``** (for tests): a context manager under which the stream starts no new work, so a
  test can see, without sleeping, that the host issued work and went on before any of it ran.
* **Events** record a point in the stream (``record`` queues a marker); ``query`` and
  ``synchronize`` look at that point; ``elapsed_ms(end)`` is the time between two recorded
  events, stamped when the stream reached them -- the device time of the work between them,
  as ``cuEventElapsedTime`` gives it, not the time the host took to issue it.
* **fork**: a child process gets empty streams (the parent's thread does not exist there); work
  the parent queued is the parent's.
"""
import collections
import contextlib
import os
import threading
import time
import weakref

from ..base import DeviceAsyncError
from .backend import Event, Stream

__all__ = ["HostStream", "HostEvent", "AsyncKernelError"]

_clock = time.perf_counter_ns


class AsyncKernelError(DeviceAsyncError):
    """Work that ran asynchronously on a stream failed; raised at the next wait on the stream
    (``__cause__`` is the original error, ``what`` names the work)."""

    def __init__(self, message, what=""):
        super().__init__(message)
        self.what = what


_streams = weakref.WeakSet()  # every HostStream, reset in a forked child


class HostStream(Stream):
    """An ordered queue of work run by its own thread (see the module docstring); ``name`` is
    for messages and the thread's name."""

    def __init__(self, name="host stream"):
        self.name = name
        self._reset()
        _streams.add(self)

    def _reset(self):
        self._cv = threading.Condition(threading.Lock())
        self._queue = collections.deque()   # (ticket, fn, what) not yet started
        self._issued = 0                    # tickets given out
        self._done = 0                      # tickets whose work has run
        self._error = None                  # (exception, what) of the first failure unreported
        self._holds = 0
        self._thread = None

    def __repr__(self):
        return f"<HostStream {self.name}: {self._issued - self._done} pending>"

    # -- issuing -----------------------------------------------------------------------------------
    def submit(self, fn, what=""):
        """Queue ``fn()`` after everything issued before; returns its ticket."""
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"mge {self.name}",
                                                daemon=True)
                self._thread.start()
            self._issued += 1
            self._queue.append((self._issued, fn, what))
            self._cv.notify_all()
            return self._issued

    def _run(self):
        cv = self._cv
        while True:
            with cv:
                while not self._queue or self._holds:
                    cv.wait()
                ticket, fn, what = self._queue.popleft()
            try:
                fn()
            except BaseException as e:  # (kept for the next wait, as a GPU keeps a fault)
                with cv:
                    if self._error is None:
                        self._error = (e, what)
            fn = None
            with cv:
                self._done = ticket
                cv.notify_all()

    # -- waiting -----------------------------------------------------------------------------------
    @property
    def pending(self):
        """Items issued and not yet run."""
        return self._issued - self._done

    def query(self):
        """Whether every piece of work issued on this stream has run."""
        return self._done >= self._issued

    def done(self, ticket):
        """Whether the work of ``ticket`` (and everything before it) has run."""
        return self._done >= ticket

    def wait_for(self, ticket):
        """Wait until the work of ``ticket`` has run; then raise the stream's unreported error,
        if any (``AsyncKernelError``)."""
        with self._cv:
            if threading.current_thread() is self._thread:
                raise RuntimeError(f"{self.name}: a wait from the stream's own thread")
            while self._done < ticket:
                if self._holds and self._queue and self._queue[0][0] <= ticket:
                    raise RuntimeError(f"{self.name}: waiting for work while the stream is "
                                       f"held (hold() is for tests that do not wait inside it)")
                self._cv.wait()
            error, self._error = self._error, None
        if error is not None:
            e, what = error
            raise AsyncKernelError(f"{what or 'work'} failed asynchronously on {self.name}: "
                                   f"{type(e).__name__}: {e}", what) from e

    def synchronize(self):
        """Wait until every piece of work issued on this stream has run (then raise its
        unreported error, if any)."""
        self.wait_for(self._issued)

    @contextlib.contextmanager
    def hold(self):
        """Start no new work while inside (work already running finishes); for tests."""
        with self._cv:
            self._holds += 1
        try:
            yield self
        finally:
            with self._cv:
                self._holds -= 1
                self._cv.notify_all()


class HostEvent(Event):
    """A point in a ``HostStream`` (see the module docstring)."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self._ticket = None
        self._recorded_in = None
        self.time_ns = None  # when the stream reached the point

    def record(self, stream=None):
        """Mark the current end of ``stream``'s work (the event's own stream by default)."""
        stream = stream or self.stream
        self.time_ns = None
        self._recorded_in = stream
        self._ticket = stream.submit(self._stamp, "an event")
        self.recorded = True
        return self

    def _stamp(self):
        self.time_ns = _clock()

    def query(self):
        """Whether the work before the recorded point has run (unrecorded: True)."""
        return self._ticket is None or self._recorded_in.done(self._ticket)

    def synchronize(self):
        """Wait for the work before the recorded point (raising the stream's error, if any)."""
        if self._ticket is not None:
            self._recorded_in.wait_for(self._ticket)

    def elapsed_ms(self, end):
        """Milliseconds from this event to the later event ``end`` (both waited for)."""
        self.synchronize()
        end.synchronize()
        if self.time_ns is None or end.time_ns is None:
            raise RuntimeError("elapsed_ms: both events must be recorded")
        return (end.time_ns - self.time_ns) / 1e6


def _after_fork_in_child():
    for s in list(_streams):
        s._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
