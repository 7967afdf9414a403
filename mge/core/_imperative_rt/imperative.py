"""``mge.core._imperative_rt.imperative``: MegEngine's ``make_backward_graph``.

MegEngine builds the backward pass of an op as a MegBrain graph (``make_backward_graph(op,
input_attrs, input_requires_grad, output_has_grad)`` returns the graph, the mask of the tensors it
saves and which inputs get gradients).  mge's backward rules are Python functions over eager
tensors (``mge/_core/autodiff/rules.py``), not graphs, so there is no graph to return.
"""

__all__ = ["make_backward_graph"]


def make_backward_graph(op, inputs, input_requires_grad, output_has_grad):
    """MegEngine's backward graph of ``op``: mge has none (backward rules are Python
    functions; see docs/differences.rst), so it raises ``NotImplementedError``."""
    raise NotImplementedError(
        "make_backward_graph returns a MegBrain graph, which mge does not have: mge's backward "
        "rules are Python functions over eager tensors (see docs/differences.rst)")
