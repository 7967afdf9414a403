"""DTR's mechanism in the channel: recording, evicting and freeing under a memory budget.

``DtrMechanism`` is a base of ``Channel`` (``channel.py``); it acts, on the worker's side, on what
the policy (``mge/_core/dtr.py``: candidates, scores, union-find) decides.  ``Executor._do_apply``
pins an op's inputs, regenerates the evicted ones (``swap_drop.py``), calls ``_auto_evict`` to stay
under the budget, runs the kernel and calls ``_dtr_record``; ``_free`` hands tensors that DTR knows
to ``_dtr_free``.  Buffers are the devices': their storage and size come from
``Device.storage``, and the memory used is the channel's ``MemoryStats``.  Compiled (see
``_accel``).
"""
import warnings

import cython

from .. import _accel

_accel.guard(__name__)
_h = _accel.load("mge._core.channel.handles")
if cython.compiled:
    from cython.cimports.mge._core.channel.handles_c import ComputePath, TensorInfo
else:
    TensorInfo, ComputePath = _h.TensorInfo, _h.ComputePath
SWAP, DROP, NONE = _h.SWAP, _h.DROP, _h.NONE

__all__ = ["DtrMechanism"]

_prof = cython.declare(object, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec



class DtrMechanism:
    """Record, evict, free under DTR (a base of ``Channel``)."""

    def _dtr_watch(self, device):
        # A device whose allocator can run out before the budget says so (a memory pool: the
        # CUDA device) asks DTR to evict when it does, budget or not: MegEngine forces an
        # eviction on an allocation failure, then allocates again.  Once per device (object: a
        # kind registered again has new devices of the old names).
        impl = device.impl
        watched = self._dtr_watched
        if impl in watched:
            return
        watched.add(impl)
        add = getattr(impl, "add_oom_callback", None)
        if add is not None:
            add(lambda nbytes: self._dtr_evict_for_oom(device))

    def _dtr_evict_for_oom(self, device):
        # the pool's out-of-memory callback: evict the best candidate of ``device`` now; whether
        # one was (the pool then tries again, and calls back while this frees something)
        dtr = self.dtr
        if not self.dtr_mode or dtr.device != device:
            return False
        memory = self.memory
        skipped = []
        try:
            while True:
                e = dtr.find_best(self.worker_options["enable_dtr_sqrt_sampling"])
                if e is None:
                    return False
                if memory.holders(e.info.device, e.info.value) > 1:
                    e.pinned += 1  # (a view holds its buffer: evicting it frees nothing)
                    skipped.append(e)
                    continue
                self._evict(e, True)
                return True
        finally:
            for e in skipped:
                e.pinned -= 1

    def _dtr_record(self, op, inputs, outputs, cost, minimum):
        # The seed's ComputePath::make under DTR: not across devices, not when an output shares
        # an input's storage (a view, or an input returned as is: evicting it frees nothing and it
        # has no computation of its own); outputs of at most ``minimum`` bytes get no producer
        # (never evicted).  Ops that must never be recomputed are not recorded at all (the
        # caller checks ``op.never_recompute``).
        dtr = self.dtr
        device = dtr.device
        if device is None:
            device = outputs[0].device if outputs else None
        owners = []
        for i in inputs:
            if i.device != device:
                return
            owners.append(_storage(i)[0])
        kept = None
        sizes = None
        for o in outputs:
            if o.device != device:
                return
            own, nbytes = _storage(o)
            for w in owners:
                if w is own:
                    return
            if nbytes > minimum:
                if kept is None:
                    kept = [o]
                    sizes = [float(nbytes)]
                else:
                    kept.append(o)
                    sizes.append(float(nbytes))
        if kept is None:
            return
        path = ComputePath(op, list(inputs), list(outputs))
        for o in kept:
            o.producer = path
        seen = []
        for i in inputs:
            if i in seen:
                continue
            seen.append(i)
            if i.users is None:
                i.users = [path]
            else:
                i.users.append(path)
        dtr.record(inputs, kept, sizes, cost)

    def _auto_evict(self):
        # The seed's auto_evict: while the device's used memory (its live tensor bytes, exact on
        # the CPU) is over the budget, evict the candidate with the smallest score.
        dtr = self.dtr
        device = dtr.device
        if device is None:
            return
        memory = self.memory
        threshold = self.worker_options["dtr_eviction_threshold"]
        used = memory.allocated(device)
        if used <= threshold:
            return
        sqrt_sampling = self.worker_options["enable_dtr_sqrt_sampling"]
        skipped = None
        try:
            while used > threshold:
                e = dtr.find_best(sqrt_sampling)
                if e is None:
                    if not dtr.warn_printed:
                        dtr.warn_printed = True
                        warnings.warn(
                            f"No tensors on {device} can be evicted automatically when memory "
                            f"usage is {used / 1048576.0:.0f}MB. Maybe memory budget is too small.",
                            RuntimeWarning)
                    break
                if memory.holders(e.info.device, e.info.value) > 1:
                    # Another tensor (a view) holds its buffer: evicting it would free nothing.
                    # Pinned for the rest of this round (seed: evicted anyway).
                    e.pinned += 1
                    if skipped is None:
                        skipped = [e]
                    else:
                        skipped.append(e)
                    continue
                self._evict(e, True)
                used = memory.allocated(device)
        finally:
            if skipped is not None:
                for e in skipped:
                    e.pinned -= 1

    def _evict(self, e, auto):
        info = e.info
        if _prof is not None:  # profiler: the eviction, with its bytes and estimated cost
            _prof.evict(info, e.nbytes, e.compute_time, auto)
        self._release(info)
        info.evict_type = DROP
        self.dtr.evicted(e, auto)

    def _dtr_free(self, info_, e):
        # The seed's free under DTR.  While live tensors recorded as computed from it may need it
        # for a recomputation it stays, *released*: evicted at once (the seed) -- or, while a
        # budget is set, left as a candidate that is evicted before any other when memory runs
        # short (see DynamicSublinear.find_best) -- and kept as it is when it cannot be
        # recomputed.  Otherwise free it and, with it, the released inputs kept only for it.
        info: TensorInfo = info_
        if e.ref_cnt > 0:
            e.allow_delete = True
            if (info.value is not None and info.evict_type == NONE and e.neighbors is not None
                    and not (self.dtr_mode and self.worker_options["dtr_eviction_threshold"] > 0
                             and e.slot >= 0)):
                self._evict(e, False)
            return
        dtr = self.dtr
        stack = [info]
        x: TensorInfo
        while stack:  # the seed's recursive_free, without the recursion
            x = stack.pop()
            users = x.users
            if users:
                # seed: detach_users.  Outputs recomputable from it are regenerated while it still
                # exists and stop being recomputable.
                x.users = None
                for path in users:
                    for o in path.outputs:
                        if o.producer is path:
                            if o.value is None and o.evict_type == DROP:
                                self._regenerate(o)
                            o.producer = None
                            dead = dtr.detach(o, path.inputs)
                            if dead is not None:
                                for d in dead:
                                    if d is not x:
                                        stack.append(d)
                    _unlink_path(path)
            path = x.producer
            if path is not None:
                x.producer = None
                dead = dtr.detach(x, path.inputs)
                if dead is not None:
                    stack.extend(dead)
                _unlink_path(path)
            dtr.forget(x)
            self._release(x)
            x.h_value = None
            x.evict_type = NONE


def _storage(info):
    # (owner, nbytes) of the storage behind a tensor's buffer, from its device
    return info.device.impl.storage(info.value)


def _unlink_path(path):
    # A producer none of whose outputs can be recomputed from it any more: its inputs forget it
    # (a long-lived input, such as the data of every step, would collect them all otherwise).
    for o in path.outputs:
        if o.producer is path:
            return
    for i in path.inputs:
        users = i.users
        if users:
            kept = [u for u in users if u is not path]
            i.users = kept if kept else None
