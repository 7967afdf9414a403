"""Commands and the ``CommandBuffer`` that fuses ``Del`` into the op that last used the tensor.

The buffer keeps the last ``buffer_length`` commands before handing them to the worker (seed
``003``, ``CommandBuffer::enqueue``/``fuse_del``/``find_last_usage``/``flush_pos_for``).  A ``Del``
whose tensor is an input of a buffered ``ApplyOp``, with no later use in the buffer, is fused into
that ``ApplyOp``: the worker frees the tensor before the kernel runs, so an elementwise kernel can
write its output into the freed buffer.  ``GetValue`` flushes everything.  Compiled (see ``_accel``).
"""
import collections

import cython

from .. import _accel

_accel.guard(__name__)

__all__ = ["Command", "CommandBuffer", "APPLY", "DEL", "GET_VALUE", "SWAP_IN", "SWAP_OUT",
           "DROP", "SET_OPTION", "PUSH_SCOPE", "POP_SCOPE", "KIND_NAMES"]

# (a value is put by the caller at once: there is no Put command)
APPLY = 1
DEL = 2
GET_VALUE = 3
SWAP_IN = 4
SWAP_OUT = 5
DROP = 6
SET_OPTION = 7
PUSH_SCOPE = 8
POP_SCOPE = 9
KIND_NAMES = (None, "ApplyOp", "Del", "GetValue", "SwapIn", "SwapOut", "Drop", "SetOption",
              "PushScope", "PopScope")


@cython.cclass
class Command:
    """One command.  ``ApplyOp`` uses ``op``/``inputs``/``outputs``/``dels``; the others ``dest``
    (a TensorInfo) or ``value`` (an option ``(name, value)`` or a scope name)."""

    kind = cython.declare(cython.int, visibility="public")
    op = cython.declare(object, visibility="public")
    inputs = cython.declare(list, visibility="public")
    outputs = cython.declare(list, visibility="public")
    dels = cython.declare(list, visibility="public")
    dest = cython.declare(object, visibility="public")
    value = cython.declare(object, visibility="public")

    def __init__(self, kind, op=None, inputs=None, outputs=None, dest=None, value=None):
        self.kind = kind
        self.op = op
        self.inputs = inputs
        self.outputs = outputs
        self.dels = None
        self.dest = dest
        self.value = value

    def uses(self, info):
        """Whether this command reads ``info`` (a later Del must then not move before it)."""
        if self.kind == APPLY:
            for i in self.inputs:
                if i is info:
                    return True
            return False
        return self.kind != DEL and self.dest is info

    def __repr__(self):
        if self.kind == APPLY:
            return f"ApplyOp({self.op!r}, {len(self.inputs)} in, {len(self.outputs)} out, dels={len(self.dels or ())})"
        return f"{KIND_NAMES[self.kind]}({self.dest if self.dest is not None else self.value!r})"


@cython.cclass
class CommandBuffer:
    """Holds back the last ``length`` commands; ``sink(cmd)`` receives the flushed ones in order."""

    commands = cython.declare(list, visibility="readonly")
    length = cython.declare(cython.Py_ssize_t, visibility="public")
    sink = cython.declare(object)
    # Re-entrancy guard.  A Tensor's finalizer (``del_``) can run inside any allocation of a buffer
    # operation (the cyclic GC), or on the worker thread; mutating ``commands`` then corrupted the
    # operation in progress (a segfault in the compiled slice of ``flush_to``, found by
    # tests/test_async_lifecycle.py).  Commands arriving meanwhile wait in ``pending`` (a deque:
    # appending is safe from any thread) and are taken in order by the next operation.
    busy = cython.declare(cython.bint, visibility="readonly")
    pending = cython.declare(object, visibility="readonly")

    def __init__(self, sink, length=3):
        self.commands = []
        self.sink = sink
        self.length = length
        self.busy = False
        self.pending = collections.deque()

    def enqueue(self, cmd):
        """Add ``cmd``: fuse it if it is a Del that can be fused, then flush what is too old."""
        if self.busy:
            self.pending.append(cmd)
            return
        self.busy = True
        try:
            self._enqueue(cmd)
            self._drain()
        finally:
            self.busy = False

    def defer(self, cmd):
        """Queue ``cmd`` for the next buffer operation (from any thread, at any time)."""
        self.pending.append(cmd)

    def _drain(self):
        pending = self.pending
        while pending:
            self._enqueue(pending.popleft())

    def _enqueue(self, cmd):
        if cmd.kind == DEL and self.fuse_del(cmd):
            return
        self.commands.append(cmd)
        self.flush_to(self.flush_pos_for(cmd))

    def flush(self):
        """Hand every buffered (and pending) command to the worker."""
        if self.busy:  # only a finalizer inside an operation gets here: that operation flushes
            return
        self.busy = True
        try:
            self._drain()
            self.flush_to(len(self.commands))
        finally:
            self.busy = False

    def flush_to(self, pos: cython.Py_ssize_t):
        if pos <= 0:
            return
        cmds = self.commands
        sink = self.sink
        flushed = cmds[:pos]
        del cmds[:pos]
        for c in flushed:
            sink(c)

    def flush_pos_for(self, cmd) -> cython.Py_ssize_t:
        """How many commands must go now: all for ``GetValue``, else all but the last ``length``."""
        if cmd.kind == GET_VALUE:
            return len(self.commands)
        n: cython.Py_ssize_t = len(self.commands)
        if n > self.length:
            return n - self.length
        return 0

    def fuse_del(self, cmd) -> cython.bint:
        """Fuse ``Del(dest)`` into the first buffered ApplyOp reading ``dest`` if nothing reads it
        afterwards; returns whether it was fused."""
        dest = cmd.dest
        cmds = self.commands
        n: cython.Py_ssize_t = len(cmds)
        i: cython.Py_ssize_t
        for i in range(n):
            c = cmds[i]
            if c.kind == APPLY and c.uses(dest):
                if self.find_last_usage(dest, i + 1, n) != n:
                    return False
                if c.dels is None:
                    c.dels = [dest]
                else:
                    c.dels.append(dest)
                return True
        return False

    def find_last_usage(self, dest, begin: cython.Py_ssize_t, end: cython.Py_ssize_t) -> cython.Py_ssize_t:
        """Index of the last command in ``[begin, end)`` that uses ``dest``; ``end`` if none."""
        found: cython.Py_ssize_t = end
        i: cython.Py_ssize_t
        cmds = self.commands
        for i in range(begin, end):
            if cmds[i].uses(dest):
                found = i
        return found
