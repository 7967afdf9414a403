"""Finding, loading and switching off transformation plugins.

Plugins are entry points of the group ``mge.transformations``; each names a ``Transformation``
subclass (or instance).  Loading is deterministic: sorted by position, then name.  A plugin that
fails to load is reported with its name and cause (a warning, and ``plugin_errors()``); the others
keep working.  ``MGE_DISABLE_PLUGINS=a,b`` keeps plugins from loading; ``disable_transformation``
takes one off at run time.
"""
import os
import warnings
from importlib import metadata

from . import _accel
_t = _accel.load("mge._core.transformation")
SEGMENTS, Transformation = _t.SEGMENTS, _t.Transformation

stack = _accel.load("mge._core.dispatch").stack

__all__ = ["load_plugins", "get_plugin", "plugins", "plugin_errors", "disable_transformation",
           "enable_transformation", "register_transformation", "transformations"]

GROUP = "mge.transformations"
_plugins = {}     # name -> Transformation instance (loaded)
_errors = {}      # name -> exception
_disabled = set()


def _env_disabled():
    raw = os.environ.get("MGE_DISABLE_PLUGINS", "")
    return {x.strip() for x in raw.split(",") if x.strip()}


def _sort_key(ep_and_obj):
    _, t = ep_and_obj
    seg_order = SEGMENTS.index(t.name) if t.name in SEGMENTS else len(SEGMENTS)
    return (str(t.position or ""), seg_order, t.name)


def load_plugins():
    """Load every plugin of the entry-point group (once); returns the loaded names."""
    _disabled.update(_env_disabled())
    try:
        eps = metadata.entry_points(group=GROUP)
    except TypeError:  # Python < 3.10
        eps = metadata.entry_points().get(GROUP, [])
    loaded = []
    for ep in sorted(eps, key=lambda e: e.name):
        if ep.name in _disabled or ep.name in _plugins:
            continue
        try:
            obj = ep.load()
            t = obj() if isinstance(obj, type) else obj
            if not isinstance(t, Transformation):
                raise TypeError(f"{ep.value} is not a mge.core.Transformation")
            if t.name != ep.name:
                raise ValueError(f"entry point {ep.name!r} names a transformation called {t.name!r}")
        except Exception as e:  # report and go on: one broken plugin must not break mge
            _errors[ep.name] = e
            warnings.warn(f"mge: plugin {ep.name!r} ({ep.value}) failed to load: "
                          f"{type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)
            continue
        loaded.append((ep, t))
    for ep, t in sorted(loaded, key=_sort_key):
        try:
            _install(t)
        except Exception as e:
            _errors[t.name] = e
            warnings.warn(f"mge: plugin {t.name!r} could not be installed: {e}", RuntimeWarning,
                          stacklevel=2)
    return [t.name for _, t in loaded]


def _install(t):
    _plugins[t.name] = t
    if not t.on_demand:
        stack.register(t)


def register_transformation(t):
    """Install a transformation object directly (what an entry point does, without packaging)."""
    if not isinstance(t, Transformation):
        raise TypeError(f"expected a mge.core.Transformation, got {type(t).__name__}")
    if t.name in _disabled:
        raise RuntimeError(f"transformation {t.name!r} is disabled")
    if t.name in _plugins:
        raise ValueError(f"a transformation named {t.name!r} is already installed")
    _install(t)


def get_plugin(name):
    """The loaded plugin ``name``; a clear error if it is disabled, failed or missing."""
    try:
        return _plugins[name]
    except KeyError:
        pass
    if name in _disabled:
        raise RuntimeError(
            f"the {name!r} transformation is disabled (MGE_DISABLE_PLUGINS or "
            f"mge.core.disable_transformation); enable it to use this feature"
        )
    if name in _errors:
        raise RuntimeError(f"the {name!r} transformation failed to load: {_errors[name]}") from _errors[name]
    raise RuntimeError(f"no {name!r} transformation is installed (entry point group {GROUP!r})")


def plugins():
    """Loaded plugins by name (active or on demand)."""
    return dict(_plugins)


def plugin_errors():
    """Plugins that failed to load: name -> exception."""
    return dict(_errors)


def disable_transformation(name):
    """Switch the plugin ``name`` off: off the stack now, and refused until enabled again."""
    if name == "eval":
        raise ValueError("the eval transformation cannot be disabled")
    _disabled.add(name)
    t = _plugins.pop(name, None)
    if t is not None:
        stack.unregister(t)
        _parked[name] = t


_parked = {}


def enable_transformation(name):
    """Undo ``disable_transformation(name)`` (loads the plugin if it never was)."""
    _disabled.discard(name)
    t = _parked.pop(name, None)
    if t is not None:
        _install(t)
    elif name not in _plugins:
        load_plugins()


def transformations():
    """The active transformations, top to bottom (``eval`` last); each has a ``name``."""
    return stack.active()
