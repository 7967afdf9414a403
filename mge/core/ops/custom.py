"""``megengine.core.ops.custom``: MegEngine's custom ops, C++ operators loaded from a shared library.

MegEngine compiles a custom op (``megengine.utils.custom_op_tools.build``) against its C++ headers
(``custom/op.h``) and libmegengine_shared, then ``load`` registers the library's ops in its C++ op
table and adds one op maker per op to this module.  mge has no C++ runtime to load such a library
into: ``_get_custom_op_list`` is empty (MegEngine's CPU wheel ships no official custom op either),
and ``load``/``unload`` raise ``NotImplementedError``.  Write the op as an ``mge.autodiff.Function``
(forward and backward in mge ops) instead; see ``docs/differences.rst``.
"""
import os

__all__ = ["load"]

_WHY = ("mge has no C++ runtime: a custom op library, built against MegEngine's C++ custom-op API "
        "(custom/op.h, libmegengine_shared), cannot be loaded into it; write the op as an "
        "mge.autodiff.Function over mge ops instead (docs/differences.rst)")


def _get_custom_op_list():
    """The names of the custom ops that are loaded, sorted: none (mge cannot load any)."""
    return []


def _get_custom_op_lib_info():
    """``{library path: [op names]}`` of the loaded custom op libraries: none."""
    return {}


def get_custom_op_abi_tag():
    """The ``_GLIBCXX_USE_CXX11_ABI`` value a custom op must be built with to load.

    mge has no C++ library for one to be compatible with: ``NotImplementedError``.
    """
    raise NotImplementedError(f"custom.get_custom_op_abi_tag: {_WHY}")


def _make_custom_op(name, params):
    """The op of the loaded custom op ``name`` with ``params``: none is ever loaded."""
    raise NotImplementedError(f"custom op {name!r}: {_WHY}")


def _gen_custom_op_maker(custom_op_name):
    """A function ``(**params) -> op`` for the custom op ``custom_op_name``."""
    def op_maker(**kwargs):
        return _make_custom_op(custom_op_name, kwargs)

    op_maker.__name__ = custom_op_name
    op_maker.__doc__ = f"The custom op {custom_op_name!r} with the given parameters."
    return op_maker


def load(lib_path):
    """Load the custom op library ``lib_path`` and add a maker for each of its ops to this module.

    Not in mge: it raises ``NotImplementedError`` (the library needs MegEngine's C++ runtime).
    """
    raise NotImplementedError(f"custom.load({os.path.abspath(lib_path)!r}): {_WHY}")


def unload(lib_path):
    """Unload a library that ``load`` loaded; mge loads none, so this raises ``NotImplementedError``."""
    raise NotImplementedError(f"custom.unload({os.path.abspath(lib_path)!r}): no custom op library "
                              f"is loaded: {_WHY}")
