"""The profiler's recorder (compiled: it runs at every event site while a profile records).

A ``Recorder`` appends one small tuple per event to one list (``list.append`` is atomic under the
GIL: the worker and the callers' threads share it).  The per-op events -- a dispatch, the flow it
starts, a channel command, a kernel, a buffer held or freed -- are written in a compact form that
holds the raw numbers; ``events`` expands them, when the profile is read, into
the plain tuples ``(phase, ns, thread ident, category, name, args, id)`` that
``mge.utils.profiler`` turns into the Trace Event format: op names and parameters (cached per op),
the flow slices, the memory and live-tensor counters (running sums over the holds and frees, in
order), the allocation numbers.  So a running profile costs a few appends and clock reads per op.
The records name ops and devices by number (``_ref``: an index into the recorder's table of them),
so that they hold no object the cyclic garbage collector must visit: a long profile's millions of
records would make every collection slower.
Timestamps are ``time.perf_counter_ns`` (monotonic, nanoseconds).  Spans are begun and ended on one
thread, strictly nested.
"""
import threading
import time

import cython

from . import _accel

_accel.guard(__name__)

__all__ = ["Recorder", "KIND_NAMES"]

_clock = time.perf_counter_ns
_get_ident = threading.get_ident
_RUNTIME = __file__.rsplit("/", 1)[0] + "/"  # frames of mge/_core: not the user's backtrace
# command kinds by number (command_buffer.py's KIND_NAMES)
KIND_NAMES = (None, "ApplyOp", "Del", "GetValue", "SwapIn", "SwapOut", "Drop", "SetOption",
              "PushScope", "PopScope")
# compact records (expanded by Recorder.events); the plain phases are "B" "E" "i" "C" "s" "f"
_DISPATCH, _FLOW, _COMMAND, _KERNEL, _HOLD, _RELEASE, _STORAGE = \
    "D", "F", "M", "K", "H", "R", "S"


class _ThreadState(threading.local):
    def __init__(self):
        self.stack = []     # the open spans (begin/end) on this thread: (category, name)
        self.flow = None    # the flow id the next kernel on this thread ends
        self.made_by = None  # the op whose kernel last ended here (names the buffers it made)


class Recorder:
    """Collects the events of one profile (created by ``mge._core.profiler.start``)."""

    def __init__(self, options=None):
        self.options = dict(options or {})
        self.log = []
        self._append = self.log.append
        self._local = _ThreadState()
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
        self._names = {}  # op -> its name (ops are interned and hashable: computed once)
        self._args = {}   # op -> its parameters as JSON values
        self._objs = []   # the ops and devices the records name by number
        self._index = {}  # op or device -> its number
        self._expanded = None

    def _ref(self, obj):
        # obj's number in the table (an unhashable one is kept as it is)
        try:
            i = self._index.get(obj)
            if i is None:
                i = self._index[obj] = len(self._objs)
                self._objs.append(obj)
            return i
        except TypeError:
            return obj

    def _obj(self, i):
        return self._objs[i] if type(i) is int else i

    # -- spans (off the per-op path) ---------------------------------------------------------------
    def begin(self, cat, name, args=None):
        """Open a span on this thread; returns the depth to pass to ``end``."""
        stack = self._local.stack
        depth = len(stack)
        stack.append((cat, name))
        self._append(("B", _clock(), _get_ident(), cat, name, args, None))
        return depth

    def end(self, depth):
        """End the span opened at ``depth`` (and any left open inside it)."""
        stack = self._local.stack
        if len(stack) <= depth:
            return
        tid = _get_ident()
        t = _clock()
        append = self._append
        while len(stack) > depth:
            stack.pop()
            append(("E", t, tid, None, None, None, None))

    def push_scope(self, name):
        """``push_scope(name)`` on this thread: a scope span."""
        self.begin("scope", name)

    def pop_scope(self, name):
        """``pop_scope(name)``: ends the innermost open scope span ``name`` (none: it was opened
        before the profile started)."""
        stack = self._local.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] == ("scope", name):
                self.end(i)
                return

    def instant(self, cat, name, args=None):
        self._append(("i", _clock(), _get_ident(), cat, name, args, None))

    def counter(self, name, args):
        self._append(("C", _clock(), _get_ident(), "counter", name, args, None))

    def call(self, cat, name, args, fn, *a):
        """``fn(*a)`` inside a span."""
        depth = self.begin(cat, name, args)
        try:
            return fn(*a)
        finally:
            self.end(depth)

    # -- the doors (the per-op path: compact records) ---------------------------------------------
    def dispatch(self, fn, op, inputs):
        """``dispatch.apply``: the op as a span (its parameters in ``args``) around ``fn``."""
        local = self._local
        local.made_by = None
        bt = self._backtrace() if self.backtrace else None
        tid = _get_ident()
        append = self._append
        append((_DISPATCH, _clock(), tid, self._ref(op), bt))
        try:
            return fn(op, inputs)
        finally:
            append(("E", _clock(), tid, None, None, None, None))
            local.made_by = None

    def _backtrace(self):
        import traceback
        return [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack(limit=16)
                if _RUNTIME not in f.filename][-12:]

    def _flow_start(self, what, op):
        self._flows += 1
        fid = self._flows
        self._append((_FLOW, _clock(), _get_ident(), what, self._ref(op), fid))
        return fid

    def flow_command(self, cmd):
        """An ``ApplyOp`` is queued: a flow from here to its kernel (its id rides on ``cmd``)."""
        cmd.value = self._flow_start("enqueue ApplyOp", cmd.op)

    def flow_host(self, op):
        """A tiny op computed now on this thread: a flow to the kernel that follows."""
        self._local.flow = self._flow_start("host compute", op)

    def command(self, fn, ex, cmd):
        """A channel command runs on this thread (``Executor._process``)."""
        kind = cmd.kind
        local = self._local
        if kind == 1:  # ApplyOp
            what = self._ref(cmd.op)
            local.flow = cmd.value
        else:
            what = cmd.value
        try:
            pending = len(ex.worker.queue) + len(ex.buffer.commands)
        except Exception:
            pending = 0
        local.made_by = None
        tid = _get_ident()
        append = self._append
        append((_COMMAND, _clock(), tid, kind, what, cmd.value if kind == 1 else None,
                len(cmd.dels) if kind == 1 and cmd.dels else 0, pending))
        try:
            return fn(ex, cmd)
        finally:
            append(("E", _clock(), tid, None, None, None, None))
            local.flow = None
            local.made_by = None

    def kernel(self, fn, device, op, inputs, descs, reuse):
        """A kernel door runs ``op``: a span on this thread, ending the dispatch's flow."""
        if not self.profile_device:
            return fn(device, op, inputs, descs, reuse)
        local = self._local
        fid = local.flow
        local.flow = None
        tid = _get_ident()
        append = self._append
        ref = self._ref(op)
        append((_KERNEL, _clock(), tid, ref, self._ref(device), len(descs),
                tuple(reuse) if reuse else None, fid))
        try:
            return fn(device, op, inputs, descs, reuse)
        finally:
            append(("E", _clock(), tid, None, None, None, None))
            local.made_by = ref
            self.kernels += 1
            if self.sample_rate and self.kernels % self.sample_rate == 0:
                self._sample()

    def _sample(self):
        # sample_rate: every n-th kernel, the memory of every device (MegEngine's SampleDevice)
        from .channel import get_channel
        current = get_channel().memory.snapshot()[1]  # (a copy under the memory lock)
        self.counter("memory sample", {str(k): v for k, v in current.items()})

    # -- memory ------------------------------------------------------------------------------------
    def hold(self, key, owner, nbytes, dev, current):
        """A tensor holds a buffer; ``current`` is the device's bytes when the storage is new,
        ``None`` when another tensor holds it already."""
        made_by = None
        if current is not None:
            made_by = self._local.made_by
            if made_by is None:
                made_by = "put"
            self._append((_HOLD, _clock(), _get_ident(), key, nbytes, self._ref(dev), current,
                          made_by, getattr(owner, "shape", None), getattr(owner, "dtype", None)))
        else:
            self._append((_HOLD, _clock(), _get_ident(), key, nbytes, self._ref(dev), None, None,
                          None, None))

    def storage(self, key, owner, nbytes, dev, made_by):
        """A buffer's life begins (one alive when the profile started: ``made_by`` says so)."""
        self._append((_STORAGE, _clock(), _get_ident(), key, nbytes, self._ref(dev), made_by,
                      getattr(owner, "shape", None), getattr(owner, "dtype", None)))

    def release(self, key, dev, current):
        """A tensor let go of a buffer; ``current`` as in ``hold`` (``None``: still shared)."""
        self._append((_RELEASE, _clock(), _get_ident(), key, self._ref(dev), current))

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
        (the compact records expanded; kept once the profile stopped)."""
        if self._expanded is not None:
            return self._expanded
        out = _expand(self, list(self.log))
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


def _expand(rec, log):
    # the compact records as plain events, in order (counters are running sums)
    out = []
    append = out.append
    obj = rec._obj

    def name_of(x):
        return rec.name_of(obj(x))
    live = rec.live
    storages = {}     # key -> (storage number, device, nbytes)
    memory = {}       # device -> its counter's name
    next_storage = 0
    for r in log:
        kind = r[0]
        if kind == _DISPATCH:
            op = obj(r[3])
            args = rec.args_of(op)
            if r[4] is not None:
                args = dict(args)
                args["backtrace"] = r[4]
            append(("B", r[1], r[2], "dispatch", name_of(op), args, None))
        elif kind == _FLOW:
            t, tid, name = r[1], r[2], name_of(r[4])
            append(("B", t, tid, "channel", r[3], {"op": name, "flow": r[5]}, None))
            append(("s", t, tid, "flow", name, None, r[5]))
            append(("E", t, tid, None, None, None, None))
        elif kind == _COMMAND:
            t, tid, ckind, what = r[1], r[2], r[3], r[4]
            append(("C", t, tid, "counter", "commands", {"pending": r[7]}, None))
            if ckind == 1:
                args = {"op": name_of(what), "flow": r[5], "dels": r[6]}
            elif what is not None:
                args = {"value": _short(what)}
            else:
                args = None
            append(("B", t, tid, "command", KIND_NAMES[ckind], args, None))
        elif kind == _KERNEL:
            t, tid, op, fid = r[1], r[2], r[3], r[7]
            name = name_of(op)
            args = {"device": obj(r[4]), "outputs": r[5]}
            if r[6]:
                args["reuse"] = list(r[6])
            if fid is not None:
                args["flow"] = fid
            append(("B", t, tid, "kernel", name, args, None))
            if fid is not None:
                append(("f", t, tid, "flow", name, None, fid))
        elif kind == _HOLD or kind == _STORAGE:
            t, tid, key, nbytes, dev = r[1], r[2], r[3], r[4], obj(r[5])
            if kind == _STORAGE:
                made_by, shape, dtype, current = r[6], r[7], r[8], None
            else:
                live += 1
                current, made_by, shape, dtype = r[6], r[7], r[8], r[9]
            if kind == _STORAGE or current is not None:
                next_storage += 1
                storages[key] = (next_storage, dev, nbytes)
                append(("i", t, tid, "memory", "alloc",
                        {"id": next_storage, "bytes": nbytes, "device": dev,
                         "op": name_of(made_by), "shape": shape, "dtype": dtype}, None))
            if current is not None:
                append(("C", t, tid, "counter", _memory_name(memory, dev),
                        {"allocated": current}, None))
            if kind == _HOLD:
                append(("C", t, tid, "counter", "tensors", {"live": live}, None))
        elif kind == _RELEASE:
            t, tid, key, dev, current = r[1], r[2], r[3], obj(r[4]), r[5]
            live -= 1
            if current is not None:
                entry = storages.pop(key, None)
                if entry is not None:
                    append(("i", t, tid, "memory", "free",
                            {"id": entry[0], "bytes": entry[2], "device": dev}, None))
                else:  # held before the profile started
                    append(("i", t, tid, "memory", "free", {"id": None, "device": dev}, None))
                append(("C", t, tid, "counter", _memory_name(memory, dev),
                        {"allocated": current}, None))
            append(("C", t, tid, "counter", "tensors", {"live": live}, None))
        else:
            append(r)
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
