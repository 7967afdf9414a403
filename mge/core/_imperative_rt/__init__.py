"""``mge.core._imperative_rt``: the names MegEngine's C++ extension module exposes, over mge.

MegEngine's ``_imperative_rt`` is its compiled runtime.  mge has no C++ runtime; this package
gives the parts that make sense over mge's Python runtime: :mod:`.core2` (``apply``, ``Tensor``,
errors, options, sync), :mod:`.ops` (RNG handles and seeds), :mod:`.common` (``CompNode``,
``DeviceTensorND``, dtype helpers), :mod:`.utils` (``Logger``).  MegBrain's graph classes
(``ComputingGraph``, ``VarNode``, ``OperatorNodeConfig``, ``make_backward_graph``) have no
counterpart: reading them raises ``NotImplementedError`` naming what to use instead.
"""
from . import common, core2, imperative, ops, utils  # noqa: F401
from .common import CompNode, DeviceTensorND  # noqa: F401
from .utils import Logger  # noqa: F401

__all__ = ["CompNode", "DeviceTensorND", "Logger", "OperatorNodeConfig", "TensorAttr", "common", "core2", "imperative", "ops", "utils"]

_GRAPH_ONLY = {
    "ComputingGraph", "VarNode", "OperatorNode", "AsyncExecutable",
    "make_const", "make_h2d", "SymbolVar", "GraphOptimizeOptions",
}


class OperatorNodeConfig:
    """MegEngine's per-op settings: ``name``, ``dtype``, ``comp_node`` and ``comp_node_arr`` (a
    tuple of devices; setting ``comp_node`` makes it that one device).  Plain values that code
    passes around to choose the device and dtype of what it creates; reading ``comp_node``
    before it is set (or with several devices) is a ``ValueError``, as in MegEngine."""

    def __init__(self):
        self.name = None
        self.dtype = None
        self._comp_nodes = ()

    @property
    def dtype(self):
        return self._dtype

    @dtype.setter
    def dtype(self, value):
        import numpy as np
        self._dtype = None if value is None else np.dtype(value)

    @property
    def comp_node(self):
        if len(self._comp_nodes) != 1:
            raise ValueError("invalid number of comp_node")
        return self._comp_nodes[0]

    @comp_node.setter
    def comp_node(self, value):
        self._comp_nodes = (CompNode(value),)

    @property
    def comp_node_arr(self):
        return self._comp_nodes

    @comp_node_arr.setter
    def comp_node_arr(self, values):
        self._comp_nodes = tuple(CompNode(v) for v in values)


class TensorAttr:
    """MegEngine's description of a tensor for ``make_backward_graph``: ``shape``, ``dtype`` and
    ``comp_node`` attributes (mge builds no backward graphs; the class is kept for code that
    only fills it in)."""

    def __init__(self, shape=None, dtype=None, comp_node=None):
        self.shape = shape
        self.dtype = dtype
        self.comp_node = comp_node


def __getattr__(name):
    graph = _graph_names().get(name)
    if graph is not None:
        return graph
    if name in _GRAPH_ONLY:
        raise NotImplementedError(
            f"mge.core._imperative_rt.{name} belongs to MegBrain's C++ computing graph, which mge "
            "does not have; use eager tensors, mge.jit.trace and mge.autodiff instead (see "
            "docs/differences.rst)")
    raise AttributeError(f"module 'mge.core._imperative_rt' has no attribute {name!r}")


def _graph_names():
    # MegBrain's graph classes, as mge's computing graphs (mge.core.tensor.megbrain_graph)
    from ..tensor import megbrain_graph as G

    def make_const(graph, data, device, dtype, name=None):
        """A constant var of ``graph`` (MegEngine's ``_imperative_rt.make_const``)."""
        return G._make_const(graph, data, dtype, device, name)

    def make_h2d(graph, device, dtype, shape=None, name=None):
        """A ``Host2DeviceCopy`` var of ``graph`` (MegEngine's ``_imperative_rt.make_h2d``)."""
        return graph.make_h2d(dtype=dtype, device=device, shape=shape, name=name)._node

    return {"ComputingGraph": G.Graph, "VarNode": G._Var, "OperatorNode": G._Opr,
            "make_const": make_const, "make_h2d": make_h2d}
