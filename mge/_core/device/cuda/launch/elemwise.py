"""Launchers of ``Elemwise`` and ``TypeCvt``: the generated kernels of ``kernels/elemwise.py``.

Which kernel: when every input is dense and of the output's shape, the *contiguous* kernel (a
flat grid-stride loop over ``n``: consecutive threads touch consecutive elements, so every warp's
loads and stores coalesce); otherwise the *general* kernel, with the output's and each input's
strides in one ``mge_layout`` struct passed by value -- broadcasting (stride 0), transposed or
otherwise strided views are read in place, with no copy first.  The layout is simplified
(``simplify_layout``: size-1 dims dropped, dims every array steps through alike merged) and the
index type is 32 bits whenever every offset fits (``index_bits_for``: 64-bit division is slow on
a GPU).  A layout that simplifies to one dense dim takes the contiguous kernel after all.

Launch: ``ELEMENTWISE_BLOCK`` (256) threads a block and ``elementwise_grid`` blocks -- one
element per thread up to 32 blocks per multiprocessor, beyond which each thread loops.  The
output is a new dense buffer, or (``reuse``) a donated input's buffer of the output's shape and
dtype: each thread reads element i of every input before writing element i of the output, so
the kernel may overwrite an input it reads at the same index.

A ``TypeCvt`` to the input's own dtype is the input itself (buffers are never written in place
while another tensor can see them); one that only relabels a quantized dtype is a view.

complex64 operands of an ``Elemwise``, and a ``TypeCvt`` into complex64, run the plans of
``kernels/complex.py`` (``plans.plan_launcher``: views read in place, a donated input reused).

``DIFFERENCES`` is the kernels' own (``kernels/elemwise.py``): where results may differ from the
CPU device's.
"""
from ....ops.base import TensorDesc
from ....ops.elemwise import Elemwise, TypeCvt, broadcast_shapes
from ..kernels import complex as _complex
from ..kernels.elemwise import (DIFFERENCES, MAX_NDIM, elemwise_kernel, index_bits_for,
                                pack_layout, simplify_layout, typecvt_kernel)
from . import def_launcher
from .plans import plan_launcher

__all__ = ["launch_general", "broadcast_strides", "DIFFERENCES"]


def broadcast_strides(buf, shape):
    """``buf``'s strides (elements) as an operand of an output of ``shape``: leading dims it
    lacks, and its size-1 dims, step 0."""
    pad = len(shape) - buf.ndim
    if pad < 0:
        raise ValueError(f"cannot broadcast shape {buf.shape} to {shape}")
    strides = [0] * pad
    for n, s, t in zip(buf.shape, buf.strides, shape[pad:]):
        if n == t:
            strides.append(s if n != 1 else 0)
        elif n == 1:
            strides.append(0)
        else:
            raise ValueError(f"cannot broadcast shape {buf.shape} to {shape}")
    return tuple(strides)


def _layout(out, ins):
    shape = out.shape
    strides = [out.strides] + [broadcast_strides(b, shape) for b in ins]
    return simplify_layout(shape, strides)


def launch_general(device, make_kernel, dtypes, out, ins, what):
    """Run the kernel ``make_kernel(*dtypes, contiguous=..., index_bits=...)`` writing ``out``
    from ``ins`` (broadcast to ``out``'s shape): the contiguous variant when the simplified
    layout is one dense dim, else the general one."""
    n = out.size
    if n == 0:
        return
    shape, strides = _layout(out, ins)
    # one element (every dim merged away), or one dim every array steps through densely
    dense = not shape or (len(shape) == 1 and all(s[0] == 1 for s in strides))
    pointers = [out.address] + [b.address for b in ins]
    if dense:
        kernel = make_kernel(*dtypes, contiguous=True)
        device.launch_elementwise(kernel, n, pointers + [n])
        return
    if len(shape) > MAX_NDIM:
        raise NotImplementedError(
            f"{what}: the layout needs {len(shape)} dims after merging, the CUDA elementwise "
            f"kernels take at most {MAX_NDIM} (output shape {out.shape}, input shapes "
            f"{[b.shape for b in ins]}, strides {[b.strides for b in ins]})")
    bits = index_bits_for(shape, strides)
    kernel = make_kernel(*dtypes, contiguous=False, index_bits=bits)
    device.launch_elementwise(kernel, n, pointers + [n, pack_layout(shape, strides, bits)])


def _describe(op, inputs):
    return ", ".join(f"{b.dtype} {b.shape}" for b in inputs)


# complex64 (kernels/complex.py): op class -> the launcher running that module's plan
_COMPLEX = {cls: plan_launcher(_complex, cls)[0] for cls in (Elemwise, TypeCvt)}


@def_launcher(Elemwise, strided=True, reuse=True)
def _elemwise(device, op, inputs, descs, donated):
    desc = descs[0]
    shape = desc.shape
    if shape is None:
        shape = broadcast_shapes(op, [(b.shape, b.dtype) for b in inputs])
    shape = tuple(shape)
    dtype = desc.dtype
    ins = tuple(b.dtype for b in inputs)
    if any(d.kind == "c" for d in ins):
        return _COMPLEX[Elemwise](device, op, inputs, [TensorDesc(shape, dtype)], donated)

    def make(*dtypes, contiguous=True, index_bits=64):
        try:
            return elemwise_kernel(op.mode, dtypes, dtype, contiguous, index_bits)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{op.name} on {device.name} (inputs {_describe(op, inputs)}): "
                          f"{e}") from None

    make(*ins)  # refuses unsupported dtypes before anything is allocated
    out = None
    for k in donated:
        b = inputs[k]
        if b.shape == shape and b.dtype == dtype and b.is_contiguous:
            out = device.view(b, shape, dtype=dtype) if b.dtype is not dtype else b
            device.inplace += 1
            break
    if out is None:
        out = device.empty(shape, dtype, f"the output of {op.name} ({dtype} {shape})")
    launch_general(device, make, ins, out, inputs, f"{op.name} on {device.name}")
    return (out,)


@def_launcher(TypeCvt, strided=True)
def _typecvt(device, op, inputs, descs):
    (x,) = inputs
    dtype = descs[0].dtype
    if x.dtype == dtype:
        # the same values: the buffer itself, or a view relabelling a quantized dtype
        return (x if x.dtype.metadata == dtype.metadata else
                device.view(x, x.shape, x.strides, 0, dtype),)
    if dtype.kind == "c":
        return _COMPLEX[TypeCvt](device, op, inputs, descs)

    def make(src, dst, contiguous=True, index_bits=64):
        try:
            return typecvt_kernel(src, dst, contiguous, index_bits)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{op.name} on {device.name} ({x.dtype} {x.shape} to {dtype}): "
                          f"{e}") from None

    make(x.dtype, dtype)
    out = device.empty(x.shape, dtype, f"the output of {op.name} ({dtype} {x.shape})")
    launch_general(device, make, (x.dtype, dtype), out, [x], f"{op.name} on {device.name}")
    return (out,)

