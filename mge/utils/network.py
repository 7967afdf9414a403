"""MegEngine's ``network``: ``Network``, an editable view of the MegBrain graph of a ``.mge``
model file (load, find and replace vars and operators, dump again).

mge has no MegBrain graph (see ``mge.core.tensor.megbrain_graph``) and does not read ``.mge``
files: constructing or loading a ``Network`` raises ``NotImplementedError`` saying so.
``set_symbolic_shape`` is real (it sets ``mge.core._trace_option``'s flag).  Saved mge programs
are written by ``trace.dump`` and read by ``mge.jit.load``.  See ``docs/differences.rst``.
"""
from ..core._trace_option import set_symbolic_shape as _set_symbolic_shape
from ..core.tensor.megbrain_graph import _no_megbrain

__all__ = ["Network", "set_symbolic_shape", "as_varnode", "as_oprnode"]


class Network:
    """MegEngine's graph editor over a MegBrain graph.  Constructing one (``Network()``) or
    loading one (``Network.load(path)``) raises ``NotImplementedError``."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        raise _no_megbrain("network.Network")

    @classmethod
    def load(cls, model_path, outspec=None):
        """MegEngine: read a ``.mge`` file.  Raises ``NotImplementedError``."""
        raise _no_megbrain("network.Network.load")


def set_symbolic_shape(option):
    """Set whether traced shapes are symbolic; returns the previous value (see
    ``mge.core._trace_option.set_symbolic_shape``)."""
    return _set_symbolic_shape(option)


def as_varnode(obj):
    """MegEngine: the ``VarNode`` of a network object.  Raises ``NotImplementedError``."""
    raise _no_megbrain("network.as_varnode")


def as_oprnode(obj):
    """MegEngine: the ``OpNode`` of a network object.  Raises ``NotImplementedError``."""
    raise _no_megbrain("network.as_oprnode")
