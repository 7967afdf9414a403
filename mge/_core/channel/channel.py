"""The channel: the one door through which tensors are created, computed, read and freed.

MegEngine's interpreter channel (seed ``003``).  This file is the caller's side; the channel's
other files (named in ``__init__.py``) hold the worker's side, swap/drop and DTR:

* ``apply_op`` infers the output shapes and dtypes at once (an unknown shape is allowed) and
  queues an ``ApplyOp`` command; the kernel runs later.  Ops whose inputs are all tiny host values
  (at most ``HOST_COMPUTE_SIZE`` elements, the seed's DEFAULT_CPU dispatch) run at once on the
  caller's thread instead, through the CPU device's kernel door, so shape arithmetic never waits.
* Commands pass through a ``CommandBuffer`` that fuses ``Del`` into the op that last read the
  tensor; the input is then freed before the kernel, whose device may write the output into the
  freed buffer.
* Queued commands run in order.  Kernels whose op says ``long_running`` (matrix products,
  convolutions, ops from outside mge) run on the worker thread; the caller runs the others itself
  when it flushes them (``_pump``), and gives the worker the GIL when it needs it (the CPU
  device's ``handoff.py``).
* An error in a kernel marks that command's outputs invalid and is raised at the next sync point
  on the caller's thread as ``AsyncError`` (``__cause__``: the original), once; at
  ``async_level=0`` the original error is raised by the call that caused it.

Threads.  Several Python threads may use the channel at once: one reentrant lock (``lock``)
serialises the callers' threads -- a call, waits included, runs as if it were the only one, and
another thread's call waits for it with the GIL free -- while the worker needs no part of it (a
kernel calling the channel is refused before it could wait for the lock).  Scopes are per thread.

The channel holds each tensor's *buffer* and never looks inside it: shapes, storage and host
copies come from the buffer's device (``info.device.impl``, ``mge/_core/device/base.py``).
"""
import atexit
import os
import sys
import threading
import weakref

import cython

from .. import _accel
from ..device import as_device
from ..device.base import DeviceAsyncError
from ..device.registry import synchronize_devices
from ..device.cpu.blas import INFO as _BLAS_INFO, install as _install_blas
from ..ops.base import INFER
from .introspection import Introspection
from .locking import LockedCalls
from .options import Options
from .worker import Worker

_accel.guard(__name__)
_h = _accel.load("mge._core.channel.handles")
_mem = _accel.load("mge._core.device.memory")
_cb = _accel.load("mge._core.channel.command_buffer")
_dtr = _accel.load("mge._core.dtr")
_handoff = _accel.load("mge._core.device.cpu.handoff")
_caller_lock = _accel.load("mge._core.channel.caller_lock")
_cpu = _accel.load("mge._core.device.cpu.device")
_ex = _accel.load("mge._core.channel.executor")
Executor, UnusableTensorError = _ex.Executor, _ex.UnusableTensorError
size_of, unusable = _ex.size_of, _ex.unusable
SwapDrop = _accel.load("mge._core.channel.swap_drop").SwapDrop
DtrMechanism = _accel.load("mge._core.channel.dtr_mechanism").DtrMechanism
DynamicSublinear = _dtr.DynamicSublinear
if cython.compiled:  # the C types, so that the per-op path reads fields as struct members
    from cython.cimports.mge._core.channel.caller_lock_c import CallerLock
    from cython.cimports.mge._core.channel.handles_c import TensorInfo
    from cython.cimports.mge._core.device.cpu.device_c import CpuDevice
    from cython.cimports.mge._core.device.cpu.handoff_c import Handoff
    from cython.cimports.mge._core.device.memory_c import MemoryStats
else:
    Handoff = _handoff.Handoff
    CallerLock = _caller_lock.CallerLock
    TensorInfo = _h.TensorInfo
    MemoryStats = _mem.MemoryStats
    CpuDevice = _cpu.CpuDevice
SWAP, DROP, NONE = _h.SWAP, _h.DROP, _h.NONE
HOST_COMPUTE_SIZE = _h.HOST_COMPUTE_SIZE
RUNNING = _handoff.RUNNING
_RUNNING = cython.declare(cython.int, _handoff.RUNNING)  # (a C constant: read at every op)
Command, CommandBuffer = _cb.Command, _cb.CommandBuffer
APPLY, DEL, GET_VALUE, SWAP_IN, SWAP_OUT, DROP_CMD, SET_OPTION, PUSH_SCOPE, POP_SCOPE = (
    _cb.APPLY, _cb.DEL, _cb.GET_VALUE, _cb.SWAP_IN, _cb.SWAP_OUT, _cb.DROP, _cb.SET_OPTION,
    _cb.PUSH_SCOPE, _cb.POP_SCOPE)

__all__ = ["Channel", "get_channel", "infer_outputs", "UnusableTensorError", "AsyncError",
           "HOST_COMPUTE_SIZE"]

_get_ident = threading.get_ident
if cython.compiled:  # (its door methods are C calls)
    from cython.cimports.mge._core.profile_recorder_c import Recorder as _Recorder
else:
    _Recorder = object
_prof = cython.declare(_Recorder, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec

ASYNC_HINT = ("Hint: this is where it is reported, not where it happened. "
              "Set mge.config.async_level = 0 to raise errors where they happen.")


class AsyncError(RuntimeError):
    """An error that happened while an op ran asynchronously, raised at the next sync point.

    Its ``__cause__`` is the original exception; ``errors`` lists every error reported at once.
    """


class Channel(LockedCalls, Executor, SwapDrop, DtrMechanism, Introspection):
    """Executes ops on devices and owns every tensor's buffer."""

    def __init__(self):
        self.options = Options()
        self.closed = False
        self.cv = threading.Condition()
        self.memory = MemoryStats()
        self.cpu = as_device("cpu0").impl  # the host: tiny values are computed there
        self.dtr = DynamicSublinear()  # DTR's policy and statistics (worker-side state)
        self.dtr_entries = self.dtr.entries  # (the same dict for good) empty: no DTR state to keep
        self._dtr_watched = set()  # devices whose out-of-memory callback evicts (dtr_mechanism)
        self._threads = threading.local()  # per calling thread: its scopes
        # A replaying trace (mge.jit) answers ops with placeholders whose handles are virtual
        # (``deleted``); reading one, or an eager op on one, asks it for the real handle.
        self.resolve = None
        self._init_worker_state()
        self.stats = {"fused_dels": 0, "recomputed": 0}
        if _BLAS_INFO["reason"] == "not searched":
            _install_blas(_handoff.CPU)

    def _init_worker_state(self):
        # One reentrant lock serialises the callers' threads: a channel call runs as if it were
        # the only one (waits included: another thread's call waits for it, with the GIL free).
        # The worker never takes it, so nothing it waits for can wait on it (caller_lock.py).
        self.lock = CallerLock()
        self.handoff = Handoff()  # when the worker gets the GIL from the caller (handoff.py)
        self.worker = Worker(self._process, self.cv, self.handoff, lambda: self.waiting, _offload,
                             lock=self.lock)
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

    def _flush_locked(self):
        self.buffer.flush()
        self._pump()

    # -- the callers' threads: one reentrant lock serialises them (locking.py) ------------------
    def put(self, value, device, no_cache=False):
        """A new tensor holding ``value`` (a host array the channel now owns) on ``device``."""
        lock: CallerLock = self.lock
        if not lock.enter():
            self._from_worker("put")  # raises: a kernel must not wait for the lock its caller holds
        try:
            return _put_locked(self, value, device, no_cache)
        finally:
            lock.exit()

    def apply_op(self, op, inputs):
        """Apply ``op`` to the input infos; returns the output infos at once."""
        lock: CallerLock = self.lock
        if not lock.enter():
            self._from_worker("apply_op")  # raises (as in put)
        try:
            return _apply_op_locked(self, op, inputs)
        finally:
            lock.exit()

    # -- guards --------------------------------------------------------------------------------
    def _check(self, what):
        if self.closed:
            raise RuntimeError(f"the channel is closed ({what})")
        if _get_ident() == self.worker.tid:
            self._from_worker(what)

    def _from_worker(self, what):
        raise RuntimeError(
            f"channel.{what} was called from the worker thread (inside a kernel); the worker "
            "would wait for itself. Kernels must not call mge ops or read tensor values."
        )

    # -- freeing -------------------------------------------------------------------------------
    def del_(self, info_):
        """The user dropped ``info``: its storage may be freed once queued ops are done with it."""
        info: TensorInfo = info_
        if info.deleted or self.closed:
            return
        lock: CallerLock = self.lock
        if not lock.enter():  # a finalizer on the worker: see _del_locked
            _del_locked(self, info, True)
            return
        try:
            _del_locked(self, info, False)
        finally:
            lock.exit()

    def _unusable_input(self, info):
        # The first error the user sees is the real one: the failure's own report while it is
        # pending (an AsyncError whose cause is the original), else an UnusableTensorError whose
        # cause is the original.
        if self.errors:
            self.wait_idle()
            with self.cv:
                if self.errors:
                    self._raise_errors()
        raise unusable() from info.error

    # -- reading -------------------------------------------------------------------------------
    def get_value(self, info):
        """The value as a read-only host array (waits for it; raises pending worker errors)."""
        value = info.value
        if value is None and info.deleted and self.resolve is not None:
            info = self.resolve(info)  # a replaying trace's placeholder (mge.jit)
            value = info.value
        if value is None or self.errors or info.error is not None:
            self._enter("get_value")
            try:
                self._wait(info)
            finally:
                self.lock.release()
            value = info.value
        impl = info.device.impl
        if type(impl) is CpuDevice:
            cpu: CpuDevice = impl
            return cpu.to_host(value)
        try:
            return impl.to_host(value)
        except DeviceAsyncError as e:  # what failed on the device since: the channel's error
            with self.cv:
                self.errors.append(e)
                self._raise_errors()

    def get_shape(self, info):
        """The shape; waits only when the op's rule could not tell it."""
        shape = info.shape
        if shape is None and info.deleted and self.resolve is not None:
            info = self.resolve(info)
            shape = info.shape
        if shape is None:
            self._enter("get_shape")
            try:
                self._wait(info)
            finally:
                self.lock.release()
            shape = info.shape
        return shape

    def get_dtype(self, info):
        return info.dtype

    def get_device(self, info):
        return info.device

    def _wait(self, info):
        if _prof is not None:  # profiler: the wait as a span, with what it waits for
            _prof.wait(self._wait_now, self, info)
            return
        self._wait_now(info)

    def _wait_now(self, info):
        handoff: Handoff = self.handoff
        with self.cv:
            self.waiting = True
            self.waiting_for = info
            handoff.caller_blocked = True  # (the worker may take both cores: handoff.gemm2)
            try:
                self.flush()
                requested = False
                while True:
                    if self.errors:
                        self._raise_errors()
                    if info.error is not None:
                        raise unusable() from info.error
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
                handoff.caller_blocked = False

    # -- control -------------------------------------------------------------------------------
    def _sync_locked(self):
        self._check("sync")
        self._sync()

    def full_sync(self):
        """``sync`` plus the devices' own queues (a GPU's stream; nothing on the CPU): errors
        that the devices report then are raised as the channel's asynchronous errors."""
        self.sync()
        errors = synchronize_devices()
        if errors:
            with self.cv:
                self.errors.extend(errors)
                self._raise_errors()

    def _sync(self, original=False):
        self.wait_idle()
        if self.errors:
            with self.cv:
                self._raise_errors(original)

    def _wait_idle_locked(self):
        if _prof is not None:  # profiler: waiting for the queue to drain, as a span
            _prof.call("wait", "wait for queue", None, self._wait_idle_now)
            return
        self._wait_idle_now()

    def _wait_idle_now(self):
        handoff: Handoff = self.handoff
        with self.cv:
            self.waiting = True
            handoff.caller_blocked = True
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
                handoff.caller_blocked = False

    def _raise_errors(self, original=False):
        errors, self.errors = self.errors, []
        first = errors[0]
        if original:
            raise first
        for e in errors:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                # an interrupt or exit requested inside a kernel: the caller's thread gets it as
                # itself (an AsyncError would hide it from ``except KeyboardInterrupt``)
                if len(errors) > 1:
                    e.errors = errors
                raise e
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
        # At exit another (daemon) thread may hold the lock for good: close anyway after a while.
        held = self.lock.acquire(timeout=10)
        try:
            try:
                self._wait_idle_locked()
            except RuntimeError:
                pass
            self.worker.stop()
            self.closed = True
        finally:
            if held:
                self.lock.release()
        if self.errors:
            errors, self.errors = self.errors, []
            print(f"mge: {len(errors)} error(s) from asynchronous ops were never read "
                  f"(no sync point followed them):", file=sys.stderr)
            for e in errors:
                print(f"  {type(e).__name__}: {e}", file=sys.stderr)

    def _set_option_locked(self, name, value):
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

    @property
    def scopes(self):
        """The calling thread's open scopes, outermost first (each thread has its own)."""
        scopes = getattr(self._threads, "scopes", None)
        if scopes is None:
            scopes = self._threads.scopes = []
        return scopes

    def _push_scope_locked(self, name):
        self._check("push_scope")
        self.scopes.append(name)
        if _prof is not None:  # profiler: the scope as a span on this thread
            _prof.push_scope(name)
        # (no command: the profiler records scopes here, on the caller's thread, and the worker
        # has nothing to do for them; a command would push older ones out of the buffer, before
        # a Del could fuse into them, and wake the worker for nothing)

    def _pop_scope_locked(self, name):
        self._check("pop_scope")
        scopes = self.scopes
        if not scopes or scopes[-1] != name:
            top = scopes[-1] if scopes else None
            raise ValueError(f"pop_scope({name!r}) does not match the innermost scope {top!r}")
        scopes.pop()
        if _prof is not None:  # profiler: ends the scope's span
            _prof.pop_scope(name)

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
        self._init_worker_state()  # a new lock too: another thread may have held the old one


# -- the per-op bodies, under the callers' lock (C functions: no Python call on the per-op path)
@cython.cfunc
def _put_locked(ch, value, device, no_cache):
    if ch.closed:  # (the worker's thread was refused by the lock already)
        ch._check("put")
    info: TensorInfo = _new_info(value.shape, value.dtype, device)
    if value.size <= HOST_COMPUTE_SIZE:
        info.h_value = value  # the host copy that host compute reads
    impl = device.impl
    buf = value if type(impl) is CpuDevice else impl.from_host(value)
    ch._produce(info, buf, not ch.worker.idle)  # the caller's thread
    return info


@cython.cfunc
def _del_locked(ch, info_, on_worker: cython.bint):
    info: TensorInfo = info_
    if info.deleted:
        return
    info.deleted = True
    if not info.in_worker:  # never seen by the worker: nothing queued can still read it
        v = info.value
        if v is not None and info.users is None:  # the common case, inline
            info.value = None
            info.h_value = None
            memory: MemoryStats = ch.memory
            memory.release(info.device, v, not ch.worker.idle)
        else:
            ch._free(info)
    elif on_worker:
        # a finalizer run by the GC on the worker thread: the buffer is the caller's; the Del
        # waits for the caller's next buffer operation (tests/test_async_lifecycle.py)
        ch.buffer.defer(Command(DEL, dest=info))
    else:
        ch.buffer.enqueue(Command(DEL, dest=info))
        handoff: Handoff = ch.handoff
        if handoff.state == _RUNNING:  # as in apply_op: a worker back from BLAS goes on
            handoff.yield_to_worker()


@cython.cfunc
def _apply_op_locked(ch, op, inputs):
    if ch.closed:
        ch._check("apply_op")
    values = ch.options.values
    host: cython.bint = values["enable_host_compute"]
    info: TensorInfo
    descs = []
    for info in inputs:
        if info.error is not None:
            ch._unusable_input(info)
        if info.deleted:
            _deleted_input(ch, inputs, info)
        descs.append((info.shape, info.dtype))
        if info.h_value is None:
            host = False
    cls = type(op)
    out_descs = INFER[cls](op, descs)
    if op.sets_device or not inputs:
        device = op.device
    else:
        device = cython.cast(TensorInfo, inputs[0]).device
        for info in inputs:
            if info.device is not device and info.device != device:
                raise _mixed_devices(op, inputs)
    d: tuple
    if host and inputs:
        for od in out_descs:
            shape = cython.cast(tuple, od)[0]  # (TensorDesc is a tuple subclass: no check)
            if shape is None or size_of(shape) > HOST_COMPUTE_SIZE:
                host = False
                break
        if host:
            return _host_compute(ch, op, inputs, out_descs, device)
    outputs = []
    for od in out_descs:
        d = cython.cast(tuple, od)
        info = _new_info(d[0], d[1], device)
        info.in_worker = True
        outputs.append(info)
    for info in inputs:
        info.in_worker = True
    level = values["async_level"]
    if level == 0 and ch.errors:
        # errors of ops queued before the switch to level 0: reported first, as what they
        # are (asynchronous), not as this op's own
        ch.wait_idle()
        with ch.cv:
            ch._raise_errors()
    cmd = Command(APPLY, op, list(inputs), outputs)
    if _prof is not None:  # profiler: a flow from this dispatch to the command's kernel
        _prof.flow_command(cmd)
    ch.buffer.enqueue(cmd)
    if level == 0:
        if ch.inline:  # the commands run right here when flushed: nothing to wait for
            ch.buffer.flush()
            if ch.errors:
                with ch.cv:
                    ch._raise_errors(True)
        else:
            ch._sync(original=True)
    elif level == 1:
        for od in out_descs:
            if cython.cast(tuple, od)[0] is None:
                ch._sync()
                break
    handoff: Handoff = ch.handoff
    if handoff.state == _RUNNING:  # the worker needs the GIL for its Python: let it run
        handoff.yield_to_worker()
    return outputs


@cython.cfunc
def _host_compute(ch, op, inputs, out_descs, device):
    # The seed's DEFAULT_CPU dispatch: tiny host values, computed now on this thread by the
    # host's kernel door; a device other than the CPU gets the results from the host.
    info: TensorInfo
    outputs = []
    k: cython.Py_ssize_t
    for k in range(len(out_descs)):
        d = cython.cast(tuple, out_descs[k])
        outputs.append(_new_info(d[0], d[1], device))
    args = []
    for info in inputs:
        args.append(info.h_value)
    cpu: CpuDevice = ch.cpu
    if _prof is not None:  # profiler: a flow from this dispatch to the kernel below
        _prof.flow_host(op)
    outs = cpu.execute(op, args, outputs, None)
    impl = device.impl
    on_cpu: cython.bint = type(impl) is CpuDevice
    locked: cython.bint = not ch.worker.idle
    memory: MemoryStats = ch.memory
    for k in range(len(outputs)):
        info = outputs[k]
        value = outs[k]
        info.h_value = value
        info.value = value if on_cpu else impl.from_host(value)
        memory.hold(device, info.value, locked)
    return outputs


def _deleted_input(ch, inputs, info):
    # An eager op on a replaying trace's placeholder (inside ``exclude_from_trace``): the
    # program runs up to it first.  Anything else deleted is an error.
    if ch.resolve is None:
        raise RuntimeError("an input tensor was already deleted")
    real = ch.resolve(info)
    for k in range(len(inputs)):
        if inputs[k] is info:
            inputs[k] = real


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


def infer_outputs(op, infos):
    """The ``(shape, dtype, device)`` of each output of ``op`` on the handles ``infos``, by the
    op's rule, as ``apply_op`` gives them -- without running anything (``trace(symbolic=True)``
    records so).  Raises what ``apply_op`` raises for bad shapes, dtypes or devices."""
    out_descs = INFER[type(op)](op, [(info.shape, info.dtype) for info in infos])
    if op.sets_device or not infos:
        device = op.device
    else:
        device = infos[0].device
        for info in infos:
            if info.device is not device and info.device != device:
                raise _mixed_devices(op, infos)
    return [(d[0], d[1], device) for d in out_descs]


def _mixed_devices(op, inputs):
    # MegEngine refuses it too ("cannot decide output comp node"): move a tensor with .to() first
    names = ", ".join(str(i.device) for i in inputs)
    return RuntimeError(f"{op.name}: the inputs are on different devices ({names}); "
                        "move them to one device with Tensor.to() first")


def _offload(cmd):
    """Whether the worker thread runs ``cmd``: an ``ApplyOp`` whose op its device calls long
    (``OpDef.long_running``)."""
    if cmd.kind != APPLY:
        return False
    op = cmd.op
    rule = op.long_running
    if rule is False or rule is True:
        return rule
    outputs = cmd.outputs
    if not outputs:
        return True
    return cython.cast(TensorInfo, outputs[0]).device.impl.runs_long(op, cmd.inputs, outputs)


_channel = None


def get_channel():
    """The process's channel, created on first use."""
    global _channel
    if _channel is None:
        _channel = Channel()
        ref = weakref.ref(_channel)
        atexit.register(_close_at_exit, ref)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=lambda: _fork_before(ref),
                                after_in_child=lambda: _fork_child(ref))
    return _channel


def _close_at_exit(ref):
    ch = ref()
    if ch is not None:
        ch.close()


def _fork_before(ref):
    # The child gets a copy of the process as it is: a fork while the worker is inside a kernel
    # (OpenBLAS without the GIL) copies its locks mid-operation and hung both processes.  So the
    # queued work runs first (errors stay pending for the parent's next sync point).  A fork from
    # inside a kernel (the worker thread itself) cannot wait for itself and proceeds.
    _handoff.CPU.join_before_fork()  # (a product this thread started, for the same reason)
    ch = ref()
    if ch is None or ch.closed or _get_ident() == ch.worker.tid:
        return
    try:
        ch.wait_idle()
    except RuntimeError:  # a dead worker: nothing runs, nothing to wait for
        pass


def _fork_child(ref):
    ch = ref()
    if ch is not None:
        ch._after_fork_in_child()
