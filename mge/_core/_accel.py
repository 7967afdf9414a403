"""One switch between the compiled and the pure-Python form of the hot modules.

Each hot module is plain Python (Cython's pure-Python mode); ``setup.py`` also compiles it under the
name ``<module>_c``.  ``load`` returns the compiled one unless ``MGE_PUREPYTHON=1`` is set or it was
not built.  ``MGE_REQUIRE_COMPILED=1`` turns a missing compiled module into an error (CI uses it so
that "compiled mode" cannot silently be pure Python).
"""
import importlib
import os

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
