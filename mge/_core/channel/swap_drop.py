"""Swap and drop: values that leave their device and come back when they are used.

``SwapDrop`` is a base of ``Channel`` (``channel.py``); its methods run on the worker's side, in
queue order:

* swap out keeps a host copy (``h_value``, from the device's ``to_host``) and frees the device
  buffer; swap in (or the next use) puts the copy back with ``from_host``;
* drop frees the buffer of a tensor whose producer was recorded (``record_computing_path``); the
  next use recomputes it: ``_regenerate`` runs the producers of the missing values again, through
  the kernel door, on the same inputs -- the same kernel on the same values gives the same bits.

DTR (``dtr_mechanism.py``) evicts by dropping, so its evicted tensors come back the same way.
Compiled (see ``_accel``).
"""
import warnings
from time import perf_counter

import cython

from .. import _accel

_accel.guard(__name__)
unusable = _accel.load("mge._core.channel.executor").unusable
_h = _accel.load("mge._core.channel.handles")
if cython.compiled:
    from cython.cimports.mge._core.channel.handles_c import TensorInfo
else:
    TensorInfo = _h.TensorInfo
SWAP, DROP, NONE = _h.SWAP, _h.DROP, _h.NONE
HOST_COMPUTE_SIZE = _h.HOST_COMPUTE_SIZE

__all__ = ["SwapDrop"]

_prof = cython.declare(object, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec



class SwapDrop:
    """Swap out/in, drop and recompute (a base of ``Channel``)."""

    def _swap_out_now(self, info_):
        info: TensorInfo = info_
        if info.value is None or info.evict_type != NONE:
            return
        # a host copy the device buffer can go without (``to_host`` may be a view of it)
        info.h_value = info.device.impl.to_host(info.value).copy()
        self._release(info)
        info.evict_type = SWAP
        if self.dtr_entries:
            e = self.dtr_entries.get(info)
            if e is not None:
                self.dtr.erase_candidate(e)

    def _swap_back(self, info_):
        info: TensorInfo = info_
        host = info.h_value
        if host.size > HOST_COMPUTE_SIZE:
            info.h_value = None  # the copy becomes the device's
        else:
            host = host.copy()  # tiny values keep their host copy (see Channel.put)
        self._produce(info, info.device.impl.from_host(host))
        if self.dtr_entries:
            e = self.dtr_entries.get(info)
            if e is not None:
                self.dtr.resident(e, self.dtr_mode)

    def _do_drop(self, info_, user=True):
        info: TensorInfo = info_
        if info.value is None or info.evict_type != NONE:
            return
        if info.producer is None:
            if user:
                warnings.warn("the input that produced this tensor has been deleted or its "
                              "computing path was not recorded (set record_computing_path=1 and "
                              "enable_drop=1 first); this drop is ignored", RuntimeWarning)
            return
        if self.dtr_entries:
            e = self.dtr_entries.get(info)
            if e is not None and e.neighbors is not None:  # recorded under DTR
                self._evict(e, False)
                return
        self._release(info)
        info.evict_type = DROP

    def _regenerate(self, info_):
        """Give ``info`` its value back: from the host copy, or by recomputing its producer.

        Iterative (the seed recursed): the evicted inputs of a producer are regenerated first, and
        a chain of thousands of evicted tensors must not hit Python's recursion limit.  The inputs
        of every producer on the stack are pinned, so that making room for one recomputation never
        evicts what a pending one needs.
        """
        info: TensorInfo = info_
        if info.evict_type == SWAP:
            self._swap_back(info)
            return
        if info.evict_type != DROP or info.producer is None:
            raise RuntimeError(f"cannot produce {info!r}: it has no value and no way to get one")
        dtr = self.dtr
        stack = [info]
        paths = [None]  # the producer of each tensor on the stack once its inputs are pinned
        t: TensorInfo
        try:
            while stack:
                t = stack[-1]
                path = paths[-1]
                if path is None:
                    if t.value is not None:
                        stack.pop()
                        paths.pop()
                        continue
                    if t.error is not None:
                        raise unusable() from t.error
                    if t.evict_type == SWAP:
                        self._swap_back(t)
                        stack.pop()
                        paths.pop()
                        continue
                    path = t.producer
                    if t.evict_type != DROP or path is None:
                        raise RuntimeError(
                            f"cannot produce {t!r}: it has no value and no way to get one")
                    dtr.pin(path.inputs)
                    paths[-1] = path
                    inputs = path.inputs
                    for k in range(len(inputs) - 1, -1, -1):
                        if inputs[k].value is None:
                            stack.append(inputs[k])
                            paths.append(None)
                    continue
                if t.value is None:
                    self._recompute(path)
                stack.pop()
                paths.pop()
                dtr.unpin(path.inputs)
        except BaseException:
            for path in paths:
                if path is not None:
                    dtr.unpin(path.inputs)
            raise

    def _recompute(self, path):
        if _prof is not None:  # profiler: the recomputation as a span (its kernel inside)
            _prof.recompute(self._recompute_now, path)
            return
        self._recompute_now(path)

    def _recompute_now(self, path):
        # The seed's ``recompute``: the producer runs again on its (present, pinned) inputs and
        # gives back the outputs that were dropped.  Same kernel, same input values: the same bits.
        dtr = self.dtr
        if self.dtr_mode and self.worker_options["dtr_eviction_threshold"] > 0:
            self._auto_evict()
        op = path.op
        inputs = path.inputs
        outputs = path.outputs
        dtr.touch(inputs)
        start = perf_counter()
        values = []
        for i in inputs:
            values.append(i.value)
        cost = 0
        for i in inputs:
            cost += i.device.impl.nbytes(i.value)
        outs = self._run_kernel(op, inputs, values, outputs, None)
        del values
        self.stats["recomputed"] += 1
        back = []
        nbytes = 0
        for k in range(len(outputs)):
            o = outputs[k]
            n = o.device.impl.nbytes(outs[k])
            cost += n
            if o.value is None and o.evict_type == DROP:
                self._produce(o, outs[k])
                nbytes += n
                back.append(o)
        dtr.recomputations += 1
        dtr.recomputed_bytes += nbytes
        dtr.recompute_time += perf_counter() - start
        for o in back:
            e = dtr.get(o)
            if e is not None:
                dtr.recomputed(e, self.dtr_mode)
        dtr.advance(cost)
