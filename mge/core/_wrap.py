"""``mge.core._wrap``: MegEngine's ``Device`` wrapper of a device (``CompNode``) and
``as_device``."""
from .._core.device import as_device as _as_cn

__all__ = ["Device", "as_device"]


class Device:
    """A device (MegEngine's wrapper of a ``CompNode``): ``Device("xpux")``, ``Device(cn)``,
    ``Device(other_device)`` or ``Device()`` (the default device).  ``to_c()`` is the
    ``CompNode``; devices compare equal when their ``CompNode``s do."""

    def __init__(self, device=None):
        if isinstance(device, Device):
            self._cn = device._cn
        else:
            self._cn = _as_cn(device)
        self._logical_name = None

    @property
    def logical_name(self):
        """The name the device was asked for (``"xpux:0"`` for ``"xpux"``)."""
        if self._logical_name is None:
            self._logical_name = getattr(self._cn, "logical_name", str(self._cn))
        return self._logical_name

    def to_c(self):
        """The ``CompNode``."""
        return self._cn

    def __repr__(self):
        return "{}({!r})".format(type(self).__qualname__, self._cn)

    def __str__(self):
        return str(self._cn)

    def __hash__(self):
        return hash(str(self._cn))

    def __eq__(self, rhs):
        if not isinstance(rhs, Device):
            rhs = Device(rhs)
        return self._cn == rhs._cn


def as_device(obj):
    """``obj`` as a :class:`Device`."""
    return obj if isinstance(obj, Device) else Device(obj)
