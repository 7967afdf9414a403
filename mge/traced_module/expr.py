"""Expressions of a traced graph: each takes input nodes and produces output nodes."""
import builtins

from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten

__all__ = ["Expr", "Input", "GetAttr", "CallMethod", "CallFunction", "Apply", "Constant"]

_next_id = [0]


def _graph_id(graph):
    if graph is None:
        i = _next_id[0]
        _next_id[0] += 1
        return i
    i = graph._total_ids[1]
    graph._total_ids[1] += 1
    return i


class Expr:
    """Base of the graph's expressions: ``inputs``/``outputs`` (nodes), ``top_graph``, ``_id``.

    Non-node arguments are kept in ``arg_def`` (the structure of ``(args, kwargs)``) and
    ``const_val`` (``(leaf index, value)`` pairs).
    """

    def __init__(self, graph=None):
        self._top_graph = graph
        self._id = _graph_id(graph)
        self.inputs = []
        self.outputs = []
        self.const_val = []
        self.arg_def = None
        self.out_def = None
        self._disable_remove = False

    @classmethod
    def _set_next_id(cls, id=0):
        """Set the id given to expressions made outside a graph."""
        _next_id[0] = int(id)

    @classmethod
    def _get_next_id(cls):
        return _next_id[0]

    @property
    def top_graph(self):
        """The graph this expression belongs to."""
        return self._top_graph

    def add_inputs(self, args, kwargs=None):
        """Record ``(args, kwargs)``: nodes become inputs, other leaves constants."""
        leaves, self.arg_def = tree_flatten((tuple(args), dict(kwargs or {})))
        self.inputs, self.const_val = [], []
        for i, v in enumerate(leaves):
            if isinstance(v, Node):
                self.inputs.append(v)
                v.users.append(self)
            else:
                self.const_val.append((i, v))

    def add_outputs(self, outputs):
        """Set the output nodes and make this expression their producer."""
        self.outputs = list(outputs)
        for n in self.outputs:
            n.expr = self
            if not getattr(n, "_qualname", ""):
                n._qualname = _make_qualname(self, n)

    def _qualname_tag(self):
        return None

    def unflatten_args(self, inputs):
        """``(args, kwargs)`` rebuilt from the input values and the constants."""
        leaves = [None] * self.arg_def.num_leaves
        it = iter(inputs)
        consts = dict(self.const_val)
        for i in range(len(leaves)):
            leaves[i] = consts[i] if i in consts else next(it)
        return self.arg_def.unflatten(leaves)

    def replace_inputs(self, repl):
        """Replace input nodes by ``repl`` (``{old: new}``)."""
        for i, n in enumerate(self.inputs):
            if n in repl:
                new = repl[n]
                if self in n.users:
                    n.users.remove(self)
                self.inputs[i] = new
                new.users.append(self)

    @property
    def kwargs(self):
        """The keyword arguments as recorded (nodes for tensors)."""
        return self.unflatten_args(self.inputs)[1]

    @property
    def args(self):
        """The positional arguments as recorded (nodes for tensors)."""
        return self.unflatten_args(self.inputs)[0]

    def _fmt_args(self, skip_first=False):
        args, kwargs = self.unflatten_args(self.inputs)
        if skip_first:
            args = args[1:]
        parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    def _fmt_outputs(self):
        if not self.outputs:
            return ""
        return ", ".join(str(o) for o in self.outputs) + " = "

    def interpret(self, *inputs):
        """Run the expression on input values; returns the list of output values."""
        raise NotImplementedError

    def __getstate__(self):
        return dict(self.__dict__)


def _make_qualname(expr, node):
    graph = expr._top_graph
    base = getattr(graph, "_qualname", None) or ""
    if isinstance(expr, GetAttr):
        return f"{expr.inputs[0]._qualname}.{expr.name}"
    if isinstance(expr, CallMethod) and expr.method == "__call__" and expr.inputs and \
            isinstance(expr.inputs[0], ModuleNode):
        return f"{expr.inputs[0]._qualname}.[out]"
    if isinstance(expr, Input) and isinstance(node, ModuleNode):
        return base
    if isinstance(expr, CallMethod):
        tag = "method_" + expr.method.strip("_")
    elif isinstance(expr, CallFunction):
        tag = "func_" + getattr(expr.func, "__name__", "function")
    elif isinstance(expr, Apply):
        tag = "def_" + type(expr.opdef).__name__.lower()
    else:
        tag = node._name or "node"
    if graph is not None:
        used = graph.__dict__.setdefault("_used_qualnames", set())
        t, i = tag, 1
        while t in used:
            t, i = f"{tag}_{i}", i + 1
        used.add(t)
        tag = t
    return f"{base}.[{tag}]"


def _fmt(v):
    if isinstance(v, Node):
        return str(v)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_fmt(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _flat_outputs(expr, result):
    leaves, out_def = tree_flatten(result)
    return leaves


class Input(Expr):
    """A graph input: produces one node (``self`` or an argument of ``forward``)."""

    def __init__(self, type=TensorNode, name=None, graph=None, **kw):
        super().__init__(graph)
        self.name = name
        self.add_outputs([type(self, name=name, graph=graph, **kw)])

    def interpret(self, *inputs):
        return list(inputs)

    def __repr__(self):
        return f"%{self._id}:\t{self.outputs[0]} = Input()"


class GetAttr(Expr):
    """``module.name`` (a dotted path): a submodule, parameter or buffer of ``inputs[0]``."""

    def __init__(self, module_node, name, out_type=TensorNode, graph=None, **kw):
        super().__init__(graph)
        self.name = name
        self.add_inputs((module_node,))
        self.add_outputs([out_type(self, name=name.replace(".", "_"), graph=graph, **kw)])

    def interpret(self, module):
        return [_get_path(module, self.name)]

    def __repr__(self):
        out_type = ""
        o = self.outputs[0]
        if isinstance(o, ModuleNode) and o.module_type is not None:
            out_type = f" -> ({o.module_type.__name__})"
        return f'%{self._id}:\t{o} = getattr({self.inputs[0]}, "{self.name}"){out_type}'


def _get_path(obj, path):
    for part in path.split("."):
        if isinstance(obj, (list, tuple)):
            obj = obj[int(part)]
        elif isinstance(obj, dict):
            obj = obj[part] if part in obj else obj[int(part)]
        else:
            obj = getattr(obj, part)
    return obj


class CallMethod(Expr):
    """``inputs[0].method(...)``: a module call (``__call__``) or a tensor method."""

    def __init__(self, node, method="__call__", graph=None):
        super().__init__(graph)
        self.method = method
        self._self_node = node

    def interpret(self, *inputs):
        args, kwargs = self.unflatten_args(inputs)
        obj = args[0]
        from mge.tensor import Tensor
        if isinstance(obj, Tensor):
            fn = getattr(Tensor, self.method)
            return _flat_outputs(self, fn(*args, **kwargs))
        return _flat_outputs(self, getattr(obj, self.method)(*args[1:], **kwargs))

    def __repr__(self):
        target = str(self.inputs[0]) if self.inputs else "?"
        m = "" if self.method == "__call__" else f".{self.method}"
        return f"%{self._id}:\t{self._fmt_outputs()}{target}{m}({self._fmt_args(True)})"


class CallFunction(Expr):
    """``func(...)`` for a function of ``mge.functional`` (or one registered as built-in)."""

    def __init__(self, func, graph=None):
        super().__init__(graph)
        self.func = func

    def interpret(self, *inputs):
        args, kwargs = self.unflatten_args(inputs)
        from .module_tracer import _state, wrapped
        fn = wrapped(self.func) if _state.scopes else self.func
        return _flat_outputs(self, fn(*args, **kwargs))

    def __repr__(self):
        mod = getattr(self.func, "__module__", "") or ""
        mod = mod.rsplit(".", 1)[-1] if mod.startswith("mge.functional") else mod
        name = f"{mod}.{self.func.__name__}" if mod else self.func.__name__
        return f"%{self._id}:\t{self._fmt_outputs()}{name}({self._fmt_args()})"

    def __getstate__(self):
        d = dict(self.__dict__)
        ref = _func_ref(self.func)
        if ref is not None:
            d["func"] = ref
        return d

    def __setstate__(self, state):
        f = state.get("func")
        if isinstance(f, _FuncRef):
            import importlib
            state["func"] = getattr(importlib.import_module(f.module), f.name)
        self.__dict__.update(state)


class _FuncRef:
    def __init__(self, module, name):
        self.module, self.name = module, name


def _func_ref(func):
    import sys
    from .module_tracer import original
    func = original(func)
    names = [func.__module__ or ""] + sorted(n for n in sys.modules if n.startswith("mge.functional"))
    for modname in names:
        mod = sys.modules.get(modname)
        for name in (func.__name__, getattr(func, "__qualname__", "")):
            if mod is not None and getattr(mod, name, None) is func:
                return _FuncRef(modname, name)
    if "<locals>" in getattr(func, "__qualname__", ""):
        for modname in names:
            mod = sys.modules.get(modname)
            for k, v in vars(mod or object()).items():
                if v is func:
                    return _FuncRef(modname, k)
    return None


class Apply(Expr):
    """``apply(opdef, *inputs)``: a raw op applied outside any recorded function."""

    def __init__(self, opdef, graph=None):
        super().__init__(graph)
        self.opdef = opdef

    def interpret(self, *inputs):
        from mge.core import apply
        return list(apply(self.opdef, *inputs))

    def __repr__(self):
        return (f"%{self._id}:\t{self._fmt_outputs()}{type(self.opdef).__name__}"
                f"({', '.join(str(i) for i in self.inputs)})")


class Constant(Expr):
    """A constant tensor (or module) captured while tracing."""

    def __init__(self, value, name=None, graph=None, **kw):
        super().__init__(graph)
        self.value = value
        from mge.module import Module
        out_type = ModuleNode if isinstance(value, Module) else TensorNode
        if out_type is ModuleNode:
            kw = {"module_type": type(value), "owner": value}
        self.add_outputs([out_type(self, name=name or "const", graph=graph, **kw)])

    def interpret(self, *inputs):
        return [self.value]

    def __repr__(self):
        v = self.value
        desc = f"Tensor(shape={tuple(v.shape)}, dtype={v.dtype})" if hasattr(v, "shape") else repr(v)
        return f"%{self._id}:\t{self.outputs[0]} = Constant({desc})"


builtins  # noqa: B018 (kept for eval of printed graphs)
