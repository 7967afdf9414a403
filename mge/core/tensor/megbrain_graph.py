"""MegBrain's computing-graph API (``Graph``, ``VarNode``, ``OutputNode``, ``dump_graph``, ...).

In MegEngine this module drives its C++ graph runtime, MegBrain: a ``Graph`` is a static
computing graph whose ``VarNode``/``OpNode`` objects are built op by op and compiled.  mge has no
MegBrain -- it runs ops eagerly and compiles ``mge.jit.trace`` programs itself -- so nothing here
can work.  The module is importable (MegEngine code and its test helpers import it for
``isinstance`` checks and type names), and its classes exist so that ``isinstance(x, VarNode)``
is simply ``False`` for mge tensors; but constructing a ``Graph`` or any node, or calling a
graph-building function, raises ``NotImplementedError`` saying so.  Use eager tensors,
``mge.jit.trace`` (and ``trace.dump`` / ``mge.jit.load`` for saved programs) instead.  See
``docs/differences.rst``.
"""
import collections

__all__ = [
    "Graph", "VarNode", "OpNode", "InputNode", "OutputNode", "ValueOutputNode",
    "AttrOutputNode", "VirtualDepNode", "TensorAttr", "CompGraphDumpResult",
    "CompGraphLoadResult", "set_priority_to_id", "optimize_for_inference",
    "deserialize_infer_option", "modify_opr_algo_strategy_inplace", "dump_graph", "load_graph",
    "apply_normal_varnode", "input_callback", "output_callback",
]


def _no_megbrain(what):
    return NotImplementedError(
        f"{what} needs MegBrain's C++ computing graph, which mge does not have: mge runs ops "
        "eagerly; use eager tensors, or mge.jit.trace (trace.dump / mge.jit.load for saved "
        "programs) instead (see docs/differences.rst)")


class _GraphObject:
    """Base of the graph classes: constructing one raises ``NotImplementedError``."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        raise _no_megbrain(f"megbrain_graph.{cls.__name__}")


class Graph(_GraphObject):
    """MegBrain's ``ComputingGraph`` (``compile``, ``make_const``, ``make_h2d``, options).
    mge has none: constructing one raises ``NotImplementedError``."""


class VarNode(_GraphObject):
    """A variable of a MegBrain graph.  No mge object is one (``isinstance`` is ``False`` for
    mge tensors); constructing one raises ``NotImplementedError``."""


class OpNode(_GraphObject):
    """An operator of a MegBrain graph; constructing one raises ``NotImplementedError``."""


class InputNode(OpNode):
    """A graph input fed by a callback; constructing one raises ``NotImplementedError``."""


class OutputNode(OpNode):
    """A graph output read back after ``execute``; constructing one raises
    ``NotImplementedError``."""


class ValueOutputNode(OpNode):
    """An output node holding the value; constructing one raises ``NotImplementedError``."""


class AttrOutputNode(OpNode):
    """An output node reading shape/dtype/device; constructing one raises
    ``NotImplementedError``."""


class VirtualDepNode(OpNode):
    """A node adding control dependencies; constructing one raises ``NotImplementedError``."""


class TensorAttr:
    """Shape, dtype and device of a graph var (what ``AttrOutputNode`` returns): plain data."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device):
        self.shape = shape
        self.dtype = dtype
        self.device = device


CompGraphDumpResult = collections.namedtuple(
    "CompGraphDumpResult",
    ["nr_opr", "tot_bytes", "tensor_value_bytes", "content_hash", "inputs", "outputs", "params"])

CompGraphLoadResult = collections.namedtuple(
    "CompGraphLoadResult", ["graph", "output_vars_dict", "output_vars_list", "metadata"])


def set_priority_to_id(dest_vars):
    """MegBrain: set each operator's priority to its id.  Raises ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.set_priority_to_id")


def optimize_for_inference(dest_vars, **kwargs):
    """MegBrain's inference graph passes.  Raises ``NotImplementedError`` (mge's traced
    programs are optimized when compiled; ``trace.dump`` accepts and ignores the options)."""
    raise _no_megbrain("megbrain_graph.optimize_for_inference")


def deserialize_infer_option(x):
    """MegBrain: decode ``GraphOptimizeOptions``.  Raises ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.deserialize_infer_option")


def modify_opr_algo_strategy_inplace(dest_vars, strategy):
    """MegBrain: set the fast-run strategy of a graph's operators.  Raises
    ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.modify_opr_algo_strategy_inplace")


def dump_graph(output_vars, **kwargs):
    """MegBrain: serialize a graph to a ``.mge`` file.  Raises ``NotImplementedError``; use
    ``trace.dump`` (mge's own model format)."""
    raise _no_megbrain("megbrain_graph.dump_graph")


def load_graph(fpath):
    """MegBrain: load a ``.mge`` graph file.  Raises ``NotImplementedError``; ``mge.jit.load``
    reads the files mge's ``trace.dump`` writes."""
    raise _no_megbrain("megbrain_graph.load_graph")


def apply_normal_varnode(op, *args):
    """MegBrain: apply an op to graph vars.  Raises ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.apply_normal_varnode")


def input_callback(callback, *args, device=None, dtype=None, shape=None, graph=None):
    """MegBrain: a graph input fed by ``callback``.  Raises ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.input_callback")


def output_callback(callback, var, *args):
    """MegBrain: call ``callback`` with a graph var's value.  Raises ``NotImplementedError``."""
    raise _no_megbrain("megbrain_graph.output_callback")
