"""Backward rules of ``mge/_core/ops/nn_extra.py``.

``SlidingWindow`` and ``SlidingWindowTranspose`` are linear and each other's transpose, so each
one's gradient is the other op: both are differentiable to any order.  ``CTCLoss`` outputs its own
gradient (alpha-beta) beside the loss; the rule scales it by the incoming gradient of the loss.
That second output is an auxiliary result: no gradient flows through it, and the CTC loss has no
second-order gradient with respect to ``pred`` (as in MegEngine, whose loss is not twice
differentiable either through its ``safelog`` floor).
"""
from ...ops.nn_extra import CTCLoss, SlidingWindow, SlidingWindowTranspose
from ...ops.shape import AddAxis
from ..gradutil import ew, output, run
from ..registry import def_backward


@def_backward(SlidingWindow)
def _sliding_window_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    x, = inputs
    back = SlidingWindowTranspose.get(tuple(int(s) for s in x.shape[2:]), op.window, op.padding,
                                      op.stride, op.dilation)
    return [run(back, g)]


@def_backward(SlidingWindowTranspose)
def _sliding_window_transpose_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None]
    return [run(SlidingWindow.get(op.window, op.padding, op.stride, op.dilation), g)]


@def_backward(CTCLoss, keeps_outputs=True)
def _ctc_loss_grad(op, inputs, outputs, grads, needs):
    g = grads[0]
    if g is None or not needs[0]:
        return [None, None, None, None]
    dpred = output(op, inputs, outputs, 1)                      # (T, N, C)
    scale = run(AddAxis.get((0, 2)), g)                         # (1, N, 1)
    return [ew("mul", dpred, scale), None, None, None]
