"""The profiler's recording side: events from the doors of the runtime (seed ``000``'s
``start_profile``/``stop_profile``, seed ``003``'s profiler events).

The runtime's event sites -- op dispatch (``dispatch.apply``), the channel's commands, the kernel
doors (``CpuDevice.execute``; other devices' ``execute`` in the executor), waits, scopes, DTR
evictions and recomputations, memory holds and frees (``MemoryStats``), trace calls -- each test
one module-level variable, ``_prof``, and do nothing else while it is ``None``: in the compiled
modules that is a C pointer comparison, the whole cost of an idle profiler.  ``start`` hands the
running ``Recorder`` to every such module (``_SITES``), ``stop`` takes it back.

A ``Recorder`` appends plain tuples ``(phase, ns, thread ident, category, name, args, id)`` to one
list (``list.append`` is atomic under the GIL: the worker and the callers' threads share it);
``mge.utils.profiler`` turns them into the Trace Event format, the memory picture and the tables.
Timestamps are ``time.perf_counter_ns`` (monotonic, nanoseconds).  Spans are begun and ended on one
thread, strictly nested: each thread keeps the stack of its open spans, and a span's end also ends
whatever an exception left open inside it.

``mge._core`` never imports ``mge.utils``; this module imports nothing of the runtime at import
time (the channel and the devices import it), only when a profile starts.
"""
import threading
import time

__all__ = ["Recorder", "start", "stop", "active", "span", "end", "instant"]

_clock = time.perf_counter_ns
_RUNTIME = __file__.rsplit("/", 1)[0] + "/"  # frames of mge/_core: not the user's backtrace
_get_ident = threading.get_ident

# The hot modules with event sites: each has ``_prof`` and ``_set_profiler(recorder_or_None)``.
_SITES = (
    "mge._core.dispatch",
    "mge._core.channel.channel",
    "mge._core.channel.executor",
    "mge._core.channel.swap_drop",
    "mge._core.channel.dtr_mechanism",
    "mge._core.device.memory",
    "mge._core.device.cpu.device",
)

_active = None  # the running Recorder
# command kinds by number (command_buffer.py's KIND_NAMES)
KIND_NAMES = (None, "ApplyOp", "Del", "GetValue", "SwapIn", "SwapOut", "Drop", "SetOption",
              "PushScope", "PopScope")


def active():
    """The running ``Recorder``, or ``None``."""
    return _active


class _ThreadState(threading.local):
    def __init__(self):
        self.stack = []     # the open spans on this thread: (category, name)
        self.flow = None    # the flow id the next kernel on this thread ends
        self.made_by = None  # the op whose kernel last ended here (names the buffers it made)


class Recorder:
    """Collects the events of one profile (created by ``start``)."""

    def __init__(self, options=None):
        self.options = dict(options or {})
        self.events = []
        self._append = self.events.append
        self._local = _ThreadState()
        self._flows = 0
        self._storages = {}  # id(owner) -> (storage number, device key, nbytes)
        self._next_storage = 0
        self.live = 0  # tensors holding a buffer
        self.kernels = 0
        self.sample_rate = int(self.options.get("sample_rate", 0) or 0)
        self.profile_device = bool(int(self.options.get("profile_device", 1)))
        self.with_params = True
        self.backtrace = bool(self.options.get("with_backtrace", False))
        self.start_ns = _clock()
        self.start_wall_us = int(time.time() * 1e6)  # merge_trace_events aligns processes by it
        self.stop_ns = None
        self.worker_tid = None
        self.main_tid = _get_ident()
        self.thread_names = {}
        self._names = {}  # op -> its name (ops are interned and hashable: computed once)
        self._args = {}   # op -> its parameters as JSON values

    # -- spans -----------------------------------------------------------------------------------
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

    # -- the doors -------------------------------------------------------------------------------
    def dispatch(self, fn, op, inputs):
        """``dispatch.apply``: the op as a span (its parameters in ``args``) around ``fn``."""
        local = self._local
        local.made_by = None
        try:
            name = self._names[op]
            args = self._args[op]
        except (KeyError, TypeError):
            name, args = self._describe(op)
        if self.backtrace:
            args = dict(args)
            import traceback
            args["backtrace"] = [f"{f.filename}:{f.lineno} {f.name}"
                                 for f in traceback.extract_stack(limit=16)
                                 if _RUNTIME not in f.filename][-12:]
        depth = self.begin("dispatch", name, args)
        try:
            return fn(op, inputs)
        finally:
            self.end(depth)
            local.made_by = None

    def _describe(self, op):
        name = op.name
        args = _op_args(op)
        try:
            self._names[op] = name
            self._args[op] = args
        except TypeError:  # an unhashable op from outside mge
            pass
        return name, args

    def _name(self, op):
        try:
            return self._names[op]
        except (KeyError, TypeError):
            return self._describe(op)[0]

    def _flow_start(self, what, op):
        self._flows += 1
        fid = self._flows
        t = _clock()
        tid = _get_ident()
        append = self._append
        # a zero-length slice to hold the flow's start (a flow binds to the slice around it)
        name = self._name(op)
        append(("B", t, tid, "channel", what, {"op": name, "flow": fid}, None))
        append(("s", t, tid, "flow", name, None, fid))
        append(("E", t, tid, None, None, None, None))
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
        name = KIND_NAMES[kind]
        local = self._local
        args = None
        if kind == 1:  # ApplyOp
            args = {"op": self._name(cmd.op), "flow": cmd.value,
                    "dels": len(cmd.dels) if cmd.dels else 0}
            local.flow = cmd.value
        elif cmd.value is not None:
            args = {"value": _short(cmd.value)}
        try:
            pending = len(ex.worker.queue) + len(ex.buffer.commands)
        except Exception:
            pending = 0
        self.counter("commands", {"pending": pending})
        local.made_by = None
        depth = self.begin("command", name, args)
        try:
            return fn(ex, cmd)
        finally:
            self.end(depth)
            local.flow = None
            local.made_by = None

    def kernel(self, fn, device, op, inputs, descs, reuse):
        """A kernel door runs ``op``: a span on this thread, ending the dispatch's flow."""
        if not self.profile_device:
            return fn(device, op, inputs, descs, reuse)
        local = self._local
        fid = local.flow
        local.flow = None
        name = self._name(op)
        args = {"device": device, "outputs": len(descs)}  # (the device named when written)
        if reuse:
            args["reuse"] = list(reuse)
        if fid is not None:
            args["flow"] = fid
        depth = self.begin("kernel", name, args)
        if fid is not None:
            self._append(("f", _clock(), _get_ident(), "flow", name, None, fid))
        try:
            return fn(device, op, inputs, descs, reuse)
        finally:
            self.end(depth)
            local.made_by = name
            self.kernels += 1
            if self.sample_rate and self.kernels % self.sample_rate == 0:
                self._sample()

    def _sample(self):
        # sample_rate: every n-th kernel, the memory of every device (MegEngine's SampleDevice)
        from .channel import get_channel
        current = get_channel().memory.snapshot()[1]  # (a copy under the memory lock)
        self.counter("memory sample", {str(k): v for k, v in current.items()})

    # -- memory ----------------------------------------------------------------------------------
    def hold(self, key, owner, nbytes, dev, current):
        """A tensor holds a buffer; ``current`` is the device's bytes when the storage is new,
        ``None`` when another tensor holds it already."""
        self.live += 1
        if current is not None:
            self.storage(key, owner, nbytes, dev, self._local.made_by or "put")
            self.counter(self._memory_name(dev), {"allocated": current})
        self.counter("tensors", {"live": self.live})

    def _memory_name(self, dev):
        try:
            return self._names[dev]
        except KeyError:
            name = self._names[dev] = "memory " + str(dev)
            return name

    def storage(self, key, owner, nbytes, dev, made_by):
        """A buffer's life begins: an ``alloc`` instant with its number, size, shape, maker."""
        self._next_storage += 1
        sid = self._next_storage
        self._storages[key] = (sid, dev, nbytes)
        # shape and dtype as objects: made JSON values when written (export_args)
        args = {"id": sid, "bytes": nbytes, "device": dev, "op": made_by,
                "shape": getattr(owner, "shape", None), "dtype": getattr(owner, "dtype", None)}
        self.instant("memory", "alloc", args)

    def release(self, key, dev, current):
        """A tensor let go of a buffer; ``current`` as in ``hold`` (``None``: still shared)."""
        self.live -= 1
        if current is not None:
            entry = self._storages.pop(key, None)
            if entry is not None:
                self.instant("memory", "free", {"id": entry[0], "bytes": entry[2],
                                                "device": dev})
            else:  # held before the profile started
                self.instant("memory", "free", {"id": None, "device": dev})
            self.counter(self._memory_name(dev), {"allocated": current})
        self.counter("tensors", {"live": self.live})

    # -- waits, DTR --------------------------------------------------------------------------------
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


def export_args(args):
    """``args`` with the objects the hot path left in them (devices, shapes, dtypes) as JSON
    values."""
    if not args:
        return args
    out = {}
    for k, v in args.items():
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = v
        elif k == "shape" or isinstance(v, (list, tuple)):
            out[k] = [x if isinstance(x, (bool, int, float, str)) or x is None else str(x)
                      for x in v]
        elif k == "device" and hasattr(v, "execute"):
            out[k] = _device_name(v)
        else:
            out[k] = str(v)
    return out


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


def _device_name(device):
    kind = getattr(device, "kind", None) or type(device).__name__
    return f"{kind}{getattr(device, 'index', '')}"


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


def _modules():
    from . import _accel
    return [_accel.load(name) for name in _SITES]


def start(options=None):
    """Start recording: waits for queued work, then hands a ``Recorder`` to every event site."""
    global _active
    if _active is not None:
        raise RuntimeError("a profile is already being recorded; stop it first")
    from .channel import get_channel
    ch = get_channel()
    ch.sync()
    rec = Recorder(options)
    rec.live, current, buffers = ch.memory.snapshot()
    rec.worker_tid = ch.worker.tid
    for key, owner, nbytes, dev in buffers:  # the buffers alive already: lifetimes from here
        rec.storage(key, owner, nbytes, dev, "(before profile)")
    for dev, cur in current.items():
        rec.counter("memory " + str(dev), {"allocated": cur})
    rec.counter("tensors", {"live": rec.live})
    rec.counter("commands", {"pending": 0})
    _active = rec
    for m in _modules():
        m._set_profiler(rec)
    return rec


def stop():
    """Stop recording (after queued work has run); returns the ``Recorder``."""
    global _active
    rec = _active
    if rec is None:
        raise RuntimeError("no profile is being recorded")
    from .channel import get_channel
    ch = get_channel()
    try:
        ch.sync()
    finally:
        for m in _modules():
            m._set_profiler(None)
        _active = None
        rec.stop_ns = _clock()
        rec.worker_tid = ch.worker.tid
        for t in threading.enumerate():
            rec.thread_names[t.ident] = t.name
    return rec


# -- helpers for code outside the hot modules (a Python call that returns at once when idle) -----
def span(cat, name, args=None):
    """Open a span when a profile runs; returns a token for ``end`` (``None`` when idle)."""
    rec = _active
    if rec is None:
        return None
    return (rec, rec.begin(cat, name, args))


def trace_span(traced, recording):
    """A ``jit.trace`` call begins: a ``trace record <name>`` or ``trace replay <name>`` span."""
    rec = _active
    if rec is None:
        return None
    fn = getattr(traced, "__wrapped__", None)
    name = getattr(traced, "__name__", None) or getattr(fn, "__name__", None) or "function"
    return (rec, rec.begin("trace", ("trace record " if recording else "trace replay ") + name))


def end(token):
    """End the span ``span`` opened (nothing for ``None``)."""
    if token is not None:
        token[0].end(token[1])


def instant(cat, name, args=None):
    """An instant event when a profile runs."""
    rec = _active
    if rec is not None:
        rec.instant(cat, name, args)
