"""Exact memory statistics of tensor storage per device.

A tensor's value may be a view of another tensor's buffer (reshape, broadcast, detach share
storage), so the counter is kept per *buffer*: a buffer counts once, from the first tensor that
holds it until the last one lets go.  Both the caller's thread (tiny host-computed values) and the
worker produce values, so updates take a lock.
"""
import threading

import numpy as np

__all__ = ["MemoryStats"]


def _owner(arr):
    base = arr.base
    while isinstance(base, np.ndarray):
        arr = base
        base = arr.base
    return arr


class MemoryStats:
    """Bytes of live tensor storage, current and peak, per device."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers = {}    # id(owner) -> [owner, holders, nbytes, device]
        self._current = {}    # device -> bytes
        self._peak = {}       # device -> bytes

    def hold(self, device, arr):
        """A tensor now holds ``arr`` on ``device``."""
        owner = _owner(arr)
        key = id(owner)
        with self._lock:
            entry = self._buffers.get(key)
            if entry is not None:
                entry[1] += 1
                return
            n = owner.nbytes
            self._buffers[key] = [owner, 1, n, device]
            cur = self._current.get(device, 0) + n
            self._current[device] = cur
            if cur > self._peak.get(device, 0):
                self._peak[device] = cur

    def release(self, arr):
        """A tensor let go of ``arr``; returns the bytes freed (0 while others still hold it)."""
        key = id(_owner(arr))
        with self._lock:
            entry = self._buffers.get(key)
            if entry is None:
                return 0
            entry[1] -= 1
            if entry[1]:
                return 0
            del self._buffers[key]
            device, n = entry[3], entry[2]
            self._current[device] -= n
            return n

    def holders(self, arr):
        """How many tensors hold the buffer of ``arr``."""
        entry = self._buffers.get(id(_owner(arr)))
        return 0 if entry is None else entry[1]

    def allocated(self, device):
        return self._current.get(device, 0)

    def peak(self, device):
        return self._peak.get(device, 0)

    def reset_peak(self, device=None):
        with self._lock:
            for d in ([device] if device is not None else list(self._peak)):
                self._peak[d] = self._current.get(d, 0)
