"""A recorded profile as Trace Event format events (``chrome_timeline.json``).

The format (Google's "Trace Event Format" document, read by Perfetto and ``chrome://tracing``):
a JSON object whose ``traceEvents`` list holds events with ``name``, ``cat``, ``ph`` (phase),
``ts`` (microseconds), ``pid`` and ``tid``.  Phases used here: ``B``/``E`` (a span begins/ends on a
thread; they nest per thread), ``i`` (an instant, ``s: "t"``: thread-scoped), ``C`` (a counter:
one track per name, its ``args`` the series), ``s``/``f`` (a flow arrow: the slice around the
``s`` to the slice around the ``f``, matched by ``cat``, ``name`` and ``id``; ``bp: "e"`` binds the
``f`` to the slice that encloses it) and ``M`` (metadata: process and thread names, sort order).
"""
import os
import time

from .._core.profiler import export_args

__all__ = ["trace_events", "timeline"]

_PHASES = ("B", "E", "i", "C", "s", "f")


def _thread_ids(rec, raw):
    # Small, stable thread ids: the thread that started the profile first, the worker second,
    # the others in the order they appear.
    order = [rec.main_tid]
    if rec.worker_tid is not None:
        order.append(rec.worker_tid)
    for e in raw:
        if e[2] not in order:
            order.append(e[2])
    return {ident: k + 1 for k, ident in enumerate(order)}


def _thread_name(rec, ident):
    if ident == rec.worker_tid:
        return "mge worker"
    name = rec.thread_names.get(ident)
    if ident == rec.main_tid:
        return f"caller ({name})" if name else "caller"
    return name or f"thread {ident}"


def trace_events(rec, pid=None):
    """The events of the recorder ``rec`` in the Trace Event format, sorted by time.

    Spans are closed where the profile stopped if they were still open then; an end without its
    begin (a span opened before the profile started) is left out, so ``B``/``E`` pairs always match
    and nest on every thread.
    """
    pid = os.getpid() if pid is None else pid
    raw = sorted(rec.events, key=lambda e: e[1])  # stable: each thread keeps its order
    t0 = rec.start_ns
    stop = rec.stop_ns if rec.stop_ns is not None else (raw[-1][1] if raw else t0)
    tids = _thread_ids(rec, raw)
    out = [{"name": "Metadata", "ph": "M", "pid": pid, "tid": 0,
            "args": {"localTime": rec.start_wall_us if hasattr(rec, "start_wall_us")
                     else int(time.time() * 1e6), "pid": pid}},
           {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "mge"}}]
    for ident, tid in sorted(tids.items(), key=lambda kv: kv[1]):
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": _thread_name(rec, ident)}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}})
    stacks = {}
    last = t0
    for ph, t, ident, cat, name, args, fid in raw:
        if t < t0:
            t = t0
        last = max(last, t)
        tid = tids[ident]
        ts = round((t - t0) / 1000.0, 3)
        if ph == "B":
            stacks.setdefault(tid, []).append((name, cat))
            ev = {"name": name, "cat": cat, "ph": "B", "ts": ts, "pid": pid, "tid": tid}
            if args:
                ev["args"] = export_args(args)
        elif ph == "E":
            stack = stacks.get(tid)
            if not stack:
                continue
            name, cat = stack.pop()
            ev = {"name": name, "cat": cat, "ph": "E", "ts": ts, "pid": pid, "tid": tid}
        elif ph == "i":
            ev = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid}
            if args:
                ev["args"] = export_args(args)
        elif ph == "C":
            ev = {"name": name, "cat": cat, "ph": "C", "ts": ts, "pid": pid, "tid": tid,
                  "args": args}
        elif ph == "s":
            ev = {"name": name, "cat": cat, "ph": "s", "id": fid, "ts": ts, "pid": pid,
                  "tid": tid}
        elif ph == "f":
            ev = {"name": name, "cat": cat, "ph": "f", "bp": "e", "id": fid, "ts": ts,
                  "pid": pid, "tid": tid}
        else:
            continue
        out.append(ev)
    end_ts = round((max(stop, last) - t0) / 1000.0, 3)
    for tid, stack in stacks.items():
        while stack:
            name, cat = stack.pop()
            out.append({"name": name, "cat": cat, "ph": "E", "ts": end_ts, "pid": pid,
                        "tid": tid, "args": {"closed_at_stop": True}})
    return out


def timeline(rec, pid=None):
    """The whole ``chrome_timeline.json`` object."""
    return {"traceEvents": trace_events(rec, pid), "displayTimeUnit": "ns",
            "otherData": {"producer": "mge.utils.profiler", "clock": "perf_counter_ns",
                          "options": rec.options}}
