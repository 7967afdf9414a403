"""``mge.core._imperative_rt.imperative``: MegEngine's ``make_backward_graph``.

``make_backward_graph(op, input_attrs, input_requires_grad, output_has_grad)`` answers
``(backward, save_for_backward, input_has_grad)``: ``save_for_backward`` says, for each input,
output and output gradient in that order, whether the backward pass reads it, and
``input_has_grad`` which inputs get a gradient.  MegEngine's ``backward`` is a MegBrain graph; mge's
backward rules are Python functions over eager tensors, so mge's ``backward`` is a
:class:`BackwardGraph` that runs the op's rule on the saved tensors.  The masks come from the
rule's declarations (``READS_INPUTS``, ``KEEPS_OUTPUTS`` in ``mge/_core/autodiff/registry.py``), so
they can save more than MegEngine's (``exp`` saves its input too).  ``op`` is one of mge's ops or a
MegEngine ``Elemwise`` of ``mge.core.ops.builtin``; other MegEngine op classes raise
``NotImplementedError``.
"""
import numpy as np

from ..._core.autodiff.registry import BACKWARD, KEEPS_OUTPUTS, READS_INPUTS
from ..._core.ops import ELEMWISE_MODES, Elemwise, OpDef, elemwise_op

__all__ = ["make_backward_graph", "BackwardGraph"]


def _mge_op(op):
    if isinstance(op, OpDef):
        return op
    from ..ops import builtin
    if isinstance(op, builtin.Elemwise):
        name = str.upper(op.mode)
        mode = builtin._ELEMWISE_RENAMES.get(name, name.lower())
        if mode in ELEMWISE_MODES:
            return elemwise_op(mode)
        raise NotImplementedError(f"make_backward_graph: Elemwise mode {name} is a composition of "
                                  "mge's modes in mge, with no single backward rule")
    raise NotImplementedError(f"make_backward_graph: MegEngine's {type(op).__name__} is not one "
                              "mge op with a backward rule (Elemwise and mge's own ops are)")


class _Described:
    """An input the backward pass does not read: its shape, dtype and device only."""

    __slots__ = ("_shape", "_k", "dtype", "device", "_info")

    def __init__(self, attr, k, shape=None):
        if attr.shape is not None:
            shape = tuple(int(s) for s in attr.shape)
        self._shape = shape
        self._k = k
        self.dtype = np.dtype(attr.dtype)
        self.device = attr.comp_node
        self._info = self

    @property
    def shape(self):
        """The input's shape, from its ``TensorAttr`` (an error if that has none)."""
        if self._shape is None:
            raise ValueError(f"BackwardGraph: input {self._k} is not saved and its TensorAttr "
                             "has no shape, which the backward rule needs")
        return self._shape

    @property
    def ndim(self):
        return len(self.shape)


class BackwardGraph:
    """The backward pass of one op: ``graph(*saved)`` takes the tensors ``save_for_backward``
    marked (inputs, outputs, output gradients, in that order) and returns the gradients of the
    inputs ``input_has_grad`` marks, in order."""

    def __init__(self, op, attrs, save, input_has_grad, n_out):
        self.op = op
        self._attrs = list(attrs)
        self._save = list(save)
        self._has = list(input_has_grad)
        self._n_out = n_out

    def __call__(self, *saved):
        want = sum(self._save)
        if len(saved) != want:
            raise TypeError(f"BackwardGraph of {self.op.name}: expects {want} saved tensors, got "
                            f"{len(saved)}")
        it = iter(saved)
        n_in = len(self._attrs)
        vals = [next(it) if s else None for s in self._save]
        outputs = vals[n_in:n_in + self._n_out]
        grads = vals[n_in + self._n_out:]
        # the one input of an elementwise op has the shape of its output (and output gradient)
        known = None
        if type(self.op) is Elemwise and n_in == 1:
            known = next((tuple(t.shape) for t in outputs + grads if t is not None), None)
        inputs = [v if v is not None else _Described(a, k, known)
                  for k, (v, a) in enumerate(zip(vals[:n_in], self._attrs))]
        result = BACKWARD[type(self.op)](self.op, tuple(inputs), tuple(outputs), tuple(grads),
                                         tuple(self._has))
        return [g for g, h in zip(result, self._has) if h]

    def __repr__(self):
        return f"<BackwardGraph of {self.op.name}>"


def make_backward_graph(op, inputs, input_requires_grad, output_has_grad):
    """``(backward, save_for_backward, input_has_grad)`` of ``op`` for inputs described by
    ``inputs`` (``TensorAttr``: ``dtype``, ``comp_node``, optionally ``shape``); see the module's
    text.  An op without a backward rule gives no gradients and saves nothing."""
    mop = _mge_op(op)
    n_in, n_out = len(inputs), len(output_has_grad)
    if len(input_requires_grad) != n_in:
        raise ValueError(f"make_backward_graph: {n_in} inputs but {len(input_requires_grad)} "
                         "input_requires_grad flags")
    cls = type(mop)
    if cls not in BACKWARD:
        return None, [False] * (n_in + 2 * n_out), [False] * n_in
    has = [bool(r) and a.dtype is not None and np.dtype(a.dtype).kind == "f"
           for r, a in zip(input_requires_grad, inputs)]
    reads = READS_INPUTS.get(cls)
    read = None if reads is None else reads(mop)
    in_mask = [read is None or k in read for k in range(n_in)]
    keep = KEEPS_OUTPUTS.get(cls)
    out_mask = [bool(keep is not None and keep(mop))] * n_out
    save = in_mask + out_mask + [bool(g) for g in output_has_grad]
    return BackwardGraph(mop, inputs, save, has, n_out), save, has
