"""Loading pickled TracedModules: loaders that rewrite expressions as they are loaded.

A loader is registered for an OpDef class (``register_opdef_loader``), a function
(``register_functional_loader(("module", "qualname"))``), a module class
(``register_module_loader(("module", "ClassName"))``) or a Tensor method name
(``register_tensor_method_loader("__add__")``).  While a TracedModule is unpickled each
expression of its graphs is handed to the loaders registered for it; a loader may change the
expression's arguments (``set_args_kwargs``/``set_arg``), its op's parameters
(``expr.opdef_state``) and make new expressions for its inputs -- those are put into the graph
before their users.  Keys naming ``megengine.`` modules match mge's (``import mge as
megengine``).  :mod:`~mge.traced_module.compat` registers the loaders that upgrade graphs
dumped by older versions.
"""
from importlib import import_module

__all__ = ["register_opdef_loader", "register_functional_loader", "register_module_loader",
           "register_tensor_method_loader", "OPDEF_LOADER", "FUNCTIONAL_LOADER",
           "TENSORMETHOD_LOADER", "MODULE_LOADER"]

OPDEF_LOADER = {}
FUNCTIONAL_LOADER = {}
TENSORMETHOD_LOADER = {}
MODULE_LOADER = {}


def _registrar(table_name):
    def register(*keys):
        def callback(loader):
            table = globals()[table_name]   # (tests swap the tables)
            for k in keys:
                assert k not in table, f"a loader for {k!r} is registered already"
                table[k] = loader
            return loader
        return callback
    return register


register_opdef_loader = _registrar("OPDEF_LOADER")
register_opdef_loader.__doc__ = """``@register_opdef_loader(OpDefClass, ...)``: run the loader on
each loaded ``Apply`` of those ops (it may edit ``expr.opdef_state``)."""
register_functional_loader = _registrar("FUNCTIONAL_LOADER")
register_functional_loader.__doc__ = """``@register_functional_loader(("module", "qualname"),
...)``: run the loader on each loaded ``CallFunction`` of those functions."""
register_module_loader = _registrar("MODULE_LOADER")
register_module_loader.__doc__ = """``@register_module_loader(("module", "ClassName"), ...)``: run
the loader on each loaded call of modules of those classes."""
register_tensor_method_loader = _registrar("TENSORMETHOD_LOADER")
register_tensor_method_loader.__doc__ = """``@register_tensor_method_loader("name", ...)``: run
the loader on each loaded call of those Tensor methods."""


def _keys(module, qualname):
    """A (module, qualname) key and its ``megengine``-named twin."""
    keys = [(module, qualname)]
    if module == "mge" or module.startswith("mge."):
        keys.append(("megengine" + module[3:], qualname))
    elif module == "megengine" or module.startswith("megengine."):
        keys.append(("mge" + module[9:], qualname))
    return keys


def _public_module(obj):
    """``obj.__module__`` with a compiled twin's ``_c`` suffix dropped."""
    mod = getattr(obj, "__module__", "") or ""
    return mod[:-2] if mod.endswith("_c") else mod


def _find(table, keys):
    for k in keys:
        if k in table:
            return table[k]
    return None


def _fix_signature(expr, func):
    """An expression dumped by another version: bind its arguments to ``func`` again (keyword
    arguments for positional parameters become positional, defaults filled in)."""
    from .utils import _convert_kwargs_to_args
    from .expr import __version__
    if getattr(expr, "version", None) == __version__:
        return
    args, kwargs = expr.unflatten_args(expr.inputs)
    try:
        new_args, new_kwargs = _convert_kwargs_to_args(func, args, kwargs)
    except TypeError:
        return
    if len(new_args) != len(args) or set(new_kwargs) != set(kwargs):
        expr.set_args_kwargs(*new_args, **new_kwargs)


def load_functional(expr):
    """Run the loader of ``expr.func`` (a ``CallFunction``)."""
    func = expr.func
    if isinstance(func, tuple):
        key = func
    else:
        key = (_public_module(func), getattr(func, "__qualname__", func.__name__))
    loader = _find(FUNCTIONAL_LOADER, _keys(*key))
    if loader is not None:
        loader(expr)
    if isinstance(expr.func, tuple):
        mname, qual = expr.func
        f = import_module("mge" + mname[9:] if mname.startswith("megengine") else mname)
        for part in qual.split("."):
            f = getattr(f, part)
        expr.func = f
    assert callable(expr.func), f"{expr}: its function did not load"
    if isinstance(expr.func, type):
        return
    _fix_signature(expr, expr.func)


def load_call_module_expr(expr):
    """Run the loader of the called module's class."""
    mtype = expr.inputs[0].module_type
    key = mtype if isinstance(mtype, tuple) else (_public_module(mtype), mtype.__qualname__)
    loader = _find(MODULE_LOADER, _keys(*key))
    if loader is not None:
        loader(expr)
    if isinstance(expr.inputs[0].module_type, tuple):
        mname, cname = expr.inputs[0].module_type
        expr.inputs[0].module_type = getattr(import_module(mname), cname)


def load_call_tensor_method_expr(expr):
    """Run the loader of a Tensor method call."""
    loader = TENSORMETHOD_LOADER.get(expr.method)
    if loader is not None:
        loader(expr)


def load_apply_expr(expr):
    """Run the loader of an ``Apply``'s op class; the op is rebuilt from ``opdef_state``."""
    loader = OPDEF_LOADER.get(type(expr.opdef))
    if loader is not None:
        loader(expr)
        expr.opdef = _opdef_from_state(expr.opdef_state)


def _opdef_state(opdef):
    """A dict of the op's class (``"opdef_type"``) and its parameters."""
    values = getattr(opdef, "_values", None)
    if values is None:
        return None
    state = dict(values)
    state["opdef_type"] = type(opdef)
    return state


def _opdef_from_state(state):
    state = dict(state)
    cls = state.pop("opdef_type")
    return cls(**state)
