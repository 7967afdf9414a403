"""CPU kernels of ``mge/_core/ops/nn_extra.py``: sliding windows (a fancy-index gather and its
transpose, a strided add per window offset) and the CTC loss (alpha-beta in float64 log-space,
a loop over time steps vectorized over the batch and the label positions).
"""
import numpy as np

from ....ops.nn_extra import CTCLoss, SlidingWindow, SlidingWindowTranspose, window_out_size
from ..table import def_kernel


def _positions(op, hw):
    return tuple(window_out_size(hw[i], op.window[i], op.stride[i], op.padding[i],
                                 op.dilation[i]) for i in range(2))


@def_kernel(SlidingWindow)
def _cpu_sliding_window(op, x):
    (ph, pw), (sh, sw), (dh, dw), (kh, kw) = op.padding, op.stride, op.dilation, op.window
    oh, ow = _positions(op, x.shape[2:])
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    ih = (np.arange(oh) * sh)[:, None, None, None] + (np.arange(kh) * dh)[None, None, :, None]
    iw = (np.arange(ow) * sw)[None, :, None, None] + (np.arange(kw) * dw)[None, None, None, :]
    return (np.ascontiguousarray(xp[:, :, ih, iw]),)


@def_kernel(SlidingWindowTranspose)
def _cpu_sliding_window_transpose(op, y):
    (ph, pw), (sh, sw), (dh, dw), (kh, kw) = op.padding, op.stride, op.dilation, op.window
    h, w = op.out_size
    n, c, oh, ow = y.shape[:4]
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), y.dtype)
    # One strided add per window offset: within one offset the target positions are distinct.
    # Offsets last to first, so that each target sums its windows in window order (the order of
    # a loop over windows, bit for bit in float32).
    for i in range(kh - 1, -1, -1):
        for j in range(kw - 1, -1, -1):
            out[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                j * dw:j * dw + sw * (ow - 1) + 1:sw] += y[:, :, :, :, i, j]
    return (np.ascontiguousarray(out[:, :, ph:ph + h, pw:pw + w]),)


_LOG_TINY = float(np.log(np.finfo(np.float32).tiny))  # MegEngine's _safelog floor (float32)


def _shift(a, k):
    """``a`` moved ``k`` places to the right along the last axis, ``-inf`` coming in."""
    out = np.full_like(a, -np.inf)
    out[..., k:] = a[..., :-k]
    return out


def _unshift(a, k):
    """``a`` moved ``k`` places to the left along the last axis, ``-inf`` coming in."""
    out = np.full_like(a, -np.inf)
    out[..., :-k] = a[..., k:]
    return out


@def_kernel(CTCLoss)
def _cpu_ctc_loss(op, pred, pred_lengths, label, label_lengths):
    t_max, n, _ = pred.shape
    plen = pred_lengths.astype(np.int64).reshape(-1)
    llen = label_lengths.astype(np.int64).reshape(-1)
    s = label.shape[1]
    big_l = 2 * s + 1
    ext = np.full((n, big_l), op.blank, np.int64)
    ext[:, 1::2] = label
    # Positions past a sample's label never reach its final states: blank them, so that padding
    # values (which may be out of range) are never used as class indices.
    ext[np.arange(big_l)[None, :] > 2 * llen[:, None]] = op.blank
    p = pred.astype(np.float64)
    floor = np.finfo(np.float32).tiny
    logp = np.log(np.maximum(p, floor))
    lp = logp[:, np.arange(n)[:, None], ext]                     # (T, N, L)
    skip = np.zeros((n, big_l), bool)
    skip[:, 2:] = ext[:, 2:] != ext[:, :-2]
    rows = np.arange(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # Forward: MegEngine starts the unreachable states at log(tiny), not -inf.
        alpha = np.empty((t_max, n, big_l))
        a = np.full((n, big_l), _LOG_TINY)
        a[:, :2] = lp[0, :, :2]
        alpha[0] = a
        for t in range(1, t_max):
            b = np.logaddexp(a, _shift(a, 1))
            b = np.where(skip, np.logaddexp(b, _shift(a, 2)), b)
            a = b + lp[t]
            alpha[t] = a
        last = plen - 1
        ends = (2 * llen, 2 * llen - 1)
        log_like = np.logaddexp(alpha[last, rows, ends[0]], alpha[last, rows, ends[1]])
        # Backward: beta[t] = d(likelihood)/d(alpha[t]) in log space, started at each sample's
        # own last step; the gradient of log-likelihood w.r.t. log y_t(s) is alpha*beta/P.
        start = np.full((n, big_l), -np.inf)
        start[rows, ends[0]] = 0.0
        start[rows, ends[1]] = 0.0
        beta = np.full((n, big_l), -np.inf)
        dlogp = np.zeros((t_max, n, pred.shape[2]))
        for t in range(t_max - 1, -1, -1):
            if t < t_max - 1:
                g = beta + lp[t + 1]
                carried = np.logaddexp(np.logaddexp(g, _unshift(g, 1)),
                                       _unshift(np.where(skip, g, -np.inf), 2))
            else:
                carried = np.full((n, big_l), -np.inf)
            beta = np.where((t == last)[:, None], start,
                            np.where((t < last)[:, None], carried, -np.inf))
            occ = np.exp(alpha[t] + beta - log_like[:, None])       # (N, L)
            if t == 0:
                occ[:, 2:] = 0.0  # the other initial states are constants
            np.add.at(dlogp[t], (np.broadcast_to(rows[:, None], ext.shape), ext), occ)
        occupancy = dlogp
    # loss = -log P; d loss / d pred = -(d log P / d log p) / p where p was not floored
    grad = np.where(p >= floor, -occupancy / np.maximum(p, floor), 0.0)
    return ((-log_like).astype(pred.dtype), grad.astype(pred.dtype))
