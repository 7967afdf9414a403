"""DTR's policy: the candidate set, the score, the choice of a victim and the union-find.

Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021; MegEngine's ``DynamicSublinear`` in
seed ``003``) trains in less memory than the activations need: before an op runs, while the
device's used memory is over the budget, the channel evicts the candidate with the smallest score
and recomputes evicted tensors from their producers when they are used again.  This module is the
bookkeeping; the mechanism (pinning, evicting, regenerating, freeing) is in ``channel.py``.

A tensor the channel records under DTR gets an ``Entry``: its bytes, the estimated cost of
computing it, when it was last used, how often it was recomputed, how many ops now running need it
(``pinned``), how many live tensors may need it for a recomputation (``ref_cnt``), and its node in
the union-find of evicted tensors.  The score of a candidate is MegEngine's ``eval_func``::

    (cost + 1e-3) * 1.0001 ** recompute_times / ((bytes / 2**20) * (now - last_used + 1e-3))

where ``cost`` is the candidate's own compute cost plus that of the evicted components around it
(each component once), costs are the bytes an op reads and writes, and the logical clock ``now``
advances by an op's cost / 1e8 (the seed's estimates: deterministic, so runs evict the same way).
Where this differs from the seed it says so in a comment marked "seed:".

Compiled (see ``_accel``), the candidates are scanned in C: choosing a victim among N candidates
costs no Python operation per candidate.  Pure-Python mode runs the same code.
"""
import cython

from . import _accel
from .device.base import Device as _Device

_accel.guard(__name__)

__all__ = ["DsuNode", "Entry", "DynamicSublinear"]

_MB = cython.declare(cython.double, 1048576.0)  # a C constant when compiled


@cython.cclass
class DsuNode:
    """A node of the union-find of evicted tensors; a root's ``t`` is its component's cost."""

    parent = cython.declare(object, visibility="public")  # DsuNode, or None for a root
    t = cython.declare(cython.double, visibility="public")
    mark = cython.declare(cython.longlong, visibility="public")  # dedups roots while scoring

    def __init__(self, t):
        self.parent = None
        self.t = t
        self.mark = 0


@cython.cclass
class Entry:
    """What DTR knows of one recorded tensor (``info``, a channel ``TensorInfo``)."""

    info = cython.declare(object, visibility="public")
    nbytes = cython.declare(cython.double, visibility="public")        # freed by evicting it
    compute_time = cython.declare(cython.double, visibility="public")  # estimated cost
    last_used = cython.declare(cython.double, visibility="public")     # logical time
    recompute_times = cython.declare(cython.long, visibility="public")
    pinned = cython.declare(cython.long, visibility="public")          # ops now running need it
    ref_cnt = cython.declare(cython.long, visibility="public")         # live recomputable users
    slot = cython.declare(cython.Py_ssize_t, visibility="public")      # index in candidates, -1
    evicted = cython.declare(cython.bint, visibility="public")         # dropped: no value now
    allow_delete = cython.declare(cython.bint, visibility="public")    # the user let it go
    # Entries of the producer's inputs and outputs (shared by the outputs of one op); None while
    # the tensor has no recorded producer.
    neighbors = cython.declare(list, visibility="public")
    # Entries of the recorded tensors computed from this one (seed: not neighbours; see score).
    children = cython.declare(list, visibility="public")
    node = cython.declare(DsuNode, visibility="public")

    def __init__(self, info):
        self.info = info
        self.nbytes = 0.0
        self.compute_time = 0.0
        self.last_used = 0.0
        self.recompute_times = 0
        self.pinned = 0
        self.ref_cnt = 0
        self.slot = -1
        self.evicted = False
        self.allow_delete = False
        self.neighbors = None
        self.children = None
        self.node = DsuNode(0.0)

    def __repr__(self):
        return (f"<dtr.Entry {self.info!r} bytes={self.nbytes:.0f} cost={self.compute_time:.0f} "
                f"pinned={self.pinned} ref_cnt={self.ref_cnt} evicted={bool(self.evicted)}>")


@cython.cfunc
@cython.locals(node=DsuNode, x=DsuNode, root=DsuNode, nxt=DsuNode)
def _find(node) -> DsuNode:
    # iterative, with path compression: deep components must not hit the recursion limit
    root = node
    while root.parent is not None:
        root = root.parent
    x = node
    while x.parent is not None:
        nxt = x.parent
        x.parent = root
        x = nxt
    return root


@cython.cclass
class DynamicSublinear:
    """The candidates, the logical clock, the union-find and the statistics of one channel."""

    entries = cython.declare(dict, visibility="readonly")   # TensorInfo -> Entry (never rebound)
    candidates = cython.declare(list, visibility="public")  # resident, recomputable, evictable
    clock = cython.declare(cython.double, visibility="public")
    device = cython.declare(object, visibility="public")    # the device DTR manages
    free_beside = cython.declare(object, visibility="public")  # its Device.free_beside, or None
    warn_printed = cython.declare(cython.bint, visibility="public")
    _rand = cython.declare(cython.longlong)
    _stamp = cython.declare(cython.longlong)
    # statistics since the last reset
    evictions = cython.declare(cython.long, visibility="public")
    evicted_bytes = cython.declare(cython.double, visibility="public")
    recomputations = cython.declare(cython.long, visibility="public")
    recomputed_bytes = cython.declare(cython.double, visibility="public")
    recompute_time = cython.declare(cython.double, visibility="public")

    def __init__(self):
        self.entries = {}
        self.candidates = []
        self.clock = 0.0
        self.device = None
        self.free_beside = None
        self.warn_printed = False
        self._rand = 12345
        self._stamp = 0
        self.reset_stats()

    # -- entries -----------------------------------------------------------------------------------
    @cython.ccall
    def get(self, info):
        """The entry of ``info``, or None."""
        return self.entries.get(info)

    @cython.ccall
    def entry(self, info):
        """The entry of ``info``, made if it has none."""
        e = self.entries.get(info)
        if e is None:
            e = Entry(info)
            self.entries[info] = e
        return e

    @cython.ccall
    @cython.locals(e=Entry)
    def forget(self, info):
        """``info`` is freed for good: drop its entry (and its cost from its evicted component)."""
        e = self.entries.pop(info, None)
        if e is None:
            return
        self.erase_candidate(e)
        if e.evicted:
            self._leave_component(e)
            e.evicted = False
        e.neighbors = None
        e.children = None

    # -- the candidate set ---------------------------------------------------------------------------
    @cython.ccall
    @cython.locals(e=Entry)
    def insert_candidate(self, e):
        if e.slot >= 0:
            return
        e.slot = len(self.candidates)
        self.candidates.append(e)
        if self.device is None:
            self._manage(e.info.device)

    def _manage(self, device):
        # the device DTR manages now; its allocator's free bytes around a block count in the
        # score where it can tell them (a pool: the CUDA device), not on the CPU (always 0)
        self.device = device
        impl = getattr(device, "impl", None)
        if impl is not None and type(impl).free_beside is not _Device.free_beside:
            self.free_beside = impl.free_beside
        else:
            self.free_beside = None

    @cython.ccall
    @cython.locals(e=Entry, last=Entry, slot=cython.Py_ssize_t)
    def erase_candidate(self, e):
        slot = e.slot
        if slot < 0:
            return
        cands = self.candidates
        last = cands[len(cands) - 1]
        cands[slot] = last
        last.slot = slot
        cands.pop()
        e.slot = -1
        if not cands:  # none left: the next candidate's device is the one managed
            self.device = None
            self.free_beside = None

    @cython.ccall
    @cython.locals(e=Entry)
    def clear_candidates(self):
        """MegEngine's ``clear_candidates``: nothing is evicted automatically any more."""
        for e in self.candidates:
            e.slot = -1
        self.candidates = []
        self.device = None
        self.free_beside = None
        self.warn_printed = False

    # -- pins and time -----------------------------------------------------------------------------
    @cython.ccall
    @cython.locals(e=Entry)
    def pin(self, infos):
        """The op about to run reads ``infos``: they must not be evicted until ``unpin``."""
        entries = self.entries
        for i in infos:
            e = entries.get(i)
            if e is not None:
                e.pinned += 1

    @cython.ccall
    @cython.locals(e=Entry)
    def unpin(self, infos):
        entries = self.entries
        for i in infos:
            e = entries.get(i)
            if e is not None and e.pinned > 0:
                e.pinned -= 1

    @cython.ccall
    @cython.locals(e=Entry)
    def touch(self, infos):
        """``infos`` are used now (the seed's ``update_used_time``)."""
        entries = self.entries
        now: cython.double = self.clock
        for i in infos:
            e = entries.get(i)
            if e is not None:
                e.last_used = now

    @cython.ccall
    def advance(self, cost: cython.double):
        """An op that read and wrote ``cost`` bytes ran: the logical clock moves on (seed)."""
        self.clock += cost / 1e8

    # -- recording ---------------------------------------------------------------------------------
    @cython.ccall
    @cython.locals(e=Entry, ie=Entry, k=cython.Py_ssize_t)
    def record(self, inputs, outputs, nbytes, cost: cython.double):
        """An op read ``inputs`` and produced the recomputable ``outputs`` (of ``nbytes`` each,
        the bytes freed by evicting them) at a cost of ``cost``; they become candidates."""
        neighbors = []
        parents = []
        for i in inputs:
            ie = self.entry(i)
            ie.ref_cnt += len(outputs)  # one per output and per occurrence, as the seed
            if ie not in parents:
                parents.append(ie)
                neighbors.append(ie)
        made = []
        now: cython.double = self.clock
        for k in range(len(outputs)):
            e = self.entry(outputs[k])
            if e.evicted:  # cannot happen for a fresh output; keep the component sound anyway
                self._leave_component(e)
                e.evicted = False
            e.nbytes = nbytes[k]
            e.compute_time = cost
            e.last_used = now
            e.node = DsuNode(cost)
            neighbors.append(e)
            made.append(e)
        for e in made:
            e.neighbors = neighbors
            self.insert_candidate(e)
        for ie in parents:
            if ie.children is None:
                ie.children = list(made)
            else:
                ie.children.extend(made)

    @cython.ccall
    @cython.locals(e=Entry, ie=Entry)
    def detach(self, info, inputs):
        """``info`` loses its producer, whose inputs were ``inputs``; returns the inputs' infos
        whose last recomputable user this was and that the user already let go (to be freed)."""
        e = self.entries.get(info)
        if e is None or e.neighbors is None:
            return None  # not recorded under DTR (or already detached): no counts to undo
        self.erase_candidate(e)
        e.neighbors = None
        dead = None
        entries = self.entries
        for i in inputs:
            ie = entries.get(i)
            if ie is None:
                continue
            children = ie.children
            if children is not None and e in children:
                children.remove(e)
            ie.ref_cnt -= 1
            if ie.ref_cnt == 0 and ie.allow_delete:
                if dead is None:
                    dead = [i]
                elif i not in dead:
                    dead.append(i)
        return dead

    # -- eviction and recomputation -------------------------------------------------------------
    @cython.ccall
    @cython.locals(e=Entry, n=Entry, i=cython.Py_ssize_t)
    def evicted(self, e, auto: cython.bint):
        """``e`` was evicted: join the components of its evicted neighbours (the seed's
        ``update_dsu_after_evict``) and stop considering it."""
        self.erase_candidate(e)
        e.evicted = True
        e.node = DsuNode(e.compute_time)
        for around in (e.neighbors, e.children):
            if around is not None:
                for i in range(len(around)):
                    n = around[i]
                    if n is not e and n.evicted:
                        self._merge(n.node, e.node)
        if auto:
            self.evictions += 1
            self.evicted_bytes += e.nbytes

    @cython.ccall
    @cython.locals(e=Entry)
    def recomputed(self, e, candidate: cython.bint):
        """``e`` was recomputed (the seed's ``update_dsu_after_recompute``, which the seed never
        reaches: it runs only ``if (!o->ptr)`` right after the output was produced).  The
        statistics are counted by the channel, per recomputed op."""
        if e.evicted:
            self._leave_component(e)
            e.evicted = False
        e.recompute_times += 1
        e.last_used = self.clock
        if candidate and e.neighbors is not None:
            self.insert_candidate(e)

    @cython.ccall
    @cython.locals(e=Entry)
    def resident(self, e, candidate: cython.bint):
        """``e`` has its value again without a recomputation (swapped in)."""
        if e.evicted:
            self._leave_component(e)
            e.evicted = False
        if candidate and e.neighbors is not None:
            self.insert_candidate(e)

    @cython.cfunc
    @cython.locals(e=Entry, root=DsuNode)
    def _leave_component(self, e) -> cython.void:
        # seed: ``root.t -= compute_time`` and the node reset in place, which also cut off every
        # member whose path went through it; a fresh node leaves the others' component intact.
        root = _find(e.node)
        root.t -= e.compute_time
        e.node = DsuNode(e.compute_time)

    @cython.cfunc
    @cython.locals(x=DsuNode, y=DsuNode, fx=DsuNode, fy=DsuNode)
    def _merge(self, x, y) -> cython.void:
        fx = _find(x)
        fy = _find(y)
        if fx is fy:
            return
        fy.t += fx.t
        fx.parent = fy

    @cython.ccall
    @cython.locals(e=Entry)
    def neighbor_cost(self, e) -> cython.double:
        """The cost of the evicted components around ``e``: what evicting it would add to the
        next recomputation that needs it or them (the seed's ``estimate_neighbor_cost``)."""
        if e.neighbors is None:
            return 0.0
        self._stamp += 1
        return self._around(e, e.neighbors) + self._around(e, e.children)

    @cython.cfunc
    @cython.locals(e=Entry, n=Entry, root=DsuNode, i=cython.Py_ssize_t, t=cython.double,
                   cost=cython.double)
    def _around(self, e, around) -> cython.double:
        # seed: a component next to ``e`` twice was counted twice; the stamp counts it once.
        cost = 0.0
        if around is None:
            return cost
        for i in range(len(around)):
            n = around[i]
            if n is e or not n.evicted:
                continue
            root = _find(n.node)
            if root.mark == self._stamp:
                continue
            root.mark = self._stamp
            t = root.t
            if t < n.compute_time:
                t = n.compute_time
            cost += t
        return cost

    @cython.ccall
    @cython.locals(e=Entry)
    def score(self, e) -> cython.double:
        """MegEngine's ``eval_func`` with the seed's parameters (1, 1, 1, 1.0001): the bytes are
        the tensor's and the free ones beside its block (a pooled device's figure; 0 on the CPU).

        seed: ``cost`` was only the neighbours'; the tensor's own cost is added, as in the DTR
        paper's h_DTR.  A tensor the user released (kept only because live tensors may need it to
        be recomputed) is scored by its own cost: evicting it costs nothing until one of them is
        evicted too, and then their own neighbourhood cost counts it.
        """
        cost: cython.double = e.compute_time
        if not e.allow_delete:
            cost += self.neighbor_cost(e)
        mem: cython.double = e.nbytes
        if self.free_beside is not None:  # (seed: the block's free neighbours count)
            mem += self.free_beside(e.info.value)
        mem /= _MB
        stale: cython.double = self.clock - e.last_used + 1e-3
        return (cost + 1e-3) * (1.0001 ** e.recompute_times) / (mem * stale)

    @cython.ccall
    @cython.locals(e=Entry, best=Entry, i=cython.Py_ssize_t, n=cython.Py_ssize_t,
                   k=cython.Py_ssize_t, samples=cython.Py_ssize_t, s=cython.double,
                   best_s=cython.double, released=cython.bint, best_released=cython.bint)
    def find_best(self, sqrt_sampling: cython.bint = False):
        """The candidate to evict, or None when there is none (all pinned, or no candidates).

        Released tensors go first (seed: they were evicted as soon as they were released, which
        thrashes: a gradient evicted just before its use then needs the whole chain of released
        gradients behind it), then the smallest score.  With ``sqrt_sampling`` about sqrt(N)
        candidates, drawn at random, are scored; when all of those are pinned every candidate is
        (seed: it gave up, printing "nothing to evict").
        """
        cands = self.candidates
        n = len(cands)
        best = None
        best_s = 0.0
        best_released = False
        if n == 0:
            return None
        if sqrt_sampling and n > 3:
            samples = 1
            while (samples + 1) * (samples + 1) <= n:
                samples += 1
            for k in range(samples):
                # a small linear congruential generator: the same draws in both modes
                self._rand = (self._rand * 1103515245 + 12345) % 2147483648
                e = cands[self._rand % n]
                if e.pinned:
                    continue
                released = e.allow_delete
                if best is not None and best_released and not released:
                    continue
                s = self.score(e)
                if best is None or (released and not best_released) or s < best_s:
                    best = e
                    best_s = s
                    best_released = released
            if best is not None:
                return best
        for i in range(n):
            e = cands[i]
            if e.pinned:
                continue
            released = e.allow_delete
            if best is not None and best_released and not released:
                continue
            s = self.score(e)
            if best is None or (released and not best_released) or s < best_s:
                best = e
                best_s = s
                best_released = released
        return best

    # -- statistics --------------------------------------------------------------------------------
    @cython.ccall
    def reset_stats(self):
        self.evictions = 0
        self.evicted_bytes = 0.0
        self.recomputations = 0
        self.recomputed_bytes = 0.0
        self.recompute_time = 0.0

    def stats(self):
        """The counters since the last ``reset_stats`` (see ``mge.dtr.stats``)."""
        return {
            "evictions": int(self.evictions),
            "evicted_bytes": int(self.evicted_bytes),
            "recomputations": int(self.recomputations),
            "recomputed_bytes": int(self.recomputed_bytes),
            "recompute_time": float(self.recompute_time),
            "candidates": len(self.candidates),
        }
