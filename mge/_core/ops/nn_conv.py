"""Convolutions: ``Convolution``, ``ConvolutionBackwardData`` (transposed conv) and
``ConvolutionBackwardFilter`` (the weight gradient).

All three work on any number of spatial dims (1-D, 2-D, 3-D): the length of ``stride`` says how
many.  Layouts are MegEngine's: input ``(N, C, *spatial)``; a dense weight is ``(O, I, *kernel)``,
a grouped weight ``(G, O/G, I/G, *kernel)``.  ``ConvolutionBackwardData`` takes ``(weight, dy)``
(MegEngine's order) and gives the input-shaped result; its weight is read as the weight of the
forward convolution whose input gradient it computes, i.e. ``(I, O, *kernel)`` of the transposed conv.

This module holds the op classes and their shape/dtype rules.  The CPU kernels (im2col and BLAS)
are in ``mge/_core/device/cpu/kernels/conv.py``, the backward rules (each op's gradients are the
other two) in ``mge/_core/autodiff/rules/conv.py``.
"""
from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardFilter", "conv_out_size",
           "deconv_out_size"]


class Convolution(OpDef):
    """Cross-correlation of ``(x, weight)``; tuples ``stride``, ``padding``, ``dilation`` (one entry per
    spatial dim) and ``groups``."""

    _fields = ("stride", "padding", "dilation", "groups", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "compute_mode": "default"}
    long_running = True  # BLAS matrix products, without the GIL: the worker runs them


class ConvolutionBackwardData(OpDef):
    """Transposed convolution of ``(weight, dy)``: the gradient of ``Convolution`` w.r.t. its input.

    ``output_padding`` adds rows/columns at the end of each spatial dim (it picks the input size
    when several sizes give the same forward output size)."""

    _fields = ("stride", "padding", "dilation", "groups", "output_padding", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "output_padding": (0, 0), "compute_mode": "default"}
    long_running = True  # BLAS matrix products, without the GIL: the worker runs them


class ConvolutionBackwardFilter(OpDef):
    """The weight gradient of ``Convolution``: inputs ``(x, dy, weight)``; ``weight`` gives the shape."""

    _fields = ("stride", "padding", "dilation", "groups", "compute_mode")
    _defaults = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1,
                 "compute_mode": "default"}
    long_running = True  # BLAS matrix products, without the GIL: the worker runs them


def conv_out_size(size, k, s, p, d):
    """Output length of a convolution along one dim (MegEngine: floor)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# -- shape rules ---------------------------------------------------------------------------------

def _check_params(op, descs):
    nd = len(op.stride)
    if not (len(op.padding) == len(op.dilation) == nd):
        raise op_error(ValueError, op, "stride, padding and dilation must have the same length", descs)
    if any(s < 1 for s in op.stride) or any(d < 1 for d in op.dilation):
        raise op_error(ValueError, op, f"stride {op.stride} and dilation {op.dilation} must be >= 1",
                       descs)
    if any(p < 0 for p in op.padding):
        raise op_error(ValueError, op, f"padding {op.padding} must be >= 0", descs)
    if op.groups < 1:
        raise op_error(ValueError, op, f"groups must be >= 1, got {op.groups}", descs)
    return nd


def _split_weight(op, descs, wshape, nd):
    """``(G, A, B, kernel)`` of a dense or grouped weight shape."""
    g = op.groups
    if g == 1 and len(wshape) == nd + 2:
        return 1, wshape[0], wshape[1], tuple(wshape[2:])
    if len(wshape) == nd + 3 and wshape[0] == g:
        return g, wshape[1], wshape[2], tuple(wshape[3:])
    want = f"{nd + 2}-D (O, I, *kernel)" if g == 1 else f"{nd + 3}-D (groups={g}, O/G, I/G, *kernel)"
    raise op_error(ValueError, op, f"weight must be {want}, got shape {wshape}", descs)


def _split_weight_for(op, descs, xs, ws, nd, channels_at):
    """``_split_weight`` of ``ws``, once the input of shape ``xs`` is checked to be
    (N, C, *spatial) with C the channels the weight expects: ``groups`` times the per-group size
    at position ``channels_at`` of ``(G, A, B, kernel)`` (B for a convolution, A for its
    transpose)."""
    if len(xs) != nd + 2:
        raise op_error(ValueError, op, f"input must be {nd + 2}-D (N, C, *spatial), got shape {xs}",
                       descs)
    parts = _split_weight(op, descs, ws, nd)
    g, per_group = parts[0], parts[channels_at]
    if per_group * g != xs[1]:
        raise op_error(ValueError, op, f"input has {xs[1]} channels but the weight expects "
                       f"{per_group * g} (groups={g}, {per_group} per group)", descs)
    return parts


def _check_float(op, descs):
    for d in descs:
        if d[1].kind != "f":
            raise op_error(TypeError, op, "inputs must be floating point", descs)
    if len({d[1] for d in descs}) > 1:
        raise op_error(TypeError, op, "inputs must have the same dtype", descs)


@def_infer(Convolution)
def _infer_conv(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (x, weight), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    _check_float(op, descs)
    (xs, dtype), (ws, _) = descs
    if xs is None or ws is None:
        return [TensorDesc(None, dtype)]
    g, og, _, k = _split_weight_for(op, descs, xs, ws, nd, channels_at=2)
    out = tuple(conv_out_size(xs[2 + i], k[i], op.stride[i], op.padding[i], op.dilation[i])
                for i in range(nd))
    if any(o <= 0 for o in out):
        raise op_error(ValueError, op, f"kernel {k} (dilation {op.dilation}) is larger than the padded "
                       f"input {xs[2:]} (padding {op.padding})", descs)
    return [TensorDesc((xs[0], g * og) + out, dtype)]


def deconv_out_size(op, ishape, k):
    """Spatial output size of the ``ConvolutionBackwardData`` ``op`` for the spatial input size
    ``ishape`` and the kernel size ``k``."""
    return tuple((ishape[i] - 1) * op.stride[i] - 2 * op.padding[i] + op.dilation[i] * (k[i] - 1)
                 + 1 + op.output_padding[i] for i in range(len(k)))


@def_infer(ConvolutionBackwardData)
def _infer_deconv(op, descs):
    if len(descs) != 2:
        raise op_error(TypeError, op, f"expects 2 inputs (weight, dy), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    if len(op.output_padding) != nd:
        raise op_error(ValueError, op, "output_padding must have one entry per spatial dim", descs)
    _check_float(op, descs)
    (ws, dtype), (ys, _) = descs
    if ws is None or ys is None:
        return [TensorDesc(None, dtype)]
    g, _, b, k = _split_weight_for(op, descs, ys, ws, nd, channels_at=1)
    if any(not 0 <= op.output_padding[i] < max(op.stride[i], op.dilation[i]) for i in range(nd)):
        raise op_error(ValueError, op, f"output_padding {op.output_padding} must be smaller than "
                       f"stride {op.stride} or dilation {op.dilation}", descs)
    out = deconv_out_size(op, ys[2:], k)
    if any(o <= 0 for o in out):
        raise op_error(ValueError, op, f"output size {out} is not positive", descs)
    return [TensorDesc((ys[0], g * b) + out, dtype)]


@def_infer(ConvolutionBackwardFilter)
def _infer_conv_filter(op, descs):
    if len(descs) != 3:
        raise op_error(TypeError, op, f"expects 3 inputs (x, dy, weight), got {len(descs)}", descs)
    nd = _check_params(op, descs)
    _check_float(op, descs[:2])
    (xs, dtype), (ys, _), (ws, wdt) = descs
    if xs is None or ys is None or ws is None:
        return [TensorDesc(ws, wdt)]
    if len(xs) != nd + 2 or len(ys) != nd + 2:
        raise op_error(ValueError, op, f"x and dy must be {nd + 2}-D (N, C, *spatial)", descs)
    g, og, ig, k = _split_weight(op, descs, ws, nd)
    full = tuple(conv_out_size(xs[2 + i], k[i], op.stride[i], op.padding[i], op.dilation[i])
                 for i in range(nd))
    # dy may be smaller than the convolution of x: the gradient of a transposed convolution whose
    # output_padding is at least the stride meets an x with rows no output position reaches.
    if (ys[0] != xs[0] or ig * g != xs[1] or og * g != ys[1]
            or any(not 0 < ys[2 + i] <= full[i] for i in range(nd))):
        raise op_error(ValueError, op, f"x {xs}, dy {ys} and weight {ws} do not belong to one "
                       f"convolution (its output would be {(xs[0], og * g) + full})", descs)
    return [TensorDesc(ws, wdt)]
