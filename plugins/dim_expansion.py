"""dim_expansion: run 4-D kernels on inputs of lower rank, as MegEngine's dim-expansion layer does.

* ``BatchNorm`` on ``(N, C)`` or ``(N, C, L)`` input runs as ``(N, C, 1, 1)`` / ``(N, C, L, 1)``;
* ``Convolution`` and ``Pooling`` on an unbatched ``(C, H, W)`` input run with a batch of one.

The outputs get the caller's rank back.  Kernels therefore only handle NCHW.
"""
from mge.core import Transformation, ops


def _batch_norm(op, inputs, next):
    x = inputs[0]
    nd = x.ndim
    if nd >= 4:
        return next(op, inputs)
    if nd < 2:
        raise ValueError(f"{op.name}: expects an input of at least 2 dims (N, C, ...), got shape {x.shape}")
    axes = (2, 3) if nd == 2 else (3,)
    x4 = next(ops.AddAxis(axes), (x,))[0]
    outs = next(op, (x4,) + tuple(inputs[1:]))
    shape4 = x4.shape
    return tuple(next(ops.RemoveAxis(axes), (y,))[0] if y.shape == shape4 else y for y in outs)


def _unbatched(op, inputs, next):
    x = inputs[0]
    if x.ndim != 3:
        return next(op, inputs)
    x4 = next(ops.AddAxis((0,)), (x,))[0]
    outs = next(op, (x4,) + tuple(inputs[1:]))
    return tuple(next(ops.RemoveAxis((0,)), (y,))[0] if y.ndim == 4 else y for y in outs)


class DimExpansionTransformation(Transformation):
    """Expands low-rank inputs of ``BatchNorm``, ``Convolution`` and ``Pooling`` to 4-D."""

    name = "dim_expansion"

    def __init__(self):
        self.rules = {}
        for cls_name, rule in (("BatchNorm", _batch_norm), ("Convolution", _unbatched),
                               ("Pooling", _unbatched)):
            cls = getattr(ops, cls_name, None)
            if cls is not None:
                self.rules[cls] = rule
        self.op_types = tuple(self.rules)

    def apply(self, op, inputs, next):
        return self.rules[type(op)](op, inputs, next)
