"""The GIL between the caller's thread and the worker, and the worker's GEMMs without it.

Python runs one thread at a time.  The worker's kernels are numpy calls that hold the GIL, except
inside BLAS and long ufunc loops; the caller's thread runs the user's Python, which holds it all the
time.  CPython gives the GIL to a waiting thread only when the holder blocks or after
``sys.getswitchinterval()`` (5 ms): a worker whose matrix product has finished would wait up to
5 ms for the caller's Python, and the two threads would take turns instead of overlapping.

So the two threads hand the GIL over explicitly (``Handoff``, one per worker):

* the worker says what it is doing: ``IDLE``, ``RUNNING`` (Python: it needs the GIL) or
  ``NOGIL`` (a matrix product or a long loop that runs without the GIL: ``CPU.gemm``,
  ``CPU.add_scaled``, ``CPU.relu_grad``);
* the caller, at each op it issues, calls ``yield_to_worker``: while the worker is ``RUNNING`` it
  releases the GIL and waits until the worker starts a GEMM or runs out of work (at most
  ``YIELD_TIMEOUT_US``, so that a kernel waiting for the caller cannot deadlock it);
* the worker runs two products at once (``gemm2``: state ``PAIR``), one on each core, only while
  the caller waits in the channel (``caller_blocked``: for a value, or for the queue to drain);
  while the caller's Python runs, the two run one after the other on the worker, and the caller
  keeps its core (measured on a traced MLP step: 10% faster so).  A caller that reaches an op
  during a pair waits the same way as for ``RUNNING``: a third runnable thread would take a
  third of both cores and the pair, which the worker waits for, would end later (measured: a
  pair taking 1.5x its time alone while a traced step's Python ran beside it).

The worker's Python then never waits for the caller's, and the caller's Python runs while BLAS
does: the overlap an asynchronous runtime is for, on two cores.  ``gemm`` calls the CBLAS of
numpy's own BLAS library (found by ``mge._core.device.cpu.blas``, held by ``CPU``, one per
process) so that the worker knows when the product ends; without it (or in the pure-Python twin)
kernels use ``np.matmul`` and nothing is handed over.  A kernel finds its worker's hand-off
through the thread it runs on (``bind``); on the caller's thread (``async_level`` 0) there is
none and nothing is handed over.

The C layout is in ``handoff.pxd`` (``handoff_c.pxd`` includes it for cimports).
"""
from __future__ import annotations  # C types in signatures are for Cython only

import threading

import cython
import numpy as np

from ... import _accel

_accel.guard(__name__)

if cython.compiled:
    from cython.cimports.cpython.buffer import (PyBUF_RECORDS, PyBUF_RECORDS_RO,
                                                PyBuffer_Release, PyObject_GetBuffer)
    from cython.cimports.cpython.pythread import (NOWAIT_LOCK, PY_LOCK_ACQUIRED, WAIT_LOCK,
                                                  PyThread_acquire_lock,
                                                  PyThread_allocate_lock, PyThread_free_lock,
                                                  PyThread_get_thread_ident,
                                                  PyThread_release_lock,
                                                  PyThread_start_new_thread)
    from cython.cimports.libc.stdlib import malloc
    from cython.cimports.posix.unistd import getpid
    # PyThread_acquire_lock_timed and the CBLAS function types are declared in handoff.pxd

__all__ = ["Handoff", "CpuKernels", "CPU", "IDLE", "RUNNING", "NOGIL", "PAIR", "add_scaled",
           "current"]

IDLE, RUNNING, NOGIL, PAIR = 0, 1, 2, 3
# the same states as C constants for the methods below (a module global costs a dict lookup and
# an int object per use, and yield_to_worker runs at every op the caller issues)
_IDLE = cython.declare(cython.int, 0)
_RUNNING = cython.declare(cython.int, 1)
_NOGIL = cython.declare(cython.int, 2)
_PAIR = cython.declare(cython.int, 3)
YIELD_TIMEOUT_US = 500
MIN_GEMM_WORK = 1 << 15  # m*n*k: smaller products are as fast through np.matmul
MIN_NOGIL_SIZE = 1 << 15  # elements: a loop this long is worth handing the GIL over for
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS enums
_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


@cython.cclass
class Handoff:
    """The worker's state and the caller's wait for it (see the module docstring).

    Fields (``handoff.pxd``): ``state``, ``caller_waiting``, ``caller_blocked`` (the caller
    waits in the channel for a value or for the queue to drain: its core is free), ``wake_pending``,
    ``yield_timeout_us`` (the longest the caller waits; 0: it never yields); counters ``yields``
    (hand-overs), ``timeouts`` (waits that ended without the worker letting go), ``nogil_runs``
    (kernels run without the GIL).  Every field is read and written with the GIL held, except
    ``state`` when such a kernel ends.
    """

    def __init__(self):
        self.state = _IDLE
        self.caller_waiting = False
        self.caller_blocked = False
        self.yields = self.timeouts = self.nogil_runs = 0
        self.yield_timeout_us = YIELD_TIMEOUT_US  # 0: the caller never yields
        self._new_locks()

    def _new_locks(self):
        # Both locks start held: no signal pending, nothing to wake the worker for.
        self.wake_pending = False
        if cython.compiled:
            self._signal = PyThread_allocate_lock()
            self._wake = PyThread_allocate_lock()
            if self._signal == cython.NULL or self._wake == cython.NULL:
                raise MemoryError("Handoff: cannot allocate a lock")
            PyThread_acquire_lock(self._signal, WAIT_LOCK)
            PyThread_acquire_lock(self._wake, WAIT_LOCK)
        else:
            self._py_wake = threading.Lock()
            self._py_wake.acquire()

    def __dealloc__(self):
        if cython.compiled:
            if self._signal != cython.NULL:
                PyThread_free_lock(self._signal)
            if self._wake != cython.NULL:
                PyThread_free_lock(self._wake)

    def reset(self):
        """After a fork: no worker, nobody waiting, fresh locks (the old ones may be held by a
        thread that does not exist in the child; they are left, not freed)."""
        self.state = _IDLE
        self.caller_waiting = False
        self.caller_blocked = False
        self._new_locks()

    # -- the caller's side ---------------------------------------------------------------------
    def kick(self):
        """The caller woke the worker: it will need the GIL."""
        self.state = _RUNNING

    @cython.ccall
    def yield_to_worker(self):
        """Let a ``RUNNING`` worker have the GIL until it starts a GEMM or goes idle, and let a
        worker running a ``PAIR`` of products have both cores until it is done."""
        if not cython.compiled or self.yield_timeout_us <= 0:
            return
        if self.state != _RUNNING and self.state != _PAIR:
            return
        self.caller_waiting = True
        self.yields += 1
        got: cython.int
        timeout: cython.longlong = self.yield_timeout_us
        with cython.nogil:
            got = PyThread_acquire_lock_timed(self._signal, timeout, 0)  # noqa: F821
        if self.caller_waiting:  # no signal came
            self.caller_waiting = False
            self.timeouts += 1
        elif got != PY_LOCK_ACQUIRED:  # the signal came after the timeout: take it back
            PyThread_acquire_lock(self._signal, NOWAIT_LOCK)

    # -- the worker's side ---------------------------------------------------------------------
    def worker_running(self):
        self.state = _RUNNING

    @cython.ccall
    def worker_idle(self):
        """The worker ran out of work (or stops)."""
        self.state = _IDLE
        self._wake_caller()

    @cython.ccall
    def wake(self):
        """Wake the sleeping worker (or make its next ``sleep`` return at once)."""
        if self.wake_pending:
            return
        self.wake_pending = True
        if cython.compiled:
            PyThread_release_lock(self._wake)
        else:
            self._py_wake.release()

    @cython.ccall
    def sleep(self):
        """The worker waits, without the GIL, until ``wake``."""
        if cython.compiled:
            with cython.nogil:
                PyThread_acquire_lock(self._wake, WAIT_LOCK)
        else:
            self._py_wake.acquire()
        self.wake_pending = False

    @cython.cfunc
    def _wake_caller(self):
        if self.caller_waiting:
            self.caller_waiting = False
            if cython.compiled:
                PyThread_release_lock(self._signal)

    def bind(self):
        """Called on the worker's thread: kernels running on it hand the GIL over through this."""
        _local.handoff = self

    @cython.cfunc
    def enter_pair(self) -> cython.int:
        # two products start, one on each core: the caller keeps waiting at its ops (no wake);
        # returns the state to restore when both end
        prev: cython.int = self.state
        self.nogil_runs += 1
        self.state = _PAIR
        return prev

    @cython.cfunc
    def enter_nogil(self) -> cython.int:
        # a kernel is about to run without the GIL: the caller may have it; returns the state to
        # restore when the kernel ends (without the GIL: ``state`` is a C field)
        prev: cython.int = self.state
        self.nogil_runs += 1
        self.state = _NOGIL
        self._wake_caller()
        return prev


_local = threading.local()


def current():
    """The hand-off of the worker whose thread calls this, or None."""
    return getattr(_local, "handoff", None)


@cython.cclass
class CpuKernels:
    """The CPU kernels that run in C, without the GIL when they are long (one per process:
    ``CPU``): matrix products through numpy's CBLAS ``sgemm``/``dgemm`` (``set_blas``), and the
    loops ``add_scaled`` (the SGD update) and ``relu_grad`` that numpy would do in several passes."""

    def __init__(self):
        self._ilp64 = False
        # counters: products run, pairs of them run at once, products started (gemm_start)
        self.gemms = self.pairs = self.starts = 0
        self.started = False
        if cython.compiled:
            self._sgemm = cython.NULL
            self._dgemm = cython.NULL

    @cython.ccall
    def add_scaled(self, out, y, x, a: cython.double):
        """``out = y + a * x`` elementwise (``out`` may be ``y``) for C-contiguous float32 or
        float64 arrays of one shape and dtype, in C, without the GIL when it is long; False when
        it cannot (the caller then uses numpy).  The arithmetic is numpy's ``y + (a * x)`` in the
        arrays' dtype (``a`` rounded to it, two roundings, no fused multiply-add), so both ways
        give the same bits."""
        if not cython.compiled:
            return False
        dtype = out.dtype
        if (dtype != y.dtype or dtype != x.dtype or out.shape != y.shape or out.shape != x.shape
                or not (out.flags.c_contiguous and y.flags.c_contiguous
                        and x.flags.c_contiguous) or not out.flags.writeable):
            return False
        if dtype == _FLOAT32:
            single: cython.bint = True
        elif dtype == _FLOAT64:
            single = False
        else:
            return False
        bo: Py_buffer  # noqa: F821
        by: Py_buffer  # noqa: F821
        bx: Py_buffer  # noqa: F821
        _acquire3(out, y, x, cython.address(bo), cython.address(by), cython.address(bx))
        n: cython.Py_ssize_t = bo.len // bo.itemsize
        h: Handoff = current() if n >= MIN_NOGIL_SIZE else None
        prev: cython.int = h.enter_nogil() if h is not None else 0
        with cython.nogil:
            if single:
                _add_scaled_f(cython.cast(cython.p_float, bo.buf),
                              cython.cast(cython.p_float, by.buf),
                              cython.cast(cython.p_float, bx.buf), cython.cast(cython.float, a), n)
            else:
                _add_scaled_d(cython.cast(cython.p_double, bo.buf),
                              cython.cast(cython.p_double, by.buf),
                              cython.cast(cython.p_double, bx.buf), a, n)
            if h is not None:
                h.state = prev
        _release3(cython.address(bo), cython.address(by), cython.address(bx))
        return True

    @cython.ccall
    def relu_grad(self, x, dy):
        """``x > 0 ? dy : 0`` elementwise (relu's backward, MegEngine's SWITCH_GT0) in one pass
        in C, for C-contiguous float32/float64 ``x`` and ``dy`` of one shape and dtype; None when
        it cannot (the caller then uses numpy).  A select, so inf and nan in ``dy`` pass as
        ``np.where`` passes them."""
        if not cython.compiled:
            return None
        dtype = dy.dtype
        if (dtype != x.dtype or x.shape != dy.shape or not x.flags.c_contiguous
                or not dy.flags.c_contiguous):
            return None
        if dtype == _FLOAT32:
            single: cython.bint = True
        elif dtype == _FLOAT64:
            single = False
        else:
            return None
        out = np.empty_like(dy)
        bo: Py_buffer  # noqa: F821
        bx: Py_buffer  # noqa: F821
        bd: Py_buffer  # noqa: F821
        _acquire3(out, x, dy, cython.address(bo), cython.address(bx), cython.address(bd))
        n: cython.Py_ssize_t = bo.len // bo.itemsize
        with cython.nogil:
            if single:
                mge_relu_grad_f(cython.cast(cython.p_float, bo.buf),  # noqa: F821 (handoff.pxd)
                                cython.cast(cython.p_float, bx.buf),
                                cython.cast(cython.p_float, bd.buf), n)
            else:
                mge_relu_grad_d(cython.cast(cython.p_double, bo.buf),  # noqa: F821
                                cython.cast(cython.p_double, bx.buf),
                                cython.cast(cython.p_double, bd.buf), n)
        _release3(cython.address(bo), cython.address(bx), cython.address(bd))
        return out

    # -- BLAS ----------------------------------------------------------------------------------
    def set_blas(self, sgemm, dgemm, ilp64):
        """Use the CBLAS ``sgemm``/``dgemm`` at these addresses (ints; 0: none)."""
        if not cython.compiled:
            return
        self._sgemm = cython.cast(cython.p_void, cython.cast(cython.Py_ssize_t, sgemm or 0))
        self._dgemm = cython.cast(cython.p_void, cython.cast(cython.Py_ssize_t, dgemm or 0))
        self._ilp64 = bool(ilp64)

    @property
    def has_blas(self):
        """Whether ``gemm`` can run products without the GIL."""
        if not cython.compiled:
            return False
        return self._sgemm != cython.NULL

    @cython.cfunc
    def _fn(self, a, b) -> cython.p_void:
        # the CBLAS GEMM for a product of a and b (NULL: none, or dtypes it does not take)
        dtype = a.dtype
        if dtype is not b.dtype and dtype != b.dtype:
            return cython.NULL
        if dtype == _FLOAT32:
            return self._sgemm
        if dtype == _FLOAT64:
            return self._dgemm
        return cython.NULL

    @cython.ccall
    def gemm(self, a, b, trans_a: cython.bint, trans_b: cython.bint):
        """``op(a) @ op(b)`` (``op``: transposed or not) for 2-D float32/float64 arrays, by CBLAS
        without the GIL; None when it cannot (no BLAS, other dtypes or strides, a small product):
        the caller then uses ``np.matmul``."""
        if not cython.compiled:
            return None
        return self._gemm_into(a, b, trans_a, trans_b, None, 1.0)

    @cython.ccall
    def gemm_update(self, a, b, trans_a: cython.bint, trans_b: cython.bint, c,
                    alpha: cython.double):
        """``c += alpha * op(a) @ op(b)`` in place, by CBLAS (beta 1) without the GIL: an SGD
        step folded into the product of its gradient (``mge.jit.program``).  ``c`` is a whole
        C-contiguous writeable array of the product's shape and dtype.  CBLAS adds the scaled
        product to ``c`` as its kernels do (on x86 a fused multiply-add per element: one
        rounding, where numpy's ``c + alpha * p`` rounds twice).  False when it cannot (no BLAS,
        other dtypes, strides or ``c``, a small product)."""
        if not cython.compiled:
            return False
        return self._gemm_into(a, b, trans_a, trans_b, c, alpha) is not None

    @cython.cfunc
    def _gemm_into(self, a, b, trans_a: cython.bint, trans_b: cython.bint, c,
                   alpha: cython.double):
        # gemm (c None) or gemm_update on this thread, without the GIL; the output or None
        fn: cython.p_void = self._fn(a, b)
        if fn == cython.NULL:
            return None
        ba: Py_buffer  # noqa: F821
        bb: Py_buffer  # noqa: F821
        bc: Py_buffer  # noqa: F821
        job: GemmJob  # noqa: F821
        _acquire2(a, b, cython.address(ba), cython.address(bb))
        try:
            out = self._plan_gemm(fn, cython.address(ba), cython.address(bb), trans_a, trans_b,
                                  cython.address(bc), cython.address(job), c, alpha)
            if out is None:
                return None
            self.gemms += 1
            h: Handoff = current()
            prev: cython.int = h.enter_nogil() if h is not None else 0
            with cython.nogil:
                _run_gemm(cython.address(job))
                if h is not None:
                    h.state = prev  # the worker wants the GIL back: the caller yields at its next op
            PyBuffer_Release(cython.address(bc))
            return out
        finally:
            PyBuffer_Release(cython.address(bb))
            PyBuffer_Release(cython.address(ba))

    @cython.ccall
    def gemm2(self, a1, b1, ta1: cython.bint, tb1: cython.bint, a2, b2, ta2: cython.bint,
              tb2: cython.bint, c1=None, alpha1: cython.double = 1.0, c2=None,
              alpha2: cython.double = 1.0):
        """Two independent products, ``gemm(a1, b1, ta1, tb1)`` and ``gemm(a2, b2, ta2, tb2)``,
        at the same time: the second on a native thread of its own (started on first use, again
        after a fork), the first on this one, both without the GIL.  The same CBLAS calls as
        ``gemm``'s, so the same bits.  A product given its ``c`` is ``gemm_update``'s instead
        (``c += alpha * product``, in place; ``c`` is returned).  On a worker whose caller is
        not blocked in the channel (its Python runs on the other core) the two run one after
        the other on this thread instead.  None when either cannot go through CBLAS (the caller
        then runs them one by one)."""
        if not cython.compiled:
            return None
        fn1: cython.p_void = self._fn(a1, b1)
        fn2: cython.p_void = self._fn(a2, b2)
        if fn1 == cython.NULL or fn2 == cython.NULL:
            return None
        if self.started:  # (the second thread runs a started product: one after the other)
            return None
        pair: cython.pointer(PairThread) = self._pair_thread()  # noqa: F821
        if pair == cython.NULL:
            return None
        ba1: Py_buffer  # noqa: F821
        bb1: Py_buffer  # noqa: F821
        bc1: Py_buffer  # noqa: F821
        ba2: Py_buffer  # noqa: F821
        bb2: Py_buffer  # noqa: F821
        bc2: Py_buffer  # noqa: F821
        job: GemmJob  # noqa: F821
        _acquire2(a1, b1, cython.address(ba1), cython.address(bb1))
        try:
            _acquire2(a2, b2, cython.address(ba2), cython.address(bb2))
            try:
                out1 = self._plan_gemm(fn1, cython.address(ba1), cython.address(bb1), ta1, tb1,
                                       cython.address(bc1), cython.address(job), c1, alpha1)
                if out1 is None:
                    return None
                out2 = self._plan_gemm(fn2, cython.address(ba2), cython.address(bb2), ta2, tb2,
                                       cython.address(bc2), cython.address(pair.job), c2, alpha2)
                if out2 is None:
                    PyBuffer_Release(cython.address(bc1))
                    return None
                self.gemms += 2
                h: Handoff = current()
                prev: cython.int
                if h is not None and not h.caller_blocked:
                    # the caller's Python has the other core: a second thread would take a
                    # third of both (measured: a traced MLP step 10% slower with pairs), so
                    # one after the other here, the caller free to run meanwhile
                    prev = h.enter_nogil()
                    with cython.nogil:
                        _run_gemm(cython.address(job))
                        _run_gemm(cython.address(pair.job))
                        h.state = prev
                    PyBuffer_Release(cython.address(bc2))
                    PyBuffer_Release(cython.address(bc1))
                    return (out1, out2)
                self.pairs += 1
                prev = h.enter_pair() if h is not None else 0
                with cython.nogil:
                    PyThread_release_lock(pair.go)  # the other thread runs the second
                    _run_gemm(cython.address(job))
                    PyThread_acquire_lock(pair.done, WAIT_LOCK)
                    if h is not None:
                        h.state = prev
                PyBuffer_Release(cython.address(bc2))
                PyBuffer_Release(cython.address(bc1))
                return (out1, out2)
            finally:
                PyBuffer_Release(cython.address(bb2))
                PyBuffer_Release(cython.address(ba2))
        finally:
            PyBuffer_Release(cython.address(bb1))
            PyBuffer_Release(cython.address(ba1))

    @cython.ccall
    def gemm_start(self, a, b, trans_a: cython.bint, trans_b: cython.bint, c=None,
                   alpha: cython.double = 1.0):
        """Start ``gemm(a, b, trans_a, trans_b)`` (or, given ``c``, ``gemm_update``'s ``c +=
        alpha * product``) on the second GEMM thread and return at once with its output array,
        to be read only after ``gemm_join()``: the calling thread runs other kernels meanwhile
        (a compiled trace program's small ops beside a long product).  One at a time; the
        arrays must not be written until the join.  The same CBLAS call as ``gemm``'s, so the
        same bits.  None when it cannot (the pure-Python twin, no BLAS, a product CBLAS does not
        take, one already started): the caller then runs the product itself."""
        if not cython.compiled:
            return None
        if self.started and self._pair.pid != getpid():
            self.started = False  # a forked child: its parent's product never ends here
        if self.started:
            return None
        fn: cython.p_void = self._fn(a, b)
        if fn == cython.NULL:
            return None
        pair: cython.pointer(PairThread) = self._pair_thread()  # noqa: F821
        if pair == cython.NULL:
            return None
        _acquire2(a, b, cython.address(self._sa), cython.address(self._sb))
        out = self._plan_gemm(fn, cython.address(self._sa), cython.address(self._sb), trans_a,
                              trans_b, cython.address(self._sc), cython.address(pair.job), c,
                              alpha)
        if out is None:
            PyBuffer_Release(cython.address(self._sb))
            PyBuffer_Release(cython.address(self._sa))
            return None
        self.gemms += 1
        self.starts += 1
        self.started = True
        self._starter = PyThread_get_thread_ident()
        PyThread_release_lock(pair.go)
        return out

    @cython.ccall
    def gemm_join(self):
        """Wait for the product ``gemm_start`` started (without the GIL: on a worker, the
        caller may have it meanwhile); nothing when none runs."""
        if not cython.compiled or not self.started:
            return
        pair: cython.pointer(PairThread) = self._pair  # noqa: F821
        if pair.pid != getpid():  # a forked child: the parent's thread is not here to finish
            self.started = False
            return
        h: Handoff = current()
        prev: cython.int = h.enter_nogil() if h is not None else 0
        with cython.nogil:
            PyThread_acquire_lock(pair.done, WAIT_LOCK)
            if h is not None:
                h.state = prev
        self.started = False
        PyBuffer_Release(cython.address(self._sc))
        PyBuffer_Release(cython.address(self._sb))
        PyBuffer_Release(cython.address(self._sa))

    @cython.ccall
    def join_before_fork(self):
        """Before a fork: wait for a product this thread started (a child must not copy
        OpenBLAS in the middle of a product; the channel drains its worker for the same
        reason)."""
        if cython.compiled and self.started and self._starter == PyThread_get_thread_ident():
            self.gemm_join()

    @cython.cfunc
    def _pair_thread(self) -> cython.pointer(PairThread):  # noqa: F821
        # the second GEMM thread of this process (a forked child starts its own)
        pid: cython.long = getpid()  # noqa: F821
        pair: cython.pointer(PairThread) = self._pair  # noqa: F821
        if pair != cython.NULL and pair.pid == pid:
            return pair
        # (a parent's thread does not exist in a child: its struct is left, never freed)
        pair = cython.cast(cython.pointer(PairThread), malloc(cython.sizeof(PairThread)))  # noqa: F821
        if pair == cython.NULL:
            return cython.NULL
        pair.go = PyThread_allocate_lock()
        pair.done = PyThread_allocate_lock()
        if pair.go == cython.NULL or pair.done == cython.NULL:
            return cython.NULL
        PyThread_acquire_lock(pair.go, WAIT_LOCK)    # both start held: nothing to run, none done
        PyThread_acquire_lock(pair.done, WAIT_LOCK)
        pair.pid = pid
        if PyThread_start_new_thread(_pair_main, cython.cast(cython.p_void, pair)) == \
                cython.cast(cython.ulong, -1):
            return cython.NULL
        self._pair = pair
        return pair

    @cython.cfunc
    def _plan_gemm(self, fn: cython.p_void, va: cython.pointer(Py_buffer),  # noqa: F821
                   vb: cython.pointer(Py_buffer), trans_a: cython.bint,  # noqa: F821
                   trans_b: cython.bint, vc: cython.pointer(Py_buffer),  # noqa: F821
                   job: cython.pointer(GemmJob), c=None,  # noqa: F821
                   alpha: cython.double = 1.0):
        # fills ``job`` for op(a) @ op(b) into a new array (returned, its buffer ``vc`` held) --
        # or, given ``c``, for ``c += alpha * op(a) @ op(b)`` (``c`` returned); None when CBLAS
        # cannot take these layouts (or ``c``), or the product is small
        if va.ndim != 2 or vb.ndim != 2:
            return None
        item: cython.Py_ssize_t = va.itemsize
        # A row-major matrix, or a column-major one read as the transpose of a row-major one.
        ra: cython.Py_ssize_t = va.shape[0]
        ca: cython.Py_ssize_t = va.shape[1]
        rb: cython.Py_ssize_t = vb.shape[0]
        cb: cython.Py_ssize_t = vb.shape[1]
        ta, lda = _layout(va, trans_a, item)
        tb, ldb = _layout(vb, trans_b, item)
        if lda == 0 or ldb == 0:
            return None
        m: cython.Py_ssize_t = ca if trans_a else ra
        k: cython.Py_ssize_t = ra if trans_a else ca
        k2: cython.Py_ssize_t = cb if trans_b else rb
        n: cython.Py_ssize_t = rb if trans_b else cb
        if k != k2 or m == 0 or n == 0 or k == 0 or m * n * k < MIN_GEMM_WORK:
            return None
        if c is None:
            out = np.empty((m, n), np.float32 if item == 4 else np.float64)
        else:  # an update in place: a whole C-contiguous (m, n) array of the product's dtype
            out = c
            if (type(c) is not np.ndarray or c.shape != (m, n) or c.itemsize != item
                    or c.dtype.kind != "f" or not c.flags.c_contiguous or not c.flags.writeable
                    or _overlaps(c, va) or _overlaps(c, vb)):
                return None
        if PyObject_GetBuffer(out, vc, PyBUF_RECORDS) < 0:
            return None
        job.alpha = 1.0 if c is None else alpha
        job.beta = 0.0 if c is None else 1.0
        job.fn = fn
        job.single = item == 4
        job.ilp64 = self._ilp64
        job.ta = ta
        job.tb = tb
        job.m = m
        job.n = n
        job.k = k
        job.lda = lda
        job.ldb = ldb
        job.pa = va.buf
        job.pb = vb.buf
        job.pc = vc.buf
        return out


@cython.cfunc
@cython.nogil
@cython.exceptval(check=False)
def _run_gemm(job: cython.pointer(GemmJob)) -> cython.void:  # noqa: F821
    # C = alpha * A @ B + beta * C of the job, by the CBLAS function it names (row-major)
    fn: cython.p_void = job.fn
    order: cython.int = 101  # CblasRowMajor (_ROW_MAJOR: a Python int, out of reach here)
    if job.single and job.ilp64:
        cython.cast(sgemm64_t, fn)(  # noqa: F821
            order, job.ta, job.tb, job.m, job.n, job.k, cython.cast(cython.float, job.alpha),
            cython.cast(cython.p_float, job.pa), job.lda, cython.cast(cython.p_float, job.pb),
            job.ldb, cython.cast(cython.float, job.beta), cython.cast(cython.p_float, job.pc),
            job.n)
    elif job.single:
        cython.cast(sgemm32_t, fn)(  # noqa: F821
            order, job.ta, job.tb, job.m, job.n, job.k, cython.cast(cython.float, job.alpha),
            cython.cast(cython.p_float, job.pa), job.lda, cython.cast(cython.p_float, job.pb),
            job.ldb, cython.cast(cython.float, job.beta), cython.cast(cython.p_float, job.pc),
            job.n)
    elif job.ilp64:
        cython.cast(dgemm64_t, fn)(  # noqa: F821
            order, job.ta, job.tb, job.m, job.n, job.k, job.alpha,
            cython.cast(cython.p_double, job.pa), job.lda, cython.cast(cython.p_double, job.pb),
            job.ldb, job.beta, cython.cast(cython.p_double, job.pc), job.n)
    else:
        cython.cast(dgemm32_t, fn)(  # noqa: F821
            order, job.ta, job.tb, job.m, job.n, job.k, job.alpha,
            cython.cast(cython.p_double, job.pa), job.lda, cython.cast(cython.p_double, job.pb),
            job.ldb, job.beta, cython.cast(cython.p_double, job.pc), job.n)


@cython.cfunc
@cython.nogil
@cython.exceptval(check=False)
def _pair_main(arg: cython.p_void) -> cython.void:
    # the second GEMM thread: runs a job each time ``go`` is released
    pair: cython.pointer(PairThread) = cython.cast(cython.pointer(PairThread), arg)  # noqa: F821
    while True:
        PyThread_acquire_lock(pair.go, WAIT_LOCK)
        _run_gemm(cython.address(pair.job))
        PyThread_release_lock(pair.done)


@cython.cfunc
def _overlaps(vc_of, va: cython.pointer(Py_buffer)) -> cython.bint:  # noqa: F821
    # whether array ``vc_of``'s bytes and the span of buffer ``va`` meet (CBLAS must not write
    # into what it reads)
    start: cython.Py_ssize_t = vc_of.ctypes.data
    stop: cython.Py_ssize_t = start + vc_of.nbytes
    a0: cython.Py_ssize_t = cython.cast(cython.Py_ssize_t, va.buf)
    span: cython.Py_ssize_t = va.itemsize
    d: cython.int
    for d in range(va.ndim):
        span += (va.shape[d] - 1) * abs(va.strides[d])
    return a0 < stop and start < a0 + span


@cython.cfunc
@cython.exceptval(check=False)
def _acquire2(a, b, va: cython.pointer(Py_buffer), vb: cython.pointer(Py_buffer)) -> cython.int:  # noqa: F821
    # read-only buffers of a and b (raises, holding neither, when one cannot be had)
    PyObject_GetBuffer(a, va, PyBUF_RECORDS_RO)
    try:
        PyObject_GetBuffer(b, vb, PyBUF_RECORDS_RO)
    except BaseException:
        PyBuffer_Release(va)
        raise
    return 0


@cython.cfunc
@cython.nogil
@cython.exceptval(check=False)
def _add_scaled_f(out: cython.p_float, y: cython.p_float, x: cython.p_float, a: cython.float,
                  n: cython.Py_ssize_t) -> cython.void:
    # two loops: in place, the compiler then checks only x against y and vectorizes
    i: cython.Py_ssize_t
    if out == y:
        for i in range(n):
            out[i] += a * x[i]
    else:
        for i in range(n):
            out[i] = y[i] + a * x[i]


@cython.cfunc
@cython.nogil
@cython.exceptval(check=False)
def _add_scaled_d(out: cython.p_double, y: cython.p_double, x: cython.p_double, a: cython.double,
                  n: cython.Py_ssize_t) -> cython.void:
    i: cython.Py_ssize_t
    if out == y:
        for i in range(n):
            out[i] += a * x[i]
    else:
        for i in range(n):
            out[i] = y[i] + a * x[i]


@cython.cfunc  # (declared in handoff.pxd: loops.py cimports it)
@cython.exceptval(-1)
def _acquire3(out, a, b, vo: cython.pointer(Py_buffer), va: cython.pointer(Py_buffer),  # noqa: F821
              vb: cython.pointer(Py_buffer)) -> cython.int:  # noqa: F821
    # The buffers of ``out`` (writable) and of two inputs: all of them, or an exception and none.
    PyObject_GetBuffer(out, vo, PyBUF_RECORDS)
    try:
        PyObject_GetBuffer(a, va, PyBUF_RECORDS_RO)
    except BaseException:
        PyBuffer_Release(vo)
        raise
    try:
        PyObject_GetBuffer(b, vb, PyBUF_RECORDS_RO)
    except BaseException:
        PyBuffer_Release(va)
        PyBuffer_Release(vo)
        raise
    return 0


@cython.cfunc  # (declared in handoff.pxd)
@cython.exceptval(check=False)
def _release3(vo: cython.pointer(Py_buffer), va: cython.pointer(Py_buffer),  # noqa: F821
              vb: cython.pointer(Py_buffer)) -> cython.void:  # noqa: F821
    PyBuffer_Release(vb)
    PyBuffer_Release(va)
    PyBuffer_Release(vo)


def add_scaled(out, y, x, a):
    """``out = y + a * x`` (see ``Handoff.add_scaled``), by numpy where C cannot."""
    if not CPU.add_scaled(out, y, x, a):
        np.add(y, np.multiply(x, a, dtype=out.dtype), out=out)
    return out


@cython.cfunc
def _layout(v: cython.pointer(Py_buffer), trans: cython.bint,  # noqa: F821
            item: cython.Py_ssize_t) -> tuple:
    # (CBLAS transpose flag, leading dimension) of a 2-D buffer, (0, 0) when it is neither
    # row-major nor column-major with unit steps.
    r: cython.Py_ssize_t = v.shape[0]
    c: cython.Py_ssize_t = v.shape[1]
    s0: cython.Py_ssize_t = v.strides[0]
    s1: cython.Py_ssize_t = v.strides[1]
    if (s1 == item or c == 1) and s0 % item == 0 and s0 >= c * item:
        return (_TRANS if trans else _NO_TRANS), s0 // item
    if (s0 == item or r == 1) and s1 % item == 0 and s1 >= r * item:
        return (_NO_TRANS if trans else _TRANS), s1 // item
    return 0, 0


CPU = CpuKernels()
