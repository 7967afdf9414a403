"""MegEngine's ``comp_graph_tools``: walking and rewriting MegBrain graphs, and
``GraphInference``, which runs a dumped model.

The graph tools (``get_dep_vars``, ``graph_traversal``, ``get_oprs_seq``, ``replace_vars``, ...)
take MegBrain ``VarNode``/``OpNode`` objects, which mge does not have (see
``mge.core.tensor.megbrain_graph``): calling one raises ``NotImplementedError``.

``GraphInference`` is real: it runs a model file written by mge's ``trace.dump`` -- mge's own
format, read by ``mge.jit.load`` -- with MegEngine's interface (``run(*inputs, inp_dict=...)``
returning a dict of numpy arrays by output name).  It cannot read MegBrain's ``.mge`` files
(``mge.jit.load`` says so).
"""
import collections

import numpy as np

from ..core.tensor.megbrain_graph import _no_megbrain, set_priority_to_id

__all__ = [
    "get_dep_vars", "get_owner_opr_inputs", "get_owner_opr_type", "get_opr_type",
    "graph_traversal", "get_oprs_seq", "replace_vars", "replace_oprs", "set_priority_to_id",
    "find_vars_by_name", "convert_inputs", "convert_outputs", "embed_inputs", "GraphInference",
]


def _graph_tool(name, doc):
    def tool(*args, **kwargs):
        raise _no_megbrain(f"comp_graph_tools.{name}")

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = f"MegBrain: {doc}.  Raises ``NotImplementedError`` (mge has no MegBrain graph)."
    return tool


get_dep_vars = _graph_tool("get_dep_vars", "the vars of given types the given vars depend on")
get_owner_opr_inputs = _graph_tool("get_owner_opr_inputs", "the inputs of a var's owner operator")
get_owner_opr_type = _graph_tool("get_owner_opr_type", "the type name of a var's owner operator")
get_opr_type = _graph_tool("get_opr_type", "the type name of an operator")
graph_traversal = _graph_tool("graph_traversal", "the maps of a graph's operators and vars")
get_oprs_seq = _graph_tool("get_oprs_seq", "a graph's operators in execution order")
replace_vars = _graph_tool("replace_vars", "a graph with some vars replaced")
replace_oprs = _graph_tool("replace_oprs", "a graph with some operators replaced")
find_vars_by_name = _graph_tool("find_vars_by_name", "a graph's vars of given names")
convert_inputs = _graph_tool("convert_inputs", "a graph with its inputs replaced by InputNodes")
convert_outputs = _graph_tool("convert_outputs", "a graph with OutputNodes on its outputs")
embed_inputs = _graph_tool("embed_inputs", "a graph with its inputs replaced by constants")


class GraphInference:
    """Load a model written by ``trace.dump`` and run it (MegEngine's interface).

    Args:
        file: a path or a binary file object (an mge model file; see ``mge.jit.load``).
        outputs: names of the outputs to return (default: all, in the dumped order).
        profiling, optimize_for_inference: accepted for MegEngine's signature; mge compiles the
            loaded program as a replay of the trace.
    """

    def __init__(self, file, outputs=None, profiling=False, optimize_for_inference=False,
                 **kwargs):
        from ..jit import load

        self._model = load(file)
        names = list(self._model.output_names)
        if outputs is not None:
            missing = [n for n in outputs if n not in names]
            if missing:
                raise KeyError(f"GraphInference: the model has no outputs named {missing} "
                               f"(its outputs: {names})")
            names = list(outputs)
        self._outputs = names
        self._inp_names = [i.name for i in self._model.inputs]

    def run(self, *inp_args, inp_dict=None):
        """Run the model on ``inp_args`` (in the model's input order) and ``inp_dict`` (by input
        name); returns an ``OrderedDict`` ``{output_name: numpy array}``."""
        assert len(inp_args) <= len(self._inp_names), \
            "This model expects {} inputs".format(len(self._inp_names))
        inputs = dict(zip(self._inp_names, inp_args))
        if inp_dict is not None:
            inputs.update(inp_dict)
        assert inputs.keys() == set(self._inp_names), \
            "This model expects inputs {}, but gets inputs {}".format(
                self._inp_names, list(inputs.keys()))
        got = self._model.run(**inputs)
        return collections.OrderedDict((k, np.asarray(got[k].numpy())) for k in self._outputs)
