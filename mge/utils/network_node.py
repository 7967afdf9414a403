"""MegEngine's ``network_node``: the nodes of ``megengine.utils.network.Network``, a wrapper
that edits the MegBrain graphs of ``.mge`` model files.

mge has no MegBrain graph (see ``mge.core.tensor.megbrain_graph``), so there is no node to wrap.
The classes exist so that MegEngine code can import them and ``isinstance(x, VarNode)`` is
simply ``False`` for mge tensors; constructing one raises ``NotImplementedError``.  See
``docs/differences.rst``.
"""
from ..core.tensor.megbrain_graph import _no_megbrain

__all__ = ["NetworkNode", "VarNode", "OpNode", "str_to_mge_class"]


class NetworkNode:
    """Base of the network nodes; constructing one raises ``NotImplementedError``."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        raise _no_megbrain(f"network_node.{cls.__name__}")


class VarNode(NetworkNode):
    """A var of a ``Network`` (a MegBrain graph var with a name and an owner ``OpNode``)."""


class OpNode(NetworkNode):
    """An operator of a ``Network``."""


def str_to_mge_class(classname):
    """MegEngine: the ``OpNode`` subclass of a MegBrain operator type name.  Raises
    ``NotImplementedError``."""
    raise _no_megbrain("network_node.str_to_mge_class")
