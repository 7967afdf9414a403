"""The worker thread: runs the long kernels (matrix products, convolutions, ops it does not know)
in order, beside the caller's Python.

Python runs one thread at a time, so the worker only pays for itself while its kernel runs without
the GIL (BLAS).  The caller's thread therefore runs the other commands itself when it flushes them
(``Channel._pump``: short elementwise, reduction, indexing and shape kernels, Dels) and hands the
worker the command at the head of the queue only when ``offload(cmd)`` says it is long.  Commands
run strictly in queue order: while the worker runs one, everything behind it waits.

A sleeping worker waits on the hand-off's lock (``handoff.py``: without the GIL, no Python
``Condition``), never by polling; ``kick`` wakes it.  Callers waiting for results wait on the
channel's condition variable, which the worker notifies when it goes idle.
"""
import collections
import threading

__all__ = ["Worker"]


class Worker:
    """Runs ``process(cmd)`` on one thread for the commands at the head of its queue that
    ``offload(cmd)`` accepts, or for every command while the caller waits (the GIL is free then);
    goes idle at the first one it should not run (the caller runs it)."""

    def __init__(self, process, cv, handoff, waiting=lambda: True, offload=lambda cmd: True,
                 name="mge-worker", lock=None):
        self.process = process
        self.cv = cv
        self.handoff = handoff  # tells the caller's thread when to give this thread the GIL
        self.lock = lock  # the callers' lock (caller_lock.py): this thread must never take it
        self.waiting = waiting  # whether someone waits on cv for the worker
        self.offload = offload  # whether a command is the worker's to run
        self.name = name
        self.queue = collections.deque()
        self.idle = True        # not running a command (the caller may run the head itself)
        self.stopping = False
        self.thread = None
        self.tid = None
        self.death = None  # the exception that ended the thread (catch_worker_execption=0)

    def add_task(self, cmd):
        self.queue.append(cmd)

    def kick(self):
        """Make the worker run the head of the queue (the caller found it is the worker's)."""
        if not self.queue or not self.idle:
            return
        self.idle = False  # from now on the caller leaves the queue to the worker
        self.handoff.kick()
        if self.thread is None:
            self._start()
        else:
            self.handoff.wake()

    def _start(self):
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def _run(self):
        self.tid = threading.get_ident()
        self.handoff.bind()  # kernels on this thread hand the GIL over through it
        if self.lock is not None:
            self.lock.bind_worker()
        q = self.queue
        cv = self.cv
        process = self.process
        offload = self.offload
        handoff = self.handoff
        waiting = self.waiting
        try:
            while True:
                # ``idle`` is False only when the caller kicked us: the queue is ours until we
                # give it back (a spurious wake-up must not take a command the caller may run)
                if not self.idle and q and (offload(q[0]) or waiting() or handoff.caller_waiting):
                    process(q.popleft())
                    continue
                self.idle = True
                handoff.worker_idle()
                if waiting():  # the caller waits for results or for the queue to drain
                    with cv:
                        cv.notify_all()
                if not self.idle:  # kicked again meanwhile
                    handoff.worker_running()
                    continue
                if self.stopping:
                    return
                handoff.sleep()
                handoff.worker_running()
        except BaseException as e:
            self.death = e
            raise
        finally:
            self.idle = True
            handoff.worker_idle()
            with cv:
                cv.notify_all()

    @property
    def alive(self):
        return self.thread is not None and self.thread.is_alive()

    def finished(self):
        """Whether every queued command has run (call with the lock held)."""
        return not self.queue and (self.idle or self.death is not None or not self.alive)

    def stop(self, timeout=10.0):
        """End the thread (the caller has drained the queue)."""
        if self.thread is None:
            return
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        self.handoff.wake()
        if threading.get_ident() != self.tid:
            self.thread.join(timeout)
