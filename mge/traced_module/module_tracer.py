"""Recording: while a module is traced (or exprs are inserted into a graph), ``mge.functional``
functions, ``Module.__call__``, Tensor methods and raw ``apply`` calls become expressions.

The patches are Python-level names only and are always restored (``patched()`` is a context
manager); raw ops are seen by a transformation on the stack's ``module_trace`` segment.
"""
import contextlib
import functools
import inspect
import sys

import numpy as np

from .expr import Apply, CallFunction, CallMethod, Constant, GetAttr
from .node import ModuleNode, Node, TensorNode
from .pytree import tree_flatten

__all__ = ["register_as_builtin", "wrap", "is_tracing", "active_scope"]

_BUILTIN_FUNCS = set()   # ids of extra functions recorded as CallFunction (``wrap``)
_BUILTIN_MODULE_TYPES = set()
_wrapped_funcs = {}      # id(original) -> wrapper
_originals = {}          # id(wrapper) -> original

# (``__del__``: a finalizer the garbage collector runs in the middle of a recording is no call
# of the traced code)
_NO_PATCH = {
    "__init__", "__new__", "__del__", "__repr__", "__str__", "__hash__", "__bool__", "__len__",
    "__iter__",
    "__array__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__format__",
    "__index__", "__int__", "__float__", "__complex__", "__copy__", "__deepcopy__", "__dlpack__",
    "__array_priority__", "__class__", "__init_subclass__", "__subclasshook__", "__sizeof__",
    "__dir__", "__getattribute__", "__setattr__", "__delattr__", "__reversed__", "__contains__",
    "numpy", "item", "tolist", "_reset", "set_value", "detach", "__array_ufunc__",
    "__array_function__", "__dlpack_device__", "__nonzero__", "__eq__", "__ne__",
}


class _State:
    def __init__(self):
        self.scopes = []
        self.paused = 0
        self.traced = {}       # id(module) -> _Traced (recorded graphs of a user module)
        self.keep = []
        self.ids = None        # the id counters shared by the graphs of the running trace

    @property
    def recording(self):
        return bool(self.scopes) and self.paused == 0


_state = _State()


def is_tracing():
    """Whether a ``trace_module`` (or ``insert_exprs``) is recording now."""
    return bool(_state.scopes)


def active_scope():
    """The innermost recording scope, or ``None``."""
    return _state.scopes[-1] if _state.scopes else None


@contextlib.contextmanager
def paused():
    _state.paused += 1
    try:
        yield
    finally:
        _state.paused -= 1


def _walk_paths(obj, prefix, out, seen):
    from mge.module import Module
    from mge.tensor import Tensor
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Module):
        items = [(k, v) for k, v in vars(obj).items()
                 if k not in ("_forward_pre_hooks", "_forward_hooks", "_modules", "argdef_graph_map",
                              "argdef_outdef_map", "_forward_sig")]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items()]
    else:
        return
    for k, v in items:
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, (Tensor, Module)):
            out.setdefault(id(v), path)
        if isinstance(v, (Module, list, tuple, dict)):
            _walk_paths(v, path, out, seen)


class Scope:
    """What one graph under construction knows: which node stands for which tensor/module."""

    def __init__(self, graph, module, self_node, insert=False):
        self.graph = graph
        self.module = module
        self.self_node = self_node
        self.insert = insert
        self.tensors = {}   # id(tensor) -> (tensor, node)
        self.modules = {id(module): (module, self_node)}
        self.nodes = {}     # id(node) -> tensor (insert mode placeholders)
        self._paths = None
        self.pending = []

    def add_expr(self, expr):
        if self.insert:
            self.pending.append(expr)
        else:
            self.graph._exprs.append(expr)

    def bind(self, t, node):
        self.tensors[id(t)] = (t, node)
        self.nodes[id(node)] = t
        _state.keep.append(t)

    def path_of(self, obj):
        if self._paths is None:
            self._paths = {}
            _walk_paths(self.module, "", self._paths, set())
        return self._paths.get(id(obj))

    def node_of(self, t):
        e = self.tensors.get(id(t))
        if e is not None and e[0] is t:
            return e[1]
        path = self.path_of(t)
        kw = _tensor_meta(t)
        if path is not None:
            expr = GetAttr(self.self_node, path, TensorNode, graph=self.graph, **kw)
        else:
            expr = Constant(t, graph=self.graph, **kw)
        self.add_expr(expr)
        self.bind(t, expr.outputs[0])
        return expr.outputs[0]

    def module_node(self, m):
        e = self.modules.get(id(m))
        if e is not None:
            return e[1]
        path = self.path_of(m)
        if path is None:
            expr = Constant(m, graph=self.graph)
        else:
            expr = GetAttr(self.self_node, path, ModuleNode, graph=self.graph,
                           module_type=type(m), owner=m)
        self.add_expr(expr)
        self.modules[id(m)] = (m, expr.outputs[0])
        return expr.outputs[0]

    def tensor_of(self, node):
        t = self.nodes.get(id(node))
        if t is None:
            if node.shape is None:
                raise ValueError(f"node {node} has no recorded shape to stand in for it")
            from mge.tensor import Tensor
            # (ones: a placeholder divided by or logged gives no warnings)
            t = Tensor(np.ones(node.shape, dtype=node.dtype or "float32"))
            self.bind(t, node)
        return t


def _tensor_meta(t):
    try:
        return {"shape": tuple(t.shape), "dtype": t.dtype}
    except Exception:  # noqa: BLE001 - shape may be unknown
        return {}


def _out_name(base):
    return base.strip("_").replace(".", "_") + "_out" if base else "out"


def _record(expr, fn, args, kwargs, out_base, self_node=None):
    """Record ``expr`` for ``fn(*args, **kwargs)`` in the innermost scope and run it."""
    from mge.tensor import Tensor
    scope = _state.scopes[-1]
    leaves, tdef = tree_flatten((args, kwargs))
    conv = []
    for i, v in enumerate(leaves):
        if self_node is not None and i == 0:
            conv.append(self_node)
        elif isinstance(v, Tensor):
            conv.append(scope.node_of(v))
        else:
            conv.append(v)
    cargs, ckwargs = tdef.unflatten(conv)
    expr.add_inputs(cargs, ckwargs)
    with paused():
        out = fn(*args, **kwargs)
    result = args[0] if getattr(expr, "method", None) == "__setitem__" else out
    outs, odef = tree_flatten(result)
    nodes = []
    for o in outs:
        if isinstance(o, Tensor):
            n = TensorNode(expr, name=_out_name(out_base), graph=scope.graph, **_tensor_meta(o))
            scope.bind(o, n)
            nodes.append(n)
    expr.add_outputs(nodes)
    expr.out_def = odef
    scope.add_expr(expr)
    return out


def _nodes_to_tensors(args, kwargs):
    scope = _state.scopes[-1]
    leaves, tdef = tree_flatten((args, kwargs))
    found = False
    conv = []
    for v in leaves:
        if isinstance(v, TensorNode):
            found = True
            conv.append(scope.tensor_of(v))
        else:
            conv.append(v)
    a, k = tdef.unflatten(conv)
    return found, a, k


def _tensors_to_nodes(out):
    from mge.tensor import Tensor
    scope = _state.scopes[-1]
    leaves, tdef = tree_flatten(out)
    conv = [scope.node_of(v) if isinstance(v, Tensor) else v for v in leaves]
    return tdef.unflatten(conv)


def _func_wrapper(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _state.scopes:
            return fn(*args, **kwargs)
        if _state.paused:
            return fn(*args, **kwargs)
        has_node, args, kwargs = _nodes_to_tensors(args, kwargs)
        out = _record(CallFunction(fn, graph=_state.scopes[-1].graph), fn, args, kwargs,
                      fn.__name__)
        return _tensors_to_nodes(out) if has_node else out
    wrapper.__wrapped_tm__ = fn
    return wrapper


def _method_wrapper(name, fn):
    def wrapper(*args, **kwargs):
        if not _state.recording:
            return fn(*args, **kwargs)
        has_node, args, kwargs = _nodes_to_tensors(args, kwargs)
        out = _record(CallMethod(None, name, graph=_state.scopes[-1].graph), fn, args, kwargs,
                      name)
        return _tensors_to_nodes(out) if has_node else out
    wrapper.__name__ = name
    return wrapper


class _TracedShape(tuple):
    """``Tensor.shape`` while recording: a plain tuple of ints that remembers its tensor, so
    that turning it into a tensor (``Tensor(x.shape)``, an op applied to it) records a
    ``GetVarShape`` of that tensor (the shape follows the input when the graph is replayed)."""

    def __new__(cls, shape, tensor):
        obj = super().__new__(cls, shape)
        obj._tensor = tensor
        return obj


# recorded arguments hold it as the plain tuple it is
from .pytree import register_supported_type as _register  # noqa: E402
_register(_TracedShape, lambda x: (list(x), None), lambda c, a: tuple(c))


def _shape_property(orig):
    def fget(self):
        shape = orig.fget(self)
        if _state.recording:
            return _TracedShape(shape, self)
        return shape
    return property(fget, doc=orig.__doc__)


def _record_shape_of(shape):
    """The tensor (and its node) of a ``GetVarShape`` of ``shape``'s tensor."""
    from mge.core.ops import builtin
    op = builtin.GetVarShape()
    expr = Apply(op, graph=_state.scopes[-1].graph)
    return _record(expr, lambda t: tuple(builtin.apply(op, t)), (shape._tensor,), {},
                   "getvarshape")[0]


def _builtin_op_applies():
    from mge.core.ops import builtin
    out = []
    for name in builtin.__all__:
        cls = getattr(builtin, name, None)
        if isinstance(cls, type) and issubclass(cls, builtin.BuiltinOp) and \
                "_apply" in vars(cls):
            out.append((cls, vars(cls)["_apply"]))
    return out


def _opdef_apply_wrapper(fn):
    """``apply(opdef, ...)`` of one of MegEngine's op classes is one ``Apply`` of that op (not
    the mge ops it is made of)."""
    def _apply(self, inputs):
        if not _state.recording:
            return fn(self, inputs)
        from mge.tensor import Tensor
        conv = []
        for x in inputs:
            if isinstance(x, _TracedShape):
                x = _record_shape_of(x)
            elif not isinstance(x, Tensor):
                x = Tensor(x)
            conv.append(x)
        expr = Apply(self, graph=_state.scopes[-1].graph)
        out = _record(expr, lambda *xs: tuple(fn(self, list(xs))), tuple(conv), {},
                      type(self).__name__.lower())
        return list(out)
    _apply.__wrapped_tm__ = fn
    return _apply


def _tensor_init_wrapper(orig_init):
    """``Tensor(...)`` of values that hold tensors is recorded (a ``CallFunction`` of the
    class), so each run makes a new tensor from its inputs; of plain data it is a constant."""
    def __init__(self, *args, **kwargs):
        if not _state.recording:
            return orig_init(self, *args, **kwargs)
        from mge.tensor import Tensor
        leaves, _ = tree_flatten((args, kwargs))
        if len(args) >= 1 and isinstance(args[0], _TracedShape):
            src = _record_shape_of(args[0])
            args = (src,) + tuple(args[1:])
            leaves = [src]
        if not any(isinstance(v, (Tensor, TensorNode)) for v in leaves):
            with paused():
                return orig_init(self, *args, **kwargs)
        _, args, kwargs = _nodes_to_tensors(args, kwargs)

        def make(*a, **k):
            orig_init(self, *a, **k)
            return self
        _record(CallFunction(type(self), graph=_state.scopes[-1].graph), make, args, kwargs,
                "new")
    __init__.__wrapped_tm__ = orig_init
    return __init__


def _is_builtin_module(m):
    from mge.module import Module
    t = type(m)
    if id(t) in _BUILTIN_MODULE_TYPES:
        return True
    if getattr(t, "argdef_graph_map", None) is not None or hasattr(m, "argdef_graph_map"):
        return False
    mod = t.__module__ or ""
    from mge.module import Sequential
    if mod.startswith(_BUILTIN_MODULE_PREFIXES) and t not in (Module, Sequential):
        return True
    # observers and fake quantizers are opaque even when user-defined (a QAT module being
    # traced has its user-defined ones swapped for a fixed-qparams FakeQuantize first)
    from mge.quantization.fake_quant import _FakeQuantize
    from mge.quantization.observer import Observer
    return isinstance(m, (Observer, _FakeQuantize))


_BUILTIN_MODULE_PREFIXES = ("mge.module", "megengine.module", "mge.quantization.",
                            "mge.traced_module.fake_quant")


def _is_registered_builtin(m):
    """Built-in by class (not by being an observer or fake quantizer)."""
    t = type(m)
    return id(t) in _BUILTIN_MODULE_TYPES or (
        (t.__module__ or "").startswith(_BUILTIN_MODULE_PREFIXES) and
        not hasattr(m, "argdef_graph_map"))


def check_qat_module(qat_module):
    """Swap a QAT module's user-defined observer / fake quantizer (which tracing cannot keep
    opaque) for a :class:`~mge.traced_module.fake_quant.FakeQuantize` holding the qparams it
    gives now (MegEngine does this in place too)."""
    from .fake_quant import FakeQuantize

    def builtin(m):
        return m is None or _is_registered_builtin(m)

    for kind in ("act", "weight"):
        if not getattr(qat_module, f"with_{kind}", False):
            continue
        obs = getattr(qat_module, f"{kind}_observer", None)
        fq = getattr(qat_module, f"{kind}_fake_quant", None)
        if builtin(obs) and builtin(fq):
            continue
        src = obs if hasattr(obs, "get_qparams") else fq
        dtype = obs.dtype if hasattr(obs, "dtype") else fq.dtype
        new = FakeQuantize(dtype)
        new.set_qparams(src.get_qparams())
        object.__setattr__(qat_module, f"{kind}_observer", None)
        object.__setattr__(qat_module, f"{kind}_fake_quant", new)


def _module_call_wrapper(orig_call):
    def __call__(self, *args, **kwargs):
        if not _state.recording:
            return orig_call(self, *args, **kwargs)
        scope = _state.scopes[-1]
        if getattr(_state, "inline", False) and scope.module is not self and \
                hasattr(self, "argdef_graph_map") and not getattr(self, "is_qat", False):
            return orig_call(self, *args, **kwargs)
        mnode = scope.module_node(self)
        base = mnode.name
        expr = CallMethod(mnode, "__call__", graph=scope.graph)
        if _is_builtin_module(self):
            from mge.module.qat.module import QATModule
            if isinstance(self, QATModule):
                with paused():
                    check_qat_module(self)
            return _record(expr, lambda m, *a, **k: orig_call(m, *a, **k), (self,) + args,
                           kwargs, base, self_node=mnode)
        from .traced_module import trace_user_module
        qn = mnode._qualname
        return _record(expr, lambda m, *a, **k: trace_user_module(m, a, k, orig_call, qn),
                       (self,) + args, kwargs, base, self_node=mnode)
    __call__.__wrapped_tm__ = orig_call
    return __call__


class _ModuleTraceLayer:
    """The transformation on ``module_trace``: records raw ops applied outside recorded calls."""


def _make_layer():
    from mge.core import Transformation

    class ModuleTraceTransformation(Transformation):
        name = "module_trace"

        def apply(self, op, inputs, next):
            if not _state.recording:
                return next(op, inputs)
            expr = Apply(op, graph=_state.scopes[-1].graph)
            return tuple(_record(expr, lambda *xs: tuple(next(op, xs)), tuple(inputs), {},
                                 type(op).__name__.lower()))

    return ModuleTraceTransformation()


def _builtin_module_namespaces():
    return [m for n, m in list(sys.modules.items())
            if m is not None and n.startswith(("mge.module.", "mge.quantization."))]


def _function_modules():
    return [m for n, m in list(sys.modules.items())
            if m is not None and (n == "mge.functional" or n.startswith("mge.functional."))]


@contextlib.contextmanager
def patched():
    """Install the recording patches; always restored, also on errors."""
    from mge._core.plugins import stack
    from mge.module import Module
    from mge.tensor import Tensor
    saved = []
    layer = None
    try:
        for mod in _function_modules():
            for k, v in list(vars(mod).items()):
                if inspect.isfunction(v) and (v.__module__ or "").startswith("mge.functional") \
                        and not k.startswith("_"):
                    w = _wrapped_funcs.get(id(v))
                    if w is None:
                        w = _wrapped_funcs[id(v)] = _func_wrapper(v)
                        _originals[id(w)] = v
                    saved.append((mod, k, v))
                    setattr(mod, k, w)
        # built-in modules call functions they imported into their own globals (``from
        # ..functional.nn import conv2d``): those names are patched too, so that a user
        # subclass of a built-in module (traced into) records ``F.conv2d`` and not its ops
        for mod in _builtin_module_namespaces():
            for k, v in list(vars(mod).items()):
                w = _wrapped_funcs.get(id(v)) if inspect.isfunction(v) else None
                if w is not None and w is not v:
                    saved.append((mod, k, v))
                    setattr(mod, k, w)
        for mod, k, v in _extra_functions():
            w = _wrapped_funcs.get(id(v)) or _func_wrapper(v)
            _wrapped_funcs[id(v)] = w
            _originals[id(w)] = v
            saved.append((mod, k, v))
            setattr(mod, k, w)
        for k, v in list(vars(Tensor).items()):
            if k in _NO_PATCH or (k.startswith("_") and not k.startswith("__")) or \
                    isinstance(v, (property, staticmethod, classmethod)) or not callable(v):
                continue
            saved.append((Tensor, k, v))
            setattr(Tensor, k, _method_wrapper(k, v))
        for cls, fn in _builtin_op_applies():
            saved.append((cls, "_apply", fn))
            setattr(cls, "_apply", _opdef_apply_wrapper(fn))
        orig_shape = Tensor.__dict__["shape"]
        saved.append((Tensor, "shape", orig_shape))
        Tensor.shape = _shape_property(orig_shape)
        orig_init = Tensor.__dict__["__init__"]
        saved.append((Tensor, "__init__", orig_init))
        Tensor.__init__ = _tensor_init_wrapper(orig_init)
        orig_call = Module.__dict__["__call__"]
        saved.append((Module, "__call__", orig_call))
        Module.__call__ = _module_call_wrapper(orig_call)
        layer = _make_layer()
        stack.register(layer, "module_trace")
        yield
    finally:
        if layer is not None:
            stack.unregister(layer)
        for obj, k, v in reversed(saved):
            setattr(obj, k, v)


_EXTRA = []  # (module, name) of functions registered with ``wrap``


def _extra_functions():
    out = []
    for modname, name in _EXTRA:
        mod = sys.modules.get(modname)
        if mod is not None and callable(getattr(mod, name, None)):
            out.append((mod, name, getattr(mod, name)))
    return out


def wrap(func):
    """Record calls of ``func`` (a module-level function) as one ``CallFunction`` while tracing.

    Use it as a decorator at module level; the function is then looked up by module and name,
    so callers must call it through that module (``mod.func(...)`` or a global name).
    """
    _EXTRA.append((func.__module__, func.__name__))
    return func


def register_as_builtin(mod_cls):
    """Treat modules of class ``mod_cls`` as built-in: recorded as one call, not traced into."""
    _BUILTIN_MODULE_TYPES.add(id(mod_cls))
    return mod_cls


def original(fn):
    """The original of a recording wrapper (``fn`` itself otherwise)."""
    return _originals.get(id(fn), fn)


def wrapped(fn):
    """The recording wrapper of ``fn`` if there is one."""
    return _wrapped_funcs.get(id(fn), fn)


# ---- insert mode: nodes used as values ---------------------------------------------------------
def node_getattr(node, name):
    if not _state.scopes:
        raise AttributeError(f"{type(node).__name__} has no attribute {name!r} "
                             "(use it inside graph.insert_exprs())")
    scope = _state.scopes[-1]
    owner = node.owner
    if "." in name:  # a dotted path: one GetAttr (see utils.get_subattr)
        from .utils import get_subattr
        value = get_subattr(owner, name)
    else:
        value = getattr(owner, name)
    from mge.module import Module
    from mge.tensor import Tensor
    if isinstance(value, Module):
        e = scope.modules.get(id(value))
        if e is not None:
            return e[1]
        expr = GetAttr(node, name, ModuleNode, graph=scope.graph, module_type=type(value),
                       owner=value)
        expr._parent_owner = owner
        scope.add_expr(expr)
        scope.modules[id(value)] = (value, expr.outputs[0])
        return expr.outputs[0]
    if isinstance(value, Tensor):
        e = scope.tensors.get(id(value))
        if e is not None:
            return e[1]
        expr = GetAttr(node, name, TensorNode, graph=scope.graph, **_tensor_meta(value))
        scope.add_expr(expr)
        scope.bind(value, expr.outputs[0])
        return expr.outputs[0]
    return value


def node_call(node, args, kwargs):
    if not _state.scopes:
        raise TypeError("a ModuleNode can be called only inside graph.insert_exprs()")
    from .traced_module import _finish_inserted_module
    _, a, k = _nodes_to_tensors(args, kwargs)
    mod = node.owner
    out = mod(*a, **k)
    _finish_inserted_module(node)
    return _tensors_to_nodes(out)


def tensor_node_attr(node, name):
    if not _state.scopes:
        raise AttributeError(f"TensorNode has no attribute {name!r} outside graph.insert_exprs()")
    t = _state.scopes[-1].tensor_of(node)
    from mge.tensor import Tensor
    attr = getattr(Tensor, name, None)
    if attr is None or not callable(attr) or isinstance(vars(Tensor).get(name), property):
        return getattr(t, name)

    def method(*args, **kwargs):
        _, a, k = _nodes_to_tensors(args, kwargs)
        return _tensors_to_nodes(getattr(Tensor, name)(t, *a, **k))
    return method
