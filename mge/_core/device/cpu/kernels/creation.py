"""CPU kernels of the creation ops (``Fill``, ``Arange``, ``Linspace``, ``Eye``).

Values are computed in float64 and converted to the op's dtype once, so ``float32`` results are
the correctly rounded float64 values; integer ranges are computed in int64.
"""
import numpy as np

from ....ops.creation import Arange, Eye, Fill, Linspace, arange_length
from ..table import def_kernel


@def_kernel(Fill)
def _cpu_fill(op):
    return (np.full(op.shape, op.value, dtype=op.dtype),)


@def_kernel(Arange)
def _cpu_arange(op):
    n = arange_length(op.start, op.stop, op.step)
    if all(isinstance(v, int) for v in (op.start, op.step)) and op.dtype.kind in "iu":
        return ((np.arange(n, dtype=np.int64) * op.step + op.start).astype(op.dtype),)
    return ((op.start + np.arange(n, dtype=np.float64) * op.step).astype(op.dtype),)


@def_kernel(Linspace)
def _cpu_linspace(op):
    return (np.linspace(op.start, op.stop, op.num, dtype=np.float64).astype(op.dtype),)


@def_kernel(Eye)
def _cpu_eye(op):
    return (np.eye(op.N, op.M, op.k, dtype=op.dtype),)
