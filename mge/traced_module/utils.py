"""Helpers of ``mge.traced_module``: dotted attribute access on modules (and on ModuleNodes
inside ``graph.insert_exprs()``) and binding call arguments to a signature."""
import inspect
from collections.abc import Callable

__all__ = ["get_subattr", "assign_attr"]


def _split(name):
    return [p for p in str(name).split(".") if p != ""] if name else []


def _get_one(obj, part):
    if isinstance(obj, (list, tuple)):
        return obj[int(part)]
    if isinstance(obj, dict):
        return obj[part] if part in obj else obj[int(part)]
    return getattr(obj, part)


def get_subattr(module, name):
    """``module.a.b.c`` for ``name = "a.b.c"`` (list, tuple and dict items by index or key).

    ``module`` may be a module or a ModuleNode (inside ``graph.insert_exprs()`` each step is
    recorded as a ``GetAttr``).  An empty name is ``module`` itself."""
    from .node import ModuleNode
    if isinstance(module, ModuleNode) and _split(name):
        from .module_tracer import node_getattr
        return node_getattr(module, ".".join(_split(name)))
    obj = module
    for part in _split(name):
        obj = _get_one(obj, part)
    return obj


def assign_attr(attr, module, name):
    """Set ``module.a.b.c = attr`` for ``name = "a.b.c"`` (the parents must exist)."""
    parts = _split(name)
    assert parts, "assign_attr needs a non-empty attribute name"
    parent = get_subattr(module, ".".join(parts[:-1]))
    last = parts[-1]
    if isinstance(parent, list):
        parent[int(last)] = attr
    elif isinstance(parent, dict):
        parent[last if last in parent or not last.isdigit() else int(last)] = attr
    else:
        setattr(parent, last, attr)


def _convert_kwargs_to_args(argspecs, args, kwargs, is_bounded=False):
    """Move keyword arguments that name positional parameters of ``argspecs`` (a function or
    an ``inspect.FullArgSpec``) into ``args``; fill defaults; returns ``(args, kwargs)`` with
    every keyword-only parameter in ``kwargs``.  ``is_bounded``: ``args`` leave out ``self``.
    """
    if isinstance(argspecs, Callable) and hasattr(argspecs, "__wrapped__"):
        argspecs = inspect.unwrap(argspecs)
    if isinstance(argspecs, inspect.FullArgSpec):
        spec, fname = argspecs, "function"
    else:
        spec, fname = inspect.getfullargspec(argspecs), getattr(argspecs, "__qualname__",
                                                                 "function")
    names = list(spec.args[1:] if is_bounded else spec.args)
    defaults = list(spec.defaults or ())
    kwdefaults = dict(spec.kwonlydefaults or {})
    new_args = list(args)
    dup = set(names[:len(new_args)]) & set(kwargs)
    if dup:
        raise TypeError(f"{fname} got multiple values for argument {', '.join(sorted(dup))}")
    first_default = len(names) - len(defaults)
    for i in range(len(new_args), len(names)):
        n = names[i]
        if n in kwargs:
            new_args.append(kwargs[n])
        elif i >= first_default:
            new_args.append(defaults[i - first_default])
        else:
            raise TypeError(f"{fname} missing required positional arguments: {n}")
    new_kwargs = {}
    for n in spec.kwonlyargs:
        if n in kwargs:
            new_kwargs[n] = kwargs[n]
        elif n in kwdefaults:
            new_kwargs[n] = kwdefaults[n]
        else:
            raise TypeError(f"{fname} missing required keyword-only argument: {n}")
    for k, v in kwargs.items():
        if k not in names and k not in spec.kwonlyargs:
            if spec.varkw is None:
                raise TypeError(f"{fname} got an unexpected keyword argument {k}")
            new_kwargs[k] = v
    return tuple(new_args), new_kwargs
