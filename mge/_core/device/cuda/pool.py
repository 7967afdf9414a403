"""The CUDA device's caching allocator: pure bookkeeping over an abstract address space.

Asking the driver for memory (``cuMemAlloc``) and giving it back (``cuMemFree``, which waits for
the device) are slow, so, like PyTorch's ``CUDACachingAllocator`` and MegEngine's memory pool,
``CachingPool`` reserves memory in large *segments* and hands out *blocks* carved from them.  A
freed block goes back to the pool's cache, not to the driver, and serves a later request.

Nothing here touches a GPU: the memory comes from an *address space* (see ``AddressSpace``),
which hands out ranges of integer addresses.  On a GPU that is device memory through pycuda (in
the device's own module, so this file never imports pycuda); in the tests it is
``FakeAddressSpace``, a simulated range with a capacity.

The policy, and why:

* **Rounding.**  Every request is rounded up to ``ALIGNMENT`` (512 bytes), so every block is
  512-byte aligned when its segment is (cudaMalloc's are): vectorised loads of any dtype are
  safe, and the leftovers of splits are never too small to describe.  A **zero-byte** request
  gets a 512-byte block: each allocation has its own address, so a block can be told from
  another by address and an owner is unique per allocation (``Device.storage``), and no block of
  size 0 ever sits in a segment's list.
* **Two pools.**  Requests of at most ``SMALL_SIZE`` (1 MiB) are *small* and come from segments
  of ``SMALL_SEGMENT`` (2 MiB); larger ones come from segments of their own size rounded up to a
  multiple of ``LARGE_ROUND`` (2 MiB: the GPU's page, the driver's granularity, so a finer size
  would save nothing).  Small tensors (scalars, biases, shapes) are allocated and freed all the
  time: packing many of them into shared segments costs one driver call per 2 MiB, and keeping
  them apart from large blocks stops them from pinning large segments in place (a large segment
  with one small block in it can be neither reused whole nor released).
* **Best fit.**  Each pool keeps its free blocks sorted by ``(size, address)``; a request takes
  the smallest free block that fits (lowest address among equals: deterministic), found with
  ``bisect``.  A block larger than the request is **split** when the rest is worth keeping: in
  the small pool whenever anything is left (all sizes are multiples of 512); in the large pool
  only when more than ``SMALL_SIZE`` is left -- a smaller rest could only serve small requests,
  which never come to the large pool, so it stays part of the block (``Block.size`` then exceeds
  the rounded request) instead of becoming a stranded sliver.
* **Coalescing.**  The blocks of a segment form a doubly linked list in address order; a freed
  block merges with a free left and right neighbour, so a segment never has two adjacent free
  blocks and a wholly free segment is one free block (which ``empty_cache`` releases).
* **Statistics.**  *Allocated* bytes are the sizes of the live blocks (rounded, with any unsplit
  rest), not the requested bytes: that is the memory nothing else can use, freeing a block gives
  back exactly that much, and ``reserved == allocated + cached free`` holds exactly.  The
  requested bytes are kept too (``stats()["requested"]``).  *Reserved* bytes are the segments'.
  Both have peaks, reset by ``reset_peak``.
* **Out of memory.**  When the space refuses a segment the pool (1) calls the ``on_oom``
  callbacks in the order they were added (DTR evicts tensors there), retrying after each one
  that freed something, round after round while any does; (2) releases its wholly free segments
  (``empty_cache``) and retries; (3) raises ``PoolOutOfMemory`` (a ``MemoryError``) whose message
  gives the request, its rounded size, allocated, reserved, cached free bytes and the largest
  free block.  Eviction comes first because blocks it frees land in the cache and serve the
  request at once; ``empty_cache`` costs a synchronising ``cuMemFree`` per segment and only helps
  when the free memory is split over segments that do not fit.  A failed request changes
  nothing but what ``empty_cache`` released: the pool stays consistent and usable.
* **Threads.**  The channel's worker thread and the caller's thread both allocate and free, so
  every public method holds the pool's lock.  The lock is *not* held while the ``on_oom``
  callbacks run: a callback may free blocks (from its own thread or by waiting for another
  thread that frees them, as an eviction that needs the channel's lock does) without deadlocking,
  and since each retry starts afresh under the lock, whatever other threads did meanwhile is seen.
"""
import bisect
import operator
import threading

__all__ = ["ALIGNMENT", "SMALL_SIZE", "SMALL_SEGMENT", "LARGE_ROUND", "OutOfDeviceMemory",
           "PoolOutOfMemory", "AddressSpace", "FakeAddressSpace", "FakeAllocation", "Block",
           "CachingPool", "format_bytes"]

ALIGNMENT = 512            # every block's size (and offset in its segment) is a multiple of this
SMALL_SIZE = 1 << 20       # requests up to 1 MiB are small; also the large pool's split threshold
SMALL_SEGMENT = 2 << 20    # the size of every small-pool segment
LARGE_ROUND = 2 << 20      # large-pool segments are multiples of this


def _round_up(n, multiple):
    return -(-n // multiple) * multiple


def format_bytes(n):
    """``n`` bytes for a person: ``"3.00 MiB (3145728 bytes)"``; ``"512 bytes"`` below 1 KiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit} ({n} bytes)"
    return f"{n} bytes"


# -- address spaces -----------------------------------------------------------------------------

class OutOfDeviceMemory(Exception):
    """Raised by ``AddressSpace.reserve`` when the space cannot give ``nbytes`` (the driver's
    out-of-memory, e.g. ``pycuda.driver.MemoryError``, translated).  The pool catches it and
    tries to make room; users see ``PoolOutOfMemory`` instead."""

    def __init__(self, nbytes, detail=""):
        self.nbytes = nbytes
        self.detail = detail
        tail = f": {detail}" if detail else ""
        super().__init__(f"cannot reserve {format_bytes(nbytes)}{tail}")


class PoolOutOfMemory(MemoryError):
    """The pool could not serve a request even after the ``on_oom`` callbacks and
    ``empty_cache``.  ``requested``/``size`` are the bytes asked for and their rounded size;
    ``stats`` is ``CachingPool.stats()`` at the moment of failure."""

    def __init__(self, message, requested, size, stats):
        super().__init__(message)
        self.requested = requested
        self.size = size
        self.stats = stats


class AddressSpace:
    """What the pool needs from device memory: ranges of integer addresses, reserved and
    released whole.  Methods may be called from any thread, one at a time (the pool holds its
    lock around them).

    * ``reserve(nbytes) -> (address, handle)``: a fresh range of ``nbytes`` (> 0) bytes starting
      at the integer ``address``, not overlapping any range still reserved; ``handle`` is
      whatever ``release`` needs (pycuda: the ``DeviceAllocation``).  Raises
      ``OutOfDeviceMemory`` when the space cannot give that much.
    * ``release(handle)``: give the range back (pycuda: ``handle.free()``).
    """

    def reserve(self, nbytes):
        """Reserve ``nbytes`` bytes: ``(address, handle)``; ``OutOfDeviceMemory`` when full."""
        raise NotImplementedError(f"{type(self).__name__}.reserve")

    def release(self, handle):
        """Release the range that ``reserve`` returned ``handle`` for."""
        raise NotImplementedError(f"{type(self).__name__}.release")


class FakeAllocation:
    """A ``FakeAddressSpace`` handle: ``address``, ``nbytes`` and ``int(handle)`` (the address,
    as for pycuda's ``DeviceAllocation``); ``released`` once given back."""

    __slots__ = ("space", "address", "nbytes", "span", "released")

    def __init__(self, space, address, nbytes, span):
        self.space = space
        self.address = address
        self.nbytes = nbytes
        self.span = span            # nbytes rounded to the space's alignment: what it occupies
        self.released = False

    def __int__(self):
        return self.address

    def __repr__(self):
        state = " released" if self.released else ""
        return f"<FakeAllocation {self.address:#x}+{self.nbytes}{state}>"


class FakeAddressSpace(AddressSpace):
    """A simulated device memory of ``capacity`` bytes at addresses ``base`` ... ``base +
    capacity``, for the tests and the device's contract tests.

    Ranges are placed first-fit, each taking ``nbytes`` rounded up to ``alignment``, so the
    space fragments as a real one does: a request fails (``OutOfDeviceMemory``) when no gap is
    large enough, even if the free bytes add up.  Releasing twice or releasing a handle this
    space did not give raises ``ValueError``.  ``reserved()`` lists what is held;
    ``reserve_calls``/``release_calls`` count the calls (a cache hit makes none).
    """

    def __init__(self, capacity, alignment=ALIGNMENT, base=0x7F00_0000_0000):
        if alignment <= 0 or base % alignment:
            raise ValueError(f"alignment {alignment} must be positive and divide base {base:#x}")
        self.capacity = operator.index(capacity)
        self.alignment = alignment
        self.base = base
        self._live = []             # FakeAllocations, sorted by address
        self.reserve_calls = 0
        self.release_calls = 0

    @property
    def reserved_bytes(self):
        """Bytes asked for by the ranges still reserved."""
        return sum(a.nbytes for a in self._live)

    @property
    def free_bytes(self):
        """Bytes not occupied (possibly in gaps too small for a request)."""
        return self.capacity - sum(a.span for a in self._live)

    def reserved(self):
        """``[(address, nbytes), ...]`` of the ranges still reserved, by address."""
        return [(a.address, a.nbytes) for a in self._live]

    def reserve(self, nbytes):
        """First fit of ``nbytes`` (rounded to the alignment) in the simulated range."""
        nbytes = operator.index(nbytes)
        if nbytes <= 0:
            raise ValueError(f"reserve({nbytes}): the size must be positive")
        self.reserve_calls += 1
        span = _round_up(nbytes, self.alignment)
        start = self.base
        for i, a in enumerate(self._live + [None]):
            end = a.address if a is not None else self.base + self.capacity
            if end - start >= span:
                alloc = FakeAllocation(self, start, nbytes, span)
                self._live.insert(i, alloc)
                return start, alloc
            if a is not None:
                start = a.address + a.span
        raise OutOfDeviceMemory(nbytes, f"fake space of {format_bytes(self.capacity)} has "
                                        f"{format_bytes(self.free_bytes)} free, no gap fits")

    def release(self, handle):
        """Give back ``handle``'s range; ``ValueError`` for a double or foreign release."""
        if not isinstance(handle, FakeAllocation) or handle.space is not self:
            raise ValueError(f"release of an unknown handle {handle!r}: not from this space")
        if handle.released:
            raise ValueError(f"double release of {handle!r}")
        self.release_calls += 1
        handle.released = True
        self._live.remove(handle)



# -- the pool -----------------------------------------------------------------------------------

class _Segment:
    """One range from the space: its blocks are a linked list from ``first``, in address order."""

    __slots__ = ("address", "size", "handle", "small", "first")

    def __init__(self, address, size, handle, small):
        self.address = address
        self.size = size
        self.handle = handle
        self.small = small
        self.first = None


class Block:
    """A piece of a segment.  The pool hands out live blocks: ``address``, ``size`` (the bytes
    it occupies: the request rounded to 512, plus any unsplit rest) and ``requested`` (the bytes
    asked for); ``int(block)`` is the address.  Give it back with ``block.free()`` or
    ``pool.free(block)``.

    A ``Block`` object handed out is never reused: once freed it is dead (its memory is merged
    into the pool's free blocks), so freeing it again is always detected, never a free of
    whatever later took its memory.
    """

    __slots__ = ("address", "size", "requested", "allocated", "segment", "prev", "next", "_pool",
                 "__weakref__")

    def __init__(self, pool, segment, address, size):
        self._pool = pool
        self.segment = segment      # None once the block is dead (freed, merged or released)
        self.address = address
        self.size = size
        self.requested = 0          # set with ``allocated`` when the block is handed out
        self.allocated = False
        self.prev = None
        self.next = None

    def __int__(self):
        return self.address

    def free(self):
        """Give the block back to its pool (``CachingPool.free``)."""
        self._pool.free(self)

    def __repr__(self):
        state = "live" if self.allocated else ("free" if self.segment is not None else "dead")
        return f"<Block {self.address:#x} size={self.size} requested={self.requested} {state}>"


class CachingPool:
    """A caching allocator over ``space`` (an ``AddressSpace``); see the module docstring for
    the policy.  Thread-safe.

    ``allocate(nbytes) -> Block``, ``free(block)``, ``free_beside(block)``; the memory figures
    ``allocated``/``peak_allocated``/``reserved``/``peak_reserved`` (bytes), ``reset_peak()``,
    ``empty_cache()``, ``stats()``, ``snapshot()``; ``add_oom_callback``/``remove_oom_callback``
    for DTR's eviction.
    """

    def __init__(self, space):
        self.space = space
        self._lock = threading.Lock()   # not held around callbacks: see the module docstring
        self._segments = {}             # address -> _Segment
        # Free blocks of each pool, sorted by (size, address): the pair is unique (free blocks
        # never overlap and none is empty), so the Block in third place is never compared.
        self._free = {True: [], False: []}      # small? -> [(size, address, Block)]
        self._callbacks = []
        self.allocated = 0          # bytes in live blocks (their sizes)
        self.peak_allocated = 0
        self.reserved = 0           # bytes in segments
        self.peak_reserved = 0
        self._requested = 0
        self._live_blocks = 0
        self._counts = dict(allocs=0, frees=0, segment_reserves=0, segment_releases=0, ooms=0)

    # -- public -------------------------------------------------------------------------------
    @staticmethod
    def round_size(nbytes):
        """The block size a request of ``nbytes`` gets (before any unsplit rest): a multiple of
        ``ALIGNMENT``, at least ``ALIGNMENT`` (a zero-byte request gets 512 bytes)."""
        return max(ALIGNMENT, _round_up(nbytes, ALIGNMENT))

    @staticmethod
    def segment_size(size):
        """The size of the segment reserved for a block of (rounded) ``size``."""
        return SMALL_SEGMENT if size <= SMALL_SIZE else _round_up(size, LARGE_ROUND)

    def add_oom_callback(self, fn):
        """Call ``fn(nbytes)`` when the space refuses memory; ``nbytes`` is the rounded size the
        pool needs in one block.  ``fn`` frees what it can (it may call ``free``, from any
        thread) and returns whether it freed anything; it must return false once it has nothing
        left, since the pool calls it again while it reports progress.  The pool's lock is not
        held during the call; an exception from ``fn`` propagates (the pool is consistent)."""
        with self._lock:
            self._callbacks.append(fn)

    def remove_oom_callback(self, fn):
        """Stop calling ``fn`` on out-of-memory (``ValueError`` if it was not added)."""
        with self._lock:
            self._callbacks.remove(fn)

    def allocate(self, nbytes):
        """A live ``Block`` of at least ``nbytes`` bytes; ``PoolOutOfMemory`` when even the
        ``on_oom`` callbacks and ``empty_cache`` cannot make room (see the module docstring)."""
        requested = operator.index(nbytes)
        if requested < 0:
            raise ValueError(f"allocate({requested}): the size must not be negative")
        size = self.round_size(requested)
        with self._lock:
            block, refusal = self._try_allocate(size, requested)
            callbacks = list(self._callbacks)   # a callback may remove itself
        if block is not None:
            return block
        progress = True
        while progress:
            progress = False
            for fn in callbacks:
                if not fn(size):
                    continue
                progress = True
                with self._lock:
                    block, refusal = self._try_allocate(size, requested)
                if block is not None:
                    return block
        with self._lock:
            self._empty_cache()
            block, refusal = self._try_allocate(size, requested)
            if block is not None:
                return block
            self._counts["ooms"] += 1
            stats = self._stats()
        raise PoolOutOfMemory(self._oom_message(requested, size, stats, refusal),
                              requested, size, stats) from refusal

    def free(self, block):
        """Give ``block`` back to the cache, merged with its free neighbours; ``ValueError`` if
        it is not a live block of this pool (a double free, or another pool's block)."""
        with self._lock:
            if not isinstance(block, Block) or block._pool is not self:
                raise ValueError(f"free of {block!r}: not a block of this pool")
            if not block.allocated:
                raise ValueError(f"double free of {block!r}")
            self._counts["frees"] += 1
            self._live_blocks -= 1
            self.allocated -= block.size
            self._requested -= block.requested
            block.allocated = False
            self._insert_free(self._coalesce(block))

    def free_beside(self, block):
        """Free bytes in the blocks immediately left and right of the live ``block`` in its
        segment (0 on a side at a segment's edge or next to a live block); DTR's score uses it."""
        with self._lock:
            if not isinstance(block, Block) or block._pool is not self or not block.allocated:
                raise ValueError(f"free_beside of {block!r}: not a live block of this pool")
            return sum(b.size for b in (block.prev, block.next)
                       if b is not None and not b.allocated)

    def empty_cache(self):
        """Release every wholly free segment to the space; returns the bytes released."""
        with self._lock:
            return self._empty_cache()

    def reset_peak(self):
        """Start the peaks (``peak_allocated``, ``peak_reserved``) again from the current values."""
        with self._lock:
            self.peak_allocated = self.allocated
            self.peak_reserved = self.reserved

    def stats(self):
        """The memory figures as a dict: ``allocated``, ``peak_allocated``, ``requested``,
        ``reserved``, ``peak_reserved``, ``cached`` (free bytes in segments), ``largest_free``,
        ``segments``, ``blocks`` (live), ``free_blocks``, and the counters ``allocs``, ``frees``,
        ``segment_reserves``, ``segment_releases``, ``ooms`` (``PoolOutOfMemory`` raised)."""
        with self._lock:
            return self._stats()

    def snapshot(self):
        """Every segment by address: ``{"address", "size", "small", "blocks": [{"address",
        "size", "requested", "allocated"}, ...]}``, blocks in address order."""
        with self._lock:
            out = []
            for address in sorted(self._segments):
                seg = self._segments[address]
                blocks = []
                b = seg.first
                while b is not None:
                    blocks.append(dict(address=b.address, size=b.size, requested=b.requested,
                                       allocated=b.allocated))
                    b = b.next
                out.append(dict(address=seg.address, size=seg.size, small=seg.small,
                                blocks=blocks))
            return out

    # -- under the lock -------------------------------------------------------------------------
    def _try_allocate(self, size, requested):
        """``(block, None)``, or ``(None, OutOfDeviceMemory)`` when there is no cached block and
        the space refuses a segment.  Changes nothing on failure."""
        small = size <= SMALL_SIZE
        free = self._free[small]
        i = bisect.bisect_left(free, (size,))
        if i < len(free):
            block = free.pop(i)[2]
        else:
            seg_size = self.segment_size(size)
            try:
                address, handle = self.space.reserve(seg_size)
            except OutOfDeviceMemory as e:
                return None, e
            seg = _Segment(address, seg_size, handle, small)
            block = seg.first = Block(self, seg, address, seg_size)
            self._segments[address] = seg
            self._counts["segment_reserves"] += 1
            self.reserved += seg_size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if rest > (0 if small else SMALL_SIZE):
            # the rest stays a free block after the new one (the cache's own object, reused)
            live = Block(self, block.segment, block.address, size)
            self._link_before(live, block)
            block.address += size
            block.size = rest
            self._insert_free(block)
        else:
            # a fresh object for the user, so a stale reference to a dead block stays dead
            live = Block(self, block.segment, block.address, block.size)
            self._replace(block, live)
        live.requested = requested
        live.allocated = True
        self._counts["allocs"] += 1
        self._live_blocks += 1
        self.allocated += live.size
        self._requested += requested
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return live, None

    def _coalesce(self, block):
        """Merge the just-freed ``block`` with its free neighbours (taken out of the index) and
        return the free block now covering its memory: the left neighbour grown, or a fresh
        object -- never ``block`` itself, which the user may still hold: it dies here."""
        left, right = block.prev, block.next
        if left is not None and not left.allocated:
            self._remove_free(left)
            merged = left
            merged.size += block.size
        else:
            merged = Block(self, block.segment, block.address, block.size)
            self._link_before(merged, block)
        self._unlink(block)
        block.segment = None
        if right is not None and not right.allocated:
            self._remove_free(right)
            merged.size += right.size
            self._unlink(right)
            right.segment = None
        return merged

    def _empty_cache(self):
        released = 0
        for address in sorted(self._segments):
            seg = self._segments[address]
            b = seg.first
            if b.allocated or b.next is not None:
                continue        # coalesced, so a wholly free segment is a single free block
            self.space.release(seg.handle)   # first: if it raises, the books still match
            self._remove_free(b)
            b.segment = None
            del self._segments[address]
            self._counts["segment_releases"] += 1
            self.reserved -= seg.size
            released += seg.size
        return released

    def _stats(self):
        frees = self._free[True] + self._free[False]
        return dict(allocated=self.allocated, peak_allocated=self.peak_allocated,
                    requested=self._requested, reserved=self.reserved,
                    peak_reserved=self.peak_reserved, cached=self.reserved - self.allocated,
                    largest_free=max((f[0] for f in frees), default=0),
                    segments=len(self._segments), blocks=self._live_blocks,
                    free_blocks=len(frees), **self._counts)

    @staticmethod
    def _oom_message(requested, size, stats, refusal):
        where = (f"a new segment of {format_bytes(CachingPool.segment_size(size))}"
                 f" in the {'small' if size <= SMALL_SIZE else 'large'} pool")
        return (f"out of memory: tried to allocate {format_bytes(requested)}; rounded to "
                f"{format_bytes(size)}, it needs {where}. "
                f"Allocated {format_bytes(stats['allocated'])}, "
                f"reserved {format_bytes(stats['reserved'])}, "
                f"cached free {format_bytes(stats['cached'])} in {stats['free_blocks']} blocks, "
                f"largest free cached block {format_bytes(stats['largest_free'])}. "
                f"The device said: {refusal}")

    # -- the free index and the segments' lists ---------------------------------------------------
    def _insert_free(self, block):
        bisect.insort(self._free[block.segment.small], (block.size, block.address, block))

    def _remove_free(self, block):
        free = self._free[block.segment.small]
        i = bisect.bisect_left(free, (block.size, block.address))
        assert free[i][2] is block, "free index out of step with the blocks"
        del free[i]

    @staticmethod
    def _link_before(new, block):
        new.prev, new.next = block.prev, block
        if block.prev is None:
            block.segment.first = new
        else:
            block.prev.next = new
        block.prev = new

    @staticmethod
    def _unlink(block):
        if block.prev is None:
            block.segment.first = block.next
        else:
            block.prev.next = block.next
        if block.next is not None:
            block.next.prev = block.prev
        block.prev = block.next = None

    def _replace(self, old, new):
        self._link_before(new, old)
        self._unlink(old)
        old.segment = None
