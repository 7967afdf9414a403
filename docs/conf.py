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
