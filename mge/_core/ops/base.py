"""Ops: small immutable descriptions, and the table of their shape/dtype rules.

An op class lists its parameters in ``_fields``; instances are immutable, hashable and compare by
value, so they can be shared (``Cls.get(*args)``, the one interning mechanism) and used as
dictionary keys.  An op class declares facts about itself (``long_running``, ``never_recompute``,
``sets_device``: see ``OpDef``).  The rules of an op are kept in tables keyed by the op's class,
as JAX keys rules by primitive, each in the layer that uses it:

* here, ``INFER[cls](op, descs) -> [TensorDesc, ...]`` -- output shapes/dtypes from input descs.
  A shape may be ``None`` (unknown until the kernel runs, e.g. ``CondTake``).  Raises
  ``ValueError`` or ``TypeError`` naming the op and the offending shapes/dtypes when the inputs
  are invalid;
* a device's kernel tables (``mge/_core/device/cpu/table.py``: ``KERNELS``, ``INPLACE``);
* the backward rules (``mge/_core/autodiff/registry.py``: ``BACKWARD``, ``KEEPS_OUTPUTS``).

Adding an op is one class and its shape rule in one file of ``mge/_core/ops``, plus one entry per
layer that runs it (a kernel, a backward rule).
"""
import numpy as np

from ..dtype import ON_FIRST_COMPLEX as _ON_FIRST_COMPLEX

__all__ = ["OpDef", "TensorDesc", "INFER", "def_infer", "op_error"]

INFER = {}


class TensorDesc(tuple):
    """``(shape, dtype)`` of a value; ``shape`` is a tuple of ints or ``None`` when unknown."""

    __slots__ = ()

    def __new__(cls, shape, dtype):
        return tuple.__new__(cls, (shape, dtype))

    @property
    def shape(self):
        return self[0]

    @property
    def dtype(self):
        return self[1]

    @property
    def ndim(self):
        return None if self[0] is None else len(self[0])


class OpDef:
    """Base of every op.  Subclasses set ``_fields`` (parameter names) and ``_defaults``.

    ``cls.get(*args)`` is the shared instance for a parameter set (ops are immutable, so one
    serves everyone; this is the one interning mechanism, see ``get``).

    Facts an op class declares about itself (class attributes, read by the channel and devices):

    * ``sets_device`` -- the output device is the op's ``device`` parameter (copies, creation
      ops), not the device of the first input.
    * ``long_running`` -- worth the worker thread: ``True``, ``False``, or a rule
      ``(op, inputs, outputs) -> bool`` over objects with ``.shape``/``.dtype`` (matrix products
      by size).  The worker runs such kernels beside the caller's Python; the caller runs the
      others itself when it flushes them.  ``True`` by default: an op defined outside mge may
      block or take long, as MegEngine's worker allows; mge's own short ops say ``False``.
    * ``never_recompute`` -- DTR and drop must never recompute its outputs (random numbers,
      parameter updates; the seed's ``is_bad_op``).
    * ``trace_parameters`` -- a replaying ``jit.trace`` takes the op with other parameters than
      recorded (hyperparameters such as a learning rate, which MegEngine passes as tensors):
      the program is recompiled with the new op instead of raising ``TraceError``.
    * ``seeded`` -- the op has a ``seed`` parameter that every call draws anew (random numbers):
      a replaying ``jit.trace`` takes each call's seed without recompiling (``reseeded``).
    * ``complex_ok`` -- the op's rule takes complex64 inputs (moving data: reshapes, indexing,
      copies; the elementwise modes that check themselves).  The rule of any other op refuses
      them with a ``TypeError`` naming the op, before a kernel could misread the data.
    """

    _fields = ()
    _defaults = {}
    sets_device = False
    long_running = True
    never_recompute = False
    trace_parameters = False
    seeded = False
    complex_ok = False

    @classmethod
    def get(cls, *args):
        """The shared ``cls(*args)``: equal parameters give the same instance."""
        # Equal parameters of other types are other ops (1, 1.0 and True).  Flat parameters --
        # numbers, strings, None -- are told apart by their types alone, found at C speed (this
        # is on many ops' path); tuples and dtypes (quantization metadata) take ``_types``.
        try:
            if len(args) == 1 and type(args[0]) is str:  # (Elemwise.get("add"): the most common)
                key = (cls, args)
            else:
                ts = tuple(map(type, args))
                key = (cls, args, ts if _FLAT_TYPES.issuperset(ts) else _types(args))
            op = _INTERNED.get(key)
        except TypeError:  # unhashable parameters (lists): the constructor freezes them
            op = cls(*args)
            return _BY_VALUE.setdefault(op, op)
        if op is not None:
            return op
        op = cls(*args)
        op = _BY_VALUE.setdefault(op, op)
        if len(_INTERNED) > 16384:  # bounded: a program that makes ops from data
            _INTERNED.clear()
            _BY_VALUE.clear()
            _BY_VALUE[op] = op
        _INTERNED[key] = op
        return op

    def __init__(self, *args, **kwargs):
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(
                f"{type(self).__name__} takes at most {len(fields)} parameters, got {len(args)}"
            )
        values = dict(self._defaults)
        values.update(zip(fields, args))
        for k, v in kwargs.items():
            if k not in fields:
                raise TypeError(f"{type(self).__name__} got an unexpected parameter {k!r}")
            values[k] = v
        missing = [f for f in fields if f not in values]
        if missing:
            raise TypeError(f"{type(self).__name__} missing parameter(s): {', '.join(missing)}")
        key = tuple(_freeze(values[f]) for f in fields)
        d = self.__dict__  # parameters are plain instance attributes: fast to read in kernels
        d.update(zip(fields, key))
        d["_key"] = key
        # Equal ops must be interchangeable, so 1, 1.0 and True are different parameters here.
        d["_types"] = _types(key)
        d["_hash"] = hash((type(self), key))

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        return (type(self) is type(other) and self._key == other._key
                and self._types == other._types)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return self._hash

    def __repr__(self):
        params = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self._key))
        return f"{type(self).__name__}({params})"

    def __reduce__(self):
        return (_rebuild_op, (type(self), self._key))

    def replace(self, **changes):
        """A copy of this op with some parameters changed."""
        values = dict(zip(self._fields, self._key))
        values.update(changes)
        return type(self)(**values)

    @property
    def name(self):
        """A short readable name (the class name, plus the mode where there is one)."""
        mode = dict(zip(self._fields, self._key)).get("mode")
        return f"{type(self).__name__}.{mode}" if mode is not None else type(self).__name__


_INTERNED = {}  # (cls, args, their types) -> the shared instance
_FLAT_TYPES = frozenset({bool, int, float, str, type(None)})
_BY_VALUE = {}  # op -> the shared instance equal to it


def _types(v):
    if isinstance(v, tuple):
        return tuple([_types(x) if isinstance(x, (tuple, np.dtype)) else type(x) for x in v])
    if isinstance(v, np.dtype) and v.metadata:
        # numpy compares dtypes without their metadata: qint8(0.1) == qint8(0.2).  The
        # quantization (scale, zero point) is part of the parameter.
        return (np.dtype, repr(v.metadata))
    return type(v)


def _rebuild_op(cls, key):
    return cls(*key)


def _freeze(v):
    # Parameters must be hashable: lists become tuples, numpy scalars Python scalars.
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.dtype):
        return v
    if isinstance(v, slice):
        return ("slice", v.start, v.stop, v.step)
    return v


def def_infer(cls):
    """Decorator: register ``fn(op, descs) -> list[TensorDesc]`` as the shape/dtype rule of ``cls``.

    Unless ``cls.complex_ok``, the rule refuses complex inputs (``TypeError``) once complex tensors
    exist (``guard_complex``).
    """
    def deco(fn):
        INFER[cls] = _refusing_complex(fn) if _COMPLEX_GUARD[0] and not cls.complex_ok else fn
        return fn
    return deco


# Whether the rules refuse complex inputs: off until the first complex64 value appears, so that
# programs without complex tensors pay nothing for the check.
_COMPLEX_GUARD = [False]


def guard_complex():
    """Make every rule of an op that is not ``complex_ok`` refuse complex inputs (called when the
    first complex64 value is made: a tensor, an ``astype``, ``F.complex``)."""
    if _COMPLEX_GUARD[0]:
        return
    _COMPLEX_GUARD[0] = True
    for cls, fn in list(INFER.items()):
        if not cls.complex_ok and not hasattr(fn, "__wrapped__"):
            INFER[cls] = _refusing_complex(fn)


_ON_FIRST_COMPLEX.append(guard_complex)


def _refusing_complex(fn):
    def rule(op, descs):
        for d in descs:
            dt = d[1]
            if dt is not None and dt.kind == "c":
                raise op_error(TypeError, op, "does not take complex inputs (complex tensors "
                               "support reshapes, indexing, add/sub/mul/neg, F.real and F.imag)",
                               descs)
        return fn(op, descs)
    rule.__name__ = getattr(fn, "__name__", "rule")
    rule.__doc__ = fn.__doc__
    rule.__wrapped__ = fn
    return rule


class OpValueError(ValueError, RuntimeError):
    """An op refused its inputs' values or shapes (a ``RuntimeError`` too, as MegEngine's op
    errors are)."""


class OpTypeError(TypeError, RuntimeError):
    """An op refused its inputs' dtypes (a ``RuntimeError`` too, as MegEngine's op errors are)."""


class OpIndexError(IndexError, RuntimeError):
    """An index out of range in an op (a ``RuntimeError`` too, as MegEngine's op errors are)."""


_OP_ERRORS = {ValueError: OpValueError, TypeError: OpTypeError, IndexError: OpIndexError}


def op_error(exc_type, op, message, descs=None):
    """Build the error an op's rule raises: it names the op, and the input shapes and dtypes.

    MegEngine's ops raise ``RuntimeError`` (its ``MegBrainError``); a plain ``ValueError``,
    ``TypeError`` or ``IndexError`` becomes its subclass that is also a ``RuntimeError``."""
    text = f"{op.name}: {message}"
    if descs:
        shapes = ", ".join(str(d[0]) for d in descs)
        dtypes = ", ".join(str(d[1]) for d in descs)
        text += f" (input shapes: {shapes}; dtypes: {dtypes})"
    return _OP_ERRORS.get(exc_type, exc_type)(text)
