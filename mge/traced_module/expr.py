"""Expressions of a traced graph: each takes input nodes and produces output nodes."""
import builtins
import inspect

from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten

__all__ = ["Expr", "Input", "GetAttr", "CallMethod", "CallFunction", "Apply", "Constant",
           "is_call_module", "is_call_tensor_method", "is_call_function", "is_constant",
           "is_getattr", "is_apply_def", "is_input"]


def is_call_module(expr, module_cls=None):
    """Whether ``expr`` calls a module (of class ``module_cls``, subclasses included)."""
    return (isinstance(expr, CallMethod) and expr.method == "__call__" and bool(expr.inputs)
            and isinstance(expr.inputs[0], ModuleNode)
            and (module_cls is None or isinstance(expr.inputs[0].owner, module_cls)))


def is_call_tensor_method(expr, method=None):
    """Whether ``expr`` calls a Tensor method (named ``method``, or one of several names)."""
    if isinstance(method, str):
        method = (method,)
    return (isinstance(expr, CallMethod) and not is_call_module(expr)
            and (method is None or expr.method in method))


def is_call_function(expr, func=None):
    """Whether ``expr`` calls the function ``func`` (or one of several)."""
    if not isinstance(expr, CallFunction):
        return False
    if func is None:
        return True
    from .module_tracer import original
    funcs = func if isinstance(func, (list, tuple, set)) else (func,)
    return any(original(expr.func) is original(f) for f in funcs)


def is_constant(expr):
    """Whether ``expr`` is a :class:`Constant`."""
    return isinstance(expr, Constant)


def is_getattr(expr):
    """Whether ``expr`` is a :class:`GetAttr`."""
    return isinstance(expr, GetAttr)


def is_apply_def(expr, opdef=None):
    """Whether ``expr`` applies an op (of OpDef class ``opdef``)."""
    return isinstance(expr, Apply) and (opdef is None or isinstance(expr.opdef, opdef))


def is_input(expr):
    """Whether ``expr`` is a graph :class:`Input`."""
    return isinstance(expr, Input)

_next_id = [0]

#: The serialized-expression format version: that of the MegEngine release whose format mge
#: follows.  Each pickled expression records it; compat loaders upgrade older ones.
__version__ = "1.13.0"


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
        for n in self.inputs:
            if self in n.users:
                n.users.remove(self)
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

    def unflatten_args(self, inputs):
        """``(args, kwargs)`` rebuilt from the input values and the constants."""
        leaves = [None] * self.arg_def.num_leaves
        it = iter(inputs)
        consts = dict(self.const_val)
        for i in range(len(leaves)):
            leaves[i] = consts[i] if i in consts else next(it)
        return self.arg_def.unflatten(leaves)

    def enable_remove(self):
        """Let ``graph.compile()`` remove this expression when its results are unused."""
        self._disable_remove = False

    def disable_remove(self):
        """Keep this expression in ``graph.compile()`` even when its results are unused."""
        self._disable_remove = True

    def _get_func(self):
        raise NotImplementedError(f"{type(self).__name__} has no function to bind arguments to")

    @property
    def _support_set_args_kwargs(self):
        return False

    def set_args_kwargs(self, *args, **kwargs):
        """Replace the recorded arguments (nodes become inputs, other leaves constants);
        keyword arguments naming positional parameters become positional."""
        assert self._support_set_args_kwargs, \
            f"Doesn't support set args/kwargs for {type(self).__name__} expr"
        from .utils import _convert_kwargs_to_args
        args, kwargs = _convert_kwargs_to_args(self._get_func(), args, kwargs)
        old = list(self.inputs)
        leaves, self.arg_def = tree_flatten((tuple(args), dict(kwargs)))
        self.inputs, self.const_val = [], []
        for i, v in enumerate(leaves):
            if isinstance(v, Node):
                self.inputs.append(v)
            else:
                self.const_val.append((i, v))
        for n in old:
            if n not in self.inputs and self in n.users:
                n.users.remove(self)
        for n in self.inputs:
            if self not in n.users:
                n.users.append(self)

    @property
    def named_args(self):
        """The arguments bound to the parameter names of the called function (defaults
        filled in), as ``{name: node or value}``."""
        args, kwargs = self.unflatten_args(self.inputs)
        return inspect.getcallargs(self._get_func(), *args, **kwargs)

    def set_arg(self, name, val):
        """Set the argument for parameter ``name`` to ``val`` (a node or a constant)."""
        func = self._get_func()
        args, kwargs = self.unflatten_args(self.inputs)
        spec = inspect.getfullargspec(inspect.unwrap(func))
        if name in kwargs:
            kwargs = dict(kwargs)
            kwargs[name] = val
            self.set_args_kwargs(*args, **kwargs)
        elif name in spec.args:
            i = spec.args.index(name)
            args = list(args)
            if i < len(args):
                args[i] = val
                self.set_args_kwargs(*args, **kwargs)
            else:
                kwargs = dict(kwargs)
                kwargs[name] = val
                self.set_args_kwargs(*args, **kwargs)
        elif name == spec.varargs:
            val = tuple(val) if isinstance(val, (list, tuple)) else (val,)
            self.set_args_kwargs(*args[:len(spec.args)], *val, **kwargs)
        else:
            assert spec.varkw is not None or name in spec.kwonlyargs, \
                f"function {func} doesn't have an argument named {name}"
            kwargs = dict(kwargs)
            kwargs[name] = val
            self.set_args_kwargs(*args, **kwargs)

    @property
    def return_val(self):
        """The outputs in the structure the operation returned them."""
        if self.out_def is None or self.out_def.num_leaves != len(self.outputs):
            return tuple(self.outputs)
        return self.out_def.unflatten(self.outputs)

    @return_val.setter
    def return_val(self, new_outputs):
        outs, out_def = tree_flatten(new_outputs, is_leaf=lambda x: isinstance(x, Node))
        assert all(isinstance(o, Node) for o in outs), \
            "Return values of expr must be ModuleNode or TensorNode or Container with them"
        assert all(o.expr in (None, self) for o in outs), \
            f"Some nodes are produced by other expr, can not be output of expr {self}"
        self.add_outputs(outs)
        self.out_def = out_def

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
        d = dict(self.__dict__)
        d["version"] = globals()["__version__"]
        return d


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
        if node is not None:  # (arguments after it: ``set_args_kwargs``)
            self.inputs = [node]
            self.arg_def = tree_flatten(((node,), {}))[1]
            node.users.append(self)

    @property
    def _support_set_args_kwargs(self):
        return True

    def _get_func(self):
        owner = getattr(self.inputs[0], "owner", None) if self.inputs else None
        if isinstance(self.inputs[0] if self.inputs else None, ModuleNode) and owner is not None:
            if self.method == "__call__":
                return _unpatched(type(owner), "forward")
            return _unpatched(type(owner), self.method)
        from mge.tensor import Tensor
        return _unpatched(Tensor, self.method)

    @property
    def graph(self):
        """The graph of the called TracedModule for these arguments (``None`` for a tensor
        method or a built-in module)."""
        if not is_call_module(self):
            return None
        owner = self.inputs[0].owner
        graphs = getattr(owner, "argdef_graph_map", None)
        if not graphs:
            return None
        if len(graphs) == 1:
            return next(iter(graphs.values()))
        from .traced_module import _normalize
        args, kwargs = self.unflatten_args(self.inputs)
        try:
            _, values = _normalize(owner._forward_sig, owner, args[1:], kwargs)
        except TypeError:
            values = list(args[1:]) + list(kwargs.values())
        return graphs.get(tree_flatten(tuple(values))[1], next(iter(graphs.values())))

    def interpret(self, *inputs):
        args, kwargs = self.unflatten_args(inputs)
        obj = args[0]
        from mge.tensor import Tensor
        if isinstance(obj, Tensor):
            out = getattr(Tensor, self.method)(*args, **kwargs)
        else:
            out = getattr(obj, self.method)(*args[1:], **kwargs)
        if self.method == "__setitem__":  # its output node is the tensor it changed
            out = obj
        return _flat_outputs(self, out)

    def __repr__(self):
        target = str(self.inputs[0]) if self.inputs else "?"
        m = "" if self.method == "__call__" else f".{self.method}"
        return f"%{self._id}:\t{self._fmt_outputs()}{target}{m}({self._fmt_args(True)})"


class CallFunction(Expr):
    """``func(...)`` for a function of ``mge.functional`` (or one registered as built-in)."""

    def __init__(self, func, graph=None):
        super().__init__(graph)
        self.func = func

    @property
    def _support_set_args_kwargs(self):
        return True

    def _get_func(self):
        from .module_tracer import original
        return original(self.func)

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
        d = super().__getstate__()
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


def _unpatched(cls, name):
    """``cls.name`` as defined (not a recording wrapper installed while tracing)."""
    from .module_tracer import original
    for klass in cls.__mro__:
        if name in vars(klass):
            return original(getattr(klass, "__tm_orig_" + name, None) or vars(klass)[name])
    return original(getattr(cls, name))


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

    def __getstate__(self):
        d = super().__getstate__()
        from .serialization import _opdef_state
        state = _opdef_state(self.opdef)
        if state is not None:
            d.pop("opdef")
            d["opdef_state"] = state
        return d

    def __setstate__(self, state):
        self.__dict__.update(state)
        if "opdef_state" in state:
            from .serialization import _opdef_from_state
            self.opdef = _opdef_from_state(state["opdef_state"])

    def interpret(self, *inputs):
        from mge.core.ops import builtin
        if isinstance(self.opdef, builtin.BuiltinOp):
            return list(builtin.apply(self.opdef, *inputs))
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
        elif not kw and hasattr(value, "shape"):
            from .module_tracer import _tensor_meta
            kw = _tensor_meta(value)
        self.add_outputs([out_type(self, name=name or "const", graph=graph, **kw)])

    def interpret(self, *inputs):
        return [self.value]

    @classmethod
    def make(cls, value, name=None, **kw):
        """A Constant of ``value`` in the graph being recorded (inside ``insert_exprs()``);
        returns its output node."""
        from .module_tracer import active_scope
        scope = active_scope()
        graph = scope.graph if scope is not None else None
        if not kw and hasattr(value, "shape"):
            from .module_tracer import _tensor_meta
            kw = _tensor_meta(value)
        expr = cls(value, name=name, graph=graph, **kw)
        if scope is not None:
            scope.add_expr(expr)
        return expr.outputs[0]

    def __repr__(self):
        v = self.value
        desc = f"Tensor(shape={tuple(v.shape)}, dtype={v.dtype})" if hasattr(v, "shape") else repr(v)
        return f"%{self._id}:\t{self.outputs[0]} = Constant({desc})"


builtins  # noqa: B018 (kept for eval of printed graphs)
