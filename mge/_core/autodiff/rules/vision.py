"""Backward rules of the image ops (``mge/_core/ops/vision.py``).

Each differentiable input gets ``VisionBackward(op, index)`` of the forward inputs and the output
gradient, where MegEngine 1.13 has a gradient: ``Resize`` (and the trilinear ``Resize3D``),
``WarpPerspective`` (input and matrix), ``Remap`` (input and map), ``ROIAlign`` and ``ROIPooling``
(input), ``Correlation`` (both inputs).  Index inputs (``mat_idx``, RoI boxes) get none, as in
MegEngine.  ``VisionBackward`` itself has no second order (as MegEngine's backward oprs).
"""
from ...ops.vision import (
    Correlation, Remap, Resize, Resize3D, ROIAlign, ROIPooling, VisionBackward, WarpAffine,
    WarpPerspective,
)
from ..gradutil import run
from ..registry import def_backward


def _grads(op, inputs, grads, needs, differentiable):
    g = grads[0]
    out = [None] * len(inputs)
    if g is None:
        return out
    for i in differentiable:
        if needs[i]:
            out[i] = run(VisionBackward.get(op, i), *inputs, g)
    return out


def _rule(cls, differentiable):
    @def_backward(cls)
    def rule(op, inputs, outputs, grads, needs):
        return _grads(op, inputs, grads, needs, differentiable)
    rule.__name__ = f"_{cls.__name__.lower()}_grad"
    return rule


_rule(Resize, (0,))
_rule(Resize3D, (0,))
_rule(WarpPerspective, (0, 1))
_rule(Remap, (0, 1))
_rule(ROIAlign, (0,))
_rule(ROIPooling, (0,))
_rule(Correlation, (0, 1))


@def_backward(WarpAffine)
def _warp_affine_grad(op, inputs, outputs, grads, needs):
    # MegEngine 1.13 has no gradient of WarpAffine; mge's kernel has one, so give it.
    return _grads(op, inputs, grads, needs, (0, 1))


@def_backward(VisionBackward)
def _vision_backward_grad(op, inputs, outputs, grads, needs):
    raise NotImplementedError(f"{op.forward.name}: no second-order gradient (as in MegEngine 1.13)")
