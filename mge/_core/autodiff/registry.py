"""The backward-rule tables.

* ``BACKWARD[cls](op, inputs, outputs, grads, needs) -> [grad or None per input]`` -- the
  vector-Jacobian product of ``cls``.  ``inputs``/``outputs`` are the forward tensors, ``grads``
  one tensor or ``None`` (zero) per output, ``needs`` one bool per input saying whether its
  gradient is wanted (a rule may skip work for the others).  Each returned gradient has its
  input's shape, or is ``None`` (zero / not differentiable).  Rules compute with the helpers of
  ``gradutil.py``, whose ops go to the layer below the grad transformation running the backward.
* ``KEEPS_OUTPUTS[cls](op) -> bool`` -- the rule reads the forward outputs, so the grad
  transformation keeps them alive until the rule has run.
* ``READS_INPUTS[cls](op) -> tuple or None`` -- the inputs whose values the rule reads (``None``:
  all).  Of the others it reads only ``shape``, ``dtype`` and ``device``, so a recording keeps
  just those (as MegEngine does: ``x * 2 + y`` keeps neither ``x * 2`` nor ``y`` alive).
"""
__all__ = ["BACKWARD", "KEEPS_OUTPUTS", "READS_INPUTS", "def_backward"]

BACKWARD = {}       # op class -> rule
KEEPS_OUTPUTS = {}  # op class -> predicate(op): the rule reads the forward outputs
READS_INPUTS = {}   # op class -> predicate(op): the inputs whose values the rule reads


def def_backward(cls, keeps_outputs=False):
    """Decorator: register ``fn(op, inputs, outputs, grads, needs)`` as ``cls``'s backward rule.

    ``keeps_outputs`` (a bool, or a predicate ``op -> bool``) says that the rule reads the forward
    outputs, so the grad transformation keeps them alive until the rule has run; otherwise a
    single output is held weakly and may reach the rule as ``None``.
    """
    def deco(fn):
        BACKWARD[cls] = fn
        if keeps_outputs:
            KEEPS_OUTPUTS[cls] = keeps_outputs if callable(keeps_outputs) else _always
        else:
            KEEPS_OUTPUTS.pop(cls, None)
        return fn
    return deco


def _always(op):
    return True
