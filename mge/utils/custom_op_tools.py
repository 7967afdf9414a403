"""``megengine.utils.custom_op_tools``: build a C++ custom op just in time, and load it.

MegEngine compiles the sources with ninja against its headers and libmegengine_shared and loads the
library with ``megengine.core.ops.custom.load``.  mge has no C++ runtime, so there is nothing to
build against: ``build`` and ``build_and_load`` raise ``NotImplementedError`` before compiling
anything (write the op as an ``mge.autodiff.Function`` instead).  The build directories are
MegEngine's: ``$MGE_CUSTOM_OP_DIR/<name>``, by default ``~/.cache/mge_custom_op/<name>``.
"""
import os
import sys
from typing import List, Optional, Union

from ..core.ops.custom import _WHY, load

__all__ = ["build", "build_and_load"]

ev_custom_op_root_dir = "MGE_CUSTOM_OP_DIR"


def _get_user_cache_dir(appname=None):
    """The user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``; ``~/Library/Caches`` on macOS),
    with ``appname`` joined."""
    if sys.platform == "darwin":
        path = os.path.expanduser("~/Library/Caches")
    elif sys.platform == "win32":
        path = os.path.join(os.environ.get("LOCALAPPDATA", os.path.expanduser("~")), "Cache")
    else:
        path = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.path.join(path, appname) if appname else path


def _get_default_build_root():
    """The folder custom ops are built under by default (``<user cache>/mge_custom_op``)."""
    return os.path.realpath(_get_user_cache_dir(appname="mge_custom_op"))


def _get_build_dir(name):
    """The folder the custom op ``name`` is built in (under ``$MGE_CUSTOM_OP_DIR`` if set)."""
    root = os.environ.get(ev_custom_op_root_dir) or _get_default_build_root()
    return os.path.join(root, name)


def build(
    name: str,
    sources: Union[str, List[str]],
    extra_cflags: Union[str, List[str]] = [],
    extra_cuda_cflags: Union[str, List[str]] = [],
    extra_ldflags: Union[str, List[str]] = [],
    extra_include_paths: Union[str, List[str]] = [],
    with_cuda: Optional[bool] = None,
    build_dir: Optional[bool] = None,
    verbose: bool = False,
    abi_tag: Optional[int] = None,
) -> str:
    """Compile the custom op ``name`` from ``sources`` into a shared library; returns its path.

    Signature as MegEngine's.  Not in mge: ``NotImplementedError`` (a custom op is C++ built against
    MegEngine's C++ runtime, which mge does not have).
    """
    srcs = [sources] if isinstance(sources, str) else list(sources)
    missing = [s for s in srcs if not os.path.exists(s)]
    if missing:
        raise ValueError(f"custom_op_tools.build({name!r}): source files not found: {missing}")
    where = build_dir if build_dir is not None else _get_build_dir(name)
    raise NotImplementedError(f"custom_op_tools.build({name!r}, {len(srcs)} source file(s), "
                              f"build_dir={where!r}): {_WHY}")


def build_and_load(
    name: str,
    sources: Union[str, List[str]],
    extra_cflags: Union[str, List[str]] = [],
    extra_cuda_cflags: Union[str, List[str]] = [],
    extra_ldflags: Union[str, List[str]] = [],
    extra_include_paths: Union[str, List[str]] = [],
    with_cuda: Optional[bool] = None,
    build_dir: Optional[bool] = None,
    verbose: bool = False,
    abi_tag: Optional[int] = None,
) -> str:
    """``build`` then ``megengine.core.ops.custom.load`` the library; returns its path.

    Not in mge: ``NotImplementedError``, from ``build``.
    """
    lib_path = build(name, sources, extra_cflags, extra_cuda_cflags, extra_ldflags,
                     extra_include_paths, with_cuda, build_dir, verbose, abi_tag)
    load(lib_path)
    return lib_path
