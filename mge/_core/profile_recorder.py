"""The profiler's recorder (compiled: it runs at every event site while a profile records).

A running profile must cost little per op, so the ``Recorder`` writes each event as a few 64-bit
integers at the end of one growing buffer (in C when compiled; a list of ints in the pure-Python
twin): a kind, the time, the thread's number, then the kind's fields.  Objects -- ops, devices,
shapes, strings, the arguments of the rare events -- are named by their number in the recorder's
table (``_ref``).  Writing an event makes no Python object, so the garbage collector has nothing
to visit and nothing is allocated per event but the buffer's growth.  The worker and the callers'
threads share the buffer: every write happens with the GIL held, in C, without releasing it.

``events`` turns the buffer, when the profile is read, into the plain tuples ``(phase, ns, thread
ident, category, name, args, id)`` that ``mge.utils.profiler`` writes in the Trace Event format:
op names and parameters, the flow slices, the memory and live-tensor counters (running sums over
the holds and frees, in order), the allocation numbers.  Timestamps are ``CLOCK_MONOTONIC``
nanoseconds (``time.perf_counter_ns``).  Spans are begun and ended on one thread, strictly nested.
"""
import threading
import time

import cython

from . import _accel

_accel.guard(__name__)
if cython.compiled:
    from cython.cimports.cpython.mem import PyMem_Free, PyMem_Realloc
    from cython.cimports.cpython.pythread import PyThread_get_thread_ident
    from cython.cimports.posix.time import CLOCK_MONOTONIC, clock_gettime, timespec

__all__ = ["Recorder", "KIND_NAMES"]

_clock = time.perf_counter_ns
_get_ident = threading.get_ident
_RUNTIME = __file__.rsplit("/", 1)[0] + "/"  # frames of mge/_core: not the user's backtrace
# command kinds by number (command_buffer.py's KIND_NAMES)
KIND_NAMES = (None, "ApplyOp", "Del", "GetValue", "SwapIn", "SwapOut", "Drop", "SetOption",
              "PushScope", "PopScope")
# Record kinds and their lengths in the buffer (kind, time, thread, fields...).
PLAIN, DISPATCH, END, FLOW, COMMAND, KERNEL, HOLD, STORAGE, RELEASE = range(9)
_LENGTH = (4, 5, 3, 6, 8, 8, 10, 9, 6)
_NONE = -1  # "no object" in a field that holds a table number
_UNSET = object()  # (a device without a timer yet)


def _now() -> cython.longlong:
    # time.perf_counter_ns: CLOCK_MONOTONIC on Linux (read in C when compiled)
    if cython.compiled:
        ts: timespec
        clock_gettime(CLOCK_MONOTONIC, cython.address(ts))
        return ts.tv_sec * 1000000000 + ts.tv_nsec
    else:
        return _clock()


def _length(kind: cython.longlong) -> cython.Py_ssize_t:
    # _LENGTH[kind], in C
    if kind == END:
        return 3
    if kind == PLAIN:
        return 4
    if kind == DISPATCH:
        return 5
    if kind == FLOW or kind == RELEASE:
        return 6
    if kind == COMMAND or kind == KERNEL:
        return 8
    if kind == STORAGE:
        return 9
    return 10


class _ThreadState:
    """One thread's state in a profile."""


    def __init__(self, index, ident):
        self.index = index
        self.ident = ident
        self.stack = []
        self.flow = _NONE
        self.made_by = _NONE
        self.kernel = _NONE


class _Log:
    """A growing buffer of 64-bit integers (C memory when compiled)."""

    def __init__(self):
        self.size = 0
        self.capacity = 0
        if cython.compiled:
            self.data = cython.NULL
        else:
            self.data = []

    def __dealloc__(self):
        if cython.compiled:
            PyMem_Free(self.data)

    def _room(self, n: cython.Py_ssize_t) -> cython.bint:
        # space for n more values (compiled: doubles the C buffer)
        if cython.compiled:
            if self.size + n > self.capacity:
                cap: cython.Py_ssize_t = max(1 << 16, 2 * self.capacity, self.size + n)
                new = cython.cast(cython.p_longlong,
                                  PyMem_Realloc(self.data, cap * cython.sizeof(cython.longlong)))
                if new == cython.NULL:
                    raise MemoryError("profiler: cannot grow the event buffer")
                self.data = new
                self.capacity = cap
        return True

    def put(self, a: cython.longlong, b: cython.longlong, c: cython.longlong,
            d: cython.longlong = 0, e: cython.longlong = 0, f: cython.longlong = 0,
            g: cython.longlong = 0, h: cython.longlong = 0, i: cython.longlong = 0,
            j: cython.longlong = 0) -> cython.bint:
        # one record: kind a, its length as _LENGTH says (the rest of the fields are ignored)
        n: cython.Py_ssize_t = _length(a)
        self._room(n)
        if cython.compiled:
            p: cython.p_longlong = self.data + self.size
            p[0] = a
            p[1] = b
            p[2] = c
            if n > 3:
                p[3] = d
            if n > 4:
                p[4] = e
            if n > 5:
                p[5] = f
            if n > 6:
                p[6] = g
                p[7] = h
            if n > 8:
                p[8] = i
            if n > 9:
                p[9] = j
        else:
            self.data.extend((a, b, c, d, e, f, g, h, i, j)[:n])
        self.size += n
        return True

    def values(self):
        """The values written, as a list of ints."""
        if cython.compiled:
            return [self.data[k] for k in range(self.size)]
        return list(self.data)


class Recorder:
    """Collects the events of one profile (created by ``mge._core.profiler.start``)."""


    def __init__(self, options=None):
        self.options = dict(options or {})
        self.buf = _Log()
        self._threads = {}
        self._thread_list = []
        self._flows = 0
        self.live = 0  # tensors holding a buffer when the profile started
        self.kernels = 0
        self.sample_rate = int(self.options.get("sample_rate", 0) or 0)
        self.profile_device = bool(int(self.options.get("profile_device", 1)))
        self.backtrace = bool(self.options.get("with_backtrace", False))
        self.start_ns = _clock()
        self.start_wall_us = int(time.time() * 1e6)  # merge_trace_events aligns processes by it
        self.stop_ns = None
        self.worker_tid = None
        self.main_tid = _get_ident()
        self.thread_names = {}
        self.timers = {}         # device -> its DeviceTimer (None: a synchronous device)
        self.device_events = []  # the timers' spans, added when the profile stops
        self._names = {}  # op -> its name (ops are interned and hashable: computed once)
        self._args = {}   # op -> its parameters as JSON values
        self._objs = []   # what the records name by number
        self._index = {}  # hashable object -> its number
        self._expanded = None
        self._last_dtype = None
        self._last_dtype_i = _NONE
        self._last_shape = None
        self._last_shape_i = _NONE
        self._last_tid = 0  # (0: no thread yet; a thread's ident is never 0)
        self._last_state = None

    # -- the tables ----------------------------------------------------------------------------------

    def _ref(self, obj) -> cython.longlong:
        # obj's number in the table (None: _NONE; an unhashable object gets a number of its own)
        if obj is None:
            return _NONE
        try:
            i = self._index.get(obj)
        except TypeError:
            self._objs.append(obj)
            return len(self._objs) - 1
        if i is None:
            i = len(self._objs)
            self._index[obj] = i
            self._objs.append(obj)
        return i

    def _ref_same(self, obj) -> cython.longlong:
        # obj's number, found by identity in a small table of the objects named last: ops and
        # devices, whose hash and equality are Python code.  (The table ``_objs`` holds every
        # object named, so an address seen here cannot be another object's while we live.)
        if cython.compiled:
            p: cython.p_void = cython.cast(cython.p_void, obj)
            a: cython.size_t = cython.cast(cython.size_t, p) >> 4  # (objects are 16-aligned)
            h: cython.size_t = (a ^ (a >> 5) ^ (a >> 10)) & 31
            if self._seen_ptr[h] == p:
                return self._seen_index[h]
            i: cython.longlong = self._ref(obj)
            self._seen_ptr[h] = p
            self._seen_index[h] = i
            return i
        return self._ref(obj)

    def _ref_op(self, op) -> cython.longlong:
        return self._ref_same(op)

    def _ref_dev(self, dev) -> cython.longlong:
        return self._ref_same(dev)

    def _ref_dtype(self, dtype) -> cython.longlong:
        if dtype is not self._last_dtype:
            self._last_dtype_i = self._ref(dtype)
            self._last_dtype = dtype
        return self._last_dtype_i

    def _ref_shape(self, shape) -> cython.longlong:
        # (buffers come in runs of one shape: an equal tuple costs no hash)
        if shape is None:
            return _NONE
        if shape is not self._last_shape and shape != self._last_shape:
            self._last_shape_i = self._ref(shape)
            self._last_shape = shape
        return self._last_shape_i

    def _new(self, obj) -> cython.longlong:
        # a number for obj without looking it up (the rare events' tuples)
        self._objs.append(obj)
        return len(self._objs) - 1

    def obj(self, i):
        """The object a record names by number ``i``."""
        return None if i == _NONE else self._objs[i]

    def _local(self) -> _ThreadState:
        # this thread's state (a dict by thread ident: cheaper than threading.local)
        if cython.compiled:
            tid: cython.ulong = PyThread_get_thread_ident()
        else:
            tid = _get_ident()
        if tid == self._last_tid:  # (a C comparison, no int object)
            return self._last_state
        st = self._threads.get(tid)
        if st is None:
            st = _ThreadState(len(self._thread_list), tid)
            self._threads[tid] = st
            self._thread_list.append(tid)
        self._last_tid = tid
        self._last_state = st
        return st

    # -- the rare events (kept as plain tuples, named by number) -------------------------------------

    def _plain(self, local: _ThreadState, event: tuple):
        self.buf.put(PLAIN, event[1], local.index, self._new(event))

    def begin(self, cat, name, args=None):
        """Open a span on this thread; returns the depth to pass to ``end``."""
        local = self._local()
        stack = local.stack
        depth = len(stack)
        stack.append((cat, name))
        self._plain(local, ("B", _now(), None, cat, name, args, None))
        return depth

    def end(self, depth):
        """End the span opened at ``depth`` (and any left open inside it)."""
        local = self._local()
        stack = local.stack
        if len(stack) <= depth:
            return
        t = _now()
        while len(stack) > depth:
            stack.pop()
            self.buf.put(END, t, local.index)

    def push_scope(self, name):
        """``push_scope(name)`` on this thread: a scope span."""
        self.begin("scope", name)

    def pop_scope(self, name):
        """``pop_scope(name)``: ends the innermost open scope span ``name`` (none: it was opened
        before the profile started)."""
        stack = self._local().stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] == ("scope", name):
                self.end(i)
                return

    def instant(self, cat, name, args=None):
        self._plain(self._local(), ("i", _now(), None, cat, name, args, None))

    def counter(self, name, args):
        self._plain(self._local(), ("C", _now(), None, "counter", name, args, None))

    def call(self, cat, name, args, fn, *a):
        """``fn(*a)`` inside a span."""
        depth = self.begin(cat, name, args)
        try:
            return fn(*a)
        finally:
            self.end(depth)

    # -- the doors (the per-op path) -----------------------------------------------------------------

    def enter_dispatch(self, op):
        """``dispatch.apply`` begins ``op``: a span (its parameters in ``args``) until
        ``exit_dispatch``."""
        local = self._local()
        local.made_by = _NONE
        bt = self._new(self._backtrace()) if self.backtrace else _NONE
        self.buf.put(DISPATCH, _now(), local.index, self._ref_op(op), bt)

    def exit_dispatch(self):
        local = self._local()
        self.buf.put(END, _now(), local.index)
        local.made_by = _NONE

    def dispatch(self, fn, op, inputs):
        """``fn(op, inputs)`` as the dispatch of ``op``."""
        self.enter_dispatch(op)
        try:
            return fn(op, inputs)
        finally:
            self.exit_dispatch()

    def _backtrace(self):
        import traceback
        return [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack(limit=16)
                if _RUNTIME not in f.filename][-12:]

    def _flow_start(self, local: _ThreadState, what, op) -> cython.longlong:
        self._flows += 1
        self.buf.put(FLOW, _now(), local.index, self._ref_same(what), self._ref_op(op),
                     self._flows)
        return self._flows

    def flow_command(self, cmd):
        """An ``ApplyOp`` is queued: a flow from here to its kernel (its id rides on ``cmd``)."""
        cmd.value = self._flow_start(self._local(), "enqueue ApplyOp", cmd.op)

    def flow_host(self, op):
        """A tiny op computed now on this thread: a flow to the kernel that follows."""
        local = self._local()
        local.flow = self._flow_start(local, "host compute", op)

    def enter_command(self, ex, cmd):
        """A channel command begins on this thread (``Executor._process``): a span until
        ``exit_command``."""
        kind = cmd.kind
        local = self._local()
        flow = _NONE
        if kind == 1:  # ApplyOp
            what = self._ref_op(cmd.op)
            if cmd.value is not None:
                flow = cmd.value
            local.flow = flow
        else:
            what = self._new(_short(cmd.value)) if cmd.value is not None else _NONE
        try:
            pending = len(ex.worker.queue) + len(ex.buffer.commands)
        except Exception:
            pending = 0
        local.made_by = _NONE
        self.buf.put(COMMAND, _now(), local.index, kind, what, flow,
                     len(cmd.dels) if kind == 1 and cmd.dels else 0, pending)

    def exit_command(self):
        local = self._local()
        self.buf.put(END, _now(), local.index)
        local.flow = _NONE
        local.made_by = _NONE

    def command(self, fn, ex, cmd):
        """``fn(ex, cmd)`` as the run of channel command ``cmd``."""
        self.enter_command(ex, cmd)
        try:
            return fn(ex, cmd)
        finally:
            self.exit_command()

    def enter_kernel(self, device, op, descs, reuse):
        """A kernel door begins ``op``: a span on this thread, ending the dispatch's flow, until
        ``exit_kernel``; False (no span) without ``profile_device``."""
        if not self.profile_device:
            return False
        local = self._local()
        fid = local.flow
        local.flow = _NONE
        ref = self._ref_op(op)
        local.kernel = ref
        self.buf.put(KERNEL, _now(), local.index, ref, self._ref_dev(device), len(descs),
                     self._new(list(reuse)) if reuse else _NONE, fid)
        return True

    def exit_kernel(self):
        local = self._local()
        self.buf.put(END, _now(), local.index)
        local.made_by = local.kernel
        self.kernels += 1
        if self.sample_rate and self.kernels % self.sample_rate == 0:
            self._sample()

    def kernel(self, fn, device, op, inputs, descs, reuse):
        """``fn(device, op, inputs, descs, reuse)`` as a kernel door's run of ``op``; on an
        asynchronous device also its device time (``profiler.DeviceTimer``)."""
        if not self.enter_kernel(device, op, descs, reuse):
            return fn(device, op, inputs, descs, reuse)
        timer = self.timers.get(device, _UNSET)
        if timer is _UNSET:
            from .device_timer import DeviceTimer
            timer = self.timers[device] = DeviceTimer.for_device(device)
        mark = timer.begin() if timer is not None else None
        try:
            return fn(device, op, inputs, descs, reuse)
        finally:
            if mark is not None:
                timer.end(mark, op)
            self.exit_kernel()

    def _sample(self):
        # sample_rate: every n-th kernel, the memory of every device (MegEngine's SampleDevice)
        from .channel import get_channel
        current = get_channel().memory.snapshot()[1]  # (a copy under the memory lock)
        self.counter("memory sample", {str(k): v for k, v in current.items()})

    # -- memory --------------------------------------------------------------------------------------

    def hold(self, key, owner, nbytes, dev, current):
        """A tensor holds a buffer; ``current`` is the device's bytes when the storage is new,
        ``None`` when another tensor holds it already."""
        local = self._local()
        if current is not None:
            self.buf.put(HOLD, _now(), local.index, key, nbytes, self._ref_dev(dev), current,
                         local.made_by, self._ref_shape(getattr(owner, "shape", None)),
                         self._ref_dtype(getattr(owner, "dtype", None)))
        else:
            self.buf.put(HOLD, _now(), local.index, key, nbytes, self._ref_dev(dev), _NONE, _NONE,
                         _NONE, _NONE)

    def storage(self, key, owner, nbytes, dev, made_by):
        """A buffer's life begins (one alive when the profile started: ``made_by`` says so)."""
        self.buf.put(STORAGE, _now(), self._local().index, key, nbytes, self._ref(dev),
                     self._ref(made_by), self._ref(getattr(owner, "shape", None)),
                     self._ref(getattr(owner, "dtype", None)))

    def release(self, key, dev, current):
        """A tensor let go of a buffer; ``current`` as in ``hold`` (``None``: still shared)."""
        self.buf.put(RELEASE, _now(), self._local().index, key, self._ref_dev(dev),
                     _NONE if current is None else current)

    # -- waits, DTR ----------------------------------------------------------------------------------

    def wait(self, fn, ch, info):
        """The caller waits for ``info``'s value (``Channel._wait``)."""
        args = {"shape": None if info.shape is None else list(info.shape),
                "dtype": str(info.dtype), "for": _producer_of(ch, info)}
        return self.call("wait", "wait for value", args, fn, info)

    def evict(self, info, nbytes, cost, auto):
        """DTR evicts ``info`` (``auto``: under the budget; else a freed tensor kept for others)."""
        self.instant("dtr", "evict", {"bytes": int(nbytes), "auto": bool(auto),
                                      "cost": float(cost), "shape": _shape(info)})

    def recompute(self, fn, path):
        self.call("dtr", "recompute " + path.op.name,
                  {"op": path.op.name, "outputs": [_shape(o) for o in path.outputs]}, fn, path)

    # -- reading ---------------------------------------------------------------------------------------
    @property
    def events(self):
        """The events as plain tuples ``(phase, ns, thread ident, category, name, args, id)``
        (expanded from the buffer; kept once the profile stopped)."""
        if self._expanded is not None:
            return self._expanded
        out = _expand(self, self.buf.values(), list(self._thread_list)) + self.device_events
        if self.stop_ns is not None:
            self._expanded = out
        return out

    def name_of(self, op):
        """``op``'s name (a string is its own name)."""
        if op is None or isinstance(op, str):
            return op
        try:
            return self._names[op]
        except (KeyError, TypeError):
            return self._describe(op)[0]

    def args_of(self, op):
        """``op``'s parameters as JSON values (cached per op)."""
        try:
            return self._args[op]
        except (KeyError, TypeError):
            return self._describe(op)[1]

    def _describe(self, op):
        name = op.name
        args = _op_args(op)
        try:
            self._names[op] = name
            self._args[op] = args
        except TypeError:  # an unhashable op from outside mge
            pass
        return name, args


def _expand(rec, v, threads):
    # the buffer's records as plain events, in order (counters are running sums)
    out = []
    append = out.append
    obj = rec.obj

    def name_of(i):
        return rec.name_of(obj(i))

    live = rec.live
    storages = {}     # key -> (storage number, device, nbytes)
    memory = {}       # device -> its counter's name
    next_storage = 0
    k, n = 0, len(v)
    while k < n:
        kind, t, tid = v[k], v[k + 1], threads[v[k + 2]]
        r = v[k:k + _LENGTH[kind]]
        k += _LENGTH[kind]
        if kind == PLAIN:
            e = obj(r[3])
            append((e[0], e[1], tid) + e[3:])
        elif kind == END:
            append(("E", t, tid, None, None, None, None))
        elif kind == DISPATCH:
            op = obj(r[3])
            args = rec.args_of(op)
            if r[4] != _NONE:
                args = dict(args)
                args["backtrace"] = obj(r[4])
            append(("B", t, tid, "dispatch", rec.name_of(op), args, None))
        elif kind == FLOW:
            name = name_of(r[4])
            append(("B", t, tid, "channel", obj(r[3]), {"op": name, "flow": r[5]}, None))
            append(("s", t, tid, "flow", name, None, r[5]))
            append(("E", t, tid, None, None, None, None))
        elif kind == COMMAND:
            ckind, what, flow = r[3], r[4], r[5]
            append(("C", t, tid, "counter", "commands", {"pending": r[7]}, None))
            if ckind == 1:
                args = {"op": name_of(what), "flow": None if flow == _NONE else flow,
                        "dels": r[6]}
            elif what != _NONE:
                args = {"value": obj(what)}
            else:
                args = None
            append(("B", t, tid, "command", KIND_NAMES[ckind], args, None))
        elif kind == KERNEL:
            name, fid = name_of(r[3]), r[7]
            args = {"device": obj(r[4]), "outputs": r[5]}
            if r[6] != _NONE:
                args["reuse"] = obj(r[6])
            if fid != _NONE:
                args["flow"] = fid
            append(("B", t, tid, "kernel", name, args, None))
            if fid != _NONE:
                append(("f", t, tid, "flow", name, None, fid))
        elif kind == HOLD or kind == STORAGE:
            key, nbytes, dev = r[3], r[4], obj(r[5])
            if kind == STORAGE:
                current, made_by, shape, dtype = None, obj(r[6]), obj(r[7]), obj(r[8])
            else:
                live += 1
                current = None if r[6] == _NONE else r[6]
                made_by = "put" if r[7] == _NONE else obj(r[7])
                shape, dtype = obj(r[8]), obj(r[9])
            if kind == STORAGE or current is not None:
                next_storage += 1
                storages[key] = (next_storage, dev, nbytes)
                append(("i", t, tid, "memory", "alloc",
                        {"id": next_storage, "bytes": nbytes, "device": dev,
                         "op": rec.name_of(made_by), "shape": shape, "dtype": dtype}, None))
            if current is not None:
                append(("C", t, tid, "counter", _memory_name(memory, dev),
                        {"allocated": current}, None))
            if kind == HOLD:
                append(("C", t, tid, "counter", "tensors", {"live": live}, None))
        elif kind == RELEASE:
            key, dev, current = r[3], obj(r[4]), r[5]
            live -= 1
            if current != _NONE:
                entry = storages.pop(key, None)
                if entry is not None:
                    append(("i", t, tid, "memory", "free",
                            {"id": entry[0], "bytes": entry[2], "device": dev}, None))
                else:  # held before the profile started
                    append(("i", t, tid, "memory", "free", {"id": None, "device": dev}, None))
                append(("C", t, tid, "counter", _memory_name(memory, dev),
                        {"allocated": current}, None))
            append(("C", t, tid, "counter", "tensors", {"live": live}, None))
    return out


def _memory_name(names, dev):
    name = names.get(dev)
    if name is None:
        name = names[dev] = "memory " + str(dev)
    return name


def _shape(info):
    s = getattr(info, "shape", None)
    return None if s is None else list(s)


def _producer_of(ch, info):
    # the op whose queued command makes ``info`` (only while profiling: scans the queue)
    try:
        cmds = list(ch.worker.queue) + list(ch.buffer.commands)
    except Exception:
        return None
    for c in cmds:
        if c.kind == 1 and any(o is info for o in c.outputs):
            return c.op.name
    return None


def _short(v):
    s = repr(v)
    return s if len(s) <= 200 else s[:197] + "..."


def _op_args(op):
    fields = getattr(op, "_fields", ())
    key = getattr(op, "_key", ())
    out = {}
    for f, v in zip(fields, key):
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[f] = v
        else:
            out[f] = _short(v)
    return out
