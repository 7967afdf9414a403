"""``CpuDevice``: numpy on the host as a device (compiled; see ``_accel``).

A buffer is a numpy array.  ``execute`` is the CPU's kernel door: the kernel of the op's class
from ``table.KERNELS`` (numpy, the C loops and CBLAS of ``handoff.py``), or, when the op frees
an input that nothing else can see, its in-place form (an elementwise ufunc's ``out=``, or the
op's ``INPLACE`` kernel); each output is then made an array of the dtype the op's rule declared,
and checked against the rule's shape (a user's kernel is not trusted: a tuple of arrays, one per
output, each of the declared shape, else the op's error).

The C layout is in ``device.pxd`` (``device_c.pxd`` includes it so that the channel can call
``execute`` as a C method).
"""
import sys

import cython
import numpy as np

from ... import _accel
from ..base import Device
from .table import DONATING, INPLACE, KERNELS

_accel.guard(__name__)

__all__ = ["CpuDevice"]

_ndarray = np.ndarray
_ufunc = np.ufunc
if cython.compiled:  # (its door methods are C calls)
    from cython.cimports.mge._core.profile_recorder_c import Recorder as _Recorder
else:
    _Recorder = object
_prof = cython.declare(_Recorder, None)  # the running profiler's Recorder (mge/_core/profiler.py)


def _set_profiler(rec):
    global _prof
    _prof = rec


def _refs(values, i):
    return sys.getrefcount(values[i])


# References to an array held only by a list and this module's check: the count above which
# someone else (a user's numpy view, another tensor) still sees the buffer.
_SOLE_REFS = _refs([np.empty(1)], 0)


def _owner(arr):
    base = arr.base
    while isinstance(base, _ndarray):
        arr = base
        base = arr.base
    return arr


@cython.cclass
class CpuDevice:
    """The CPU device ``cpu<index>``: numpy arrays as buffers, ``table.KERNELS`` as kernels.

    Fields (``device.pxd``): ``index``; ``inplace`` counts the kernels that wrote their output
    into a freed input's buffer.
    """

    kind = "cpu"

    def __init__(self, index=0):
        self.index = index
        self.inplace = 0

    def __repr__(self):
        return f"<CpuDevice cpu{self.index}>"

    # -- storage and transfers -------------------------------------------------------------------
    def from_host(self, array):
        """The host array itself: the channel owns it from now on."""
        return array

    @cython.ccall
    def to_host(self, buffer):
        """A read-only view (it never lets the caller write into the tensor)."""
        view = buffer.view()
        view.flags.writeable = False
        return view

    def storage(self, buffer):
        owner = _owner(buffer)
        return owner, owner.nbytes

    def shape(self, buffer):
        return buffer.shape

    def nbytes(self, buffer):
        return buffer.nbytes

    def free_beside(self, buffer):
        return 0  # numpy's allocator does not say

    def synchronize(self):
        """Nothing to wait for: a CPU kernel has run when ``execute`` returns."""

    def runs_long(self, op, inputs, outputs):
        rule = op.long_running
        if rule is True or rule is False:
            return rule
        return bool(rule(op, inputs, outputs))

    # -- the kernel door ---------------------------------------------------------------------------
    @cython.ccall
    def execute(self, op, inputs: list, descs: list, reuse: list = None) -> list:
        """Run ``op`` on the arrays ``inputs``; one array per desc, of the desc's dtype.

        ``reuse``: positions of inputs whose tensors this op freed (see ``base.Device``).
        """
        if _prof is not None:  # profiler: the kernel as a span on the thread that runs it
            rec = _prof
            if rec.enter_kernel(self, op, descs, reuse):
                try:
                    return self._execute(op, inputs, descs, reuse)
                finally:
                    rec.exit_kernel()
        return self._execute(op, inputs, descs, reuse)

    @cython.cfunc
    def _execute(self, op, inputs: list, descs: list, reuse: list) -> list:
        cls = type(op)
        kernel = KERNELS.get(cls)
        if kernel is None:
            kernel = _lookup(op, cls)
        outs = None
        if reuse is not None:
            donating = DONATING.get(cls)
            if donating is not None:
                outs = donating(op, inputs, self._donated(inputs, reuse))
            elif len(descs) == 1:
                outs = self._inplace(op, cls, inputs, descs[0], reuse)
        if outs is None:
            outs = kernel(op, *inputs)
            if type(outs) is not tuple and type(outs) is not list:
                raise _not_a_tuple(op, outs)
        n: cython.Py_ssize_t = len(descs)
        if len(outs) != n:
            raise RuntimeError(f"{op.name}: the CPU kernel returned {len(outs)} output(s), "
                               f"the op declares {n}")
        result = []
        k: cython.Py_ssize_t
        for k in range(n):
            value = outs[k]
            desc = descs[k]
            dtype = desc.dtype
            if type(value) is not _ndarray or value.dtype is not dtype:
                value = _as_array(value, dtype)
            shape = desc.shape
            if shape is not None and value.shape != shape:
                _check_shape(op, k, value, shape)
            result.append(value)
        return result

    @cython.cfunc
    def _donated(self, inputs: list, reuse: list) -> list:
        # The freed inputs that nothing else sees (as ``_inplace`` checks: references, a whole
        # writeable C-contiguous array), each passed once
        k: cython.Py_ssize_t
        j: cython.Py_ssize_t
        donated = []
        for k in reuse:
            uses: cython.Py_ssize_t = 0
            for j in range(len(inputs)):
                if inputs[j] is inputs[k]:
                    uses += 1
            if uses != 1 or _refs(inputs, k) > _SOLE_REFS:
                continue
            buf = inputs[k]
            if buf.base is None and buf.flags.writeable and buf.flags.c_contiguous:
                donated.append(k)
        return donated

    @cython.cfunc
    def _inplace(self, op, cls, inputs: list, out, reuse: list):
        # A freed input's buffer may take output 0 when nothing else sees it: no other tensor, no
        # user's numpy view (counted by references), and it is a whole, writeable, contiguous
        # array of output 0's shape and dtype.
        special = INPLACE.get(cls)
        if special is None:
            return None
        k: cython.Py_ssize_t
        j: cython.Py_ssize_t
        for k in reuse:
            uses: cython.Py_ssize_t = 0
            for j in range(len(inputs)):
                if inputs[j] is inputs[k]:
                    uses += 1
            # count references before binding the buffer to a local name
            if _refs(inputs, k) > _SOLE_REFS + uses - 1:
                continue
            buf = inputs[k]
            if (buf.base is None and buf.flags.writeable and buf.flags.c_contiguous
                    and buf.shape == out.shape and buf.dtype == out.dtype):
                outs = special(op, inputs, k)
                if outs is not None:
                    self.inplace += 1
                    return outs
        return None



def _lookup(op, cls):
    for base in cls.__mro__[1:]:
        kernel = KERNELS.get(base)
        if kernel is not None:
            KERNELS[cls] = kernel
            return kernel
    raise NotImplementedError(f"{op.name} has no kernel for the cpu device")


def _not_a_tuple(op, outs):
    # a bare array would be taken apart along its first axis, one "output" per row
    return TypeError(f"{op.name}: the CPU kernel must return a tuple of arrays (one per output), "
                     f"it returned {type(outs).__name__}")


def _check_shape(op, k, value, shape):
    # only after ``value.shape != shape``: a rule may declare its shape as a list, or numpy ints
    try:
        if value.shape == tuple([int(s) for s in shape]):
            return
    except (TypeError, ValueError):
        pass
    raise ValueError(f"{op.name}: the CPU kernel returned an output of shape {value.shape} for "
                     f"output {k}, the op declares {tuple(shape)}")


def _as_array(value, dtype):
    if type(value) is not _ndarray:
        value = np.asarray(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    return value


Device.register(CpuDevice)
