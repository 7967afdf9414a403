"""How a worker hands a batch to the main process.

The batch is pickled with protocol 5; numpy arrays of at least ``SHM_MIN_BYTES`` go out of band
into a shared-memory slot (a ``memfd`` the main process created before forking the worker, so
both hold it) and only the small pickle header travels through the pipe. The main process copies
the arrays out of the slot at once (one ``preadv``) and hands the slot back with the next index it
sends that worker. Without ``memfd`` / fork, or when no slot is free, the whole pickle goes
through the pipe.
"""
import os
import pickle

import numpy as np

SHM_MIN_BYTES = 16 * 1024  # below this an array is cheaper in the pickle itself
_ALIGN = 64

# memfds of every live loader in this process: a freshly forked worker closes the others' copies
_LIVE_FDS = set()


def shm_supported(start_method):
    return start_method == "fork" and hasattr(os, "memfd_create") and hasattr(os, "preadv")


def new_slot():
    fd = os.memfd_create("mge-dataloader", getattr(os, "MFD_CLOEXEC", 0))
    _LIVE_FDS.add(fd)
    return fd


def close_slot(fd):
    _LIVE_FDS.discard(fd)
    try:
        os.close(fd)
    except OSError:
        pass


def close_foreign_slots(mine):
    """In a new worker: close the inherited slots of other loaders' workers."""
    for fd in list(_LIVE_FDS):
        if fd not in mine:
            close_slot(fd)


def _pwrite_all(fd, buf, offset):
    view = memoryview(buf).cast("B")
    while len(view):
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


def _pread_all(fd, buf, offset):
    view = memoryview(buf).cast("B")
    while len(view):
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise RuntimeError("DataLoader: a shared-memory slot was shorter than its batch")
        view = view[n:]
        offset += n


class Encoder:
    """Worker side: ``encode(obj)`` gives a message; ``release(slots)`` frees slots."""

    def __init__(self, slots):
        self.free = list(slots)

    def release(self, slots):
        self.free.extend(slots)

    def encode(self, obj):
        if not self.free:
            return ("inline", pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        bufs = []

        def out_of_band(pb):
            raw = pb.raw()
            if raw.nbytes >= SHM_MIN_BYTES:
                bufs.append(raw)
                return False
            return True

        header = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
        if not bufs:
            return ("inline", header)
        slot = self.free.pop()
        layout, offset = [], 0
        for raw in bufs:
            _pwrite_all(slot, raw, offset)
            layout.append((offset, raw.nbytes))
            offset += -(-raw.nbytes // _ALIGN) * _ALIGN
        return ("shm", header, slot, layout)


def decode(msg):
    """Main side: the object of a message, and the slot it used (``None`` for inline)."""
    if msg[0] == "inline":
        return pickle.loads(msg[1]), None
    _, header, slot, layout = msg
    buffers = []
    for offset, nbytes in layout:
        buf = np.empty(nbytes, dtype=np.uint8)
        _pread_all(slot, buf, offset)
        buffers.append(buf)
    return pickle.loads(header, buffers=buffers), slot
