"""Utilities MegEngine users import from ``megengine.utils``.

* ``profiler`` -- ``Profiler``, ``scope``, ``profile``: timelines (Perfetto), memory pictures;
* ``profile_analyze`` -- ``python -m mge.utils.profile_analyze DIR_OR_FILE``: tables of a profile;
* ``module_stats`` -- parameters, flops and activations of a module, from forward hooks;
* ``module_utils`` -- ``get_expand_structure``, ``set_expand_structure``, ``set_module_mode_safe``;
* ``persistent_cache`` -- ``PersistentCacheOnServer``, a key-value cache in Redis, a file or memory.

Submodules load on first use (``import mge`` does not load the profiler).
"""
import importlib

__all__ = ["profiler", "profile_analyze", "module_stats", "module_utils", "persistent_cache"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
