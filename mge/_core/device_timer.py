"""``DeviceTimer``: the device-side times of an asynchronous device's kernels for the profiler
(``profiler.py`` hands one per device to the ``Recorder``, which uses it at the kernel door).

Its own module so that the recorder (``profile_recorder.py``) and the profiler's front
(``profiler.py``) both import it and neither imports the other.
"""
import time

__all__ = ["DeviceTimer", "device_name"]

_clock = time.perf_counter_ns


def device_name(device):
    """A device's name for the profile (``gpu0``, ``cpu0``...)."""
    name = getattr(device, "name", None)  # (the CUDA device's "gpu0")
    if isinstance(name, str):
        return name
    kind = getattr(device, "kind", None) or type(device).__name__
    return f"{kind}{getattr(device, 'index', '')}"


class DeviceTimer:
    """The device-side times of the kernels of one asynchronous device (``device.asynchronous``:
    a GPU, whose kernels run after ``execute`` returns), as MegEngine times a kernel with its
    comp node's events (``Timer::record_event``): an event recorded on the device's stream
    before and after each op's kernels, read when the profile stops.

    A host clock time is tied to the device's timeline once (``anchor``: an event recorded and
    waited for, then ``perf_counter_ns``), and each event's time is the anchor's plus the
    device time between them (``Event.elapsed_ms``), so device spans share the host spans'
    timeline.  They go to a track of their own (thread ident ``("device", name)``, named
    "<device> (device time)"), category ``"device"``."""

    def __init__(self, device):
        self.device = device
        self.name = device_name(device)
        self.anchor = device.event().record()
        self.anchor.synchronize()
        self.anchor_ns = _clock()
        self.spans = []  # (start event, end event, op)

    @classmethod
    def for_device(cls, device):
        """A timer for ``device`` when its kernels run asynchronously, else ``None``."""
        if not getattr(device, "asynchronous", False) or not hasattr(device, "event"):
            return None
        return cls(device)

    def begin(self):
        """Record the event before an op's kernels."""
        return self.device.event().record()

    def end(self, start, op):
        """Record the event after ``op``'s kernels (begun with ``begin``)."""
        self.spans.append((start, self.device.event().record(), op))

    @property
    def ident(self):
        return ("device", self.name)

    def events(self, rec):
        """The spans as the recorder's plain events (waits for the device first)."""
        self.device.synchronize()
        out = []
        for start, end, op in self.spans:
            b = self.anchor_ns + round(self.anchor.elapsed_ms(start) * 1e6)
            e = self.anchor_ns + round(self.anchor.elapsed_ms(end) * 1e6)
            name = rec.name_of(op)
            out.append(("B", b, self.ident, "device", name, {"device": self.name}, None))
            out.append(("E", max(b, e), self.ident, "device", name, None, None))
        return out
