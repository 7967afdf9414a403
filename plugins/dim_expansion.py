"""dim_expansion: run batched (NCHW) kernels on unbatched ``(C, H, W)`` inputs.

``Convolution`` (2-D) and ``Pooling`` get a batch of one added before the kernel and removed from
the outputs, so ``F.conv2d``/``F.max_pool2d``/``F.avg_pool2d`` accept a single image.  MegEngine
1.13 rejects such inputs (its dim-expansion layer covers only BatchNorm, whose mge kernel handles
any rank itself); this extension is listed in ``docs/differences.rst``.  Kernels therefore only see
batched inputs.
"""
from mge.core import Transformation, ops


def _unbatched(op, inputs, next):
    x = inputs[0]
    spatial = len(op.stride)  # one entry per spatial dim, for both ops
    if x.ndim != spatial + 1:
        return next(op, inputs)
    xb = next(ops.AddAxis((0,)), (x,))[0]
    outs = next(op, (xb,) + tuple(inputs[1:]))
    return tuple(next(ops.RemoveAxis((0,)), (y,))[0] for y in outs)


class DimExpansionTransformation(Transformation):
    """Adds a batch axis to unbatched inputs of ``Convolution`` and ``Pooling``."""

    name = "dim_expansion"

    def __init__(self):
        self.op_types = tuple(getattr(ops, n) for n in ("Convolution", "Pooling") if hasattr(ops, n))

    def apply(self, op, inputs, next):
        return _unbatched(op, inputs, next)
