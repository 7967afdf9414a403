"""Small CPU kernels as C loops: one pass where numpy would make several calls (compiled).

A kernel on small tensors is mostly Python and numpy call overhead, and in a traced program it
runs right after a matrix product has evicted the interpreter from the caches: the cross entropy
of a (64, 10) batch took about 100 us as numpy's nine calls there.  These loops do it in one.

Each function returns ``None`` when it cannot run -- in the pure-Python twin, or for a dtype,
layout or label it does not take -- and the kernel (``kernels/nn.py``) then computes the same
thing with numpy.  The two ways agree to float rounding, not bit for bit (C's ``expf`` and a
double sum against numpy's SIMD ``exp`` and pairwise sum); an op gives the same bits each time in
one mode, so traced and eager results stay identical.  The C code is in ``loops.pxd``.
"""
from __future__ import annotations  # C types in signatures are for Cython only

import cython
import numpy as np

from ... import _accel

_accel.guard(__name__)
if cython.compiled:
    from cython.cimports.cpython.buffer import PyBUF_RECORDS, PyBUF_RECORDS_RO, PyBuffer_Release
    from cython.cimports.cpython.buffer import PyObject_GetBuffer
    # (the buffer helpers of handoff.py's C loops)
    from cython.cimports.mge._core.device.cpu.handoff_c import _acquire3, _release3

__all__ = ["bias_act", "colsum_sgd", "cross_entropy", "cross_entropy_backward"]

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)


def _takes(x, label):
    # (rows, classes) C-contiguous float32/float64 logits and contiguous int32/int64 labels
    return (x.ndim == 2 and label.ndim == 1 and label.shape[0] == x.shape[0] and x.shape[1] > 0
            and (x.dtype == _F32 or x.dtype == _F64) and (label.dtype == _I32 or label.dtype == _I64)
            and x.flags.c_contiguous and label.flags.c_contiguous)


def bias_act(out, x, b, relu):
    """``out = x + b`` (then ``relu``, as ``numpy.maximum(v, 0)``) for a C-contiguous
    (rows, cols) float32/float64 ``x`` and a contiguous ``b`` of ``cols`` (``out`` may be ``x``):
    the same bits as numpy's two calls, in one pass.  False when this cannot run it."""
    if not cython.compiled:
        return False
    dtype = x.dtype
    if (x.ndim != 2 or b.ndim != 1 or b.shape[0] != x.shape[1] or out.shape != x.shape
            or (dtype != _F32 and dtype != _F64) or b.dtype != dtype or out.dtype != dtype
            or not (x.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous)
            or not out.flags.writeable):
        return False
    bo: Py_buffer  # noqa: F821
    bx: Py_buffer  # noqa: F821
    bb: Py_buffer  # noqa: F821
    _acquire3(out, x, b, cython.address(bo), cython.address(bx), cython.address(bb))
    rows: cython.Py_ssize_t = x.shape[0]
    cols: cython.Py_ssize_t = x.shape[1]
    act: cython.int = 1 if relu else 0
    single: cython.bint = dtype == _F32
    with cython.nogil:
        if single:
            mge_bias_act_f(cython.cast(cython.p_float, bo.buf),  # noqa: F821 (loops.pxd)
                           cython.cast(cython.p_float, bx.buf),
                           cython.cast(cython.p_float, bb.buf), rows, cols, act)
        else:
            mge_bias_act_d(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                           cython.cast(cython.p_double, bx.buf),
                           cython.cast(cython.p_double, bb.buf), rows, cols, act)
    _release3(cython.address(bo), cython.address(bx), cython.address(bb))
    return True


def colsum_sgd(out, param, g, a):
    """``out = param + a * g.sum(axis=0)`` for a C-contiguous (rows, cols) float32/float64 ``g``
    with rows >= 1 and cols >= 2 and contiguous (cols,) ``param`` and ``out`` of its dtype: a
    bias's SGD step from its gradient's rows, with the bits of numpy's ``add.reduce`` and
    ``param + (a * sum)`` (``a`` rounded to the dtype).  False when this cannot run it."""
    if not cython.compiled:
        return False
    dtype = g.dtype
    if (g.ndim != 2 or g.shape[0] < 1 or g.shape[1] < 2 or param.shape != (g.shape[1],)
            or out.shape != param.shape or (dtype != _F32 and dtype != _F64)
            or param.dtype != dtype or out.dtype != dtype or not out.flags.writeable
            or not (g.flags.c_contiguous and param.flags.c_contiguous
                    and out.flags.c_contiguous)):
        return False
    acc = np.empty_like(param)
    bo: Py_buffer  # noqa: F821
    bp: Py_buffer  # noqa: F821
    bg: Py_buffer  # noqa: F821
    ba: Py_buffer  # noqa: F821
    _acquire3(out, param, g, cython.address(bo), cython.address(bp), cython.address(bg))
    try:
        PyObject_GetBuffer(acc, cython.address(ba), PyBUF_RECORDS)
    except BaseException:
        _release3(cython.address(bo), cython.address(bp), cython.address(bg))
        raise
    rows: cython.Py_ssize_t = g.shape[0]
    cols: cython.Py_ssize_t = g.shape[1]
    single: cython.bint = dtype == _F32
    ad: cython.double = a
    af: cython.float = ad  # (a rounded to float32, as numpy's float32 update rounds it)
    with cython.nogil:
        if single:
            mge_colsum_sgd_f(cython.cast(cython.p_float, bo.buf),  # noqa: F821 (loops.pxd)
                             cython.cast(cython.p_float, bp.buf),
                             cython.cast(cython.p_float, bg.buf),
                             cython.cast(cython.p_float, ba.buf), rows, cols, af)
        else:
            mge_colsum_sgd_d(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                             cython.cast(cython.p_double, bp.buf),
                             cython.cast(cython.p_double, bg.buf),
                             cython.cast(cython.p_double, ba.buf), rows, cols, ad)
    PyBuffer_Release(cython.address(ba))
    _release3(cython.address(bo), cython.address(bp), cython.address(bg))
    return True


_REDUCE = {"none": 0, "sum": 1, "mean": 2}


def cross_entropy(x, label, reduction="none"):
    """Per-row ``logsumexp(x[i]) - x[i, label[i]]`` of (rows, classes) logits, or their
    ``"sum"``/``"mean"`` (a 0-d array, summed in double), or ``None`` when this cannot run it
    (see the module docstring): also for a label out of range, which the numpy path reports."""
    if not cython.compiled or not _takes(x, label) or reduction not in _REDUCE:
        return None
    reduce: cython.int = _REDUCE[reduction]
    out = np.empty(x.shape[0] if reduce == 0 else (), x.dtype)
    bo: Py_buffer  # noqa: F821
    bx: Py_buffer  # noqa: F821
    bl: Py_buffer  # noqa: F821
    _acquire3(out, x, label, cython.address(bo), cython.address(bx), cython.address(bl))
    rows: cython.Py_ssize_t = x.shape[0]
    cls: cython.Py_ssize_t = x.shape[1]
    single: cython.bint = x.dtype == _F32
    wide: cython.bint = label.dtype == _I64
    bad: cython.Py_ssize_t
    with cython.nogil:
        if single and not wide:
            bad = mge_ce_fwd_f_i32(cython.cast(cython.p_float, bo.buf),  # noqa: F821 (loops.pxd)
                                   cython.cast(cython.p_float, bx.buf),
                                   cython.cast(cython.p_int, bl.buf), rows, cls, reduce)
        elif single:
            bad = mge_ce_fwd_f_i64(cython.cast(cython.p_float, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_float, bx.buf),
                                   cython.cast(cython.p_longlong, bl.buf), rows, cls, reduce)
        elif not wide:
            bad = mge_ce_fwd_d_i32(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_double, bx.buf),
                                   cython.cast(cython.p_int, bl.buf), rows, cls, reduce)
        else:
            bad = mge_ce_fwd_d_i64(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_double, bx.buf),
                                   cython.cast(cython.p_longlong, bl.buf), rows, cls, reduce)
    _release3(cython.address(bo), cython.address(bx), cython.address(bl))
    return out if bad < 0 else None


def cross_entropy_backward(x, label, dy, reduction="none"):
    """``(softmax(x[i]) - onehot(label[i])) * g[i]`` per row of (rows, classes) logits, with
    ``g`` = ``dy`` (one per row), or for a reduced loss its scalar ``dy`` (divided by the rows for
    a ``"mean"``), or ``None`` when this cannot run it (``dy`` of ``x``'s dtype)."""
    if not cython.compiled or not _takes(x, label) or dy.dtype != x.dtype or reduction not in _REDUCE:
        return None
    if reduction == "none":
        if dy.ndim != 1 or dy.shape[0] != x.shape[0]:
            return None
        if not dy.flags.c_contiguous:
            dy = np.ascontiguousarray(dy)
    elif dy.ndim != 0:
        return None
    step: cython.Py_ssize_t = 1 if reduction == "none" else 0
    mean: cython.int = 1 if reduction == "mean" else 0
    out = np.empty_like(x)
    bo: Py_buffer  # noqa: F821
    bx: Py_buffer  # noqa: F821
    bl: Py_buffer  # noqa: F821
    bd: Py_buffer  # noqa: F821
    _acquire3(out, x, label, cython.address(bo), cython.address(bx), cython.address(bl))
    try:
        PyObject_GetBuffer(dy, cython.address(bd), PyBUF_RECORDS_RO)
    except BaseException:
        _release3(cython.address(bo), cython.address(bx), cython.address(bl))
        raise
    rows: cython.Py_ssize_t = x.shape[0]
    cls: cython.Py_ssize_t = x.shape[1]
    single: cython.bint = x.dtype == _F32
    wide: cython.bint = label.dtype == _I64
    bad: cython.Py_ssize_t
    with cython.nogil:
        if single and not wide:
            bad = mge_ce_bwd_f_i32(cython.cast(cython.p_float, bo.buf),  # noqa: F821 (loops.pxd)
                                   cython.cast(cython.p_float, bx.buf),
                                   cython.cast(cython.p_int, bl.buf),
                                   cython.cast(cython.p_float, bd.buf), step, mean, rows, cls)
        elif single:
            bad = mge_ce_bwd_f_i64(cython.cast(cython.p_float, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_float, bx.buf),
                                   cython.cast(cython.p_longlong, bl.buf),
                                   cython.cast(cython.p_float, bd.buf), step, mean, rows, cls)
        elif not wide:
            bad = mge_ce_bwd_d_i32(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_double, bx.buf),
                                   cython.cast(cython.p_int, bl.buf),
                                   cython.cast(cython.p_double, bd.buf), step, mean, rows, cls)
        else:
            bad = mge_ce_bwd_d_i64(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                                   cython.cast(cython.p_double, bx.buf),
                                   cython.cast(cython.p_longlong, bl.buf),
                                   cython.cast(cython.p_double, bd.buf), step, mean, rows, cls)
    PyBuffer_Release(cython.address(bd))
    _release3(cython.address(bo), cython.address(bx), cython.address(bl))
    return out if bad < 0 else None
