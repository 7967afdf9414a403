"""Backward rules of the convolutions (``mge/_core/ops/nn_conv.py``).

The three ops are bilinear, and each one's gradients are the other two, so convolutions are
differentiable to any order.  With ``y = conv(x, w)``: ``dx = ConvolutionBackwardData(w, dy)``
(``output_padding`` restores the input size that the floor in the output size lost) and
``dw = ConvolutionBackwardFilter(x, dy, w)``.
"""
from ...ops.indexing import Subtensor
from ...ops.nn_conv import Convolution, ConvolutionBackwardData, ConvolutionBackwardFilter
from ..gradutil import run
from ..registry import def_backward

_ALL = ("slice", None, None, None)


def _params(op):
    return op.stride, op.padding, op.dilation, op.groups


def _input_grad(op, w, dy, in_spatial):
    """``ConvolutionBackwardData(w, dy)`` of the spatial size ``in_spatial``: ``output_padding``
    adds back the input rows that the floor in the convolution's output size dropped."""
    nd = len(op.stride)
    k = tuple(w.shape[-nd:])
    extra = tuple(int(in_spatial[i]) - ((dy.shape[2 + i] - 1) * op.stride[i] - 2 * op.padding[i]
                                        + op.dilation[i] * (k[i] - 1) + 1) for i in range(nd))
    bwd = ConvolutionBackwardData.get(*_params(op), extra, op.compute_mode)
    return run(bwd, w, dy)


def _output_grad(op, x, w, out_spatial):
    """``Convolution(x, w)`` cropped to ``out_spatial`` (it is larger only after an
    ``output_padding`` of at least the stride)."""
    y = run(Convolution.get(*_params(op), op.compute_mode), x, w)
    if tuple(y.shape[2:]) != tuple(out_spatial):
        crop = (_ALL, _ALL) + tuple(("slice", 0, int(n), None) for n in out_spatial)
        y = run(Subtensor.get(crop), y)
    return y


def _filter_grad(op, x, dy, w):
    bwd = ConvolutionBackwardFilter.get(*_params(op), op.compute_mode)
    return run(bwd, x, dy, w)


@def_backward(Convolution)
def _conv_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None:
        return [None, None]
    x, w = inputs
    dx = _input_grad(op, w, g, x.shape[2:]) if needs[0] else None
    dw = _filter_grad(op, x, g, w) if needs[1] else None
    return [dx, dw]


@def_backward(ConvolutionBackwardData)
def _deconv_grad(op, inputs, outputs, grads, needs):
    # out = deconv(w, dy) is the transpose of x -> conv(x, w): <gg, deconv(w, dy)> = <conv(gg, w), dy>
    g = grads[0]
    if g is None:
        return [None, None]
    w, dy = inputs
    dw = _filter_grad(op, g, dy, w) if needs[0] else None
    ddy = _output_grad(op, g, w, dy.shape[2:]) if needs[1] else None
    return [dw, ddy]


@def_backward(ConvolutionBackwardFilter)
def _conv_filter_grad(op, inputs, outputs, grads, needs):
    # <gg, filter(x, dy)> = <conv(x, gg), dy>; the weight input only gives the shape.
    g = grads[0]
    if g is None:
        return [None, None, None]
    x, dy, _ = inputs
    dx = _input_grad(op, g, dy, x.shape[2:]) if needs[0] else None
    ddy = _output_grad(op, x, g, dy.shape[2:]) if needs[1] else None
    return [dx, ddy, None]
