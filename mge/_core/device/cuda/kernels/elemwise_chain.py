"""CUDA C for ``ElemwiseChain`` (``ops/program.py``): a chain of elementwise ops as one kernel.

A ``jit.trace`` program for the CUDA device turns runs of elementwise ops over one shape into one
``ElemwiseChain`` (``mge/jit/program.py``): one launch and one pass over memory where the ops one
by one took a launch each and wrote every intermediate to device memory and read it back.

The kernel is the ``Elemwise`` kernel (``elemwise.py``) with several steps in its loop: for
element ``i`` it loads each input -- ``in<k>[i]`` (or ``in<k>[0]`` for one element) in the
contiguous form, at its offset in an ``mge_layout`` in the general one, where inputs broadcast
to the chain's shape (a bias, a norm's statistics) --, then for each step calls the mode's scalar function -- the very function
the single-op kernel calls, with the same conversions of its arguments -- and keeps the result
*in its storage type* (``r<k>``: float16 as its bits, bool as a byte), as if stored to memory
and loaded back; the outputs are stored from those registers.  Each step therefore rounds where
the op run alone rounds, and with ``NVRTC_OPTIONS`` (no contraction into fused multiply-adds)
the chain gives the bits of the ops run one by one.

``chain_kernel`` is cached per chain; ``DIFFERENCES`` are the elementwise kernels' own.
"""
import functools
import hashlib

import numpy as np

from .elemwise import (_PRELUDE, DIFFERENCES, NVRTC_OPTIONS, SUPPORTED_DTYPES, KernelSource,
                       _code, _load, _mode, _out_dtype, _plan, _scalar_function, _storage, _store,
                       _to_compute)

__all__ = ["chain_kernel", "chain_supports", "DIFFERENCES", "NVRTC_OPTIONS"]


def chain_supports(mode, in_dtypes):
    """Whether ``Elemwise(mode)`` on inputs of ``in_dtypes`` can be a step of a chain (the
    elementwise kernels take those dtypes and the mode; its output dtype is the op's)."""
    try:
        ins = tuple(np.dtype(d) for d in in_dtypes)
        if any(d not in SUPPORTED_DTYPES for d in ins):
            return False
        _out_dtype(_mode(mode, ins), ins)
    except (TypeError, ValueError):
        return False
    return True


def chain_kernel(op, in_scalar, contiguous=True, index_bits=64):
    """The kernel of the ``ElemwiseChain`` ``op``.  ``contiguous``: every input is dense and of
    the chain's shape, or one element (``in_scalar[k]``: read at 0, broadcast); else the general
    form, whose inputs are read at their offsets in an ``mge_layout`` over the output's shape
    (the output first, dense; broadcast dims of stride 0), with ``index_bits``-wide indices.
    Its parameters: the output pointers (``op.outs`` in order), the input pointers, then
    ``long long n`` (contiguous) or ``I n, mge_layout<1 + inputs, I> layout``."""
    return _chain_kernel(op.steps, tuple(op.dtypes), op.n_in, tuple(op.outs), tuple(in_scalar),
                         bool(contiguous), int(index_bits))


@functools.lru_cache(maxsize=256)
def _chain_kernel(steps, dtypes, n_in, outs, in_scalar, contiguous, index_bits):
    dtypes = tuple(np.dtype(d) for d in dtypes)
    if index_bits not in (32, 64):
        raise ValueError(f"CUDA ElemwiseChain kernel: index_bits must be 32 or 64, got "
                         f"{index_bits!r}")
    idx = "long long" if contiguous or index_bits == 64 else "int"
    parts, lines = [], []
    if not contiguous:
        lines.append(f"{idx} off[{n_in + 1}];")
        lines.append(f"mge_offsets<{n_in + 1}, {idx}>(layout, ({idx})i, off);")
    for k in range(n_in):
        index = ("0" if in_scalar[k] else "i") if contiguous else f"off[{k + 1}]"
        lines.append(f"const {_storage(dtypes[k])} r{k} = in{k}[{index}];")
    for j, (mode, regs) in enumerate(steps):
        dst = n_in + j
        ins = tuple(dtypes[r] for r in regs)
        mode = _mode(mode, ins)
        out = _out_dtype(mode, ins)
        if out != dtypes[dst]:
            raise TypeError(f"CUDA ElemwiseChain: step {j} ({mode} of "
                            f"{', '.join(str(d) for d in ins)}) gives {out}, the chain says "
                            f"{dtypes[dst]}")
        plan = _plan(mode, ins, out)
        fn, text = _scalar_function(mode, plan)
        parts.append((fn, text))
        args = [_to_compute(_load(f"r{r}", d, d), d, a) for r, d, a in zip(regs, ins, plan.args)]
        call = f"{fn}({', '.join(args)})"
        lines.append(f"const {_storage(out)} r{dst} = {_store(call, plan.ret, out)};")
    at = "i" if contiguous else "off[0]"
    for k, r in enumerate(outs):
        lines.append(f"out{k}[{at}] = r{r};")
    codes = "_".join(f"{mode}{''.join(map(str, regs))}" for mode, regs in steps)
    sig = "_".join(_code(d) for d in dtypes)
    # (a stable name: the same chain has the same kernel in every process)
    what = repr((steps, [str(d) for d in dtypes], n_in, outs, in_scalar)).encode()
    name = f"mge_chain_{hashlib.sha1(what).hexdigest()[:16]}"
    name += "_c" if contiguous else f"_s{index_bits}"
    params = ([f"{_storage(dtypes[r])}* out{k}" for k, r in enumerate(outs)]
              + [f"const {_storage(dtypes[k])}* in{k}" for k in range(n_in)])
    params += (["long long n"] if contiguous else
               [f"{idx} n", f"mge_layout<{n_in + 1}, {idx}> layout"])
    body = "\n".join(f"        {line}" for line in lines)
    text = (f"/* {codes} over {sig} */\n"
            f"MGE_KERNEL {name}({', '.join(params)})\n{{\n"
            f"    MGE_LOOP(unsigned {idx}, i, n) {{\n{body}\n    }}\n}}\n")
    all_parts = (("MGE_ELEMWISE_PRELUDE", _PRELUDE), *dict.fromkeys(parts), (name, text))
    return KernelSource(name, all_parts, tuple(params), contiguous, index_bits, n_in)
