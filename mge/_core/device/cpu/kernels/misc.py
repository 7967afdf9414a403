"""CPU kernels of ``Identity``, ``Detach`` and ``Copy``: the input array itself (arrays are never
written in place while another tensor can see them)."""
import numpy as np

from ....ops.misc import AssertEqual, AssertEqualError, Copy, Detach, Identity
from ..table import def_kernel


@def_kernel(Identity)
@def_kernel(Detach)
def _cpu_identity(op, x):
    return (x,)


@def_kernel(Copy)
def _cpu_copy(op, x):
    # ``x`` is the source's value on the host (another device's ``to_host``, read-only) or a CPU
    # buffer: the copy is the destination's own storage, counted and writable there.
    return (np.array(x),)


@def_kernel(AssertEqual)
def _cpu_assert_equal(op, expect, actual, err):
    e = float(np.asarray(err).reshape(-1)[0]) if np.size(err) else 0.0
    if op.verbose:
        print(f"AssertEqual: err={e}")
    if not e <= op.maxerr:  # NaN fails too
        raise AssertEqualError(f"AssertEqual: the values differ: error {e} > maxerr {op.maxerr} "
                               f"(shape {tuple(np.shape(expect))}, dtype {np.asarray(expect).dtype})")
    return (expect,)
