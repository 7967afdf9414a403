"""CPU kernels of ``Identity``, ``Detach`` and ``Copy``: the input array itself (arrays are never
written in place while another tensor can see them)."""
import numpy as np

from ....ops.misc import Copy, Detach, Identity
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
