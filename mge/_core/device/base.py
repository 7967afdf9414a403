"""``Device``: what the channel asks of a device -- storage, transfers, kernels, memory figures.

The channel (``mge/_core/channel``) never looks inside a value: it holds each tensor's *buffer*
(whatever object the device uses for storage) and asks the buffer's device for everything else.
A device kind is one package (``device/cpu/`` is numpy on the host) plus a registration
(``mge._core.device.register_device_kind``).

The contract, method by method:

* ``from_host(array) -> buffer``: a buffer holding ``array`` (a host ``np.ndarray`` that the
  device may keep: nobody else writes it).
* ``to_host(buffer) -> np.ndarray``: the value on the host, read-only (a view where possible).
* ``shape(buffer)``, ``nbytes(buffer)``: the value's shape, the bytes of its storage.
* ``storage(buffer) -> (owner, nbytes)``: the allocation behind ``buffer`` and its size.  Two
  buffers with the same ``owner`` share storage (a view): memory is counted once per owner, and
  DTR does not evict a tensor whose storage another one still holds.  An owner must be unique
  per allocation while it lives (CPython shares small ``bytes`` objects: use a ``bytearray``).
* ``execute(op, inputs, descs, reuse=None) -> tuple of buffers`` -- **the kernel door**.  Every
  kernel runs through it: eager ops, tiny values computed on the host, recomputations under DTR
  and drop, and (later) a compiled trace's program; the profiler records here.  ``inputs`` are
  buffers of this device (for a transfer from another device, ``Copy``'s input is that device's
  ``to_host`` array), ``descs`` one object per output with ``.shape`` (``None``: unknown) and
  ``.dtype``; the result has one buffer per desc, of that dtype.  ``reuse`` lists the positions of
  inputs whose tensors were freed by this op (it was their last user): the kernel may write its
  output into such a buffer when nothing else can see it.
* ``runs_long(op, inputs, outputs) -> bool``: whether the worker thread should run this op
  (``inputs``/``outputs`` have ``.shape``/``.dtype``); the caller's thread runs the others.
* ``free_beside(buffer) -> int``: free bytes adjacent to the buffer's block (DTR's score uses
  it; 0 where the allocator cannot tell, as on the CPU).
* ``synchronize()``: wait for work the device still runs after ``execute`` returned (a GPU's
  stream), raising what failed there; nothing on the CPU.  ``to_host`` waits by itself for
  the work that writes its buffer (work on a device runs in issue order), so only
  ``full_sync`` and timing need this.

Allocation and freeing are the buffers' own: a device allocates inside its kernels and
``from_host`` (numpy arrays on the CPU; a pool's blocks on a GPU), and storage is freed when the
channel drops the last reference to a buffer (a device's buffer object returns its block then).
Memory statistics (bytes held by live tensors, current and peak) are kept for every device by the
channel's ``MemoryStats`` from ``storage``.
"""

import abc

__all__ = ["Device", "DeviceAsyncError"]


class DeviceAsyncError(RuntimeError):
    """Work that a device ran after ``execute`` returned (a GPU's kernel) failed; raised at the
    next wait on the device (``to_host``, ``synchronize``).  The channel reports it as an
    ``AsyncError`` whose cause it is."""


class Device(abc.ABC):
    """Base class of a device implementation; one instance per physical device (``cpu0``...).

    Subclasses set ``kind`` and implement the methods below (see the module docstring).  A
    compiled device (``cpu/device.py``) registers itself with ``Device.register``.
    """

    kind = None
    # whether ``execute`` runs a ``jit.trace`` program (``ops/program.py``'s ``Program``) as one
    # op, as the CPU and CUDA devices do; a device that does not gets the recorded ops one by one
    # from a trace's replay (mge/jit/tracing.py), the same results without the program's savings
    runs_programs = True
    # whether kernels run after ``execute`` returns (a GPU's stream); such a device also has
    # ``event()`` (``cuda/backend.py``'s ``Event``), with which the profiler times its kernels
    asynchronous = False

    def __init__(self, index=0):
        self.index = index

    def __repr__(self):
        return f"<{type(self).__name__} {self.kind}{self.index}>"

    # -- storage and transfers -------------------------------------------------------------------
    def from_host(self, array):
        """A buffer holding the host array ``array`` (which the device may keep)."""
        raise NotImplementedError(f"{type(self).__name__}.from_host")

    def to_host(self, buffer):
        """The value of ``buffer`` as a read-only host array."""
        raise NotImplementedError(f"{type(self).__name__}.to_host")

    def storage(self, buffer):
        """``(owner, nbytes)``: the allocation behind ``buffer``, unique while it lives."""
        raise NotImplementedError(f"{type(self).__name__}.storage")

    def shape(self, buffer):
        """The shape of the value in ``buffer`` (a tuple of ints)."""
        raise NotImplementedError(f"{type(self).__name__}.shape")

    def nbytes(self, buffer):
        """Bytes of ``buffer``'s storage."""
        return self.storage(buffer)[1]

    # -- kernels ---------------------------------------------------------------------------------
    def execute(self, op, inputs, descs, reuse=None):
        """The kernel door: run ``op`` on the buffers ``inputs``; one buffer per desc."""
        raise NotImplementedError(f"{type(self).__name__}.execute")

    def runs_long(self, op, inputs, outputs):
        """Whether the worker thread runs ``op``: what the op says of itself (``long_running``)."""
        rule = op.long_running
        if rule is True or rule is False:
            return rule
        return bool(rule(op, inputs, outputs))

    def synchronize(self):
        """Wait until the work issued to the device has run, raising an error it reported
        asynchronously (``mge._full_sync`` calls it on every device).  A device whose kernels
        have finished when ``execute`` returns (the CPU) has nothing to wait for."""

    # -- memory ------------------------------------------------------------------------------------
    def free_beside(self, buffer):
        """Free bytes adjacent to ``buffer``'s block (0: the allocator cannot tell)."""
        return 0
