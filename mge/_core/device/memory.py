"""Exact memory statistics of tensor storage per device (compiled; see ``_accel``).

A tensor's value may be a view of another tensor's buffer (reshape, broadcast, detach share
storage), so the counter is kept per *storage*: the owner that the buffer's device names
(``Device.storage``; for numpy arrays the end of the ``.base`` chain, found here without a call),
counted once from the first tensor that holds it until the last one lets go.  Both the caller's
thread (tiny host-computed values) and the worker produce values, so updates take a lock.

The C layout is declared in ``memory.pxd`` (``memory_c.pxd`` includes it for cimports).
"""
import threading

import cython
import numpy as np

from .. import _accel

_accel.guard(__name__)

__all__ = ["MemoryStats"]

_ndarray = np.ndarray
if cython.compiled:  # (its door methods are C calls)
    from cython.cimports.mge._core.profile_recorder_c import Recorder as _Recorder
else:
    _Recorder = object
_prof = cython.declare(_Recorder, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec


def _owner(arr):
    base = arr.base
    while isinstance(base, _ndarray):
        arr = base
        base = arr.base
    return arr


def _storage(device, buf):
    # (owner, nbytes) of a buffer on ``device`` (a CompNode) that is not a numpy array (those
    # are handled inline, without the tuple: this is on every op's path)
    return device.impl.storage(buf)


@cython.cclass
class MemoryStats:
    """Bytes of live tensor storage, current and peak, per device (keyed by physical name).

    C fields (``memory.pxd``): ``_buffers`` (id(owner) -> [owner, holders, nbytes, device key]),
    ``_current`` and ``_peak`` (device key -> bytes), ``_lock``.  ``hold`` and ``release`` are
    ``cpdef``: the channel calls them in C on every op.
    """

    def __init__(self):
        # Reentrant: a garbage collection inside ``hold`` (its list allocation) may finalize a
        # Tensor, whose ``__del__`` releases a buffer on this thread; the table is consistent at
        # every point where that can happen.
        self._lock = threading.RLock()
        self._buffers = {}
        self._current = {}
        self._peak = {}

    @cython.ccall
    def hold(self, device, arr, locked: cython.bint = True):
        """A tensor on ``device`` (a CompNode) now holds the buffer ``arr``.

        ``locked=False`` is for the caller's thread while the worker sleeps: nobody else can touch
        the table then, and the lock is a good part of the cost of a tiny op.
        """
        if type(arr) is _ndarray:
            owner = arr if arr.base is None else _owner(arr)
            n = owner.nbytes
        else:
            owner, n = _storage(device, arr)
        key = id(owner)
        lock = self._lock
        if locked:
            lock.acquire()
        try:
            entry = self._buffers.get(key)
            if entry is not None:
                entry[1] += 1
                if _prof is not None:  # profiler: one more tensor holds a live buffer
                    _prof.hold(key, owner, n, entry[3], None)
                return
            dev = device.physical
            self._buffers[key] = [owner, 1, n, dev]
            cur = self._current.get(dev, 0) + n
            self._current[dev] = cur
            if cur > self._peak.get(dev, 0):
                self._peak[dev] = cur
            if _prof is not None:  # profiler: a new buffer, and the device's bytes
                _prof.hold(key, owner, n, dev, cur)
        finally:
            if locked:
                lock.release()

    @cython.ccall
    def release(self, device, arr, locked: cython.bint = True):
        """A tensor on ``device`` let go of ``arr``; returns the bytes freed (0 while others still
        hold it)."""
        if type(arr) is _ndarray:
            key = id(arr if arr.base is None else _owner(arr))
        else:
            key = id(_storage(device, arr)[0])
        lock = self._lock
        if locked:
            lock.acquire()
        try:
            entry = self._buffers.get(key)
            if entry is None:
                return 0
            entry[1] -= 1
            if entry[1]:
                if _prof is not None:  # profiler: the buffer is still held by others
                    _prof.release(key, entry[3], None)
                return 0
            del self._buffers[key]
            dev = entry[3]
            n = entry[2]
            self._current[dev] -= n
            if _prof is not None:  # profiler: the buffer is freed, and the device's bytes
                _prof.release(key, dev, self._current[dev])
            return n
        finally:
            if locked:
                lock.release()

    def holders(self, device, arr):
        """How many tensors hold the storage of the buffer ``arr`` on ``device``."""
        owner = _owner(arr) if type(arr) is _ndarray else _storage(device, arr)[0]
        entry = self._buffers.get(id(owner))
        return 0 if entry is None else entry[1]

    def snapshot(self):
        """``(tensors holding a buffer, {device key: bytes}, [(key, owner, nbytes, device key)])``
        now (the profiler starts from it)."""
        with self._lock:
            return (sum(e[1] for e in self._buffers.values()), dict(self._current),
                    [(k, e[0], e[2], e[3]) for k, e in self._buffers.items()])

    def allocated(self, device):
        return self._current.get(device.physical, 0)

    def peak(self, device):
        return self._peak.get(device.physical, 0)

    def reset_peak(self, device=None):
        with self._lock:
            keys = [device.physical] if device is not None else list(self._peak)
            for d in keys:
                self._peak[d] = self._current.get(d, 0)

    def reset_lock(self):
        """A fresh lock (the child of a fork must not inherit a held one)."""
        self._lock = threading.RLock()
