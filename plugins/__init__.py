"""mge's built-in transformations, loaded through the entry-point group ``mge.transformations``.

Installed as the package ``mge_plugins``.  ``mge._core`` never imports this package.
"""
