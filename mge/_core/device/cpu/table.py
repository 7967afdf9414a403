"""The CPU device's kernel tables, filled by the files of ``kernels/`` (one per op family).

* ``KERNELS[cls](op, *arrays) -> tuple of arrays`` -- the computation on numpy arrays.  A kernel
  may return arrays of another dtype or numpy scalars: the device converts each output to the
  dtype the op's rule declared.
* ``INPLACE[cls](op, arrays, k) -> tuple of arrays, or None`` -- optional: output 0 written into
  ``arrays[k]``, the buffer of an input whose tensor this op was the last user of (the device
  checks first that nothing else can see it and that its shape and dtype are output 0's).
  ``None`` declines (the ordinary kernel runs).
* ``DONATING[cls](op, arrays, donated) -> tuple of arrays`` -- optional, for ops with several
  outputs that overwrite inputs of their own (a compiled trace program's parameter updates):
  called instead of the kernel when the op frees inputs, with ``donated`` the positions of those
  that nothing else can see (whole, writeable, C-contiguous arrays); the op may write into them.

A kernel is looked up by the op's class, then by its base classes.
"""
__all__ = ["KERNELS", "INPLACE", "DONATING", "def_kernel", "def_inplace", "def_donating"]

KERNELS = {}  # op class -> fn(op, *arrays)
INPLACE = {}  # op class -> fn(op, arrays, k)
DONATING = {}  # op class -> fn(op, arrays, donated positions)


def def_kernel(cls):
    """Decorator: register ``fn(op, *arrays) -> tuple of arrays`` as ``cls``'s CPU kernel."""
    def deco(fn):
        KERNELS[cls] = fn
        return fn
    return deco


def def_inplace(cls):
    """Decorator: register ``fn(op, arrays, k)`` as ``cls``'s in-place CPU kernel (see above)."""
    def deco(fn):
        INPLACE[cls] = fn
        return fn
    return deco


def def_donating(cls):
    """Decorator: register ``fn(op, arrays, donated)`` as ``cls``'s donating CPU kernel (see
    above)."""
    def deco(fn):
        DONATING[cls] = fn
        return fn
    return deco
