"""Nodes of a traced graph: a :class:`TensorNode` stands for a tensor, a :class:`ModuleNode`
for a module; each is produced by one expression and used by others."""

__all__ = ["Node", "ModuleNode", "TensorNode", "NodeMixin"]

_next_id = [0]


class Node:
    """A value in an :class:`~mge.traced_module.traced_module.InternalGraph`.

    ``expr`` is the expression that produced it, ``users`` the expressions that use it,
    ``name`` its (graph-unique) name and ``top_graph`` the graph it belongs to.
    """

    def __init__(self, expr=None, name=None, graph=None):
        self.expr = expr
        self.users = []
        self._top_graph = graph
        self._name = None
        if graph is not None:
            self._id = graph._total_ids[0]
            graph._total_ids[0] += 1
            self._name = graph._namespace.create_unique_name(name or "node")
        else:
            self._id = _next_id[0]
            _next_id[0] += 1
            self._name = name
        self._orig_name = name
        self._qualname = ""

    @classmethod
    def _set_next_id(cls, id=0):
        """Set the id given to nodes made outside a graph (ids inside a graph are per graph)."""
        _next_id[0] = int(id)

    @classmethod
    def _get_next_id(cls):
        return _next_id[0]

    @property
    def top_graph(self):
        """The graph this node belongs to."""
        return self._top_graph

    @property
    def name(self):
        """The node's name, unique in its graph; assigning a used name raises ``AssertionError``."""
        return self._name

    @name.setter
    def name(self, new):
        graph = self._top_graph
        if graph is None or new == self._name:
            self._name = new
            return
        assert new not in graph._namespace.used_names, f"name {new!r} is already used"
        graph._namespace.used_names.discard(self._name)
        graph._namespace.used_names.add(new)
        self._name = new

    @property
    def qualname(self):
        """Where the node's value lives in the top module, as a dotted path: a module or an
        attribute is its attribute path (``"Net.block.conv"``), a computed tensor names its
        producer in brackets (``"Net.block.conv.[out]"``, ``"Net.block.[func_relu]"``)."""
        return self._qualname

    def __repr__(self):
        return f"%{self._id}_{self._name}" if self._name else f"%{self._id}"

    def __str__(self):
        return str(self._name)

    def __format__(self, spec):
        return str(self._name)


class ModuleNode(Node):
    """A node standing for a module; ``owner`` is the module, ``module_type`` its class.

    Inside ``graph.insert_exprs()``, ``node.attr`` records a ``GetAttr`` and ``node(...)`` a call.
    """

    def __init__(self, expr=None, name=None, graph=None, module_type=None, owner=None):
        super().__init__(expr, name, graph)
        self.module_type = module_type
        self._owner = owner

    @property
    def owner(self):
        """The module this node stands for."""
        return self._owner

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_owner", "module_type", "_top_graph", "expr"):
            raise AttributeError(name)
        from . import module_tracer
        return module_tracer.node_getattr(self, name)

    def __call__(self, *args, **kwargs):
        from . import module_tracer
        return module_tracer.node_call(self, args, kwargs)


class TensorNode(Node):
    """A node standing for a tensor: ``shape``, ``dtype``, ``qparams`` as seen while tracing.

    Inside ``graph.insert_exprs()`` it can be used as a tensor (``node + 1``, ``F.neg(node)``).
    """

    def __init__(self, expr=None, name=None, graph=None, shape=None, dtype=None, qparams=None):
        super().__init__(expr, name, graph)
        self._shape = shape
        self._dtype = dtype
        self._qparams = qparams
        self.value = None

    @property
    def shape(self):
        """The shape seen while tracing."""
        return self._shape

    @shape.setter
    def shape(self, v):
        self._shape = v

    @property
    def dtype(self):
        """The dtype seen while tracing."""
        return self._dtype

    @dtype.setter
    def dtype(self, v):
        self._dtype = v

    @property
    def qparams(self):
        """Quantization parameters seen while tracing (or ``None``)."""
        return self._qparams

    def __getattr__(self, name):
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        from . import module_tracer
        return module_tracer.tensor_node_attr(self, name)


def _install_tensor_node_dunders():
    names = ["__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
             "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
             "__rpow__", "__neg__", "__pos__", "__abs__", "__matmul__", "__rmatmul__", "__lt__",
             "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__", "__invert__",
             "__getitem__", "__lshift__", "__rshift__"]

    def make(n):
        def method(self, *args):
            from . import module_tracer
            return module_tracer.tensor_node_attr(self, n)(*args)
        method.__name__ = n
        return method

    for n in names:
        setattr(TensorNode, n, make(n))


_install_tensor_node_dunders()


class NodeMixin:
    """MegEngine's link between a traced value and its node; in mge the active recording
    scope keeps that link (see :meth:`wrap` and :meth:`get`)."""

    __node = None

    @classmethod
    def wrap(cls, value, node):
        """Make ``node`` stand for the tensor ``value`` in the graph being recorded (later
        operations on ``value`` inside ``insert_exprs()`` use ``node``)."""
        from . import module_tracer
        scope = module_tracer.active_scope()
        assert scope is not None, "NodeMixin.wrap needs an active recording (insert_exprs())"
        scope.bind(value, node)

    wrap_safe = wrap

    @classmethod
    def get(cls, value, *default):
        """The node standing for ``value`` in the graph being recorded (``default``, when
        given, if there is none; a node is its own node)."""
        if isinstance(value, Node):
            return value
        from . import module_tracer
        scope = module_tracer.active_scope()
        e = scope.tensors.get(id(value)) if scope is not None else None
        if e is not None and e[0] is value:
            return e[1]
        if default:
            return default[0]
        raise KeyError(f"no node stands for {type(value).__name__} in the active recording")
