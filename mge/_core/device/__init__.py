"""Devices (MegEngine's CompNode): names and the default device.

``cpu0`` is numpy on the host.  MegEngine's logical names are accepted: ``xpux`` means "the best
device there is" (``gpu0`` when a CUDA device is usable, else ``cpu0``), ``cpux`` is the CPU.  A CUDA
device joins by registering a ``DeviceKind`` under ``"cuda"``; nothing CUDA is imported at start.
"""
import re

__all__ = ["CompNode", "as_device", "get_default_device", "set_default_device", "DEVICE_KINDS"]

_NAME = re.compile(r"^(xpu|cpu|gpu|cuda)(x|\d+)(?::(\d+))?$")

# kind -> object with ``available()`` (bool); "cpu" is always there.
DEVICE_KINDS = {}


class CompNode:
    """A device.  Compares equal to another with the same physical device.

    ``str()`` keeps the name the user gave (``xpux:0``), ``repr`` shows the physical device too,
    as MegEngine does.
    """

    __slots__ = ("logical", "physical", "kind", "index", "_hash")

    def __init__(self, logical, physical, kind, index):
        self.logical = logical
        self.physical = physical
        self.kind = kind
        self.index = index
        self._hash = hash(physical)

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = as_device(other)
            except ValueError:
                return False
        return isinstance(other, CompNode) and self.physical == other.physical

    def __hash__(self):
        return self._hash

    def __str__(self):
        return self.logical

    def __repr__(self):
        if self.logical == self.physical:
            return f'CompNode("{self.physical}")'
        return f'CompNode("{self.physical}" from "{self.logical}")'

    def __reduce__(self):
        return (as_device, (self.logical,))


_cache = {}
_default = "xpux"


def _cuda_available():
    kind = DEVICE_KINDS.get("cuda")
    return kind is not None and kind.available()


def as_device(device=None):
    """Resolve ``None`` (the default device), a name, or a ``CompNode`` to a ``CompNode``."""
    if device is None:
        device = _default
    elif isinstance(device, CompNode):
        return device
    try:
        return _cache[device]
    except KeyError:
        pass
    if not isinstance(device, str):
        raise TypeError(f"device must be a str or CompNode, got {type(device).__name__}")
    m = _NAME.match(device)
    if not m:
        raise ValueError(
            f"invalid device name {device!r}: expected xpux, cpux, cpu<N>, gpu<N> or cuda<N>, "
            "optionally followed by :<stream>"
        )
    kind, num, stream = m.group(1), m.group(2), m.group(3) or "0"
    if kind == "xpu":
        kind = "cuda" if _cuda_available() else "cpu"
    elif kind == "gpu":
        kind = "cuda"
    if kind == "cuda" and not _cuda_available():
        if "cuda" not in DEVICE_KINDS:
            raise RuntimeError(f"device {device!r}: this version of mge has no CUDA device yet; use cpu0")
        raise RuntimeError(
            f"device {device!r} needs CUDA, which is not available: install pycuda "
            '(pip install "mge[cuda]") on a machine with an NVIDIA GPU'
        )
    index = 0 if num == "x" else int(num)
    logical = device if ":" in device else f"{device}:{stream}"
    physical = f"{'gpu' if kind == 'cuda' else 'cpu'}{index}:{stream}"
    node = CompNode(logical, physical, kind, index)
    _cache[device] = node
    return node


def get_default_device():
    """The default device's name (MegEngine: ``"xpux"``)."""
    return _default


def set_default_device(device="xpux"):
    """Set the default device for new tensors, e.g. ``"cpu0"``; checks that the name is valid."""
    global _default
    as_device(device)
    _default = device
    _cache.pop(None, None)
