"""One switch between the compiled and the pure-Python form of the hot modules.

Each hot module is plain Python (Cython's pure-Python mode); ``setup.py`` also compiles it under the
name ``<module>_c``.  ``load`` returns the compiled one unless ``MGE_PUREPYTHON=1`` is set or it was
not built.  ``MGE_REQUIRE_COMPILED=1`` turns a missing compiled module into an error (CI uses it so
that "compiled mode" cannot silently be pure Python).
"""
import importlib
import os

# The hot modules: plain Python that setup.py also compiles, each under the name ``<module>_c``.
HOT_MODULES = (
    "mge._core.channel.handles",
    "mge._core.channel.command_buffer",
    "mge._core.channel.caller_lock",
    "mge._core.device.memory",
    "mge._core.profile_recorder",
    "mge._core.device.cpu.handoff",
    "mge._core.device.cpu.loops",
    "mge._core.device.cpu.device",
    "mge._core.dtr",
    "mge._core.channel.executor",
    "mge._core.channel.swap_drop",
    "mge._core.channel.dtr_mechanism",
    "mge._core.channel.channel",
    "mge._core.transformation",
    "mge._core.dispatch",
    "mge._core.tensor",
    "mge_plugins.dtype_rules",
    "mge.jit.engine",
    "mge_plugins.trace_match",
)

PURE = os.environ.get("MGE_PUREPYTHON", "0") not in ("", "0")
REQUIRE = os.environ.get("MGE_REQUIRE_COMPILED", "0") not in ("", "0")
MODES = {}  # module name -> "compiled" | "pure"


def load(name):
    """Import ``name`` (dotted), preferring its compiled twin ``name + "_c"``."""
    if not PURE:
        try:
            mod = importlib.import_module(name + "_c")
            MODES[name] = "compiled"
            return mod
        except ImportError:
            if REQUIRE:
                raise
    MODES[name] = "pure"
    return importlib.import_module(name)


def guard(name):
    """Called at the top of a hot module: refuse to import the pure twin beside a compiled one.

    Two copies of one module would mean two ``Tensor`` classes or two channels; import hot modules
    through ``load`` (or the public modules that do).
    """
    if name.endswith("_c") or MODES.get(name) != "compiled":
        return
    raise ImportError(
        f"{name} is running compiled as {name}_c; import it through mge._core._accel.load "
        f"(or set MGE_PUREPYTHON=1 to use the pure-Python modules)"
    )
