"""``save`` and ``load``: pickle objects holding tensors (MegEngine's ``megengine.serialization``).

A tensor pickles as its value (a numpy array), its dtype, the name of its device and its name;
a ``Parameter`` stays a ``Parameter``.  ``load`` can move every tensor to another device with
``map_location``.  The pickling rule is registered with :mod:`copyreg` when this module is
imported (``import mge`` does), so plain ``pickle.dumps(tensor)`` and ``copy.deepcopy`` use it too.
"""
import copyreg
import pickle
import re
import sys

import numpy as np

from .tensor import Parameter, Tensor

from .device import get_default_device  # noqa: E402,F401  (MegEngine's module has it too)

__all__ = ["save", "load", "dmap", "max_recursion_limit", "get_default_device"]

_DEVICE = re.compile(r"^([cxg]pu|rocm|multithread)(x|\d+)(:\d+)?$")  # MegEngine's _valid_device

# The device mapping of the load() in progress (a stack: a pickled object may load another).
_map_locations = []


def _valid_device(name):
    return isinstance(name, str) and _DEVICE.match(name) is not None


def _reduce_tensor(t):
    # The value is copied out of the channel (waits for it); the device is kept by name so that
    # map_location can rewrite it at load time.
    # A quantized dtype travels whole (its metadata holds the scale); the state is MegEngine's
    # ``__getstate__`` (the quantization parameters, when set).
    dtype = t.dtype if t.dtype.metadata else t.dtype.name
    args = (type(t), np.array(t.numpy()), dtype, str(t.device), t.name)
    state = t.__getstate__()
    return (_rebuild_tensor, args, state) if state else (_rebuild_tensor, args)


def _rebuild_tensor(cls, value, dtype, device, name):
    if _map_locations:
        device = _map_locations[-1](device)
    return cls(value, dtype=dtype, device=device, name=name or None)


copyreg.pickle(Tensor, _reduce_tensor)
copyreg.pickle(Parameter, _reduce_tensor)


def _legacy_class(cls):
    class Legacy:
        """MegEngine pickles a tensor as ``cls.__new__(cls, value, dtype, device, ...)`` and its
        state (``__getnewargs__``/``__getstate__``); this builds the mge tensor from those."""

        def __new__(_, *args):
            if not args:  # older pickles: the value comes in the state ("data", ...)
                return cls.__new__(cls)
            value, dtype, device = (list(args) + [None, None])[:3]
            if _map_locations:
                device = _map_locations[-1](device)
            return cls(value, dtype=dtype, device=device)
    Legacy.__name__ = cls.__name__
    return Legacy


_LEGACY = {"Tensor": _legacy_class(Tensor), "Parameter": _legacy_class(Parameter)}


class _Unpickler(pickle.Unpickler):
    # MegEngine's own pickles (mge.save's name its rebuild function instead) name the tensor
    # class of ``megengine.tensor``.
    def find_class(self, module, name):
        if module in ("megengine.tensor", "mge.tensor") and name in _LEGACY:
            return _LEGACY[name]
        return super().find_class(module, name)


class _MaxRecursionLimit:
    # Deeply nested modules pickle recursively; MegEngine raises the limit while (un)pickling.
    def __init__(self, limit=2 ** 16):
        self.limit = limit

    def __enter__(self):
        self.old = sys.getrecursionlimit()
        if self.old < self.limit:
            sys.setrecursionlimit(self.limit)

    def __exit__(self, *exc):
        sys.setrecursionlimit(self.old)


def max_recursion_limit():
    """A context manager that raises Python's recursion limit (to 65536) while it is entered, as
    ``save``/``load`` do for deeply nested objects."""
    return _MaxRecursionLimit()


class dmap:
    """``with dmap(map_location): ...`` -- tensors unpickled in the block have their saved device
    name passed through ``map_location`` (a function from a device name to a device), as inside
    :func:`load`."""

    def __init__(self, map_location):
        self.map_location = map_location

    def __enter__(self):
        _map_locations.append(self.map_location)
        return self

    def __exit__(self, *exc):
        _map_locations.pop()


def save(obj, f, pickle_module=pickle, pickle_protocol=pickle.DEFAULT_PROTOCOL):
    r"""Save an object to a file.

    The object is usually a :class:`~mge.Tensor`, a ``Module``'s state dict or an
    :meth:`Optimizer.state_dict <mge.optimizer.Optimizer.state_dict>`; any picklable object
    holding tensors works (nested dicts, lists, ``Parameter``\ s...).

    Args:
        obj: object to be saved.
        f: a file name (``str``) or a binary file object to which ``obj`` is saved.
        pickle_module: the module to use for pickling (it needs ``dump(obj, f, protocol)``).
        pickle_protocol: the protocol to use for pickling.

    Different Python versions may have different default/highest pickle protocols; to load the
    file with another Python version, save it with a protocol both know.

    Example::

        >>> import io, mge
        >>> buf = io.BytesIO()
        >>> mge.save({"w": mge.Parameter([1.0, 2.0])}, buf)
        >>> _ = buf.seek(0)
        >>> mge.load(buf)["w"].numpy()
        array([1., 2.], dtype=float32)
    """
    if isinstance(f, str):
        with open(f, "wb") as fout:
            save(obj, fout, pickle_module=pickle_module, pickle_protocol=pickle_protocol)
        return

    with _MaxRecursionLimit():
        assert hasattr(f, "write"), "{} does not support write".format(f)
        pickle_module.dump(obj, f, pickle_protocol)


def _get_callable_map_location(map_location):
    if map_location is None:
        def callable_map_location(device):
            return device
    elif isinstance(map_location, str):
        def callable_map_location(device):
            return map_location
    elif isinstance(map_location, dict):
        for key, value in map_location.items():
            # keys and values are device names such as "xpux", "cpux", "gpu0", "cpu0:1"
            assert _valid_device(key), "Invalid locator_map key value {}".format(key)
            assert _valid_device(value), "Invalid locator_map key value {}".format(value)

        def callable_map_location(device):
            if device[:4] in map_location.keys():
                device = map_location[device[:4]]
            return device
    else:
        assert callable(map_location), "map_location should be str, dict or function"
        callable_map_location = map_location
    return callable_map_location


def load(f, map_location=None, pickle_module=pickle):
    r"""Load an object saved with :func:`~mge.save` from a file.

    Args:
        f: a file name (``str``) or a binary file object from which to load.
        map_location: where to put the loaded tensors: ``None`` (the device each was saved
            from), a device name (all tensors there), a dict mapping saved device names to new
            ones (the first four characters of the saved name, e.g. ``{"gpu0": "cpu0"}``), or a
            function from the saved device name to the new one.
        pickle_module: the module to use for unpickling (it needs ``load(f)``).

    Call :func:`~mge.set_default_device` before ``load`` if you use it: tensors saved from the
    default device ``xpux`` are created on the default device of the time of loading.

    Example::

        >>> import io, mge
        >>> buf = io.BytesIO()
        >>> mge.save([mge.tensor([1, 2])], buf)
        >>> _ = buf.seek(0)
        >>> mge.load(buf, map_location="cpu0")[0].device
        CompNode("cpu0:0")
        >>> _ = buf.seek(0)
        >>> mge.load(buf, map_location=lambda dev: "cpu1")[0].device
        CompNode("cpu1:0")
    """
    if isinstance(f, str):
        with open(f, "rb") as fin:
            return load(fin, map_location=map_location, pickle_module=pickle_module)

    map_location = _get_callable_map_location(map_location)
    _map_locations.append(map_location)
    try:
        with _MaxRecursionLimit():
            if pickle_module is pickle:
                return _Unpickler(f).load()
            return pickle_module.load(f)
    finally:
        _map_locations.pop()
