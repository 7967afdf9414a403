"""The op registry: ops are small immutable descriptions; their rules live in side tables.

An op class lists its parameters in ``_fields``; instances are immutable, hashable and compare by
value, so they can be cached and used as dictionary keys (trace and the channel do so).  The rules
of an op are kept in tables keyed by the op's class, as JAX keys rules by primitive:

* ``INFER[cls](op, descs) -> [TensorDesc, ...]`` -- output shapes/dtypes from input descs.  A shape
  may be ``None`` (unknown until the kernel runs, e.g. ``CondTake``).  Raises ``ValueError`` or
  ``TypeError`` naming the op and the offending shapes/dtypes when the inputs are invalid.
* ``KERNELS[device_kind][cls](op, *arrays) -> tuple of arrays`` -- the computation.
* ``BACKWARD[cls](op, inputs, outputs, grads, needs) -> [grad or None per input]`` -- the
  backward rule (vector-Jacobian product).  ``inputs``/``outputs`` are the forward tensors,
  ``grads`` one tensor or ``None`` (zero) per output, ``needs`` one bool per input saying whether
  its gradient is wanted (a rule may skip work for the others).  Each returned gradient has its
  input's shape, or is ``None`` (zero / not differentiable).  Rules compute with ``apply`` and
  ``mge.functional``, so they walk the transformation stack: a grad key recording above the one
  running backward sees them, which gives higher-order gradients.
* ``HOST[cls]`` -- optional host-compute rule for tiny values (defaults to the CPU kernel).
* ``ON_WORKER[cls]`` -- ``True`` or ``rule(op, input_infos, output_infos) -> bool``: the kernel
  is long and mostly runs without the GIL (matrix products, convolutions), so at ``async_level``
  1 and 2 the worker thread runs it beside the caller's Python.  Other built-in ops run on the
  caller's thread when their command is flushed; ops defined outside mge always run on the worker.
* ``INPLACE[cls](op, arrays, k) -> tuple of arrays`` -- optional CPU kernel that writes output 0
  into ``arrays[k]``, the buffer of an input that this op is the last user of (the channel checks
  that nothing else sees it).  Elementwise ops do this without an entry (their ufunc's ``out=``).

Adding an op is one class plus its rules, in one file of ``mge/_core/ops``.
"""
import numpy as np

__all__ = [
    "OpDef", "TensorDesc", "INFER", "KERNELS", "BACKWARD", "KEEPS_OUTPUTS", "HOST", "INPLACE",
    "ON_WORKER", "def_infer", "def_kernel", "def_inplace", "def_on_worker", "def_backward", "op_error", "unknown",
]

INFER = {}
KERNELS = {"cpu": {}}
BACKWARD = {}
KEEPS_OUTPUTS = {}  # cls -> predicate(op): the backward rule reads the forward outputs
HOST = {}
INPLACE = {}
ON_WORKER = {}


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


unknown = None


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
    """

    _fields = ()
    _defaults = {}
    sets_device = False
    long_running = True
    never_recompute = False

    @classmethod
    def get(cls, *args):
        """The shared ``cls(*args)``: equal parameters give the same instance."""
        key = (cls, args, _types(args))
        try:
            return _INTERNED[key]
        except KeyError:
            pass
        except TypeError:  # unhashable parameters (lists): the constructor freezes them
            key = None
        op = cls(*args)
        op = _BY_VALUE.setdefault(op, op)
        if key is not None:
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
_BY_VALUE = {}  # op -> the shared instance equal to it


def _types(v):
    if isinstance(v, tuple):
        return tuple(_types(x) for x in v)
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
    """Decorator: register ``fn(op, descs) -> list[TensorDesc]`` as the shape/dtype rule of ``cls``."""
    def deco(fn):
        INFER[cls] = fn
        return fn
    return deco


def def_kernel(cls, device="cpu"):
    """Decorator: register ``fn(op, *arrays) -> tuple of arrays`` as ``cls``'s kernel on ``device``."""
    def deco(fn):
        KERNELS.setdefault(device, {})[cls] = fn
        return fn
    return deco


def def_inplace(cls):
    """Decorator: register ``fn(op, arrays, k) -> tuple of arrays`` as ``cls``'s in-place CPU
    kernel (output 0 written into ``arrays[k]``; see the module docstring)."""
    def deco(fn):
        INPLACE[cls] = fn
        return fn
    return deco


def def_on_worker(cls, rule=True):
    """Say that ``cls``'s kernel runs on the worker thread (always, or when ``rule(op,
    input_infos, output_infos)`` says so; see the module docstring)."""
    ON_WORKER[cls] = rule
    return cls


def def_backward(cls, keeps_outputs=False):
    """Decorator: register ``fn(op, inputs, outputs, grads, needs)`` as ``cls``'s backward rule.

    See the module docstring for the contract; the grad transformation calls it.
    ``keeps_outputs`` (a bool, or a predicate ``op -> bool``) says that the rule reads the forward
    outputs, so the grad transformation keeps them alive until the rule has run; otherwise a
    single output is held weakly and may reach the rule as ``None``.
    """
    def deco(fn):
        BACKWARD[cls] = fn
        if keeps_outputs:
            KEEPS_OUTPUTS[cls] = keeps_outputs if callable(keeps_outputs) else _always
        else:
            KEEPS_OUTPUTS.pop(cls, None)
        return fn
    return deco


def _always(op):
    return True


def op_error(exc_type, op, message, descs=None):
    """Build the error an op's rule raises: it names the op, and the input shapes and dtypes."""
    text = f"{op.name}: {message}"
    if descs:
        shapes = ", ".join(str(d[0]) for d in descs)
        dtypes = ", ".join(str(d[1]) for d in descs)
        text += f" (input shapes: {shapes}; dtypes: {dtypes})"
    return exc_type(text)
