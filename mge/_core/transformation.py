"""The transformation stack: which layers an op walks through, top to bottom.

A transformation sees ``(op, inputs)`` and either handles it or hands it to the layer below by
calling ``next(op, inputs)`` -- JAX's ``interpret_op``/``prev_interpreter`` in one argument.  The
stack has MegEngine's segments, top to bottom::

    module_trace  dtype_promote  dim_expansion  grad  scalar  symbol  trace  eval

A segment holds the transformations registered at it (the newest on top); a plugin may also sit
``before:NAME`` or ``after:NAME`` a segment.  Only active transformations are on the stack, and a
transformation that declares ``op_types`` is skipped for every other op, so an idle layer costs
nothing.  The chain of callables for an op class is built once and cached until the stack changes.
"""

import cython

from . import _accel

_accel.guard(__name__)

__all__ = ["Transformation", "SEGMENTS", "Stack"]

SEGMENTS = ("module_trace", "dtype_promote", "dim_expansion", "grad", "scalar", "symbol", "trace", "eval")


class Transformation:
    """Base class of a transformation (the plugin contract).

    Attributes a subclass sets:

    * ``name`` -- unique name; a built-in segment's name makes it that segment's transformation.
    * ``position`` -- ``"before:NAME"`` or ``"after:NAME"`` of a segment (ignored for built-ins).
    * ``op_types`` -- ``None`` (every op) or a tuple of op classes this layer looks at.
    * ``rules`` -- optionally, a table ``{op class: rule(op, inputs, next)}``: the layer looks at
      exactly those classes (and their subclasses), and the stack calls the rule directly instead
      of ``apply`` (one call less per op; ``op_types`` is then ignored).
    * ``on_demand`` -- ``True`` if loading must not put it on the stack (a front-end such as
      ``GradManager`` registers it while it records).

    ``apply(op, inputs, next)`` returns the outputs (a tuple of tensors); the default hands the op
    down unchanged.
    """

    name = None
    position = None
    op_types = None
    rules = None
    on_demand = False

    def apply(self, op, inputs, next):
        return next(op, inputs)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


def _parse_position(t):
    if t.name in SEGMENTS:
        return t.name, "at"
    pos = t.position
    if not isinstance(pos, str) or ":" not in pos:
        raise ValueError(
            f"transformation {t.name!r}: position must be 'before:NAME' or 'after:NAME' "
            f"with NAME one of {', '.join(SEGMENTS)}; got {pos!r}"
        )
    where, seg = pos.split(":", 1)
    if where not in ("before", "after") or seg not in SEGMENTS:
        raise ValueError(
            f"transformation {t.name!r}: position must be 'before:NAME' or 'after:NAME' "
            f"with NAME one of {', '.join(SEGMENTS)}; got {pos!r}"
        )
    if seg == "eval" and where == "after":
        raise ValueError(f"transformation {t.name!r}: nothing can sit below eval")
    return seg, where


class Stack:
    """The active transformations, and the per-op-class chains built from them."""

    def __init__(self, eval_fn, eval_transformation):
        self._eval = eval_fn
        self._eval_t = eval_transformation
        # (segment, where) -> list of transformations, topmost first
        self._slots = {(s, w): [] for s in SEGMENTS for w in ("before", "at", "after")}
        self.chains = {}
        self._nexts = None
        self._below = {}  # (id(t), segment) -> next without t (see below)
        self.version = 0

    def register(self, t, segment=None):
        """Put ``t`` on the stack: at ``segment`` (topmost there) or where its name/position says."""
        key = (segment, "at") if segment is not None else _parse_position(t)
        if key[0] not in SEGMENTS:
            raise ValueError(f"unknown segment {key[0]!r}; segments are {', '.join(SEGMENTS)}")
        slot = self._slots[key]
        if key[1] == "at":
            slot.insert(0, t)
        else:
            slot.append(t)
            slot.sort(key=lambda x: x.name)
        self._changed()

    def unregister(self, t):
        """Take ``t`` off the stack; returns whether it was there."""
        for slot in self._slots.values():
            for i, x in enumerate(slot):
                if x is t:
                    del slot[i]
                    self._changed()
                    return True
        return False

    def active(self):
        """Active transformations, top to bottom, ``eval`` last."""
        out = []
        for s in SEGMENTS:
            for w in ("before", "at", "after"):
                out.extend(self._slots[(s, w)])
        out.append(self._eval_t)
        return out

    def _changed(self):
        self.chains.clear()  # the dict object is shared with dispatch.apply: clear, never replace
        self._nexts = None
        self._below.clear()
        self.version += 1

    def chain_for(self, cls):
        """The callable ``(op, inputs) -> outputs`` for ops of class ``cls`` (cached)."""
        if self._nexts is None:
            self._build()
        f = self._nexts[0].resolve(cls)
        self.chains[cls] = f
        return f

    def below(self, t, segment="grad"):
        """``next`` for the layers from ``segment`` down, without ``t``: a callable
        ``(op, inputs) -> outputs``.

        The grad transformation runs its backward rules' ops through this: the layers above the
        ``grad`` segment (dtype promotion, dim expansion) are not walked again, the running key's
        own layer does not see them, and the keys entered after it (above it) do not either
        -- as in MegEngine, an inner recording does not see an outer one's backward -- while the
        keys entered before it record them (higher-order gradients).  Cached until the stack changes.
        """
        key = (id(t), segment)
        nxt = self._below.get(key)
        if nxt is None:
            layers = []
            started = False
            for s in SEGMENTS:
                if s == segment:
                    started = True
                if started:
                    for w in ("before", "at", "after"):
                        slot = self._slots[(s, w)]
                        if s == segment and w == "at":
                            for i, x in enumerate(slot):  # newest first: skip t and newer
                                if x is t:
                                    slot = slot[i + 1:]
                                    break
                        layers.extend(x for x in slot if x is not t)
            nxt = None
            for k in range(len(layers), -1, -1):
                nxt = _Next(layers, k, nxt, self._eval)
            self._below[key] = nxt
        return nxt

    def _build(self):
        layers = self.active()[:-1]
        nxt = None
        for k in range(len(layers), -1, -1):
            nxt = _Next(layers, k, nxt, self._eval)
        self._nexts = [nxt]


@cython.cclass
class _Next:
    """``next`` for the layers from ``k`` down: finds, per op class, the first layer that takes it.

    A layer may hand down a different op than it received (a cast, a reshape); the op walks the
    remaining layers by its own class, so it meets exactly the layers that look at that class.
    The ``_Next`` objects of a stack form a chain, each holding the one for ``k + 1`` (``below``):
    no reference cycles, so a replaced chain (and the layers it held) is freed at once.
    """

    layers = cython.declare(list)
    k = cython.declare(cython.Py_ssize_t)
    below = cython.declare(object, visibility="readonly")
    eval = cython.declare(object)
    cache = cython.declare(dict, visibility="readonly")

    def __init__(self, layers, k, below, eval_fn):
        self.layers = layers
        self.k = k
        self.below = below
        self.eval = eval_fn
        self.cache = {}

    def resolve(self, cls):
        f = self.eval
        node = self  # the _Next for layer j
        for j in range(self.k, len(self.layers)):
            layer = self.layers[j]
            rules = layer.rules
            if rules is not None:
                rule = _rule_for(rules, cls)
                if rule is not None:
                    f = _layer(rule, node.below)
                    break
                node = node.below
                continue
            types = layer.op_types
            if types is None or issubclass(cls, types):
                f = _layer(layer.apply, node.below)
                break
            node = node.below
        self.cache[cls] = f
        return f

    def __call__(self, op, inputs):
        try:
            f = self.cache[type(op)]
        except KeyError:
            f = self.resolve(type(op))
        return f(op, inputs)


def _rule_for(rules, cls):
    for c in cls.__mro__:
        rule = rules.get(c)
        if rule is not None:
            return rule
    return None


def _layer(apply, nxt):
    def layer(op, inputs):
        return apply(op, inputs, nxt)
    return layer
