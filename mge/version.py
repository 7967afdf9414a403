"""``mge.version`` (MegEngine's ``megengine.version``): the package's version, in a module of
its own so that parts of mge can read it without importing the whole package."""
__version__ = "0.1.0"
