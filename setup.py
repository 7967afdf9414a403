"""Build: the pure-Python package plus compiled twins of the hot modules.

Each hot module is plain Python written for Cython's pure-Python mode; it is compiled a second time
under the name ``<module>_c`` so that the installed extension never shadows the ``.py`` and
``MGE_PUREPYTHON=1`` can pick either (see ``mge/_core/_accel.py``).
"""
import os
import runpy

from setuptools import Extension, find_packages, setup

# The list lives beside the selector that loads the compiled modules.
HOT_MODULES = runpy.run_path(os.path.join("mge", "_core", "_accel.py"))["HOT_MODULES"]


def _source(module):
    # mge_plugins is installed from the folder plugins/ (package_dir below)
    path = module.replace(".", "/") + ".py"
    return "plugins/" + path[len("mge_plugins/"):] if path.startswith("mge_plugins/") else path


def _flags(module):
    # the C loops (handoff, loops) and the traced programs' fused chains must round as numpy does:
    # no fused multiply-add
    if (module.endswith((".cpu.handoff", ".cpu.loops")) or module == "mge.jit.engine") \
            and os.name != "nt":
        return ["-ffp-contract=off"]
    return []


def extensions():
    if os.environ.get("MGE_NO_CYTHON"):
        return []
    from Cython.Build import cythonize

    exts = [Extension(m + "_c", [_source(m)], extra_compile_args=_flags(m)) for m in HOT_MODULES]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"binding": True, "embedsignature": True},
        quiet=True,
        nthreads=int(os.environ.get("MGE_BUILD_JOBS") or 0),  # (cythonize N modules at once)
    )


setup(
    packages=find_packages(include=["mge", "mge.*"]) + ["mge_plugins"],
    package_dir={"mge_plugins": "plugins"},
    ext_modules=extensions(),
)
