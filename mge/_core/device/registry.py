"""Device names and kinds: ``CompNode``, ``as_device``, the default device, ``register_device_kind``.

A kind registers a factory of ``Device`` objects (``base.py``); ``as_device`` resolves a name to
a ``CompNode`` whose ``impl`` is that kind's device of that index.
"""
import os
import re

__all__ = ["CompNode", "DeviceKind", "live_devices", "synchronize_devices", "as_device", "get_default_device", "set_default_device",
           "register_device_kind", "on_kind_replaced", "DEVICE_KINDS"]

_NAME = re.compile(r"^([a-z]+?)(x|\d+)(?::(\d+))?$")
_ALIASES = {"xpu": None, "gpu": "cuda"}  # name prefix -> kind (None: the best there is)


class DeviceKind:
    """A registered kind: ``factory(index) -> Device``, ``available() -> bool``, and the prefix of
    its physical names (``gpu`` for ``cuda``)."""

    def __init__(self, kind, factory, available=None, physical=None):
        self.kind = kind
        self.factory = factory
        self._available = available
        self.physical = physical or kind
        self.impls = {}  # index -> Device

    def available(self):
        return True if self._available is None else bool(self._available())

    def impl(self, index):
        dev = self.impls.get(index)
        if dev is None:
            dev = self.impls[index] = self.factory(index)
        return dev


# kind -> DeviceKind; "cpu" is always there (registered by device/cpu/ below).
DEVICE_KINDS = {}


def live_devices():
    """Every ``Device`` made so far (of every registered kind), in registration order."""
    return [dev for kind in list(DEVICE_KINDS.values()) for dev in list(kind.impls.values())]


def synchronize_devices():
    """Wait for the queued work of every device made so far (``Device.synchronize``); returns
    the errors they reported (a device's asynchronous failure), one per failing device."""
    errors = []
    for dev in live_devices():
        try:
            dev.synchronize()
        except Exception as e:  # (reported by the caller, after every device has been waited for)
            errors.append(e)
    return errors


def register_device_kind(kind, factory, available=None, physical=None):
    """Register a device kind: names ``<kind><N>`` then resolve to ``factory(N)`` (a ``Device``).

    ``available()`` says whether the kind can be used on this machine; ``physical`` is the prefix
    of its physical names (default: ``kind``).  Registering a kind again replaces it.
    """
    if not re.match(r"^[a-z]+$", kind) or kind in ("xpu", "gpu"):
        raise ValueError(f"register_device_kind: invalid kind {kind!r} (lower-case letters; not "
                         "xpu or gpu)")
    replaced = kind in DEVICE_KINDS
    DEVICE_KINDS[kind] = DeviceKind(kind, factory, available, physical)
    for name in [n for n, node in _cache.items() if n is None or node.kind == kind]:
        del _cache[name]
    if replaced:
        for fn in list(_on_replaced):
            fn(kind)


_on_replaced = []


def on_kind_replaced(fn):
    """Call ``fn(kind)`` whenever a kind is registered again: its new devices have the old names
    (``CompNode`` equality is by name), so what is cached per device -- ``apply``'s constants for
    Python numbers -- must not outlive the old ones."""
    _on_replaced.append(fn)

class CompNode:
    """A device.  Compares equal to another with the same physical device.

    ``str()`` keeps the name the user gave (``xpux:0``), ``repr`` shows the physical device too,
    as MegEngine does.
    """

    __slots__ = ("logical", "physical", "kind", "index", "impl", "_hash")

    def __new__(cls, name):
        """``CompNode("xpux")``, as in MegEngine: the device of that name (``as_device``)."""
        if not isinstance(name, (str, CompNode)):
            raise TypeError(f"CompNode(name): name must be a device name such as 'xpux' or "
                            f"'cpu0', got {type(name).__name__}")
        return as_device(name)

    @classmethod
    def _make(cls, logical, physical, kind, index, impl=None):
        node = object.__new__(cls)
        node.logical = logical
        node.physical = physical
        node.kind = kind
        node.index = index
        node.impl = impl  # the Device that owns this node's storage and kernels
        node._hash = hash(physical)
        return node

    @property
    def logical_name(self):
        """The name the device was asked by (``"xpux:0"``)."""
        return self.logical

    @property
    def physical_name(self):
        """The physical device (``"cpu0:0"``)."""
        return self.physical

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
        raise ValueError(_bad_name(device))
    kind, num, stream = m.group(1), m.group(2), m.group(3) or "0"
    if kind in _ALIASES:
        kind = _ALIASES[kind] or ("cuda" if _cuda_available() else "cpu")
    index = 0 if num == "x" else int(num)
    if kind == "cuda":
        # says what is missing: pycuda, the driver, a GPU, that index, or the device's code
        _cuda_driver().check_device(index, f"device {device!r}")
    registered = DEVICE_KINDS.get(kind)
    if registered is None:
        raise ValueError(_bad_name(device))
    if not registered.available():
        raise RuntimeError(f"device {device!r}: the {kind} device is not available on this machine")
    logical = device if ":" in device else f"{device}:{stream}"
    physical = f"{registered.physical}{index}:{stream}"
    node = CompNode._make(logical, physical, kind, index, registered.impl(index))
    _cache[device] = node
    return node


def _cuda_driver():
    """``device/cuda/driver.py``, imported on first use: ``import mge`` loads no CUDA code."""
    from .cuda import driver
    return driver


def _cuda_device_module():
    """``device/cuda/device.py`` (its ``make_device`` is gpu<N>'s factory), on first use."""
    from .cuda import device
    return device


def _bad_name(device):
    kinds = "".join(f", {k}<N>" for k in sorted(DEVICE_KINDS) if k not in ("cpu", "cuda"))
    return (f"invalid device name {device!r}: expected xpux, cpux, cpu<N>, gpu<N> or "
            f"cuda<N>{kinds}, optionally followed by :<stream>")


def get_default_device():
    """The default device's name (MegEngine: ``"xpux"``)."""
    return _default


def set_default_device(device="xpux"):
    """Set the default device for new tensors, e.g. ``"cpu0"``; checks that the name is valid."""
    global _default
    as_device(device)
    _default = device
    _cache.pop(None, None)


# gpu<N>/cuda<N>: pycuda, the driver and the GPUs are found on first use (cuda/driver.py)
register_device_kind("cuda", lambda index: _cuda_device_module().make_device(index),
                     available=lambda: _cuda_driver().usable(), physical="gpu")


def _forget_cuda_names():
    # A forked child cannot use its parent's CUDA (cuda/driver.py): the names its parent
    # resolved to a GPU (xpux included) are resolved again, so that using them says so.
    for name in [n for n, node in _cache.items() if node.kind == "cuda"]:
        del _cache[name]


os.register_at_fork(after_in_child=_forget_cuda_names)
