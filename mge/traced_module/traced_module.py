"""``InternalGraph`` (a module's recorded forward), ``TracedModule`` and ``trace_module``."""
import contextlib
import inspect

from mge.module import Module

from . import module_tracer as mt
from .expr import Apply, CallFunction, CallMethod, Expr, GetAttr, Input, _get_path
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten

__all__ = ["InternalGraph", "TracedModule", "TracedModuleBuilder", "trace_module", "NodeFilter",
           "ExprFilter"]


class _Namespace:
    def __init__(self):
        self.used_names = set()

    def create_unique_name(self, name):
        base, i = name, 1
        while name in self.used_names:
            name = f"{base}_{i}"
            i += 1
        self.used_names.add(name)
        return name


class _Filter:
    def __init__(self, items):
        self._items = list(items)

    def __iter__(self):
        return iter(self._items)

    def as_list(self):
        """All matches as a list."""
        return list(self._items)

    def as_unique(self):
        """The only match (``AssertionError`` if there are none or several)."""
        assert len(self._items) == 1, f"expected one match, found {len(self._items)}"
        return self._items[0]

    def as_dict(self):
        """Matches by id."""
        return {x._id: x for x in self._items}


class NodeFilter(_Filter):
    """A list of nodes with ``as_list``/``as_unique``/``as_dict``."""


class ExprFilter(_Filter):
    """A list of expressions with ``as_list``/``as_unique``/``as_dict``."""


class InternalGraph:
    """The recorded forward of one module: ``inputs`` (``self`` first), ``_exprs``, ``outputs``."""

    def __init__(self, name, qualname=None):
        self._name = name
        self._qualname = qualname or name
        self._namespace = _Namespace()
        # [next node id, next expr id], shared by all graphs of one trace (ids are unique in
        # the whole TracedModule, as MegEngine's)
        self._total_ids = mt._state.ids if mt._state.ids is not None else [0, 0]
        self._inputs = []
        self._outputs = []
        self._exprs = []
        self._out_def = None
        self._arg_def = None

    @property
    def name(self):
        """The graph's name (the class name of its module by default)."""
        return self._name

    @name.setter
    def name(self, v):
        self._name = v

    @property
    def qualname(self):
        """Dotted path of the graph's module."""
        return self._qualname

    @property
    def inputs(self):
        """Input nodes: ``self`` then the tensor arguments."""
        return self._inputs

    @property
    def outputs(self):
        """Output nodes."""
        return self._outputs

    @property
    def top_graph(self):
        return None

    def exprs(self, recursive=True):
        """The expressions (of sub-graphs too when ``recursive``), as an :class:`ExprFilter`."""
        return ExprFilter(self._all_exprs(recursive))

    def _all_exprs(self, recursive, visited=None):
        # the Input expressions first, then the expressions; a called TracedModule's graph
        # follows its call (each graph once)
        visited = set() if visited is None else visited
        visited.add(id(self))
        seen_inputs = set()
        for n in self._inputs:
            if id(n) not in seen_inputs and n.expr is not None:
                seen_inputs.add(id(n))
                yield n.expr
        for e in self._exprs:
            yield e
            if recursive and isinstance(e, CallMethod) and e.method == "__call__":
                owner = getattr(e.inputs[0], "owner", None)
                for g in getattr(owner, "argdef_graph_map", {}).values():
                    if id(g) not in visited:
                        yield from g._all_exprs(True, visited)

    def nodes(self, recursive=True):
        """Every node (inputs and expression outputs), as a :class:`NodeFilter`."""
        seen, out = set(), []
        for n in [o for e in self._all_exprs(recursive) for o in e.outputs]:
            if id(n) not in seen:
                seen.add(id(n))
                out.append(n)
        return NodeFilter(out)

    def get_function_by_type(self, func=None, recursive=True):
        """``CallFunction`` expressions of ``func``."""
        f = mt.original(func)
        return ExprFilter(e for e in self._all_exprs(recursive)
                          if isinstance(e, CallFunction) and (f is None or e.func is f))

    def get_method_by_type(self, method=None, recursive=True):
        """``CallMethod`` expressions of ``method`` (a name such as ``"__add__"``)."""
        return ExprFilter(e for e in self._all_exprs(recursive)
                          if isinstance(e, CallMethod) and (method is None or e.method == method))

    def get_module_by_type(self, module_cls, recursive=True):
        """``ModuleNode``s of modules of class ``module_cls``."""
        return NodeFilter(n for n in self.nodes(recursive)
                          if isinstance(n, ModuleNode) and n.module_type is not None
                          and issubclass(n.module_type, module_cls))

    def get_expr_by_id(self, expr_id=None, recursive=True):
        """Expressions whose ``_id`` is ``expr_id`` (or in it, a list)."""
        ids = expr_id if isinstance(expr_id, (list, tuple)) else [expr_id]
        return ExprFilter(e for e in self._all_exprs(recursive) if e._id in ids)

    def get_node_by_id(self, node_id=None, recursive=True):
        """Nodes whose ``_id`` is ``node_id`` (or in it, a list)."""
        ids = node_id if isinstance(node_id, (list, tuple)) else [node_id]
        return NodeFilter(n for n in self.nodes(recursive) if n._id in ids)

    def get_node_by_name(self, name=None, ignorecase=True, recursive=True):
        """Nodes whose qualified name (``graph name`` + ``_`` + node name) is ``name``."""
        import fnmatch
        def match(n):
            g = n.top_graph
            q = f"{g._name}_{n._name}" if g is not None else str(n._name)
            return fnmatch.fnmatch(q.lower(), name.lower()) if ignorecase else \
                fnmatch.fnmatchcase(q, name)
        return NodeFilter(n for n in self.nodes(recursive) if match(n))

    # -- modification ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def insert_exprs(self, expr=None):
        """Record new expressions written with this graph's nodes; they are inserted after the
        last producer of the nodes they use (or after ``expr``)."""
        owner = self._inputs[0].owner
        scope = mt.Scope(self, owner, self._inputs[0], insert=True)
        # module nodes that may be reused: those defined before the insertion point (a later
        # one would move the inserted expressions after their intended place)
        visible = self._exprs if expr is None or expr not in self._exprs else \
            self._exprs[:self._exprs.index(expr) + 1]
        for e in [None] + visible:
            for n in (self._inputs if e is None else e.outputs):
                if isinstance(n, ModuleNode) and n.owner is not None:
                    scope.modules.setdefault(id(n.owner), (n.owner, n))
        mt._state.scopes.append(scope)
        try:
            with mt.patched():
                yield self
        finally:
            mt._state.scopes.remove(scope)
            mt._state.keep.clear()
        pos = self._exprs.index(expr) + 1 if expr is not None else 0
        new = set(id(e) for e in scope.pending)
        for e in scope.pending:
            for n in e.inputs:
                if n.expr is not None and id(n.expr) not in new and n.expr in self._exprs:
                    pos = max(pos, self._exprs.index(n.expr) + 1)
        self._exprs[pos:pos] = scope.pending
        for n in scope.nodes_values() if hasattr(scope, "nodes_values") else ():
            n.value = None

    def replace_node(self, repl):
        """Make users of each ``old`` node (after ``new``'s producer) use ``new``: ``{old: new}``."""
        for old, new in repl.items():
            start = 0
            if new.expr is not None and new.expr in self._exprs:
                start = self._exprs.index(new.expr) + 1
            for e in self._exprs[start:]:
                if old in e.inputs:
                    e.replace_inputs({old: new})
            self._outputs = [new if o is old else o for o in self._outputs]

    def compile(self):
        """Remove expressions and nodes whose results are not used by the outputs."""
        live = set(id(n) for n in self._outputs)
        keep = []
        for e in reversed(self._exprs):
            if any(id(o) in live for o in e.outputs) or e._disable_remove:
                keep.append(e)
                live.update(id(n) for n in e.inputs)
            else:
                for n in e.inputs:
                    if e in n.users:
                        n.users.remove(e)
                for o in e.outputs:  # a removed node's name is free again
                    self._namespace.used_names.discard(o._name)
        self._exprs = list(reversed(keep))
        return self

    def _adopt_new_exprs(self):
        """After loaders ran: expressions they made for inputs go before their users; users
        lists, producers and names of new nodes are made consistent."""
        ind = 0
        while ind < len(self._exprs):
            expr = self._exprs[ind]
            inserted = False
            for n in expr.inputs:
                if n.expr is not None and n.expr not in self._exprs and \
                        not isinstance(n.expr, Input):
                    self._exprs.insert(ind, n.expr)
                    inserted = True
            if not inserted:
                ind += 1
        for expr in self._exprs:
            expr._top_graph = self
            for n in expr.inputs:
                have, want = n.users.count(expr), expr.inputs.count(n)
                if want > have:
                    n.users.extend([expr] * (want - have))
                for _ in range(have - want):
                    n.users.remove(expr)
            for o in expr.outputs:
                o.expr = expr
        for n in self.nodes(False):
            n.users = [e for e in n.users if n in e.inputs]
        for expr in self._exprs:
            for o in expr.outputs:
                if o._top_graph is not self or o._name is None or \
                        o._name not in self._namespace.used_names:
                    o._top_graph = self
                    base = o._name or _default_out_name(expr)
                    o._name = self._namespace.create_unique_name(base)
                if not o._qualname or o._qualname.startswith("."):
                    o._qualname = ""
                    from .expr import _make_qualname
                    o._qualname = _make_qualname(expr, o)

    def _reset_ids(self):
        """Number the expressions and nodes (of sub-graphs too) 0, 1, ... in iteration order."""
        e_id = n_id = -1
        for e_id, expr in enumerate(self.exprs()):
            expr._id = e_id
        for n_id, node in enumerate(self.nodes()):
            node._id = n_id
        self._total_ids[:] = [n_id + 1, e_id + 1]

    def add_input_node(self, shape, dtype="float32", name="args"):
        """Append a tensor input (``shape``, ``dtype``) to the graph and return its node."""
        e = Input(TensorNode, name=name, graph=self, shape=shape, dtype=dtype)
        self._inputs.append(e.outputs[0])
        owner = self._inputs[0].owner
        if owner is not None and getattr(owner, "_forward_sig", None) is not None:
            owner._extra_inputs = getattr(owner, "_extra_inputs", 0) + 1
        return e.outputs[0]

    def add_output_node(self, node):
        """Append ``node`` to the outputs (the module then returns a tuple)."""
        self._outputs.append(node)
        outs = [None] * len(self._outputs)
        self._out_def = tree_flatten(tuple(outs))[1]

    def reset_outputs(self, outputs):
        """Set the outputs to ``outputs``, a structure of nodes (tuples, lists, dicts)."""
        leaves, self._out_def = tree_flatten(outputs, is_leaf=lambda x: isinstance(x, Node))
        self._outputs = list(leaves)

    def interpret(self, *inputs):
        """Run the graph on values for its inputs (``self`` first); returns the output list."""
        env = {}
        for n, v in zip(self._inputs, inputs):
            env[id(n)] = v
        for e in self._exprs:
            vals = [env[id(n)] for n in e.inputs]
            outs = e.interpret(*vals)
            from mge.tensor import Tensor
            outs = [o for o in outs if isinstance(o, (Tensor, Module))] \
                if not isinstance(e, GetAttr) and len(outs) != len(e.outputs) else outs
            for n, v in zip(e.outputs, outs):
                env[id(n)] = v
        return [env[id(n)] for n in self._outputs]

    def __repr__(self):
        return self.__format__("")

    def __format__(self, spec):
        ins = ", ".join(str(n) for n in self._inputs)
        lines = [f"{self._name}.Graph ({ins}) {{"]
        for e in self._exprs:
            lines.append("\t" + repr(e))
        lines.append(f"\treturn {', '.join(str(o) for o in self._outputs)}")
        lines.append("}")
        return "\n".join(lines)


def _default_out_name(expr):
    from .expr import Apply, Constant
    if isinstance(expr, Constant):
        return "const"
    if isinstance(expr, CallFunction):
        return getattr(expr.func, "__name__", "func").strip("_") + "_out"
    if isinstance(expr, CallMethod):
        return expr.method.strip("_") + "_out"
    if isinstance(expr, Apply):
        return type(expr.opdef).__name__.lower() + "_out"
    return "node"


def _signature(mod):
    sig = getattr(mod, "_forward_sig", None)
    return sig if sig is not None else inspect.signature(type(mod).forward)


def _normalize(sig, mod, args, kwargs):
    """``(names, values)`` of the forward arguments after ``self``, defaults applied."""
    bound = sig.bind(mod, *args, **kwargs)
    bound.apply_defaults()
    names, values = [], []
    for i, (k, v) in enumerate(bound.arguments.items()):
        if i == 0:
            continue
        p = sig.parameters[k]
        if p.kind == p.VAR_POSITIONAL:
            for j, x in enumerate(v):
                names.append(f"{k}_{j}")
                values.append(x)
        elif p.kind == p.VAR_KEYWORD:
            for kk, x in v.items():
                names.append(kk)
                values.append(x)
        else:
            names.append(k)
            values.append(v)
    return names, values


class _Traced:
    def __init__(self, mod, sig):
        self.mod = mod
        self.sig = sig
        self.graphs = {}
        self.converted = None


def trace_user_module(mod, args, kwargs, orig_call, qualname=None):
    """Trace ``mod``'s forward into a new graph (inside a recording); returns its outputs."""
    from mge.module.qat.module import QATModule
    from mge.tensor import Tensor
    st = mt._state
    if isinstance(mod, QATModule):
        with mt.paused():
            mt.check_qat_module(mod)
    sig = _signature(mod)
    names, values = _normalize(sig, mod, args, kwargs)
    if isinstance(mod, TracedModule) and mod.argdef_graph_map:
        g0 = next(iter(mod.argdef_graph_map.values()))
        gnames = [n.name for n in g0.inputs[1:]]
        names = gnames + names[len(gnames):]
    leaves, argdef = tree_flatten(tuple(values))
    tr = st.traced.get(id(mod))
    if tr is None:
        tr = st.traced[id(mod)] = _Traced(mod, sig)
    graph = InternalGraph(type(mod).__name__ if not isinstance(mod, TracedModule)
                          else mod._graph_name, qualname or _top_qualname(mod))
    self_in = Input(ModuleNode, name="self", graph=graph, module_type=type(mod), owner=mod)
    graph._inputs.append(self_in.outputs[0])
    scope = mt.Scope(graph, mod, self_in.outputs[0])
    leaf_names = _leaf_names(names, values)
    for leaf, nm in zip(leaves, leaf_names):
        if isinstance(leaf, Tensor):
            if scope.tensors.get(id(leaf)):
                continue
            e = Input(TensorNode, name=nm, graph=graph, **mt._tensor_meta(leaf))
            graph._inputs.append(e.outputs[0])
            scope.bind(leaf, e.outputs[0])
    graph._arg_def = argdef
    st.scopes.append(scope)
    saved = []
    paused_before, st.paused = st.paused, 0
    try:
        for k, v in list(vars(mod).items()):
            if callable(v) and not isinstance(v, Module) and mt.wrapped(v) is not v:
                saved.append((k, v))
                object.__setattr__(mod, k, mt.wrapped(v))
        out = orig_call(mod, *args, **kwargs)
        outs, odef = tree_flatten(out)
        graph._outputs = [scope.node_of(o) for o in outs if isinstance(o, Tensor)]
        graph._out_def = odef
        for t, n in list(scope.tensors.values()):
            tn = getattr(t, "name", None)
            if isinstance(tn, str) and tn and tn != n._name and \
                    tn not in graph._namespace.used_names:
                n.name = tn
    finally:
        for k, v in saved:
            object.__setattr__(mod, k, v)
        st.scopes.pop()
        st.paused = paused_before
    tr.graphs.setdefault(argdef, graph)
    return out


def _top_qualname(mod):
    if isinstance(mod, TracedModule) and mod.graph is not None:
        return mod.graph._qualname
    return getattr(mod, "_name", None) or type(mod).__name__


def _leaf_names(names, values):
    out = []
    for nm, v in zip(names, values):
        lv, _ = tree_flatten(v)
        out += [nm] if len(lv) == 1 else [f"{nm}_{i}" for i in range(len(lv))]
    return out


def _convert(obj, memo):
    """The traced counterpart of ``obj`` (modules traced become TracedModules; containers too)."""
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, Module):
        tr = mt._state.traced.get(id(obj))
        if tr is None:
            memo[id(obj)] = obj
            return obj
        tm = TracedModule.__new__(TracedModule)
        memo[id(obj)] = tm
        Module.__init__(tm)
        used = _used_attributes(tr.graphs.values())
        used_ids = {id(vars(obj)[k]) for k in used if k in vars(obj)}
        drop = memo.get("drop_unused", False)
        for k, v in vars(obj).items():
            if k in ("_forward_pre_hooks", "_forward_hooks", "argdef_graph_map",
                     "argdef_outdef_map"):
                continue
            # as MegEngine's trace_module: tensors and modules the forward never touched are
            # left out (another name of a used one stays)
            if drop and k not in used and id(v) not in used_ids and _only_state(v):
                continue
            tm.__dict__[k] = _convert(v, memo)
        tm.argdef_graph_map = dict(tr.graphs)
        tm.argdef_outdef_map = {k: g._out_def for k, g in tr.graphs.items()}
        tm._forward_sig = tr.sig
        tm._graph_name = obj._graph_name if isinstance(obj, TracedModule) else type(obj).__name__
        tm.argspec = None
        tm._is_top = False
        from mge.module.qat.module import QATModule
        tm.is_qat = isinstance(obj, QATModule) or bool(getattr(obj, "is_qat", False))
        for g in tm.argdef_graph_map.values():
            g._inputs[0]._owner = tm
            g._inputs[0].module_type = TracedModule
        return tm
    if isinstance(obj, (list, dict)) and _all_modules(obj):
        return _container_module(obj, memo)
    if isinstance(obj, list):
        return [_convert(v, memo) for v in obj]
    if isinstance(obj, tuple) and not hasattr(type(obj), "_fields"):
        return tuple(_convert(v, memo) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((k, _convert(v, memo)) for k, v in obj.items())
    return obj


def _used_attributes(graphs):
    """The attribute names (first path parts) the graphs read from their ``self``."""
    used = set()
    for g in graphs:
        self_node = g._inputs[0] if g._inputs else None
        for e in g._exprs:
            if isinstance(e, GetAttr) and e.inputs and e.inputs[0] is self_node:
                used.add(e.name.split(".")[0])
    return used


def _only_state(v):
    """A tensor or module, or a non-empty container of only those."""
    from mge.tensor import Tensor
    if isinstance(v, (Tensor, Module)):
        return True
    if isinstance(v, (list, tuple, dict)):
        items = list(v.values()) if isinstance(v, dict) else list(v)
        return bool(items) and all(_only_state(x) for x in items)
    return False


def _all_modules(obj):
    """Whether ``obj`` is a non-empty list/dict whose leaves (through nested lists and dicts)
    are all modules."""
    if isinstance(obj, Module):
        return True
    if isinstance(obj, (list, dict)):
        items = list(obj.values()) if isinstance(obj, dict) else obj
        return bool(items) and all(_all_modules(v) for v in items)
    return False


def _container_module(obj, memo):
    """A list or dict of modules in a traced module becomes a graph-less TracedModule with an
    attribute per item (``"0"``, ``"1"``... or the keys), as MegEngine's module containers are
    built: the recorded ``GetAttr`` paths (``"blocks.0"``) reach the items through it."""
    tm = TracedModule.__new__(TracedModule)
    memo[id(obj)] = tm
    TracedModule.__init__(tm)
    tm._graph_name = "ModuleDict" if isinstance(obj, dict) else "ModuleList"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        tm.__dict__[str(k)] = _convert(v, memo)
    return tm


def _fix_owners(tm, seen=None):
    seen = seen if seen is not None else set()
    if id(tm) in seen:
        return
    seen.add(id(tm))
    for g in getattr(tm, "argdef_graph_map", {}).values():
        for e in g._exprs:
            if isinstance(e, GetAttr) and isinstance(e.outputs[0], ModuleNode):
                src = e.inputs[0].owner
                try:
                    m = _get_path(src, e.name)
                except (AttributeError, IndexError, KeyError):
                    continue
                e.outputs[0]._owner = m
                e.outputs[0].module_type = type(m)
                if isinstance(m, TracedModule):
                    _fix_owners(m, seen)


class TracedModule(Module):
    """A module whose forward is a recorded graph (one per argument structure).

    ``graph`` is the :class:`InternalGraph` of the (first) recorded call; calling the module
    interprets it.  Submodules that were user modules are TracedModules themselves.
    """

    def __init__(self, is_top=False, argdef_graph_map=None, argdef_outdef_map=None):
        super().__init__()
        self.argdef_graph_map = dict(argdef_graph_map or {})
        self.argdef_outdef_map = dict(argdef_outdef_map or {})
        self._is_top = is_top
        self.is_qat = False
        self.argspec = None
        self._forward_sig = None
        self._graph_name = "TracedModule"

    @property
    def graph(self):
        """The graph of the first recorded argument structure."""
        if not self.argdef_graph_map:
            return None
        return next(iter(self.argdef_graph_map.values()))

    def forward(self, *args, **kwargs):
        from mge.tensor import Tensor
        sig = self._forward_sig
        if sig is not None:
            extra = getattr(self, "_extra_inputs", 0)
            try:
                _, values = _normalize(sig, self, args[:len(args) - extra] if extra else args,
                                       kwargs)
                values = values + list(args[len(args) - extra:]) if extra else values
            except TypeError:
                values = list(args) + list(kwargs.values())
        else:
            values = list(args) + list(kwargs.values())
        leaves, argdef = tree_flatten(tuple(values))
        if not self.argdef_graph_map:
            raise RuntimeError(f"TracedModule({self._graph_name}) has no recorded graph (a "
                               "container of modules, or a module never called while tracing) "
                               "and cannot be called")
        graph = self.argdef_graph_map.get(argdef)
        if graph is None:
            graph = self.graph
            if getattr(self, "_extra_inputs", 0) == 0 and len(self.argdef_graph_map) > 1:
                raise ValueError(f"no graph recorded for arguments {argdef}")
        tensors = [x for x in leaves if isinstance(x, Tensor)]
        outs = graph.interpret(self, *tensors)
        odef = graph._out_def
        if odef is None or odef.num_leaves != len(outs):
            return outs[0] if len(outs) == 1 else tuple(outs)
        return odef.unflatten(outs)

    def flatten(self):
        """A copy with every TracedModule submodule's graph inlined into one top graph."""
        from .flatten import flatten_module
        return flatten_module(self)

    def __getstate__(self):
        d = dict(self.__dict__)
        return d

    def __setstate__(self, state):
        self.__dict__.update(state)
        from . import compat  # noqa: F401 (registers the upgrade loaders)
        from . import serialization as S
        for graph in self.argdef_graph_map.values():
            for expr in list(graph._exprs):
                if isinstance(expr, CallFunction):
                    S.load_functional(expr)
                elif isinstance(expr, CallMethod):
                    if expr.method == "__call__":
                        S.load_call_module_expr(expr)
                    else:
                        S.load_call_tensor_method_expr(expr)
                elif isinstance(expr, Apply):
                    S.load_apply_expr(expr)
        for graph in self.argdef_graph_map.values():
            graph._adopt_new_exprs()
        if self.graph is not None:
            self.graph._reset_ids()

    def __repr__(self):
        return f"TracedModule({self._graph_name})"


class TracedModuleBuilder:
    """MegEngine's tracing helper class; in mge, tracing records through patches instead
    (use :func:`trace_module`)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "TracedModuleBuilder: mge records a forward with patched functions; use trace_module")


def _finish_inserted_module(node):
    """After a ModuleNode call in insert mode: a traced user module replaces the attribute."""
    mod = node.owner
    if id(mod) not in mt._state.traced:
        return
    tm = _convert(mod, {})
    expr = node.expr
    parent = getattr(expr, "_parent_owner", None)
    if isinstance(expr, GetAttr) and parent is not None:
        from .utils import assign_attr
        assign_attr(tm, parent, expr.name)
    node._owner = tm
    node.module_type = TracedModule
    _fix_owners(tm)
    mt._state.traced.pop(id(mod), None)


def trace_module(mod, *args, **kwargs):
    """Trace ``mod(*args, **kwargs)`` and return the :class:`TracedModule` that replays it."""
    assert isinstance(mod, Module), "trace_module expects a Module"
    st = mt._state
    if st.scopes:
        raise RuntimeError("trace_module cannot be nested in another trace")
    from .expr import Input as _I  # noqa: F401
    st.traced = {}
    st.ids = [0, 0]
    root = mt.Scope(InternalGraph("root"), Module.__new__(_Root), None)
    st.scopes.append(root)
    try:
        with mt.patched():
            orig = Module.__call__.__wrapped_tm__
            real = trace_user_module(mod, args, kwargs, orig)
            tm = _convert(mod, {"drop_unused": True})
    finally:
        st.scopes.clear()
        st.keep.clear()
        st.traced = {}
        st.ids = None
    tm._is_top = True
    sig = tm._forward_sig
    try:
        tm.argspec = inspect.getfullargspec(type(mod).forward) if not isinstance(mod, TracedModule) \
            else mod.argspec
    except TypeError:
        tm.argspec = None
    tm._forward_sig = sig
    _fix_owners(tm)
    if CHECK_EXPRS:
        _check_replay(mod, tm, args, kwargs, real)
    return tm


#: ``enable_expr_checker()`` sets it: each ``trace_module`` then replays its graph on the traced
#: inputs and checks the results against the module's own (the module's state is put back).
CHECK_EXPRS = False


def _check_replay(mod, tm, args, kwargs, real):
    import numpy as np

    from mge.tensor import Tensor
    state = [(t, t.numpy()) for t in _state_tensors(mod)]
    try:
        got = tm(*args, **kwargs)
    finally:
        for t, value in state:  # (a BatchNorm in training mode updated its statistics)
            t._reset(Tensor(value, dtype=t.dtype, device=t.device))
    want_leaves, _ = tree_flatten(real)
    got_leaves, _ = tree_flatten(got)
    if len(want_leaves) != len(got_leaves):
        raise AssertionError(f"expr checker: the traced graph of {type(mod).__name__} gives "
                             f"{len(got_leaves)} outputs where the module gives {len(want_leaves)}")
    for i, (w, g) in enumerate(zip(want_leaves, got_leaves)):
        if isinstance(w, Tensor) and isinstance(g, Tensor):
            w, g = w.numpy(), g.numpy()
            if w.shape != g.shape or not np.allclose(w, g, rtol=1e-5, atol=1e-6, equal_nan=True):
                raise AssertionError(f"expr checker: output {i} of the traced graph of "
                                     f"{type(mod).__name__} differs from the module's "
                                     f"(shapes {g.shape} and {w.shape})")


def _state_tensors(mod):
    seen, out = set(), []
    for m in Module.modules(mod):  # (a module may have an attribute named "modules")
        for v in vars(m).values():
            from mge.tensor import Tensor
            if isinstance(v, Tensor) and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


class _Root(Module):
    def forward(self):
        pass
