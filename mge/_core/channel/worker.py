"""The worker thread: executes flushed commands in order.

A sleeping worker waits on the hand-off's lock (``handoff.py``: without the GIL, no Python
``Condition``), never by polling.  It is woken only when ``BATCH`` commands have gathered, when a
command is urgent (a big kernel, worth running beside the caller's Python), or when the caller
needs results (``kick``).  Waking a thread costs several microseconds and a handoff of the GIL, so
a stream of tiny ops is run in batches instead of one handoff per op; a busy worker takes new
commands without any wake-up.  Callers waiting for the queue to drain wait on the channel's
condition variable, which the worker notifies when it goes idle.
"""
import collections
import threading

__all__ = ["Worker"]


BATCH = 32


class Worker:
    """Runs ``process(cmd)`` for each command of its queue on one thread, in order."""

    def __init__(self, process, cv, handoff, waiting=lambda: True, name="mge-worker"):
        self.process = process
        self.cv = cv
        self.waiting = waiting  # whether someone waits on cv for the queue to drain
        self.handoff = handoff  # tells the caller's thread when to give this thread the GIL
        self.name = name
        self.queue = collections.deque()
        self.idle = True
        self.stopping = False
        self.thread = None
        self.tid = None
        self.death = None  # the exception that ended the thread (catch_worker_execption=0)

    def add_task(self, cmd):
        q = self.queue
        q.append(cmd)
        if self.idle and (cmd.urgent or len(q) >= BATCH):
            self.kick()

    def kick(self):
        """Make a sleeping worker start on its queue (callers that wait for results call this)."""
        if self.thread is None:
            if self.queue:
                self.handoff.kick()
                self._start()
        elif self.idle and self.queue:
            self.handoff.kick()
            self.handoff.wake()

    def _start(self):
        self.idle = False
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def _run(self):
        self.tid = threading.get_ident()
        self.handoff.bind()  # kernels on this thread hand the GIL over through it
        q = self.queue
        cv = self.cv
        process = self.process
        handoff = self.handoff
        waiting = self.waiting
        try:
            while True:
                if q:
                    process(q.popleft())
                    continue
                self.idle = True
                handoff.worker_idle()
                if waiting():  # the caller waits for the queue to drain
                    with cv:
                        cv.notify_all()
                if q:  # a command came after the check above: the caller saw us busy
                    self.idle = False
                    handoff.worker_running()
                    continue
                if self.stopping:
                    return
                handoff.sleep()
                self.idle = False
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
        """Finish the queue, then end the thread."""
        if self.thread is None:
            return
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        self.handoff.wake()
        if threading.get_ident() != self.tid:
            self.thread.join(timeout)
