"""Tables of a recorded profile: ``python -m mge.utils.profile_analyze DIR_OR_FILE``.

Reads ``<pid>.chrome_timeline.json`` (a file, or every one in a directory, as the ``Profiler``
writes them) and prints:

* the top ops by kernel time: calls, total, mean, max (``--sort total|mean|calls|max|name``);
* the top ops by dispatch time on the caller's side (the Python/stack/channel overhead);
* the time spent waiting for values and for the queue, and what was waited for;
* kernel time per thread (caller versus worker);
* peak memory per device, when it was reached, and the tensors alive at the peak (largest first).

``--top N`` limits every table to N rows (default 10).  ``analyze(events)`` returns the same
figures as a dict, for programs.
"""
import argparse
import json
import os
import sys

from . import _memory

__all__ = ["load", "analyze", "format_report", "main"]

SORT_KEYS = ("total", "mean", "calls", "max", "name")


def load(path):
    """The Trace Event list of the profile ``path`` (a JSON file, or a directory: its
    ``<pid>.chrome_timeline.json`` files, each as one list in a ``{file: events}`` dict)."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith("chrome_timeline.json"))
        if not names:
            raise FileNotFoundError(f"no *.chrome_timeline.json in {path}")
        return {n: load(os.path.join(path, n)) for n in names}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _spans(events):
    # (tid, name, cat, begin, end, args) of every B/E pair, matched per thread
    stacks = {}
    out = []
    for e in events:
        ph = e.get("ph")
        if ph == "B":
            stacks.setdefault((e["pid"], e["tid"]), []).append(e)
        elif ph == "E":
            st = stacks.get((e["pid"], e["tid"]))
            if st:
                b = st.pop()
                out.append((e["tid"], b["name"], b.get("cat"), b["ts"], e["ts"],
                            b.get("args") or {}))
        elif ph == "X":
            out.append((e["tid"], e["name"], e.get("cat"), e["ts"], e["ts"] + e.get("dur", 0),
                        e.get("args") or {}))
    return out


def _by_name(spans, cat):
    table = {}
    for tid, name, c, b, e, args in spans:
        if c != cat:
            continue
        row = table.setdefault(name, {"name": name, "calls": 0, "total": 0.0, "max": 0.0})
        d = e - b
        row["calls"] += 1
        row["total"] += d
        row["max"] = max(row["max"], d)
    for row in table.values():
        row["mean"] = row["total"] / row["calls"]
    return list(table.values())


def _sorted(rows, key):
    if key == "name":
        return sorted(rows, key=lambda r: r["name"])
    return sorted(rows, key=lambda r: (-r[key], r["name"]))


def analyze(events, top=10, sort="total"):
    """The figures of one profile's ``events``: ``kernels``, ``dispatch``, ``waits`` (rows with
    calls/total/mean/max in microseconds), ``threads`` (kernel time per thread), ``peak``
    (``device``, ``ts``, ``bytes``) and ``alive_at_peak`` (the largest ``top`` tensors)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}")
    spans = _spans(events)
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    kernels = _by_name(spans, "kernel")
    dispatch = _by_name(spans, "dispatch")
    waits = _by_name(spans, "wait")
    waited_for = {}
    for tid, name, c, b, e, args in spans:
        if c == "wait":
            what = args.get("for") or ("the queue" if name == "wait for queue" else "?")
            w = waited_for.setdefault(what, {"name": what, "calls": 0, "total": 0.0, "max": 0.0})
            w["calls"] += 1
            w["total"] += e - b
            w["max"] = max(w["max"], e - b)
    for w in waited_for.values():
        w["mean"] = w["total"] / w["calls"]
    threads = {}
    for tid, name, c, b, e, args in spans:
        if c == "kernel":
            # a kernel inside a kernel (a traced program's steps) counts once, as the outer one
            t = threads.setdefault(tid, {"name": names.get(tid, f"thread {tid}"), "tid": tid,
                                         "calls": 0, "total": 0.0, "spans": []})
            t["spans"].append((b, e))
    for t in threads.values():
        spans_t = sorted(t.pop("spans"))
        end = -1.0
        for b, e in spans_t:
            t["calls"] += 1
            if b >= end:
                t["total"] += e - b
                end = e
            elif e > end:
                t["total"] += e - end
                end = e
    pk = _memory.peak(events)
    alive = []
    if pk is not None:
        lives = _memory.lifetimes(events)
        alive = sorted(_memory.alive_at(lives, pk[1], pk[0]), key=lambda x: -x.bytes)
    return {
        "kernels": _sorted(kernels, sort)[:top],
        "dispatch": _sorted(dispatch, sort)[:top],
        "waits": _sorted(waits, sort)[:top],
        "waited_for": _sorted(list(waited_for.values()), sort)[:top],
        "threads": sorted(threads.values(), key=lambda t: -t["total"]),
        "peak": None if pk is None else {"device": pk[0], "ts": pk[1], "bytes": pk[2]},
        "alive_at_peak": [{"id": x.id, "op": x.op, "shape": x.shape, "dtype": x.dtype,
                           "bytes": x.bytes} for x in alive[:top]],
        "alive_count": len(alive),
        "alive_bytes": sum(x.bytes for x in alive),
    }


def _table(title, header, rows):
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[k]) for r in cells) for k in range(len(header))]
    line = "+".join("-" * (w + 2) for w in widths)
    out = [title, line]
    for k, r in enumerate(cells):
        out.append("|".join(" " + (c.ljust(w) if j == 0 else c.rjust(w)) + " "
                            for j, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            out.append(line)
    if not rows:
        out.append(" (none)")
    out.append(line)
    return "\n".join(out)


def _ms(us):
    return f"{us / 1000.0:.3f}"


def _timing_rows(rows):
    return [(r["name"], r["calls"], _ms(r["total"]), _ms(r["mean"]), _ms(r["max"])) for r in rows]


def format_report(report, sort="total"):
    """The tables of ``analyze``'s ``report`` as text."""
    th = ("name", "calls", "total ms", "mean ms", "max ms")
    parts = [
        _table(f"Top ops by kernel time (sorted by {sort})", ("op",) + th[1:],
               _timing_rows(report["kernels"])),
        _table(f"Top ops by dispatch time on the caller (sorted by {sort})", ("op",) + th[1:],
               _timing_rows(report["dispatch"])),
        _table("Waits", ("wait",) + th[1:], _timing_rows(report["waits"])),
        _table("Waited for (the op that produced the value)", ("for",) + th[1:],
               _timing_rows(report["waited_for"])),
        _table("Kernel time per thread", ("thread", "kernels", "total ms"),
               [(t["name"], t["calls"], _ms(t["total"])) for t in report["threads"]]),
    ]
    pk = report["peak"]
    if pk is None:
        parts.append("Peak memory: no memory events")
    else:
        parts.append(f"Peak memory: {pk['bytes']} bytes on {pk['device']} at "
                     f"{_ms(pk['ts'])} ms; {report['alive_count']} tensors alive then "
                     f"({report['alive_bytes']} bytes)")
        parts.append(_table("Tensors alive at the peak (largest first)",
                            ("op", "shape", "dtype", "bytes", "id"),
                            [(a["op"], "x".join(map(str, a["shape"])) if a["shape"] is not None
                              else "?", a["dtype"] or "", a["bytes"], a["id"])
                             for a in report["alive_at_peak"]]))
    return "\n\n".join(parts) + "\n"


def main(argv=None):
    """The command line (``python -m mge.utils.profile_analyze --help``)."""
    p = argparse.ArgumentParser(
        prog="python -m mge.utils.profile_analyze",
        description="Print tables of an mge profile: top ops by kernel and dispatch time, waits, "
                    "kernel time per thread, peak memory and the tensors alive at the peak.",
        epilog="Times are in milliseconds.  A profile is written by "
               "mge.utils.profiler.Profiler as <dir>/<pid>.chrome_timeline.json.")
    p.add_argument("path", metavar="DIR_OR_FILE",
                   help="a chrome_timeline.json file, or the profiler's directory (each "
                        "<pid>.chrome_timeline.json in it is reported)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="rows per table (default 10)")
    p.add_argument("--sort", choices=SORT_KEYS, default="total",
                   help="order of the op tables (default: total time)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead")
    args = p.parse_args(argv)
    try:
        data = load(args.path)
    except (OSError, ValueError) as e:
        print(f"profile_analyze: {e}", file=sys.stderr)
        return 2
    files = data if isinstance(data, dict) else {args.path: data}
    out = {}
    for name, events in files.items():
        report = analyze(events, top=args.top, sort=args.sort)
        if args.json:
            out[name] = report
        else:
            if len(files) > 1:
                print(f"== {name} ==")
            print(format_report(report, args.sort))
    if args.json:
        print(json.dumps(out if len(files) > 1 else next(iter(out.values())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
