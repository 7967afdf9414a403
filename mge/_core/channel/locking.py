"""The callers' side of the channel's lock: the public calls that are not on the per-op path.

``LockedCalls`` is a base of ``Channel`` (``channel.py``).  One reentrant lock (``Channel.lock``)
serialises the callers' threads: each call here checks the channel (closed; called from inside a
kernel, which must not wait for the lock its waiting caller holds), takes the lock, and runs the
channel's ``_<name>_locked`` body.  ``put``, ``apply_op``, ``del_`` and the waits of
``get_value``/``get_shape`` take it in ``channel.py`` itself (they are on every op's path).
"""

from .. import _accel

__all__ = ["LockedCalls"]

_cb = _accel.load("mge._core.channel.command_buffer")
Command, SWAP_IN, SWAP_OUT, DROP_CMD = _cb.Command, _cb.SWAP_IN, _cb.SWAP_OUT, _cb.DROP


class LockedCalls:
    """The channel's locked public calls (a base of ``Channel``)."""

    def sync(self):
        """Wait until every command issued so far has run; raise pending worker errors."""
        self._enter("sync")
        try:
            self._sync_locked()
        finally:
            self.lock.release()

    def wait_idle(self):
        """Flush and wait for the worker to drain, without raising its errors."""
        self._enter("wait_idle")
        try:
            self._wait_idle_locked()
        finally:
            self.lock.release()

    def flush(self):
        """Run or hand over the buffered commands (no waiting)."""
        self._enter("flush")
        try:
            self._flush_locked()
        finally:
            self.lock.release()

    def set_option(self, name, value):
        """Set option ``name`` (the worker applies it when it reaches this point of the queue)."""
        self._enter("set_option")
        try:
            self._set_option_locked(name, value)
        finally:
            self.lock.release()

    def push_scope(self, name):
        """Open a named scope (profiler annotations); scopes are per thread."""
        self._enter("push_scope")
        try:
            self._push_scope_locked(name)
        finally:
            self.lock.release()

    def pop_scope(self, name):
        """Close the calling thread's innermost scope, which must be ``name``."""
        self._enter("pop_scope")
        try:
            self._pop_scope_locked(name)
        finally:
            self.lock.release()

    def swap_out(self, info):
        """Move the value to host memory (``enable_swap``; otherwise nothing, as in MegEngine)."""
        self._enter("swap_out")
        try:
            self._swap_out_locked(info)
        finally:
            self.lock.release()

    def swap_in(self, info):
        """Bring a swapped-out value back to its device (``enable_swap``)."""
        self._enter("swap_in")
        try:
            self._swap_in_locked(info)
        finally:
            self.lock.release()

    def drop(self, info):
        """Free the value; it is recomputed from its producer when used (``enable_drop``)."""
        self._enter("drop")
        try:
            self._drop_locked(info)
        finally:
            self.lock.release()

    def _enter(self, what):
        # Checks first (closed; called from inside a kernel, which must not wait for the lock the
        # waiting caller holds), then takes the callers' lock; the caller releases it.
        self._check(what)
        self.lock.acquire()

    # -- swap and drop ---------------------------------------------------------------------------
    def _swap_out_locked(self, info):
        """Move the value to host memory (``enable_swap``; otherwise nothing, as in MegEngine)."""
        self._check("swap_out")
        if self.options.values["enable_swap"]:
            self._enqueue_for(info, SWAP_OUT)

    def _swap_in_locked(self, info):
        """Bring a swapped-out value back to its device (``enable_swap``)."""
        self._check("swap_in")
        if self.options.values["enable_swap"]:
            self._enqueue_for(info, SWAP_IN)

    def _drop_locked(self, info):
        """Free the value; it is recomputed from its producer when used (``enable_drop``)."""
        self._check("drop")
        if self.options.values["enable_drop"]:
            self._enqueue_for(info, DROP_CMD)

    def _enqueue_for(self, info, kind):
        if info.deleted:
            raise RuntimeError("the tensor was already deleted")
        info.in_worker = True
        self.buffer.enqueue(Command(kind, dest=info))
