"""The channel: the one door through which tensors are created, computed, read and freed.

MegEngine's interpreter channel (seed ``003``):

* ``apply_op`` infers the output shapes and dtypes at once (an unknown shape is allowed) and
  queues an ``ApplyOp`` command; the kernel runs later.  Ops whose inputs are all tiny host values
  (at most ``HOST_COMPUTE_SIZE`` elements, the seed's DEFAULT_CPU dispatch) run at once on the
  caller's thread instead, so shape arithmetic never waits.
* Commands pass through a ``CommandBuffer`` that fuses ``Del`` into the op that last read the
  tensor; the input is then freed before the kernel and an elementwise kernel (or an op's
  ``INPLACE`` kernel) may write its output into the freed buffer.
* Queued commands run in order.  Long kernels that mostly run without the GIL (``ON_WORKER``:
  matrix products, convolutions) and ops from outside mge run on the worker thread; the caller
  runs the others itself when it flushes them (``_pump``), and gives the worker the GIL when it
  needs it (``handoff.py``).
* An error in a kernel marks that command's outputs invalid and is raised at the next sync point
  on the caller's thread as ``AsyncError`` (``__cause__``: the original), once; at
  ``async_level=0`` the original error is raised by the call that caused it.
* ``_swap_out``/``_swap_in`` move a value to host memory and back; ``_drop`` frees it and
  recomputes it from its recorded producer when it is used again.
* DTR (``mge.dtr``, seed ``003``'s ``DynamicSublinear``): under a memory budget the worker evicts
  tensors before each op and recomputes them when they are used again (the "DTR" methods below;
  the policy is ``mge/_core/dtr.py``).
"""
import atexit
import os
import sys
import threading
import warnings
import weakref
from time import perf_counter as _perf_counter

import cython
import numpy as np

from .. import _accel
from ..ops.base import HOST, INFER, INPLACE, KERNELS, ON_WORKER
from ..device.cpu import blas as cpu_blas
from .options import Options
from .worker import Worker

_accel.guard(__name__)
_h = _accel.load("mge._core.channel.handles")
_mem = _accel.load("mge._core.device.memory")
_cb = _accel.load("mge._core.channel.command_buffer")
_dtr = _accel.load("mge._core.dtr")
_handoff = _accel.load("mge._core.device.cpu.handoff")
DynamicSublinear, _is_bad_op = _dtr.DynamicSublinear, _dtr.is_bad_op
if cython.compiled:  # the C types, so that the per-op path reads fields as struct members
    from cython.cimports.mge._core.channel.handles_c import ComputePath, TensorInfo
    from cython.cimports.mge._core.device.memory_c import MemoryStats
    from cython.cimports.mge._core.device.cpu.handoff_c import Handoff
else:
    Handoff = _handoff.Handoff
    TensorInfo, ComputePath = _h.TensorInfo, _h.ComputePath
    MemoryStats = _mem.MemoryStats
SWAP, DROP, NONE = _h.SWAP, _h.DROP, _h.NONE
RUNNING = _handoff.RUNNING
Command, CommandBuffer = _cb.Command, _cb.CommandBuffer
APPLY, DEL, GET_VALUE, SWAP_IN, SWAP_OUT, DROP_CMD, SET_OPTION, PUSH_SCOPE, POP_SCOPE = (
    _cb.APPLY, _cb.DEL, _cb.GET_VALUE, _cb.SWAP_IN, _cb.SWAP_OUT, _cb.DROP, _cb.SET_OPTION,
    _cb.PUSH_SCOPE, _cb.POP_SCOPE)

__all__ = ["Channel", "get_channel", "UnusableTensorError", "AsyncError", "HOST_COMPUTE_SIZE"]

_get_ident = threading.get_ident
_ndarray = np.ndarray
_CPU_KERNELS = KERNELS["cpu"]
HOST_COMPUTE_SIZE = 7  # the seed's limit for values kept and computed on the host

ASYNC_HINT = ("Hint: this is where it is reported, not where it happened. "
              "Set mge.config.async_level = 0 to raise errors where they happen.")


class UnusableTensorError(RuntimeError):
    """Raised when an op uses a tensor whose producer failed."""


class AsyncError(RuntimeError):
    """An error that happened while an op ran asynchronously, raised at the next sync point.

    Its ``__cause__`` is the original exception; ``errors`` lists every error reported at once.
    """


def _unusable():
    return UnusableTensorError("an input tensor is unusable due to previous error")


def _readonly(value):
    view = value.view()
    view.flags.writeable = False
    return view


def _refs(values, i):
    return sys.getrefcount(values[i])


# References to an array held only by a list and this module's check: the count above which
# someone else (a user's numpy view, another tensor) still sees the buffer.
_SOLE_REFS = _refs([np.empty(1)], 0)


def _as_array(value, dtype):
    if type(value) is not np.ndarray:
        value = np.asarray(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    return value


class Channel:
    """Executes ops on devices and owns every tensor's storage."""

    def __init__(self):
        self.options = Options()
        self.closed = False
        self.cv = threading.Condition()
        self.memory = MemoryStats()
        self.dtr = DynamicSublinear()  # DTR's policy and statistics (worker-side state)
        self.dtr_entries = self.dtr.entries  # (the same dict for good) empty: no DTR state to keep
        self._init_worker_state()
        self.scopes = []
        self.stats = {"inplace": 0, "fused_dels": 0, "recomputed": 0}
        if cpu_blas.INFO["reason"] == "not searched":
            cpu_blas.install(_handoff.CPU)

    def _init_worker_state(self):
        self.handoff = Handoff()  # when the worker gets the GIL from the caller (handoff.py)
        self.worker = Worker(self._process, self.cv, self.handoff, lambda: self.waiting, _offload)
        # At async_level 0 every op is waited for anyway: flushed commands then run right here on
        # the caller's thread, which saves the two thread handoffs per op of a round trip.
        self.inline = self.options.values["async_level"] == 0
        self.buffer = CommandBuffer(self._sink, self.options.get("buffer_length"))
        self.errors = []      # worker errors not yet raised on the caller's thread
        self.waiting = False  # the caller waits on cv: the worker must notify
        self.waiting_for = None  # the TensorInfo _wait waits for (None: the queue to drain)
        # The worker's own copy of the options, changed by SetOption commands in queue order (the
        # seed's worker state): an option set now must not change how already queued ops run.
        self.worker_options = dict(self.options.values)
        self.dtr_mode = bool(self.worker_options["enable_dtr_auto_drop"])

    def _sink(self, cmd):
        if self.inline:
            self._process(cmd)
        else:
            self.worker.add_task(cmd)
            self._pump()

    def _pump(self):
        # Run the queue's head commands here, in order, while the worker is idle and they are not
        # the worker's (``_offload``); wake the worker for the first one that is.  Errors are
        # caught by _process and reported at the next sync point, as the worker's are.
        worker = self.worker
        q = worker.queue
        if worker.death is not None:  # nothing runs any more: the waits report the death
            return
        if self.waiting:  # the caller only waits: the worker runs everything, without hand-offs
            worker.kick()
            return
        while q and worker.idle:
            cmd = q[0]
            if _offload(cmd):
                worker.kick()
                return
            q.popleft()
            self._process(cmd)

    def flush(self):
        """Run or hand over the buffered commands (no waiting)."""
        self.buffer.flush()
        self._pump()

    # -- guards --------------------------------------------------------------------------------
    def _check(self, what):
        if self.closed:
            raise RuntimeError(f"the channel is closed ({what})")
        if _get_ident() == self.worker.tid:
            raise RuntimeError(
                f"channel.{what} was called from the worker thread (inside a kernel); the worker "
                "would wait for itself. Kernels must not call mge ops or read tensor values."
            )

    # -- creating and freeing ------------------------------------------------------------------
    def put(self, value, device, no_cache=False):
        """A new tensor holding ``value`` (a host array the channel now owns) on ``device``."""
        self._check("put")
        info: TensorInfo = _new_info(value.shape, value.dtype, device)
        if value.size <= HOST_COMPUTE_SIZE:
            info.h_value = value
        self._produce(info, value, not self.worker.idle)  # the caller's thread
        return info

    def del_(self, info_):
        """The user dropped ``info``: its storage may be freed once queued ops are done with it."""
        info: TensorInfo = info_
        if info.deleted or self.closed:
            return
        info.deleted = True
        if not info.in_worker:  # never seen by the worker: nothing queued can still read it
            v = info.value
            if v is not None and info.users is None:  # the common case, inline
                info.value = None
                info.h_value = None
                memory: MemoryStats = self.memory
                memory.release(info.device, v, not self.worker.idle)
            else:
                self._free(info)
        elif _get_ident() == self.worker.tid:
            # a finalizer run by the GC on the worker thread: the buffer is the caller's; the Del
            # waits for the caller's next buffer operation (found by tests/test_async.py)
            self.buffer.defer(Command(DEL, dest=info))
        else:
            self.buffer.enqueue(Command(DEL, dest=info))
            handoff: Handoff = self.handoff
            if handoff.state == RUNNING:  # as in apply_op: a worker back from BLAS goes on
                handoff.yield_to_worker()

    # -- computing -----------------------------------------------------------------------------
    def apply_op(self, op, inputs):
        """Apply ``op`` to the input infos; returns the output infos at once."""
        if self.closed or _get_ident() == self.worker.tid:
            self._check("apply_op")
        values = self.options.values
        host: cython.bint = values["enable_host_compute"]
        info: TensorInfo
        descs = []
        for info in inputs:
            if info.error is not None:
                raise _unusable()
            if info.deleted:
                raise RuntimeError("an input tensor was already deleted")
            descs.append((info.shape, info.dtype))
            if info.h_value is None:
                host = False
        cls = type(op)
        out_descs = INFER[cls](op, descs)
        device = op.device if op.sets_device or not inputs else cython.cast(TensorInfo, inputs[0]).device
        d: tuple
        if host and inputs:
            for od in out_descs:
                shape = cython.cast(tuple, od)[0]  # (TensorDesc is a tuple subclass: no check)
                if shape is None or _size(shape) > HOST_COMPUTE_SIZE:
                    host = False
                    break
            if host:
                return self._host_compute(op, cls, inputs, out_descs, device)
        outputs = []
        for od in out_descs:
            d = cython.cast(tuple, od)
            info = _new_info(d[0], d[1], device)
            info.in_worker = True
            outputs.append(info)
        for info in inputs:
            info.in_worker = True
        self.buffer.enqueue(Command(APPLY, op, list(inputs), outputs))
        level = values["async_level"]
        if level == 0:
            if self.inline:  # the commands run right here when flushed: nothing to wait for
                self.buffer.flush()
                if self.errors:
                    with self.cv:
                        self._raise_errors(True)
            else:
                self._sync(original=True)
        elif level == 1:
            for od in out_descs:
                if cython.cast(tuple, od)[0] is None:
                    self._sync()
                    break
        handoff: Handoff = self.handoff
        if handoff.state == RUNNING:  # the worker needs the GIL for its Python: let it run
            handoff.yield_to_worker()
        return outputs

    def _host_compute(self, op, cls, inputs, out_descs, device):
        # The seed's DEFAULT_CPU dispatch: tiny host values, computed now on this thread.
        kernel = HOST.get(cls)
        if kernel is None:
            kernel = _CPU_KERNELS.get(cls)
            if kernel is None:
                kernel = _kernel(op, cls, "cpu")
        info: TensorInfo
        args = []
        for info in inputs:
            args.append(info.h_value)
        outs = kernel(op, *args)
        locked: cython.bint = not self.worker.idle
        memory: MemoryStats = self.memory
        result = []
        k: cython.Py_ssize_t
        for k in range(len(out_descs)):
            dtype = cython.cast(tuple, out_descs[k])[1]
            value = outs[k]
            if type(value) is not _ndarray or value.dtype != dtype:
                value = _as_array(value, dtype)
            info = _new_info(value.shape, dtype, device)
            info.h_value = value
            info.value = value
            memory.hold(device, value, locked)
            result.append(info)
        return result

    # -- reading -------------------------------------------------------------------------------
    def get_value(self, info):
        """The value as a read-only host array (waits for it; raises pending worker errors)."""
        value = info.value
        if value is None or self.errors or info.error is not None:
            self._check("get_value")
            self._wait(info)
            value = info.value
        return _readonly(value)

    def get_shape(self, info):
        """The shape; waits only when the op's rule could not tell it."""
        shape = info.shape
        if shape is None:
            self._check("get_shape")
            self._wait(info)
            shape = info.shape
        return shape

    def get_dtype(self, info):
        return info.dtype

    def get_device(self, info):
        return info.device

    def _wait(self, info):
        with self.cv:
            self.waiting = True
            self.waiting_for = info
            try:
                self.flush()
                requested = False
                while True:
                    if self.errors:
                        self._raise_errors()
                    if info.error is not None:
                        raise _unusable()
                    if info.value is not None:
                        return
                    if info.deleted:
                        raise RuntimeError("the tensor was deleted")
                    if info.evict_type != NONE and not requested:
                        # swapped out or dropped: the worker brings it back (cv is reentrant)
                        requested = True
                        self.buffer.enqueue(Command(GET_VALUE, dest=info))
                        self.flush()
                        continue
                    if self.worker.death is not None:
                        raise RuntimeError("the mge worker thread died") from self.worker.death
                    if self.worker.finished() and not self.buffer.commands:
                        if info.value is None and info.error is None and info.evict_type == NONE:
                            raise RuntimeError("waiting for a tensor that nothing will produce")
                        requested = False  # evicted again (DTR) after it was brought back
                        continue
                    self._pump()
                    if info.value is not None or info.error is not None or self.errors:
                        continue
                    self.cv.wait()
            finally:
                self.waiting = False
                self.waiting_for = None

    # -- control -------------------------------------------------------------------------------
    def sync(self):
        """Wait until every command issued so far has run; raise pending worker errors."""
        self._check("sync")
        self._sync()

    def full_sync(self):
        """``sync`` plus the devices' own queues (nothing more to wait for on the CPU)."""
        self.sync()

    def _sync(self, original=False):
        self.wait_idle()
        if self.errors:
            with self.cv:
                self._raise_errors(original)

    def wait_idle(self):
        """Flush and wait for the worker to drain, without raising its errors."""
        with self.cv:
            self.waiting = True
            try:
                self.flush()
                while True:
                    self._pump()
                    if self.worker.finished():
                        break
                    if self.worker.death is not None:
                        raise RuntimeError("the mge worker thread died") from self.worker.death
                    self.cv.wait()
            finally:
                self.waiting = False

    def _raise_errors(self, original=False):
        errors, self.errors = self.errors, []
        first = errors[0]
        if original:
            raise first
        more = f" ({len(errors) - 1} more error(s) follow in .errors)" if len(errors) > 1 else ""
        err = AsyncError(f"an error was reported by an op that ran asynchronously: "
                         f"{type(first).__name__}: {str(first).rstrip('.')}{more}. {ASYNC_HINT}")
        err.errors = errors
        raise err from first

    def close(self):
        """Finish queued work and stop the worker; idempotent.  Unread errors are reported."""
        if self.closed:
            return
        if threading.get_ident() == self.worker.tid:
            raise RuntimeError("channel.close was called from the worker thread")
        try:
            self.wait_idle()
        except RuntimeError:
            pass
        self.worker.stop()
        self.closed = True
        if self.errors:
            errors, self.errors = self.errors, []
            print(f"mge: {len(errors)} error(s) from asynchronous ops were never read "
                  f"(no sync point followed them):", file=sys.stderr)
            for e in errors:
                print(f"  {type(e).__name__}: {e}", file=sys.stderr)

    def set_option(self, name, value):
        self._check("set_option")
        # the caller's state changes now; the worker's when it reaches the SetOption (seed 003)
        self.buffer.enqueue(Command(SET_OPTION, value=self.options.set(name, value)))
        if self.options.get("buffer_length") != self.buffer.length:
            self.buffer.flush()
            self.buffer.length = self.options.get("buffer_length")
        inline = self.options.values["async_level"] == 0
        if inline != self.inline:
            self.wait_idle()  # what the worker holds runs first, in order
            self.inline = inline

    def get_option(self, name):
        return self.options.get(name)

    def push_scope(self, name):
        """Open a named scope (profiler annotations)."""
        self._check("push_scope")
        self.scopes.append(name)
        self.buffer.enqueue(Command(PUSH_SCOPE, value=name))

    def pop_scope(self, name):
        """Close the innermost scope, which must be ``name``."""
        self._check("pop_scope")
        if not self.scopes or self.scopes[-1] != name:
            top = self.scopes[-1] if self.scopes else None
            raise ValueError(f"pop_scope({name!r}) does not match the innermost scope {top!r}")
        self.scopes.pop()
        self.buffer.enqueue(Command(POP_SCOPE, value=name))

    # -- swap and drop ---------------------------------------------------------------------------
    def swap_out(self, info):
        """Move the value to host memory (``enable_swap``; otherwise nothing, as in MegEngine)."""
        self._check("swap_out")
        if self.options.values["enable_swap"]:
            self._enqueue_for(info, SWAP_OUT)

    def swap_in(self, info):
        """Bring a swapped-out value back to its device (``enable_swap``)."""
        self._check("swap_in")
        if self.options.values["enable_swap"]:
            self._enqueue_for(info, SWAP_IN)

    def drop(self, info):
        """Free the value; it is recomputed from its producer when used (``enable_drop``)."""
        self._check("drop")
        if self.options.values["enable_drop"]:
            self._enqueue_for(info, DROP_CMD)

    def _enqueue_for(self, info, kind):
        if info.deleted:
            raise RuntimeError("the tensor was already deleted")
        info.in_worker = True
        self.buffer.enqueue(Command(kind, dest=info))

    # -- the worker's side -------------------------------------------------------------------------
    def _process(self, cmd):
        if not self.worker_options["catch_worker_execption"]:
            self._run_command(cmd)
            return
        try:
            self._run_command(cmd)
        except Exception as e:
            with self.cv:  # a waiter sees the outputs' error and the error to report together
                if cmd.kind == APPLY:
                    for o in cmd.outputs:
                        o.error = e
                    if cmd.dels:
                        for d in cmd.dels:
                            self._free(d)
                elif cmd.dest is not None and cmd.kind != DEL:
                    cmd.dest.error = e
                self.errors.append(e)
                self.cv.notify_all()

    def _run_command(self, cmd):
        kind = cmd.kind
        if kind == APPLY:
            self._do_apply(cmd.op, cmd.inputs, cmd.outputs, cmd.dels)
        elif kind == DEL:
            self._free(cmd.dest)
        elif kind == GET_VALUE:
            if cmd.dest.value is None and cmd.dest.error is None and not cmd.dest.deleted:
                self._regenerate(cmd.dest)
        elif kind == SWAP_OUT:
            info = cmd.dest
            if info.value is not None and info.evict_type == NONE:
                info.h_value = np.array(info.value)  # a host copy the device buffer can go without
                self._release(info)
                info.evict_type = SWAP
                if self.dtr_entries:
                    e = self.dtr_entries.get(info)
                    if e is not None:
                        self.dtr.erase_candidate(e)
        elif kind == SWAP_IN:
            info = cmd.dest
            if info.value is None and info.evict_type == SWAP:
                self._regenerate(info)
        elif kind == DROP_CMD:
            self._do_drop(cmd.dest)
        elif kind == SET_OPTION:
            name, value = cmd.value
            self.worker_options[name] = value
            if name == "enable_dtr_auto_drop":
                self.dtr_mode = bool(value)
        # PUSH_SCOPE, POP_SCOPE: ordering marks for the profiler; nothing to run

    def _do_apply(self, op, inputs, outputs, dels):
        # An input made invalid by an earlier failure: its error is already reported (or pending)
        # once; the outputs inherit it silently instead of adding an error per dependent op, which
        # would report the failure again at the next sync point (found by tests/test_async.py).
        for i in inputs:
            if i.error is not None:
                for o in outputs:
                    o.error = i.error
                if dels:
                    for d in dels:
                        self._free(d)
                if self.waiting:
                    with self.cv:
                        self.cv.notify_all()
                return
        if self.dtr_mode:  # the one check DTR costs an op while it is off
            self._dtr_apply(op, inputs, outputs, dels)
            return
        values = []
        for i in inputs:
            if i.value is None:
                self._regenerate(i)
            values.append(i.value)
        cls = type(op)
        kernel = None
        if dels:
            for d in dels:
                self._free(d)
            self.stats["fused_dels"] += len(dels)
            kernel = self._inplace_kernel(op, cls, inputs, values, outputs, dels)
        if kernel is None:
            outs = _kernel(op, cls, outputs[0].device.kind if outputs else "cpu")(op, *values)
        else:
            outs = kernel()
        del values
        record = self.worker_options["record_computing_path"] and self.worker_options["enable_drop"]
        # An input freed by a fused Del cannot feed a recomputation: no producer then (as when an
        # unfused Del frees it later, see _free).  Recording it made a later drop unrecoverable
        # ("cannot produce ...") for e.g. ``y = F.exp(x) * 2`` (found by tests/test_async.py).
        path = ComputePath(op, list(inputs), list(outputs)) if record and not dels else None
        for info, value in zip(outputs, outs):
            # produced even if the user already let go: queued commands may still read it
            self._produce(info, _as_array(value, info.dtype))
            if path is not None:
                info.producer = path
        if path is not None:
            for i in inputs:
                if i.users is None:
                    i.users = [path]
                else:
                    i.users.append(path)

    def _inplace_kernel(self, op, cls, inputs, values, outputs, dels):
        # A fused Del freed an input: an elementwise ufunc may write its output into that buffer
        # if nothing else can see it (no other tensor, no user's numpy view).
        fn = getattr(op, "fn", None)
        special = None
        if not isinstance(fn, np.ufunc) or fn.nout != 1 or len(outputs) != 1:
            special = INPLACE.get(cls)  # an op with its own in-place kernel
            if special is None or not outputs:
                return None
        out = outputs[0]
        for k in range(len(inputs)):
            i = inputs[k]
            if i not in dels:
                continue
            # count references before binding the buffer to a local name
            if _refs(values, k) > _SOLE_REFS + _uses(inputs, i) - 1:
                continue
            buf = values[k]
            if (buf.base is None and buf.flags.writeable and buf.flags.c_contiguous
                    and buf.shape == out.shape and buf.dtype == out.dtype):
                self.stats["inplace"] += 1
                if special is not None:
                    return lambda: special(op, values, k)
                return lambda: (fn(*values, out=buf),)
        return None

    def _produce(self, info, value, locked=True):
        if info.shape is None:
            info.shape = value.shape
        self.memory.hold(info.device, value, locked)
        info.value = value
        info.evict_type = NONE
        if self.waiting and self.waiting_for is info:  # (a drain is notified when idle)
            with self.cv:
                self.cv.notify_all()

    def _release(self, info):
        v = info.value
        if v is not None:
            info.value = None
            self.memory.release(info.device, v)

    def _free(self, info):
        # The user let go: free the storage; tensors recorded as computed from it no longer can be.
        if self.dtr_entries:
            e = self.dtr_entries.get(info)
            if e is not None:
                self._dtr_free(info, e)
                return
        if info.users:
            for path in info.users:
                for o in path.outputs:
                    if o.producer is path:
                        if o.value is None and o.evict_type == DROP:
                            self._regenerate(o)
                        o.producer = None
            info.users = None
        self._release(info)
        info.h_value = None
        info.producer = None
        info.evict_type = NONE

    def _do_drop(self, info, user=True):
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

    def _regenerate(self, info):
        """Give ``info`` its value back: from the host copy, or by recomputing its producer.

        Iterative (the seed recursed): the evicted inputs of a producer are regenerated first, and
        a chain of thousands of evicted tensors must not hit Python's recursion limit.  The inputs
        of every producer on the stack are pinned, so that making room for one recomputation never
        evicts what a pending one needs.
        """
        if info.evict_type == SWAP:
            self._swap_back(info)
            return
        if info.evict_type != DROP or info.producer is None:
            raise RuntimeError(f"cannot produce {info!r}: it has no value and no way to get one")
        dtr = self.dtr
        stack = [info]
        paths = [None]  # the producer of each tensor on the stack once its inputs are pinned
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
                        raise _unusable()
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

    def _swap_back(self, info):
        self._produce(info, np.array(info.h_value))
        info.h_value = None if info.h_value is None or info.h_value.size > HOST_COMPUTE_SIZE else info.h_value
        if self.dtr_entries:
            e = self.dtr_entries.get(info)
            if e is not None:
                self.dtr.resident(e, self.dtr_mode)

    def _recompute(self, path):
        # The seed's ``recompute``: the producer runs again on its (present, pinned) inputs and
        # gives back the outputs that were dropped.  Same kernel, same input values: the same bits.
        dtr = self.dtr
        if self.dtr_mode and self.worker_options["dtr_eviction_threshold"] > 0:
            self._auto_evict()
        op = path.op
        inputs = path.inputs
        outputs = path.outputs
        dtr.touch(inputs)
        start = _perf_counter()
        values = []
        for i in inputs:
            values.append(i.value)
        cost = _nbytes(values)
        outs = _kernel(op, type(op), outputs[0].device.kind)(op, *values)
        del values
        self.stats["recomputed"] += 1
        back = []
        nbytes = 0
        for k in range(len(outputs)):
            o = outputs[k]
            value = _as_array(outs[k], o.dtype)
            cost += value.nbytes
            if o.value is None and o.evict_type == DROP:
                self._produce(o, value)
                nbytes += value.nbytes
                back.append(o)
        dtr.recomputations += 1
        dtr.recomputed_bytes += nbytes
        dtr.recompute_time += _perf_counter() - start
        for o in back:
            e = dtr.get(o)
            if e is not None:
                dtr.recomputed(e, self.dtr_mode)
        dtr.advance(cost)

    # -- DTR: the mechanism (the policy is mge/_core/dtr.py) ---------------------------------------
    def _dtr_apply(self, op, inputs, outputs, dels):
        # The seed's do_apply_op with enable_dtr_auto_drop: pin the inputs, regenerate the evicted
        # ones, evict until the budget holds, run the kernel, record how the outputs can be
        # recomputed.
        dtr = self.dtr
        opts = self.worker_options
        cls = type(op)
        record = opts["record_computing_path"] and opts["enable_drop"]
        minimum = opts["dtr_evictee_minimum_size"]
        # The Dels fused into an op that will be recorded run after it, as unfused ones would:
        # its inputs must all be there to recompute it, so none of their buffers may be reused
        # in place.  An op that is not recorded frees them first, and may reuse one (as without
        # DTR: see _inplace_kernel).
        early = dels is not None and not (record and _recordable(cls, outputs, minimum))
        dtr.pin(inputs)
        try:
            for i in inputs:
                if i.value is None:
                    self._regenerate(i)
            dtr.touch(inputs)
            if opts["dtr_eviction_threshold"] > 0:
                self._auto_evict()
            values = []
            for i in inputs:
                values.append(i.value)
            cost = _nbytes(values)
            kernel = None
            if early:
                for d in dels:
                    self._free(d)
                kernel = self._inplace_kernel(op, cls, inputs, values, outputs, dels)
            if kernel is None:
                outs = _kernel(op, cls, outputs[0].device.kind if outputs else "cpu")(op, *values)
            else:
                outs = kernel()
            del values
        finally:
            dtr.unpin(inputs)
        for k in range(len(outputs)):
            info = outputs[k]
            value = _as_array(outs[k], info.dtype)
            cost += value.nbytes
            # produced even if the user already let go: queued commands may still read it
            self._produce(info, value)
        if record and not early:  # (early: nothing to record, and some inputs are gone)
            self._dtr_record(op, inputs, outputs, cost, minimum)
        dtr.advance(cost)
        if dels:
            self.stats["fused_dels"] += len(dels)
            if not early:
                for d in dels:
                    self._free(d)

    def _dtr_record(self, op, inputs, outputs, cost, minimum):
        # The seed's ComputePath::make under DTR: not for bad ops (random numbers, updates in
        # place), not across devices, not when an output shares an input's storage (a view, or an
        # input returned as is: evicting it frees nothing and it has no computation of its own);
        # outputs of at most ``minimum`` bytes get no producer (never evicted).
        if _is_bad_op(type(op)):
            return
        dtr = self.dtr
        device = dtr.device
        if device is None:
            device = outputs[0].device if outputs else None
        owners = []
        for i in inputs:
            if i.device != device:
                return
            owners.append(_owner(i.value))
        kept = None
        sizes = None
        for o in outputs:
            if o.device != device:
                return
            own = _owner(o.value)
            for w in owners:
                if w is own:
                    return
            if own.nbytes > minimum:
                if kept is None:
                    kept = [o]
                    sizes = [float(own.nbytes)]
                else:
                    kept.append(o)
                    sizes.append(float(own.nbytes))
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
        self._release(info)
        info.evict_type = DROP
        self.dtr.evicted(e, auto)

    def _dtr_free(self, info, e):
        # The seed's free under DTR.  While live tensors recorded as computed from it may need it
        # for a recomputation it stays, *released*: evicted at once (the seed) -- or, while a
        # budget is set, left as a candidate that is evicted before any other when memory runs
        # short (see DynamicSublinear.find_best) -- and kept as it is when it cannot be
        # recomputed.  Otherwise free it and, with it, the released inputs kept only for it.
        if e.ref_cnt > 0:
            e.allow_delete = True
            if (info.value is not None and info.evict_type == NONE and e.neighbors is not None
                    and not (self.dtr_mode and self.worker_options["dtr_eviction_threshold"] > 0
                             and e.slot >= 0)):
                self._evict(e, False)
            return
        dtr = self.dtr
        stack = [info]
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

    # -- the test API (documented: tests use it instead of private fields) ----------------------------
    def counters(self):
        """Counters since start: ``inplace`` (kernels that wrote into a freed input's buffer),
        ``fused_dels`` (Dels fused into the op that last read their tensor), ``recomputed``
        (producers run again for dropped or evicted tensors)."""
        return dict(self.stats)

    def buffered(self):
        """The commands held in the command buffer (not yet handed on), oldest first, as
        ``(kind, op, inputs, dels)``; ``kind`` is a name (``"ApplyOp"``, ``"Del"``...)."""
        return [(_cb.KIND_NAMES[c.kind], c.op, c.inputs, c.dels) for c in self.buffer.commands]

    def worker_thread(self):
        """The ident of the worker thread (``None`` before it first ran)."""
        return self.worker.tid

    def idle(self):
        """Whether nothing is buffered, queued or running."""
        return not self.buffer.commands and not self.buffer.pending and self.worker.finished()

    # -- fork ------------------------------------------------------------------------------------
    def _after_fork_in_child(self):
        # The worker thread does not exist in the child: start afresh; ops that had not run in
        # the parent cannot run here, so their outputs become unusable.
        pending = list(self.worker.queue) + list(self.buffer.commands) + list(self.buffer.pending)
        lost = RuntimeError("the op had not run when the process forked")
        for cmd in pending:
            if cmd.kind == APPLY:
                for o in cmd.outputs:
                    if o.value is None:
                        o.error = lost
        self.cv = threading.Condition()
        self.memory.reset_lock()
        self._init_worker_state()


@cython.cfunc
def _new_info(shape, dtype, device) -> TensorInfo:
    # TensorInfo(shape, dtype, device) without the Python-level call (the other fields start as
    # None / 0 / False, as __init__ sets them).
    if not cython.compiled:
        return TensorInfo(shape, dtype, device)
    info: TensorInfo = TensorInfo.__new__(TensorInfo)
    info.shape = shape
    info.dtype = dtype
    info.device = device
    return info


def _owner(arr):
    # the array that owns the buffer of ``arr`` (a view's base, followed to the end)
    base = arr.base
    while isinstance(base, _ndarray):
        arr = base
        base = arr.base
    return arr


def _nbytes(values):
    n = 0
    for v in values:
        n += v.nbytes
    return n


def _recordable(cls, outputs, minimum):
    # Whether _dtr_record may record an op of class ``cls`` (an output of unknown shape may be
    # large enough).
    if _is_bad_op(cls):
        return False
    for o in outputs:
        shape = o.shape
        if shape is None or _size(shape) * o.dtype.itemsize > minimum:
            return True
    return False


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


def _uses(inputs, info):
    n = 0
    for i in inputs:
        if i is info:
            n += 1
    return n


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


_WORKER_RULES = {}  # op class -> ON_WORKER's rule, None (the caller's) or True (not mge's op)


def _offload(cmd):
    """Whether the worker thread runs ``cmd`` (see ``ON_WORKER`` in ``mge/_core/ops/base.py``)."""
    if cmd.kind != APPLY:
        return False
    op = cmd.op
    cls = type(op)
    try:
        rule = _WORKER_RULES[cls]
    except KeyError:
        rule = ON_WORKER.get(cls)
        if rule is None and not cls.__module__.startswith(("mge.", "mge_plugins.")):
            rule = True  # a user's op: it may block or take long, as MegEngine's worker allows
        _WORKER_RULES[cls] = rule
    if rule is None:
        return False
    if rule is True:
        return True
    return rule(op, cmd.inputs, cmd.outputs)


def _kernel(op, cls, kind):
    try:
        return KERNELS[kind][cls]
    except KeyError:
        raise NotImplementedError(f"{op.name} has no kernel for the {kind} device") from None


_channel = None


def get_channel():
    """The process's channel, created on first use."""
    global _channel
    if _channel is None:
        _channel = Channel()
        ref = weakref.ref(_channel)
        atexit.register(_close_at_exit, ref)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: _fork_child(ref))
    return _channel


def _close_at_exit(ref):
    ch = ref()
    if ch is not None:
        ch.close()


def _fork_child(ref):
    ch = ref()
    if ch is not None:
        ch._after_fork_in_child()
