"""Sliding windows and the CTC loss: ``SlidingWindow`` (MegEngine's ``Images2Neibs``),
``SlidingWindowTranspose`` and ``CTCLoss``.

* ``SlidingWindow(window, padding, stride, dilation)``: ``(N, C, H, W)`` ->
  ``(N, C, OH, OW, WH, WW)`` with ``out[n, c, oh, ow, i, j] = x[n, c, oh*sh - ph + i*dh,
  ow*sw - pw + j*dw]`` (zero outside the input); ``OH`` as a convolution's output size.
* ``SlidingWindowTranspose(out_size, window, padding, stride, dilation)``: its transpose, the sum of
  every window element back onto the input position it was copied from.  The two are each other's
  gradient (linear maps), so both are differentiable to any order.
* ``CTCLoss(blank)``: ``(pred, pred_lengths, label, label_lengths)`` -> ``(loss, grad)``: the
  per-sample negative log likelihood ``(N,)`` of the padded ``(N, S)`` labels under the
  ``(T, N, C)`` probabilities ``pred`` (MegEngine's ``ctc_loss`` takes probabilities, not logits), and its
  gradient with respect to ``pred`` (alpha-beta in float64 log-space), which the backward rule
  scales by the incoming gradient.  Both outputs have ``pred``'s dtype (``F.nn.ctc_loss`` gives
  float32 ``pred``, so float32 results, as MegEngine).

The deformable and region-restricted convolutions, the locally connected convolution and the
deformable PS-ROI pooling are compositions of these and other differentiable ops
(``mge/functional/_nn_extra.py``).  CPU kernels: ``mge/_core/device/cpu/kernels/nn_extra.py``;
backward rules: ``mge/_core/autodiff/rules/nn_extra.py``.
"""
import numpy as np

from .base import OpDef, TensorDesc, def_infer, op_error

__all__ = ["SlidingWindow", "SlidingWindowTranspose", "CTCLoss", "window_out_size"]


class SlidingWindow(OpDef):
    """Copy every ``window`` of the zero-padded input to its own output location
    (MegEngine's ``Images2Neibs``); pairs ``window``, ``padding``, ``stride``, ``dilation``."""

    _fields = ("window", "padding", "stride", "dilation")
    _defaults = {"padding": (0, 0), "stride": (1, 1), "dilation": (1, 1)}
    long_running = False


class SlidingWindowTranspose(OpDef):
    """Sum the windows of ``(N, C, OH, OW, WH, WW)`` back onto an ``(N, C, *out_size)`` image."""

    _fields = ("out_size", "window", "padding", "stride", "dilation")
    _defaults = {"padding": (0, 0), "stride": (1, 1), "dilation": (1, 1)}
    long_running = False


class CTCLoss(OpDef):
    """Per-sample CTC negative log likelihood and its gradient w.r.t. the probabilities."""

    _fields = ("blank",)
    _defaults = {"blank": 0}
    long_running = True  # a Python loop over time steps: the worker runs it


def window_out_size(size, k, s, p, d):
    """Number of window positions along one dim (a convolution's output size, floor)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _check_window(op, descs):
    for name in ("window", "padding", "stride", "dilation"):
        v = getattr(op, name)
        if len(v) != 2:
            raise op_error(ValueError, op, f"{name} must be a pair, got {v}", descs)
    if min(op.window) < 1 or min(op.stride) < 1 or min(op.dilation) < 1:
        raise op_error(ValueError, op, f"window {op.window}, stride {op.stride} and dilation "
                       f"{op.dilation} must be >= 1", descs)
    if min(op.padding) < 0:
        raise op_error(ValueError, op, f"padding {op.padding} must be >= 0", descs)


def _window_positions(op, descs, hw):
    out = tuple(window_out_size(hw[i], op.window[i], op.stride[i], op.padding[i], op.dilation[i])
                for i in range(2))
    if min(out) <= 0:
        raise op_error(ValueError, op, f"window {op.window} (dilation {op.dilation}) is larger "
                       f"than the padded input {tuple(hw)} (padding {op.padding})", descs)
    return out


@def_infer(SlidingWindow)
def _infer_sliding_window(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    _check_window(op, descs)
    (xs, dtype), = descs
    if xs is None:
        return [TensorDesc(None, dtype)]
    if len(xs) != 4:
        raise op_error(ValueError, op, f"input must be 4-D (N, C, H, W), got shape {xs}", descs)
    return [TensorDesc(tuple(xs[:2]) + _window_positions(op, descs, xs[2:]) + tuple(op.window),
                       dtype)]


@def_infer(SlidingWindowTranspose)
def _infer_sliding_window_transpose(op, descs):
    if len(descs) != 1:
        raise op_error(TypeError, op, f"expects 1 input, got {len(descs)}", descs)
    _check_window(op, descs)
    if len(op.out_size) != 2 or min(op.out_size) < 1:
        raise op_error(ValueError, op, f"out_size must be a pair of positive ints, got "
                       f"{op.out_size}", descs)
    (xs, dtype), = descs
    if xs is None:
        return [TensorDesc(None, dtype)]
    want = _window_positions(op, descs, op.out_size) + tuple(op.window)
    if len(xs) != 6 or tuple(xs[2:]) != want:
        raise op_error(ValueError, op, f"input must be (N, C) + {want} for out_size "
                       f"{op.out_size}, got shape {xs}", descs)
    return [TensorDesc(tuple(xs[:2]) + tuple(op.out_size), dtype)]


@def_infer(CTCLoss)
def _infer_ctc_loss(op, descs):
    if len(descs) != 4:
        raise op_error(TypeError, op, "expects 4 inputs (pred, pred_lengths, label, "
                       f"label_lengths), got {len(descs)}", descs)
    (ps, pdt), (pls, _), (ls, ldt), (lls, _) = descs
    if pdt.kind != "f":
        raise op_error(TypeError, op, "pred must be floating point", descs)
    if ldt.kind not in "iub":
        raise op_error(TypeError, op, "label must be integer", descs)
    f32 = np.dtype(pdt)  # F.nn.ctc_loss passes float32 (MegEngine's result dtype)
    if ps is None:
        return [TensorDesc(None, f32), TensorDesc(None, f32)]
    if len(ps) != 3:
        raise op_error(ValueError, op, f"pred must be 3-D (T, N, C), got shape {ps}", descs)
    if ls is not None and (len(ls) != 2 or ls[0] != ps[1]):
        raise op_error(ValueError, op, f"label must be (N, S) with N={ps[1]}, got shape {ls}",
                       descs)
    if not 0 <= op.blank < ps[2]:
        raise op_error(ValueError, op, f"blank must be in [0, {ps[2]}), got {op.blank}", descs)
    return [TensorDesc((ps[1],), f32), TensorDesc(tuple(ps), f32)]
