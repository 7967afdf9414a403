"""The worker's side of the channel: running commands, and the one call of the kernel door.

``Executor`` is a base of ``Channel`` (``channel.py``).  Its methods run queued commands, on the
worker thread or on the caller's thread when it flushes short ones (``Channel._pump``), always in
queue order:

* ``_process`` runs one command and turns a failure into the outputs' error and a pending
  report (raised at the next sync point);
* ``_do_apply`` is an ``ApplyOp``, with DTR or without: bring evicted inputs back, evict under the
  budget (DTR), free the inputs whose ``Del`` was fused into it, run the kernel, record how the
  outputs can be recomputed (``record_computing_path``);
* ``_run_kernel`` is the only place where the channel calls a device's ``execute``, the kernel
  door (``mge/_core/device/base.py``): eager ops here, recomputations in ``swap_drop.py`` and
  tiny host values in ``channel.py`` go through it;
* ``_produce``/``_release``/``_free`` hand buffers to tensors and take them back, keeping the
  memory statistics (``mge/_core/device/memory.py``) exact.

Compiled (see ``_accel``).
"""
import cython

from .. import _accel

_accel.guard(__name__)
_h = _accel.load("mge._core.channel.handles")
_cb = _accel.load("mge._core.channel.command_buffer")
_mem = _accel.load("mge._core.device.memory")
_cpu = _accel.load("mge._core.device.cpu.device")
if cython.compiled:  # the C types, so that the per-op path reads fields as struct members
    from cython.cimports.mge._core.channel.handles_c import ComputePath, TensorInfo
    from cython.cimports.mge._core.device.cpu.device_c import CpuDevice
    from cython.cimports.mge._core.device.memory_c import MemoryStats
else:
    TensorInfo, ComputePath = _h.TensorInfo, _h.ComputePath
    CpuDevice = _cpu.CpuDevice
    MemoryStats = _mem.MemoryStats
SWAP, DROP, NONE = _h.SWAP, _h.DROP, _h.NONE
APPLY, DEL, GET_VALUE, SWAP_IN, SWAP_OUT, DROP_CMD, SET_OPTION = (
    _cb.APPLY, _cb.DEL, _cb.GET_VALUE, _cb.SWAP_IN, _cb.SWAP_OUT, _cb.DROP, _cb.SET_OPTION)

__all__ = ["Executor", "unusable", "UnusableTensorError", "size_of"]

if cython.compiled:  # (its door methods are C calls)
    from cython.cimports.mge._core.profile_recorder_c import Recorder as _Recorder
else:
    _Recorder = object
_prof = cython.declare(_Recorder, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec


class UnusableTensorError(RuntimeError):
    """Raised when an op uses a tensor whose producer failed."""


def unusable():
    return UnusableTensorError("an input tensor is unusable due to previous error")


class Executor:
    """Runs commands (a base of ``Channel``; the state it uses is set up by ``Channel``)."""

    def _process(self, cmd):
        if _prof is not None:  # profiler: the command as a span on the thread that runs it
            rec = _prof
            rec.enter_command(self, cmd)
            try:
                _process_cmd(self, cmd)
            finally:
                rec.exit_command()
            return
        _process_cmd(self, cmd)

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
            self._swap_out_now(cmd.dest)
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
                if not value:  # DTR off: no candidates, and no device managed (the next picks)
                    self.dtr.clear_candidates()
        # (PUSH_SCOPE, POP_SCOPE: the seed's kinds; the channel sends none, scopes are the caller's)

    def _do_apply(self, op, inputs, outputs, dels):
        # An input made invalid by an earlier failure: its error is already reported (or pending)
        # once; the outputs inherit it silently instead of adding an error per dependent op, which
        # would report the failure again at the next sync point (tests/test_async_errors.py).
        info: TensorInfo
        for info in inputs:
            if info.error is not None:
                for o in outputs:
                    o.error = info.error
                if dels:
                    for d in dels:
                        self._free(d)
                if self.waiting:
                    with self.cv:
                        self.cv.notify_all()
                return
        opts = self.worker_options
        dtr_mode: cython.bint = self.dtr_mode
        record: cython.bint = (opts["record_computing_path"] and opts["enable_drop"]
                               and not op.never_recompute)
        minimum = 0
        # The Dels fused into an op run before its kernel (its buffer may then take the output)
        # -- "early" -- unless the op is recorded under DTR: its inputs must all be there to
        # recompute it, so they are freed after it, as unfused Dels would be.  Without DTR an op
        # with fused Dels is not recorded: an input freed by a fused Del cannot feed a
        # recomputation (recording it made a later drop unrecoverable, "cannot produce ...", for
        # e.g. ``y = F.exp(x) * 2``; found by tests/test_swap_drop.py).
        early: cython.bint = dels is not None
        if dtr_mode:
            minimum = opts["dtr_evictee_minimum_size"]
            if early and record and _recordable(outputs, minimum):
                early = False
            self.dtr.pin(inputs)
        record = record and not early
        cost = 0
        try:
            for info in inputs:
                if info.value is None:
                    self._regenerate(info)
            if dtr_mode:
                self.dtr.touch(inputs)
                if inputs:
                    self._dtr_watch(cython.cast(TensorInfo, inputs[0]).device)
                if opts["dtr_eviction_threshold"] > 0:
                    self._auto_evict()
            values = []
            for info in inputs:
                values.append(info.value)
            if dtr_mode:
                cost = _nbytes(inputs)
            reuse = None
            if early:  # ``values`` holds the freed buffers until the kernel has run
                for d in dels:
                    self._free(d)
                self.stats["fused_dels"] += len(dels)
                reuse = _positions(inputs, dels)
            outs = self._run_kernel(op, inputs, values, outputs, reuse)
            del values
        finally:
            if dtr_mode:
                self.dtr.unpin(inputs)
        k: cython.Py_ssize_t
        for k in range(len(outputs)):
            # produced even if the user already let go: queued commands may still read it
            self._produce(outputs[k], outs[k])
        if dtr_mode:
            cost += _nbytes(outputs)
            if record:
                self._dtr_record(op, inputs, outputs, cost, minimum)
            self.dtr.advance(cost)
        elif record:
            _record(op, inputs, outputs)
        if dels is not None and not early:
            self.stats["fused_dels"] += len(dels)
            for d in dels:
                self._free(d)

    def _run_kernel(self, op, inputs, values, outputs, reuse):
        # The kernel door: the device of the outputs runs ``op`` on the input buffers.  A
        # transfer (``Copy`` to another device) gets the source's value on the host.
        device = self.cpu if not outputs else cython.cast(TensorInfo, outputs[0]).device.impl
        if op.sets_device and inputs:
            src = cython.cast(TensorInfo, inputs[0]).device.impl
            if src is not device:
                values = [src.to_host(values[0])] + values[1:]
                reuse = None
        if type(device) is CpuDevice:
            cpu: CpuDevice = device
            return cpu.execute(op, values, outputs, reuse)  # (the CPU's door records itself)
        if _prof is not None:  # profiler: another device's kernel door, as a span
            return _prof.kernel(_execute_def, device, op, values, outputs, reuse)
        return device.execute(op, values, outputs, reuse)

    def _produce(self, info_, value, locked=True):
        info: TensorInfo = info_
        if info.shape is None:
            info.shape = info.device.impl.shape(value)
        memory: MemoryStats = self.memory
        memory.hold(info.device, value, locked)
        info.value = value
        info.evict_type = NONE
        if self.waiting and self.waiting_for is info:  # (a drain is notified when idle)
            with self.cv:
                self.cv.notify_all()

    def _release(self, info_):
        info: TensorInfo = info_
        v = info.value
        if v is not None:
            info.value = None
            memory: MemoryStats = self.memory
            memory.release(info.device, v, True)

    def _free(self, info_):
        # The user let go: free the storage; tensors recorded as computed from it no longer can be.
        info: TensorInfo = info_
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


@cython.cfunc
def _process_cmd(ex, cmd):
    # Executor._process's body: run one command; a failure becomes its outputs' error
    if not ex.worker_options["catch_worker_execption"]:
        ex._run_command(cmd)
        return
    try:
        ex._run_command(cmd)
    except BaseException as e:
        # Any exception a kernel raises -- KeyboardInterrupt, SystemExit and GeneratorExit
        # too -- is that command's error, reported at the next sync point; it must never end
        # the worker (every later op would fail).  Channel._raise_errors re-raises a
        # KeyboardInterrupt or SystemExit as itself on the caller's thread.
        with ex.cv:  # a waiter sees the outputs' error and the error to report together
            if cmd.kind == APPLY:
                for o in cmd.outputs:
                    o.error = e
                if cmd.dels:
                    for d in cmd.dels:
                        ex._free(d)
            elif cmd.dest is not None and cmd.kind != DEL:
                cmd.dest.error = e
            ex.errors.append(e)
            ex.cv.notify_all()


def _execute_def(device, op, values, outputs, reuse):
    return device.execute(op, values, outputs, reuse)


def _positions(inputs, dels):
    # the positions of the inputs that a fused Del freed
    out = []
    k: cython.Py_ssize_t
    for k in range(len(inputs)):
        if inputs[k] in dels:
            out.append(k)
    return out


def _record(op, inputs, outputs):
    # record_computing_path without DTR: every output can be recomputed from the inputs
    path = ComputePath(op, list(inputs), list(outputs))
    for o in outputs:
        o.producer = path
    for i in inputs:
        if i.users is None:
            i.users = [path]
        else:
            i.users.append(path)


def _nbytes(infos):
    n = 0
    for i in infos:
        v = i.value
        if v is not None:
            n += i.device.impl.nbytes(v)
    return n


def _recordable(outputs, minimum):
    # Whether an op may be recorded under DTR (an output of unknown shape may be large enough).
    for o in outputs:
        shape = o.shape
        if shape is None or size_of(shape) * o.dtype.itemsize > minimum:
            return True
    return False


def size_of(shape):
    n = 1
    for s in shape:
        n *= s
    return n
