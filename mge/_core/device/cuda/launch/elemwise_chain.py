"""The launcher of ``ElemwiseChain`` (``ops/program.py``): a ``jit.trace`` program's run of
elementwise ops over one shape as one kernel (``kernels/elemwise_chain.py``).

The inputs are made dense; when each is of the chain's shape or one element, the contiguous
kernel runs, else the general one reads the broadcast inputs at their offsets (an
``mge_layout`` as the elementwise kernels', simplified, 32-bit indices where they fit).  Each
output is a donated input's buffer of its dtype (``reuse``: every input of an
element is loaded before its outputs are stored) or a new dense buffer of the chain's shape, and
one grid-stride launch computes every step for each element.  An empty chain launches nothing.
"""
from ....ops.program import ElemwiseChain
from ..kernels.launch import dense_strides
from ..kernels.elemwise import MAX_NDIM, index_bits_for, pack_layout, simplify_layout
from ..kernels.elemwise_chain import chain_kernel
from . import def_launcher
from .elemwise import broadcast_strides

__all__ = ["launch_chain"]


@def_launcher(ElemwiseChain, reuse=True)
def launch_chain(device, op, inputs, descs, donated):
    """Run the chain ``op`` on the dense ``inputs`` (each of the chain's shape or broadcast to
    it); its output buffers (an output may be a donated input's buffer of its dtype:
    ``reuse``)."""
    shape = tuple(op.shape)
    n = 1
    for d in shape:
        n *= d
    strides = [broadcast_strides(b, shape) for b in inputs]  # (a ValueError names the shapes)
    full = [b.shape == shape or b.size == n for b in inputs]
    scalar = [b.size == 1 and n != 1 for b in inputs]
    outs = []
    free = [k for k in donated if full[k]]
    for r in op.outs:
        dtype = op.dtypes[r]
        k = next((k for k in free if inputs[k].dtype == dtype), None)
        if k is None:
            outs.append(device.empty(shape, dtype, f"an output of {op.name} ({dtype} {shape})"))
        else:  # (each element's inputs are loaded before its outputs are stored)
            free.remove(k)
            outs.append(device.view(inputs[k], shape))
            device.inplace += 1
    if not n:
        return tuple(outs)
    pointers = [b.address for b in outs + list(inputs)]
    if all(f or s for f, s in zip(full, scalar)):
        device.launch_elementwise(chain_kernel(op, scalar), n, pointers + [n])
        return tuple(outs)
    lshape, lstrides = simplify_layout(shape, [dense_strides(shape)] + strides)
    if len(lshape) > MAX_NDIM:
        raise NotImplementedError(f"{op.name}: the layout needs {len(lshape)} dims after "
                                  f"merging, at most {MAX_NDIM} (shape {shape})")
    bits = index_bits_for(lshape, lstrides)
    kernel = chain_kernel(op, [False] * len(inputs), contiguous=False, index_bits=bits)
    device.launch_elementwise(kernel, n, pointers + [n, pack_layout(lshape, lstrides, bits)])
    return tuple(outs)
