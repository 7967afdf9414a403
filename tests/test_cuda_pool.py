"""The CUDA device's caching allocator (``mge/_core/device/cuda/pool.py``) on a fake address space:
rounding, the two pools, best fit, splitting, coalescing, ``free_beside``, exact statistics,
out-of-memory handling, threads, and a hypothesis state machine checking the invariants."""
import random
import threading

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mge._core.device.cuda.pool import (ALIGNMENT, LARGE_ROUND, SMALL_SEGMENT, SMALL_SIZE,
                                        CachingPool, FakeAddressSpace, OutOfDeviceMemory,
                                        PoolOutOfMemory, format_bytes)

KiB = 1 << 10
MiB = 1 << 20


def make(capacity=64 * MiB):
    space = FakeAddressSpace(capacity)
    return space, CachingPool(space)


def layout(pool):
    """Each segment's blocks as ``(size, allocated)`` pairs, segments by address."""
    return [[(b["size"], b["allocated"]) for b in s["blocks"]] for s in pool.snapshot()]


def check(pool, space, live):
    """Every invariant, computed by brute force from ``snapshot()`` and the live blocks."""
    snap, stats = pool.snapshot(), pool.stats()
    assert [(s["address"], s["size"]) for s in snap] == space.reserved()
    assert stats["reserved"] == sum(s["size"] for s in snap) == space.reserved_bytes
    assert stats["segments"] == len(snap)
    by_address = {b.address: b for b in live}
    assert len(by_address) == len(live)
    seen_live, free = {}, {True: [], False: []}
    for s in snap:
        assert s["size"] == SMALL_SEGMENT if s["small"] else s["size"] % LARGE_ROUND == 0
        pos, prev_free, blocks = s["address"], False, s["blocks"]
        for i, b in enumerate(blocks):
            # the blocks tile the segment exactly, in order, each a positive multiple of 512
            assert b["address"] == pos and b["size"] > 0 and b["size"] % ALIGNMENT == 0
            pos += b["size"]
            if b["allocated"]:
                seen_live[b["address"]] = (b["size"], b["requested"])
                assert b["size"] >= CachingPool.round_size(b["requested"])
                assert (CachingPool.round_size(b["requested"]) <= SMALL_SIZE) == s["small"]
                left = blocks[i - 1] if i > 0 else None
                right = blocks[i + 1] if i + 1 < len(blocks) else None
                beside = sum(n["size"] for n in (left, right) if n and not n["allocated"])
                assert pool.free_beside(by_address[b["address"]]) == beside
            else:
                assert not prev_free, "two adjacent free blocks: not coalesced"
                free[s["small"]].append((b["size"], b["address"]))
            prev_free = not b["allocated"]
        assert pos == s["address"] + s["size"]
    assert seen_live == {b.address: (b.size, b.requested) for b in live}
    spans = sorted((b.address, b.address + b.size) for b in live)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), "overlap"
    assert all(b.allocated for b in live)
    assert stats["allocated"] == sum(b.size for b in live)
    assert stats["requested"] == sum(b.requested for b in live)
    assert stats["blocks"] == len(live)
    frees = free[True] + free[False]
    assert stats["cached"] == stats["reserved"] - stats["allocated"] == sum(f[0] for f in frees)
    assert stats["free_blocks"] == len(frees)
    assert stats["largest_free"] == max((f[0] for f in frees), default=0)
    for small in (True, False):   # the best-fit index holds exactly the free blocks, sorted
        assert [(k[0], k[1]) for k in pool._free[small]] == sorted(free[small])
    assert stats["peak_allocated"] >= stats["allocated"]
    assert stats["peak_reserved"] >= stats["reserved"]


# -- the fake address space -------------------------------------------------------------------

def test_fake_space_first_fit_alignment_capacity():
    space = FakeAddressSpace(10 * KiB, alignment=1 * KiB, base=0x1000_0000)
    a, ha = space.reserve(1500)           # takes 2 KiB of the range
    b, hb = space.reserve(1 * KiB)
    assert (a, b) == (0x1000_0000, 0x1000_0000 + 2 * KiB) and int(hb) == b
    assert space.reserved() == [(a, 1500), (b, 1 * KiB)]
    assert space.reserved_bytes == 2524 and space.free_bytes == 7 * KiB
    space.release(ha)
    c, _ = space.reserve(2 * KiB)         # first fit: the gap that ``a`` left
    assert c == a
    with pytest.raises(OutOfDeviceMemory) as e:
        space.reserve(8 * KiB)            # 7 KiB free in one gap
    assert e.value.nbytes == 8 * KiB and "no gap fits" in str(e.value)
    d, _ = space.reserve(7 * KiB)
    assert d == b + 1 * KiB and space.free_bytes == 0
    assert (space.reserve_calls, space.release_calls) == (5, 1)


def test_fake_space_misuse():
    space, other = FakeAddressSpace(4 * MiB), FakeAddressSpace(4 * MiB)
    _, h = space.reserve(1 * MiB)
    _, h_other = other.reserve(1 * MiB)
    space.release(h)
    with pytest.raises(ValueError, match="double release"):
        space.release(h)
    with pytest.raises(ValueError, match="unknown handle"):
        space.release(h_other)
    with pytest.raises(ValueError, match="unknown handle"):
        space.release(12345)
    with pytest.raises(ValueError, match="positive"):
        space.reserve(0)
    assert space.reserved() == [] and other.reserved_bytes == 1 * MiB


# -- rounding and the two pools -----------------------------------------------------------------

def test_rounding():
    r, seg = CachingPool.round_size, CachingPool.segment_size
    assert [r(n) for n in (0, 1, 511, 512, 513, 1 * MiB, 1 * MiB + 1)] == \
        [512, 512, 512, 512, 1024, 1 * MiB, 1 * MiB + 512]
    assert [seg(r(n)) for n in (0, 1 * MiB, 1 * MiB + 1, 2 * MiB, 2 * MiB + 1, 5 * MiB)] == \
        [2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 4 * MiB, 6 * MiB]
    space, pool = make()
    b = pool.allocate(1000)
    assert (b.size, b.requested, int(b)) == (1024, 1000, b.address)
    with pytest.raises(ValueError, match="negative"):
        pool.allocate(-1)


def test_zero_bytes_get_an_aligned_block_of_their_own():
    space, pool = make()
    a, b = pool.allocate(0), pool.allocate(0)
    assert (a.size, a.requested) == (512, 0) and b.address == a.address + 512
    assert pool.stats()["allocated"] == 1024 and pool.stats()["requested"] == 0
    check(pool, space, [a, b])


def test_small_requests_share_a_2mib_segment():
    space, pool = make()
    a, b, c = pool.allocate(1000), pool.allocate(3000), pool.allocate(1 * MiB)
    assert space.reserve_calls == 1
    assert (b.address, c.address) == (a.address + 1024, a.address + 1024 + 3072)
    assert layout(pool) == [[(1024, True), (3072, True), (1 * MiB, True),
                             (1 * MiB - 4096, False)]]
    s = pool.stats()
    assert (s["allocated"], s["requested"], s["reserved"], s["cached"]) == \
        (1 * MiB + 4096, 1 * MiB + 4000, 2 * MiB, 1 * MiB - 4096)
    d = pool.allocate(1 * MiB)            # does not fit in the rest: a second segment
    assert space.reserve_calls == 2 and pool.snapshot()[1]["address"] == d.address
    check(pool, space, [a, b, c, d])


def test_large_segments_and_the_split_threshold():
    space, pool = make()
    a = pool.allocate(3 * MiB)            # 4 MiB segment, 1 MiB left: not worth splitting
    assert a.size == 4 * MiB and layout(pool) == [[(4 * MiB, True)]]
    b = pool.allocate(5 * MiB // 2)       # 4 MiB segment, 1.5 MiB left: split
    assert b.size == 5 * MiB // 2
    assert layout(pool)[1] == [(5 * MiB // 2, True), (3 * MiB // 2, False)]
    c = pool.allocate(1 * MiB + 1)        # large, though the free 1.5 MiB is in reach: fits there
    assert c.address == b.address + b.size and c.size == 3 * MiB // 2   # rest 0.5 MiB unsplit
    assert space.reserve_calls == 2
    check(pool, space, [a, b, c])


def test_small_and_large_pools_are_separate():
    space, pool = make()
    big = pool.allocate(4 * MiB)
    big.free()                            # 4 MiB cached in the large pool
    small = pool.allocate(100)
    assert space.reserve_calls == 2 and pool.snapshot()[1]["small"]
    small.free()                          # ~2 MiB cached in the small pool
    large = pool.allocate(1 * MiB + 512)  # from the large cache, not the small segment
    assert large.address == big.address and space.reserve_calls == 2
    check(pool, space, [large])


# -- best fit, splitting, coalescing ------------------------------------------------------------

def holes(pool, sizes):
    """A small segment with free holes of ``sizes`` (KiB), separated by 1 KiB live blocks."""
    live, gaps = [], []
    for size in sizes:
        gaps.append(pool.allocate(size * KiB))
        live.append(pool.allocate(1 * KiB))
    for g in gaps:
        g.free()
    return live, gaps


def test_best_fit_takes_the_smallest_block_that_fits():
    space, pool = make()
    live, gaps = holes(pool, [4, 1, 2, 8])
    b = pool.allocate(1536)               # 2 KiB hole: the smallest >= 1.5 KiB, split
    assert b.address == gaps[2].address and b.size == 1536
    assert (b.address + 1536, 512) in [(f[1], f[0]) for f in pool._free[True]]
    c = pool.allocate(1 * KiB)            # exactly the 1 KiB hole
    assert c.address == gaps[1].address
    d = pool.allocate(3 * KiB)            # 4 KiB hole (8 KiB and the tail are larger)
    assert d.address == gaps[0].address
    check(pool, space, live + [b, c, d])
    assert space.reserve_calls == 1


def test_best_fit_ties_go_to_the_lowest_address():
    space, pool = make()
    live, gaps = holes(pool, [2, 2, 2])
    assert pool.allocate(2 * KiB).address == gaps[0].address
    assert pool.allocate(2 * KiB).address == gaps[1].address


def quarters(pool):
    """A small segment filled with four 512 KiB live blocks."""
    blocks = [pool.allocate(512 * KiB) for _ in range(4)]
    assert layout(pool) == [[(512 * KiB, True)] * 4]
    return blocks


Q = 512 * KiB


@pytest.mark.parametrize("order, expect", [
    ("b", [(Q, True), (Q, False), (Q, True), (Q, True)]),          # no free neighbour
    ("ab", [(2 * Q, False), (Q, True), (Q, True)]),                # b merges left
    ("dc", [(Q, True), (Q, True), (2 * Q, False)]),                # c merges right
    ("acb", [(3 * Q, False), (Q, True)]),                          # b merges both ways
    ("bdc", [(Q, True), (3 * Q, False)]),
    ("bdca", [(4 * Q, False)]),
])
def test_coalescing(order, expect):
    space, pool = make()
    blocks = dict(zip("abcd", quarters(pool)))
    for name in order:
        blocks.pop(name).free()
    assert layout(pool) == [expect]
    check(pool, space, list(blocks.values()))


def test_free_beside():
    space, pool = make()
    a, b, c, d = quarters(pool)
    assert [pool.free_beside(x) for x in (a, b, c, d)] == [0, 0, 0, 0]
    b.free()
    assert (pool.free_beside(a), pool.free_beside(c), pool.free_beside(d)) == (Q, Q, 0)
    d.free()                              # at the right edge: nothing beyond it counts
    assert pool.free_beside(c) == 2 * Q
    whole = pool.allocate(2 * MiB)        # a large segment of exactly one block
    assert pool.free_beside(whole) == 0
    with pytest.raises(ValueError, match="not a live block"):
        pool.free_beside(b)
    check(pool, space, [a, c, whole])


# -- statistics -------------------------------------------------------------------------------

def test_exact_stats_after_each_operation():
    space, pool = make()
    keys = ("allocated", "requested", "reserved", "cached", "segments", "blocks", "free_blocks",
            "largest_free")

    def stats():
        s = pool.stats()
        return tuple(s[k] for k in keys)

    assert stats() == (0, 0, 0, 0, 0, 0, 0, 0)
    a = pool.allocate(1000)
    assert stats() == (1024, 1000, 2 * MiB, 2 * MiB - 1024, 1, 1, 1, 2 * MiB - 1024)
    b = pool.allocate(3 * MiB)
    assert stats() == (1024 + 4 * MiB, 1000 + 3 * MiB, 6 * MiB, 2 * MiB - 1024, 2, 2, 1,
                       2 * MiB - 1024)
    a.free()
    assert stats() == (4 * MiB, 3 * MiB, 6 * MiB, 2 * MiB, 2, 1, 1, 2 * MiB)
    b.free()
    assert stats() == (0, 0, 6 * MiB, 6 * MiB, 2, 0, 2, 4 * MiB)
    assert pool.empty_cache() == 6 * MiB
    assert stats() == (0, 0, 0, 0, 0, 0, 0, 0)
    s = pool.stats()
    assert (s["allocs"], s["frees"], s["segment_reserves"], s["segment_releases"], s["ooms"]) == \
        (2, 2, 2, 2, 0)


def test_peaks_and_reset():
    space, pool = make()
    a = pool.allocate(3 * MiB)            # 4 MiB
    b = pool.allocate(1 * MiB)            # 1 MiB of a 2 MiB small segment
    a.free()
    s = pool.stats()
    assert (s["allocated"], s["peak_allocated"], s["reserved"], s["peak_reserved"]) == \
        (1 * MiB, 5 * MiB, 6 * MiB, 6 * MiB)
    pool.empty_cache()
    assert (pool.reserved, pool.peak_reserved) == (2 * MiB, 6 * MiB)
    pool.reset_peak()
    assert (pool.peak_allocated, pool.peak_reserved) == (1 * MiB, 2 * MiB)
    c = pool.allocate(512)
    b.free()
    assert (pool.allocated, pool.peak_allocated) == (512, 1 * MiB + 512)
    assert pool.peak_reserved == 2 * MiB
    check(pool, space, [c])


def test_empty_cache_releases_only_wholly_free_segments():
    space, pool = make()
    keep = pool.allocate(100)             # small segment, stays
    tmp = pool.allocate(200)
    big1, big2 = pool.allocate(4 * MiB), pool.allocate(6 * MiB)
    tmp.free()
    big1.free()
    assert pool.empty_cache() == 4 * MiB
    assert space.reserved() == [(pool.snapshot()[0]["address"], 2 * MiB),
                                (big2.address, 6 * MiB)]
    assert space.release_calls == 1
    assert pool.empty_cache() == 0
    check(pool, space, [keep, big2])


def test_cached_blocks_are_reused_without_asking_the_space():
    space, pool = make()
    blocks = [pool.allocate(n) for n in (100, 5000, 3 * MiB, 8 * MiB)]
    addresses = [b.address for b in blocks]
    for b in blocks:
        b.free()
    calls = space.reserve_calls
    again = [pool.allocate(n) for n in (100, 5000, 3 * MiB, 8 * MiB)]
    assert space.reserve_calls == calls and space.release_calls == 0
    assert [b.address for b in again] == addresses
    assert all(x is not y for x, y in zip(blocks, again))    # fresh objects every time
    check(pool, space, again)


# -- freeing errors ------------------------------------------------------------------------------

def test_double_free_and_foreign_blocks():
    space, pool = make()
    a, b = pool.allocate(100), pool.allocate(100)
    a.free()
    with pytest.raises(ValueError, match="double free"):
        pool.free(a)
    c = pool.allocate(100)                # takes a's memory: a stays dead, c is not hurt
    assert c.address == a.address
    with pytest.raises(ValueError, match="double free"):
        a.free()
    assert c.allocated
    other = CachingPool(FakeAddressSpace(4 * MiB))
    with pytest.raises(ValueError, match="not a block of this pool"):
        other.free(b)
    with pytest.raises(ValueError, match="not a block of this pool"):
        pool.free("b")
    check(pool, space, [b, c])


# -- out of memory --------------------------------------------------------------------------------

def test_oom_callbacks_in_order_retry_after_one_that_freed():
    space, pool = make(8 * MiB)
    hog = pool.allocate(8 * MiB)
    log = []

    def nothing(n):
        log.append(("nothing", n))
        return False

    def frees(n):
        log.append(("frees", n))
        hog.free()
        return True

    def never(n):
        log.append(("never", n))
        return False

    for fn in (nothing, frees, never):
        pool.add_oom_callback(fn)
    b = pool.allocate(3 * MiB)
    assert log == [("nothing", 3 * MiB), ("frees", 3 * MiB)]   # success: ``never`` not asked
    assert b.address == hog.address and space.release_calls == 0
    check(pool, space, [b])


def test_oom_callbacks_are_called_again_while_they_free():
    space, pool = make(8 * MiB)
    hogs = [pool.allocate(2 * MiB) for _ in range(4)]      # four 2 MiB large segments
    calls = []

    def evict_one(n):                     # as DTR does: one tensor a call
        calls.append(n)
        if not hogs:
            return False
        hogs.pop(0).free()
        return True

    pool.add_oom_callback(evict_one)
    b = pool.allocate(4 * MiB)            # no 4 MiB block: 2 MiB segments freed one by one,
    assert len(calls) == 5                # then empty_cache joins their ranges in the space
    assert b.size == 4 * MiB and pool.stats()["segment_releases"] == 4
    pool.remove_oom_callback(evict_one)
    with pytest.raises(ValueError):
        pool.remove_oom_callback(evict_one)
    check(pool, space, [b])


def test_oom_empty_cache_comes_after_the_callbacks():
    space, pool = make(4 * MiB)
    smalls = [pool.allocate(1 * MiB) for _ in range(4)]    # two small segments fill the space
    for s in smalls:
        s.free()
    seen = []
    pool.add_oom_callback(lambda n: seen.append(len(space.reserved())) or False)
    b = pool.allocate(3 * MiB)            # the small cache cannot serve it: released, retried
    assert seen == [2] and b.size == 4 * MiB
    assert pool.stats()["segment_releases"] == 2 and pool.stats()["segments"] == 1
    check(pool, space, [b])


def test_oom_error_message_and_the_pool_unchanged_after():
    space, pool = make(8 * MiB)
    a = pool.allocate(3 * MiB)            # 4 MiB large segment
    b = pool.allocate(1000)               # small segment, 2 MiB - 1 KiB cached in it
    c = pool.allocate(1 * MiB + 512)      # 2 MiB large segment: the space is full
    pool.add_oom_callback(lambda n: False)
    before, stats_before = pool.snapshot(), pool.stats()
    with pytest.raises(PoolOutOfMemory) as e:
        pool.allocate(5 * MiB - 100)
    err = e.value
    assert isinstance(err, MemoryError) and isinstance(err.__cause__, OutOfDeviceMemory)
    assert (err.requested, err.size) == (5 * MiB - 100, 5 * MiB)
    msg = str(err)
    for part in ("out of memory", f"tried to allocate {format_bytes(5 * MiB - 100)}",
                 f"rounded to {format_bytes(5 * MiB)}", format_bytes(6 * MiB) + " in the large",
                 f"Allocated {format_bytes(6 * MiB + 1024)}", f"reserved {format_bytes(8 * MiB)}",
                 f"cached free {format_bytes(2 * MiB - 1024)} in 1 blocks",
                 f"largest free cached block {format_bytes(2 * MiB - 1024)}",
                 "The device said: cannot reserve"):
        assert part in msg, (part, msg)
    assert pool.snapshot() == before      # nothing leaked, nothing released (no free segment)
    after = pool.stats()
    assert after.pop("ooms") == stats_before.pop("ooms") + 1 and after == stats_before
    check(pool, space, [a, b, c])
    d = pool.allocate(1 * MiB)            # still usable: from the small segment's cache
    for x in (a, b, c, d):
        x.free()
    assert pool.empty_cache() == 8 * MiB and space.reserved() == []


def test_oom_releases_free_segments_then_fails_cleanly():
    space, pool = make(4 * MiB)
    pool.allocate(1 * MiB).free()         # a cached, wholly free small segment
    live = pool.allocate(2 * MiB)
    with pytest.raises(PoolOutOfMemory):
        pool.allocate(3 * MiB)
    assert pool.stats()["segments"] == 1 and space.reserved() == [(live.address, 2 * MiB)]
    check(pool, space, [live])


def test_a_callback_freeing_from_another_thread_does_not_deadlock():
    space, pool = make(4 * MiB)
    hog = pool.allocate(4 * MiB)

    def evict(n):
        # The pool's lock must not be held here: the thread's free() needs it.
        t = threading.Thread(target=hog.free)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive(), "deadlock: free() blocked while the callback ran"
        return True

    pool.add_oom_callback(evict)
    b = pool.allocate(4 * MiB)
    assert b.address == hog.address and not hog.allocated
    check(pool, space, [b])


def test_a_callback_that_raises_leaves_the_pool_usable():
    space, pool = make(2 * MiB)
    a = pool.allocate(2 * MiB)

    def broken(n):
        raise RuntimeError("eviction failed")

    pool.add_oom_callback(broken)
    with pytest.raises(RuntimeError, match="eviction failed"):
        pool.allocate(1)
    check(pool, space, [a])
    pool.remove_oom_callback(broken)
    a.free()
    assert pool.allocate(1).address == a.address


# -- threads ------------------------------------------------------------------------------------

def test_threads_allocate_and_free_concurrently():
    space, pool = make(4096 * MiB)   # ample: this test is about races, not OOM
    n_threads, steps = 8, 300
    barrier = threading.Barrier(n_threads)
    kept, errors = [], []

    def work(seed):
        rng = random.Random(seed)
        mine = []
        try:
            barrier.wait()
            for _ in range(steps):
                if mine and rng.random() < 0.45:
                    mine.pop(rng.randrange(len(mine))).free()
                else:
                    size = rng.choice([rng.randrange(0, 64 * KiB), rng.randrange(0, 1 * MiB),
                                       rng.randrange(1 * MiB, 5 * MiB)])
                    mine.append(pool.allocate(size))
                if rng.random() < 0.02:
                    pool.empty_cache()
        except Exception as e:            # reported below, with the invariants
            errors.append(e)
        kept.extend(mine)                 # list.extend is atomic under the GIL

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = pool.stats()
    assert s["allocs"] - s["frees"] == len(kept)
    check(pool, space, kept)
    for b in kept:
        b.free()
    pool.empty_cache()
    assert pool.allocated == pool.reserved == 0 and space.reserved() == []


# -- the state machine ---------------------------------------------------------------------------

SIZES = st.one_of(st.integers(0, 4 * KiB), st.integers(0, 1 * MiB),
                  st.integers(1 * MiB + 1, 7 * MiB),
                  st.sampled_from([0, 512, 1 * MiB, 1 * MiB + 1, 2 * MiB, 3 * MiB, 4 * MiB]))


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / free / empty_cache / reset_peak on a 24 MiB space, optionally with an
    eviction callback that frees the oldest live block; every invariant after each step, and
    the peaks against a model."""

    def __init__(self):
        super().__init__()
        self.space = FakeAddressSpace(24 * MiB)
        self.pool = CachingPool(self.space)
        self.live = []
        self.peaks = [0, 0]               # the model's peak allocated, peak reserved

    @initialize(evict=st.booleans())
    def setup(self, evict):
        self.evict = evict
        if evict:
            self.pool.add_oom_callback(self._evict)

    def _evict(self, n):
        if not self.live:
            return False
        self.live.pop(0).free()
        return True

    @rule(nbytes=SIZES)
    def allocate(self, nbytes):
        try:
            b = self.pool.allocate(nbytes)
        except PoolOutOfMemory as e:
            assert e.requested == nbytes
            assert not (self.evict and self.live)         # eviction tried everything
            free_segment = [s for s in self.pool.snapshot() if len(s["blocks"]) == 1
                            and not s["blocks"][0]["allocated"]]
            assert free_segment == []                      # empty_cache ran
            return
        assert b.size >= CachingPool.round_size(nbytes) and b.requested == nbytes
        self.live.append(b)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        b = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        if data.draw(st.booleans()):
            b.free()
        else:
            self.pool.free(b)
        with pytest.raises(ValueError, match="double free"):
            b.free()

    @rule()
    def empty_cache(self):
        before = self.pool.reserved
        released = self.pool.empty_cache()
        assert released == before - self.pool.reserved
        assert all(any(b["allocated"] for b in s["blocks"]) for s in self.pool.snapshot())

    @rule()
    def reset_peak(self):
        self.pool.reset_peak()
        self.peaks = [self.pool.allocated, self.pool.reserved]

    @invariant()
    def consistent(self):
        check(self.pool, self.space, self.live)
        # allocated only grows at an allocation's end, and reserved only at a segment's
        # reservation (the last step of a successful request) or as it was when a request began
        self.peaks = [max(self.peaks[0], self.pool.allocated),
                      max(self.peaks[1], self.pool.reserved)]
        assert [self.pool.peak_allocated, self.pool.peak_reserved] == self.peaks


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                         derandomize=True, database=None)
test_pool_state_machine = PoolMachine.TestCase
