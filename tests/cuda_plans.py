"""The kernel tests' one host runner of ``kernels/launch.py`` plans (a helper, not a test file).

``run_plan(plan, ins, outs)`` does on the host what the CUDA device does with a plan: it builds
the plan's kernels with ``hostbuild`` (one library per set of kernels, cached for the process),
binds ``"in0"``... to the given numpy arrays (a pointer is the array's first element; strided
inputs pass their own view), allocates ``"out0"``... dense and ``"ws"`` (filled with 0xff bytes:
a read of what nobody wrote shows), zeroes the checks' words, and runs the steps in order:

* ``Launch``: block.py's ``mge_host_launch(grid, block, shared_bytes)``, then the kernel through
  ctypes with exactly the plan's arguments (``Buf`` -> address, bounds-checked against its
  buffer; ``None`` -> NULL; numpy scalars of each parameter's C type; ``numpy.void`` structs by
  value); ``mge_host_error`` afterwards fails the run;
* ``Gemm``: numpy in cuBLAS's column-major terms (``lda``-strided columns, ``op`` transposes the
  stored matrix, ``beta == 0`` never reads C), every operand bounds-checked in its buffer;
* ``Memset``: bytes of a buffer.

Then the checks: a non-zero word raises ``check.error(value)`` (or ``check.error(value, read)``
when the error function takes two arguments: ``read(buf, dtype, count)`` gives ``count``
elements at a ``Buf``).  A ``Readback`` reads its value and runs ``then(value)`` on the same
buffers (outputs allocated anew from ``outs(value)`` where it has ``outs``).  Returns the outputs.
"""
import ctypes
import inspect
import tempfile

import numpy as np

from mge._core.device.cuda import hostbuild
from mge._core.device.cuda.backend import ctypes_struct, parse_param
from mge._core.device.cuda.kernels.elemwise import program
from mge._core.device.cuda.kernels.launch import Buf, Gemm, Launch, Memset

__all__ = ["run_plan", "library"]

_libraries = {}
_structs = {}


def library(kernels, jobs=1):
    """The host library of ``kernels`` (built once per process for a set of kernel texts, in
    ``jobs`` translation units side by side).  A library built before for more kernels serves
    too: a test module may build every kernel of its plans once, up front, and each plan then
    runs in that one library instead of a g++ build of its own."""
    kernels = list(dict.fromkeys(kernels))
    key = frozenset((k.name, hash(k.parts)) for k in kernels)
    lib = _libraries.get(key) or next((v for have, v in _libraries.items() if key <= have), None)
    if lib is None:
        units = [program(kernels[j::jobs]) for j in range(max(1, min(jobs, len(kernels))))]
        lib = hostbuild.build(units, tempfile.mkdtemp(prefix="mge_plans_"), jobs=len(units))
        _libraries[key] = lib
    return lib


class _Buffers:
    def __init__(self, ins, outs, workspace):
        self.arrays = {f"in{k}": a for k, a in enumerate(ins)}
        self.arrays.update({f"out{k}": a for k, a in enumerate(outs)})
        raw = np.full(int(workspace) + 256, 0xFF, np.uint8)
        skip = -raw.ctypes.data % 256  # the device's allocations are aligned
        self.arrays["ws"] = raw[skip:skip + int(workspace)]

    def span(self, name):
        """(first address, last address + 1) of buffer ``name`` (any strides)."""
        a = self.arrays[name]
        lo = hi = a.__array_interface__["data"][0]
        for n, s in zip(a.shape, a.strides):
            if n == 0:
                return lo, lo
            (lo, hi) = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
        return lo, hi + a.itemsize

    def address(self, buf, nbytes, what):
        # a Buf is the buffer's first element plus its offset, as on the device: below it for a
        # view with negative strides (the offset may then be negative), within the span anyway
        lo, hi = self.span(buf.name)
        at = self.arrays[buf.name].__array_interface__["data"][0] + buf.offset
        if not (lo <= at and at + nbytes <= hi):
            raise AssertionError(f"{what}: {buf} ({nbytes} bytes) outside {buf.name!r} "
                                 f"({hi - lo} bytes)")
        return at

    def read(self, buf, dtype, count):
        dtype = np.dtype(dtype)
        at = self.address(buf, dtype.itemsize * count, "read")
        return np.ctypeslib.as_array((ctypes.c_uint8 * (dtype.itemsize * count)).from_address(
            at)).view(dtype).copy()


def _launch(lib, step, bufs):
    name = step.kernel.name
    params = [parse_param(p) for p in step.kernel.params]
    assert len(params) == len(step.args), f"{name}: {len(step.args)} args for {len(params)}"
    types, values = [], []
    for p, a in zip(params, step.args):
        if p.kind == "pointer":
            assert a is None or isinstance(a, Buf), f"{name}: {p.decl!r} given {a!r}"
            types.append(ctypes.c_void_p)
            values.append(None if a is None else bufs.address(a, 0, f"{name} {p.decl!r}"))
        elif p.kind == "scalar":
            assert isinstance(a, np.generic) and a.dtype == p.dtype, (name, p.decl, a)
            types.append(np.ctypeslib.as_ctypes_type(p.dtype))
            values.append(a.item())
        else:
            assert isinstance(a, np.void), (name, p.decl, a)
            t = _structs.get(a.dtype) or _structs.setdefault(a.dtype, ctypes_struct(a.dtype))
            types.append(t)
            values.append(t.from_buffer_copy(a.tobytes()))
    if "mge_host_launch" in lib:
        lib.function("mge_host_launch", [ctypes.c_uint] * 7)(*step.grid, *step.block,
                                                             step.shared_bytes)
    lib.function(name, types)(*values)
    if "mge_host_error" in lib:
        error = ctypes.c_int.in_dll(lib.lib, "mge_host_error").value
        assert error == 0, f"{name}: more dynamic shared memory than the plan's " \
                           f"{step.shared_bytes} bytes (mge_host_error={error})"


def _matrices(bufs, buf, dtype, rows, cols, ld, stride, batch, what):
    """The ``batch`` column-major ``rows x cols`` matrices at ``buf`` as a (batch, rows, cols)
    view, bounds-checked."""
    dtype = np.dtype(dtype)
    assert ld >= max(rows, 1), f"{what}: ld {ld} < {rows} rows"
    last = (batch - 1) * stride + (cols - 1) * ld + rows if rows and cols and batch else 0
    at = bufs.address(buf, last * dtype.itemsize, what)
    flat = np.ctypeslib.as_array((ctypes.c_uint8 * max(last * dtype.itemsize, 1))
                                 .from_address(at)).view(dtype)
    e = dtype.itemsize
    return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols), (stride * e, e, ld * e))


def _gemm(g, bufs):
    ar, ac = (g.k, g.m) if g.transa else (g.m, g.k)
    br, bc = (g.n, g.k) if g.transb else (g.k, g.n)
    a = _matrices(bufs, g.a, g.a_dtype, ar, ac, g.lda, g.stride_a, g.batch, "gemm A")
    b = _matrices(bufs, g.b, g.b_dtype, br, bc, g.ldb, g.stride_b, g.batch, "gemm B")
    c = _matrices(bufs, g.c, g.c_dtype, g.m, g.n, g.ldc, g.stride_c, g.batch, "gemm C")
    t = np.dtype(g.compute_dtype)
    a = a.astype(t)
    b = b.astype(t)
    if g.transa:
        a = a.transpose(0, 2, 1)
    if g.transb:
        b = b.transpose(0, 2, 1)
    r = t.type(g.alpha) * (a @ b)
    if g.beta != 0:
        r = r + t.type(g.beta) * c.astype(t)
    c[...] = r.astype(g.c_dtype)


def _run(plan, bufs):
    lib = library(plan.kernels) if plan.kernels else None
    for check in plan.checks:
        at = bufs.address(check.flag, np.dtype(check.dtype).itemsize, "check")
        ctypes.memset(at, 0, np.dtype(check.dtype).itemsize)
    for step in plan.steps:
        if isinstance(step, Launch):
            _launch(lib, step, bufs)
        elif isinstance(step, Gemm):
            _gemm(step, bufs)
        elif isinstance(step, Memset):
            ctypes.memset(bufs.address(step.buf, step.nbytes, "memset"), step.value, step.nbytes)
        else:
            raise AssertionError(f"unknown step {step!r}")
    for check in plan.checks:
        value = int(bufs.read(check.flag, check.dtype, 1)[0])
        if value:
            two = len(inspect.signature(check.error).parameters) >= 2
            raise check.error(value, bufs.read) if two else check.error(value)
    return bufs


def _allocate(outs):
    """Dense output arrays of ``outs`` (``Layout``s), filled with 0xff bytes."""
    return [np.frombuffer(bytearray(b"\xff" * (o.size * o.dtype.itemsize)), o.dtype)
            .reshape(o.shape) for o in outs]


def run_plan(plan, ins, outs):
    """Run ``plan`` on the host: ``ins`` numpy arrays, ``outs`` the outputs' ``Layout``s; the
    output arrays (see the module)."""
    out_arrays = _allocate(outs)
    while plan is not None:
        bufs = _Buffers(ins, out_arrays, plan.workspace)
        _run(plan, bufs)
        if plan.readback is None:
            break
        value = bufs.read(plan.readback.buf, plan.readback.dtype, 1)[0].item()
        if plan.readback.outs is not None:  # data-dependent sizes: the outputs come now
            out_arrays = _allocate(plan.readback.outs(value))
        plan = plan.readback.then(value)
    return out_arrays
