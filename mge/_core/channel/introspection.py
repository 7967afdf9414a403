"""The channel's small documented test API: what tests may ask instead of reading private fields.

``Introspection`` is a base of ``Channel`` (``channel.py``).
"""
from .. import _accel
from ..device import DEVICE_KINDS

__all__ = ["Introspection"]

KIND_NAMES = _accel.load("mge._core.channel.command_buffer").KIND_NAMES


class Introspection:
    """``counters``, ``buffered``, ``worker_thread``, ``idle`` (a base of ``Channel``)."""

    def counters(self):
        """Counters since start: ``inplace`` (kernels that wrote into a freed input's buffer),
        ``fused_dels`` (Dels fused into the op that last read their tensor), ``recomputed``
        (producers run again for dropped or evicted tensors)."""
        out = dict(self.stats)
        out["inplace"] = sum(getattr(d, "inplace", 0) for kind in DEVICE_KINDS.values()
                             for d in kind.impls.values())
        return out

    def buffered(self):
        """The commands held in the command buffer (not yet handed on), oldest first, as
        ``(kind, op, inputs, dels)``; ``kind`` is a name (``"ApplyOp"``, ``"Del"``...)."""
        return [(KIND_NAMES[c.kind], c.op, c.inputs, c.dels) for c in self.buffer.commands]

    def worker_thread(self):
        """The ident of the worker thread (``None`` before it first ran)."""
        return self.worker.tid

    def idle(self):
        """Whether nothing is buffered, queued or running."""
        return not self.buffer.commands and not self.buffer.pending and self.worker.finished()
