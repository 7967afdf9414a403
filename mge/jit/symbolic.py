"""``SymbolVar``: a tensor of a traced function's call as a var of the graph the trace records.

In the first call of ``trace(symbolic=True)`` no op runs (``mge_plugins.trace.LazyRecorder``):
each tensor the traced function makes is a var of the recording, whose shape and dtype the ops'
rules give at once and whose value exists only once the recorded program has run, when the
function returns.  ``SymbolVar(x)`` describes tensor ``x`` as such a var, as the seed's
``SymbolVar`` describes a graph's var node: ``shape``, ``dtype`` and ``device`` where the rules
know them, ``numpy()`` where the value can be inferred statically (it does not depend on the
function's arguments: constants, parameters and what is computed from them only).  Anything else
raises ``ValueError`` where it is used.  In the other calls of a traced function (recording with
``symbolic=False``, replays) every value can be read: the ops run, or the program runs up to them.
"""
from .._core.plugins import stack

__all__ = ["SymbolVar"]


def _trace_layer():
    for t in stack.active():
        if t.name == "trace" and hasattr(t, "inferable"):
            return t
    return None


class SymbolVar:
    """Tensor ``x`` of a traced function's call in progress, as a var of the recorded graph.

    Example::

        >>> import mge
        >>> from mge.jit import trace, SymbolVar
        >>> @trace(symbolic=True)
        ... def f(x):
        ...     y = x * 2
        ...     v = SymbolVar(y)
        ...     print(v.shape, v.dtype, v.inferable)
        ...     return y
        >>> _ = f(mge.tensor([1.0, 2.0]))
        (2,) float32 False
    """

    __slots__ = ("_tensor", "_layer", "_var")

    def __init__(self, x):
        layer = _trace_layer()
        if layer is None:
            raise TypeError("SymbolVar: only a tensor of a traced function's call is a var of "
                            "a graph; no traced function runs now")
        var = layer.var_of(x)
        if var is None:
            raise TypeError("SymbolVar: the tensor is not a value of the traced call in progress")
        self._tensor = x
        self._layer = layer
        self._var = var

    @property
    def var(self):
        """The var's number in the recording."""
        return self._var

    @property
    def op(self):
        """The op that computes the var (``None`` for an argument or a captured tensor)."""
        k = self._layer.producer_of(self._var)
        return None if k is None else self._layer.recording.ops[k][0]

    @property
    def dtype(self):
        """The dtype, from the ops' rules."""
        return self._tensor.dtype

    @property
    def device(self):
        """The device (a ``CompNode``)."""
        return self._tensor.device

    @property
    def shape(self):
        """The shape, from the ops' rules; ``ValueError`` where only the values would tell it
        (``cond_take``) and those depend on the function's arguments."""
        return self._tensor.shape

    @property
    def inferable(self):
        """Whether :meth:`numpy` can give the value now."""
        return self._layer.inferable(self._var)

    def numpy(self):
        """The value, where it can be inferred statically; otherwise ``ValueError``."""
        return self._tensor.numpy()

    def _isscalar(self):
        return self._tensor.ndim == 0

    def __repr__(self):
        shape = self._tensor._info.shape
        return f"SymbolVar(var={self._var}, shape={shape}, dtype={self.dtype})"
