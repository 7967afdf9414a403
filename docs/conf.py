"""Sphinx configuration for mge's documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` from the repository root.
"""
import os
import sys

# Document the source tree (mge is normally installed editable, so this is the same code).
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import mge  # noqa: E402

project = "mge"
author = "the mge authors"
copyright = "2024, the mge authors"
version = release = mge.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = []

autodoc_default_options = {
    "members": True,
    "undoc-members": False,
    "show-inheritance": False,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"mge {release}"
html_static_path = []
html_theme_options = {
    "description": "MegEngine's imperative runtime in Python",
    "fixed_sidebar": True,
}


# -- ``.. mge-members::`` -------------------------------------------------------------------------
# Documents, under the public name ``MODULE.<name>``, every name in ``__all__`` of the module(s)
# given in ``:from:`` (default: MODULE itself), sorted.  F re-exports its submodules' names
# (``F.add`` is defined in ``mge.functional.elemwise``); this documents each once, under the name
# users call, grouped by the submodule it comes from, and follows the modules as they grow.
import importlib  # noqa: E402

from docutils import nodes  # noqa: E402
from docutils.parsers.rst import Directive, directives  # noqa: E402
from docutils.statemachine import StringList  # noqa: E402
from sphinx.util.nodes import nested_parse_with_titles  # noqa: E402


class MgeMembers(Directive):
    required_arguments = 1
    option_spec = {"from": directives.unchanged, "exclude": directives.unchanged}

    def run(self):
        public = self.arguments[0]
        target = importlib.import_module(public)
        sources = (self.options.get("from") or public).split()
        exclude = set((self.options.get("exclude") or "").replace(",", " ").split())
        names = set()
        for src in sources:
            mod = importlib.import_module(src)
            names.update(getattr(mod, "__all__", None)
                         or [n for n in vars(mod) if not n.startswith("_")])
        lines = []
        for name in sorted(names - exclude):
            obj = getattr(target, name, None)
            if obj is None or isinstance(obj, type(importlib)):
                continue
            kind = ("autoclass" if isinstance(obj, type)
                    else "autofunction" if callable(obj) else "autodata")
            lines += [f".. {kind}:: {public}.{name}", ""]
        node = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=f"<mge-members {public}>"), node)
        return node.children


def setup(app):
    app.add_directive("mge-members", MgeMembers)
    return {"parallel_read_safe": True}
