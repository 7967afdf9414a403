"""Tensor lifetimes from a profile's events, and the ``memory_flow.svg`` picture of them.

Each buffer the profile saw allocated is one ``Lifetime`` (from its ``alloc`` instant to its
``free``, or to the end of the profile); the memory counters give the bytes in use over time.  The
picture lays the lifetimes out as an allocator would -- each buffer at the lowest offset free for
its whole life (first fit), so the height of the stack at a moment is close to the memory in use
then -- with time across and bytes up; the buffers alive at the peak are drawn strong, the others
pale, and the largest of them are labelled with the op that made them.
"""
from xml.sax.saxutils import escape

__all__ = ["Lifetime", "lifetimes", "memory_series", "peak", "memory_flow_svg"]


class Lifetime:
    """One buffer: ``id``, ``bytes``, ``op`` (its maker), ``shape``, ``dtype``, ``device``,
    ``start``/``end`` (microseconds; ``end`` is the profile's end if it was never freed) and
    ``freed``."""

    __slots__ = ("id", "bytes", "op", "shape", "dtype", "device", "start", "end", "freed",
                 "offset")

    def __init__(self, args, start):
        self.id = args.get("id")
        self.bytes = int(args.get("bytes", 0))
        self.op = args.get("op", "?")
        self.shape = args.get("shape")
        self.dtype = args.get("dtype")
        self.device = args.get("device")
        self.start = start
        self.end = None
        self.freed = False
        self.offset = 0

    def __repr__(self):
        return (f"Lifetime(id={self.id}, op={self.op!r}, shape={self.shape}, bytes={self.bytes}, "
                f"{self.start}..{self.end})")


def lifetimes(events):
    """The buffers allocated in ``events`` (Trace Event dicts), in allocation order."""
    live = {}
    out = []
    end = 0.0
    for e in events:
        ts = e.get("ts")
        if ts is not None:
            end = max(end, ts)
        if e.get("cat") != "memory" or e.get("ph") != "i":
            continue
        args = e.get("args") or {}
        if e["name"] == "alloc":
            life = Lifetime(args, ts)
            live[life.id] = life
            out.append(life)
        elif e["name"] == "free":
            life = live.pop(args.get("id"), None)
            if life is not None:
                life.end = ts
                life.freed = True
    for life in out:
        if life.end is None:
            life.end = end
    return out


def memory_series(events):
    """``{counter name: [(ts, bytes), ...]}`` of the ``memory <device>`` counters."""
    series = {}
    for e in events:
        if e.get("ph") == "C" and e["name"].startswith("memory ") and "allocated" in e["args"]:
            series.setdefault(e["name"][len("memory "):], []).append(
                (e["ts"], e["args"]["allocated"]))
    return series


def peak(events):
    """``(device, ts, bytes)`` of the highest memory counter value (the first time it is
    reached), or ``None`` without memory counters."""
    best = None
    for dev, points in memory_series(events).items():
        for ts, v in points:
            if best is None or v > best[2]:
                best = (dev, ts, v)
    return best


def alive_at(lives, ts, device=None):
    """The lifetimes alive at ``ts`` (allocated at or before it, freed after it)."""
    return [x for x in lives if x.start <= ts < x.end or (x.start <= ts and not x.freed)
            if device is None or x.device == device]


def _first_fit(lives):
    # each buffer at the lowest offset not overlapping a buffer alive at the same time
    live = []
    top = 0
    for x in sorted(lives, key=lambda x: (x.start, -x.bytes)):
        live = [y for y in live if y.end > x.start]
        spans = sorted((y.offset, y.offset + y.bytes) for y in live)
        off = 0
        for a, b in spans:
            if off + x.bytes <= a:
                break
            off = max(off, b)
        x.offset = off
        live.append(x)
        top = max(top, off + x.bytes)
    return top


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")


def memory_flow_svg(events, num_tensor_watch=10, width=1000, height=480):
    """The ``memory_flow.svg`` text for ``events`` (Trace Event dicts): one ``<rect
    class="tensor">`` per buffer (its ``<title>`` tells op, shape, size and lifetime), the memory
    counter as a line, the peak marked; the ``num_tensor_watch`` largest buffers alive at the peak
    labelled."""
    lives = lifetimes(events)
    series = memory_series(events)
    pk = peak(events)
    t_end = max([x.end for x in lives] + [e.get("ts", 0) for e in events if "ts" in e] + [1e-3])
    stack_top = _first_fit(lives)
    counter_top = max([v for pts in series.values() for _, v in pts] + [0])
    ymax = max(stack_top, counter_top, 1)
    left, right, top, bottom = 80, 20, 40, 50
    pw, ph = width - left - right, height - top - bottom

    def X(t):
        return left + pw * (t / t_end)

    def Y(b):
        return top + ph - ph * (b / ymax)

    at_peak = set()
    if pk is not None:
        at_peak = {id(x) for x in alive_at(lives, pk[1], pk[0])}
    colours = {}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    title = "Memory flow: tensor lifetimes (bars, first-fit offsets) and memory in use (line)"
    out.append(f'<text x="{left}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>')
    if pk is not None:
        out.append(f'<text x="{left}" y="32" fill="#333">peak {_fmt_bytes(pk[2])} on '
                   f'{escape(str(pk[0]))} at {pk[1] / 1000.0:.3f} ms, '
                   f'{len(at_peak)} buffers alive</text>')
    # axes
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#000"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#000"/>')
    for k in range(5):
        b = ymax * k / 4
        out.append(f'<text x="{left - 6}" y="{Y(b) + 4:.1f}" text-anchor="end">{_fmt_bytes(b)}</text>')
        t = t_end * k / 4
        out.append(f'<text x="{X(t):.1f}" y="{top + ph + 16}" text-anchor="middle">'
                   f'{t / 1000.0:.2f} ms</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 12}" text-anchor="middle">time</text>')
    out.append('<g class="tensors">')
    for x in lives:
        col = colours.setdefault(x.op, _PALETTE[len(colours) % len(_PALETTE)])
        strong = id(x) in at_peak
        x0, x1 = X(x.start), max(X(x.end), X(x.start) + 0.5)
        y0, y1 = Y(x.offset + x.bytes), Y(x.offset)
        shape = "x".join(str(s) for s in x.shape) if x.shape is not None else "?"
        tip = (f"#{x.id} {x.op} [{shape}] {x.dtype or ''} {_fmt_bytes(x.bytes)}, "
               f"{x.start / 1000.0:.3f}-{x.end / 1000.0:.3f} ms"
               + ("" if x.freed else " (not freed)") + (" (alive at peak)" if strong else ""))
        out.append(f'<rect class="tensor" data-id="{x.id}" data-bytes="{x.bytes}" '
                   f'x="{x0:.2f}" y="{y0:.2f}" width="{x1 - x0:.2f}" height="{max(y1 - y0, 0.3):.2f}" '
                   f'fill="{col}" fill-opacity="{0.9 if strong else 0.3}" stroke="#222" '
                   f'stroke-width="{0.6 if strong else 0.1}"><title>{escape(tip)}</title></rect>')
    out.append('</g>')
    for dev, pts in series.items():
        path = []
        prev = None
        for ts, v in pts:
            if prev is not None:
                path.append(f"L{X(ts):.2f},{Y(prev):.2f}")
            path.append(("M" if prev is None else "L") + f"{X(ts):.2f},{Y(v):.2f}")
            prev = v
        if prev is not None:
            path.append(f"L{X(t_end):.2f},{Y(prev):.2f}")
            out.append(f'<path class="memory" data-device="{escape(str(dev))}" d="{" ".join(path)}" '
                       f'fill="none" stroke="#000" stroke-width="1.2"/>')
    if pk is not None:
        xp = X(pk[1])
        out.append(f'<line class="peak" x1="{xp:.2f}" y1="{top}" x2="{xp:.2f}" y2="{top + ph}" '
                   f'stroke="#d00" stroke-dasharray="4,3"/>')
        watch = sorted((x for x in lives if id(x) in at_peak), key=lambda x: -x.bytes)
        for k, x in enumerate(watch[:num_tensor_watch]):
            shape = "x".join(str(s) for s in x.shape) if x.shape is not None else "?"
            ly = Y(x.offset + x.bytes / 2) + 4
            out.append(f'<text class="label" x="{min(xp + 4, width - 200):.1f}" y="{ly:.1f}" '
                       f'fill="#000">{escape(f"{x.op} [{shape}] {_fmt_bytes(x.bytes)}")}</text>')
    # legend: ops by colour
    lx = left + pw - 180
    for k, (op, col) in enumerate(list(colours.items())[:10]):
        y = top + 12 + 14 * k
        out.append(f'<rect x="{lx}" y="{y - 9}" width="10" height="10" fill="{col}"/>')
        out.append(f'<text x="{lx + 14}" y="{y}">{escape(op)}</text>')
    out.append('</svg>')
    return "\n".join(out) + "\n"
