"""scalar: MegEngine's meaning of 0-d inputs for ops whose kernels work on arrays of rank >= 1.

MegEngine's core has no 0-d tensors; its scalar transformation marks values as scalars and gives
ops their scalar meaning.  numpy has 0-d arrays, so in mge most ops need nothing, but a few treat a
0-d input the way MegEngine does only through this layer:

* ``Concat`` of 0-d tensors concatenates them as one-element vectors (``F.concat([a, b])`` of two
  scalars has shape ``(2,)``);
* ``CumSum`` of a 0-d tensor is a one-element vector;
* ``Reduce`` of a 0-d tensor along axis 0 (or -1) is the scalar itself.

With the plugin switched off these ops follow their kernels: ``Concat`` rejects 0-d inputs, and
``CumSum``/``Reduce`` of a 0-d tensor keep the 0-d shape.
"""
from mge.core import Transformation, ops

_VEC1 = None


def _lift(next, x):
    return next(ops.Reshape((1,)), (x,))[0] if x.ndim == 0 else x


def _concat(op, inputs, next):
    if all(x.ndim != 0 for x in inputs):
        return next(op, inputs)
    return next(op, tuple(_lift(next, x) for x in inputs))


def _cumsum(op, inputs, next):
    x = inputs[0]
    if x.ndim != 0:
        return next(op, inputs)
    return next(op.replace(axis=0), (_lift(next, x),) + tuple(inputs[1:]))


def _reduce(op, inputs, next):
    x = inputs[0]
    if x.ndim != 0 or op.axis is None:
        return next(op, inputs)
    if op.axis not in (0, -1, (0,), (-1,)):
        raise ValueError(f"{op.name}: axis {op.axis} is out of range for a 0-d tensor")
    out = next(op.replace(axis=0), (_lift(next, x),) + tuple(inputs[1:]))
    return tuple(next(ops.Reshape(()), (y,))[0] if y.ndim == 1 else y for y in out)


class ScalarTransformation(Transformation):
    """Gives 0-d inputs of ``Concat``, ``CumSum`` and ``Reduce`` MegEngine's meaning."""

    name = "scalar"

    def __init__(self):
        self.rules = {}
        for cls_name, rule in (("Concat", _concat), ("CumSum", _cumsum), ("Reduce", _reduce)):
            cls = getattr(ops, cls_name, None)
            if cls is not None:
                self.rules[cls] = rule

    def apply(self, op, inputs, next):
        return self.rules[type(op)](op, inputs, next)
