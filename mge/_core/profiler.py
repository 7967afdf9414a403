"""The profiler's recording side: events from the doors of the runtime (seed ``000``'s
``start_profile``/``stop_profile``, seed ``003``'s profiler events).

The runtime's event sites -- op dispatch (``dispatch.apply``), the channel's commands, the kernel
doors (``CpuDevice.execute``; other devices' ``execute`` in the executor), waits, scopes, DTR
evictions and recomputations, memory holds and frees (``MemoryStats``), trace calls -- each test
one module-level variable, ``_prof``, and do nothing else while it is ``None``: in the compiled
modules that is a C pointer comparison, the whole cost of an idle profiler.  ``start`` hands the
running ``Recorder`` to every such module (``_SITES``), ``stop`` takes it back.

The ``Recorder`` (``profile_recorder.py``, a hot module: compiled, it is what a running profile
costs per op) appends a few small tuples per op to one list; its ``events`` are the plain tuples
``(phase, ns, thread ident, category, name, args, id)`` that ``mge.utils.profiler`` turns into the
Trace Event format, the memory picture and the tables.  Timestamps are ``time.perf_counter_ns``
(monotonic, nanoseconds).  Spans are begun and ended on one thread, strictly nested.

``mge._core`` never imports ``mge.utils``; this module imports nothing of the runtime at import
time (the channel and the devices import it), only when a profile starts.
"""
import threading
import time

from . import _accel
from .device_timer import DeviceTimer, device_name as _device_name

__all__ = ["Recorder", "DeviceTimer", "start", "stop", "active", "span", "end", "instant", "export_args"]

_clock = time.perf_counter_ns
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


def active():
    """The running ``Recorder``, or ``None``."""
    return _active


_recorder = _accel.load("mge._core.profile_recorder")
Recorder = _recorder.Recorder


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
    from .device.registry import live_devices
    for dev in live_devices():  # (anchored now; a device made later is anchored at its first op)
        rec.timers[dev] = DeviceTimer.for_device(dev)
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
        for timer in rec.timers.values():
            if timer is not None:
                rec.thread_names[timer.ident] = f"{timer.name} (device time)"
                rec.device_events.extend(timer.events(rec))
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
