"""``HostBackend``: the CUDA device's backend emulated on the host, for machines without a GPU.

It is what the tests run the CUDA device on (``tests/devices/cuda_host.py`` registers it as the
device kind ``cudahost``), so that everything above the backend -- the device's buffers and
views, its caching pool, the launchers' shapes, strides and launch arguments, and the whole
runtime on top -- runs the code a GPU runs:

* **Memory** is host memory at real addresses: one numpy allocation per segment the pool
  reserves, aligned to 512 bytes as ``cudaMalloc``'s are, and filled with ``0xFF`` bytes (NaN
  floats, -1 integers), so a kernel that reads what nobody wrote shows it.  ``capacity`` bounds
  the bytes reserved: beyond it ``reserve`` raises ``OutOfDeviceMemory`` as the driver does, and
  the pool's out-of-memory path runs.  Every copy, every kernel's pointer arguments and every
  GEMM operand are checked to lie inside reserved memory (a ``HostMemoryError`` instead of the
  GPU's ``CUDA_ERROR_ILLEGAL_ADDRESS``).
* **Kernels** are the very sources NVRTC compiles (``kernels/``), built as host C++ with
  ``hostbuild.build`` and called through ctypes with the argument list a GPU launch gets
  (``backend.marshal_args``: pointers are the addresses above, structs are passed by value).  A
  build is cached per source text for the process (every ``HostBackend`` shares it);
  ``preload(kernels)`` builds many kernels in one library, which is much faster than one build
  each (a test module preloads what it uses).  Launch limits are checked as the driver checks
  them (block at most 1024 threads, grid dims, dynamic shared memory).
* **Thread indices.**  The host build of a grid-stride kernel (elemwise's ``MGE_LOOP``) is a
  serial loop and ignores grid and block.  A kernel that needs its thread and block indices (a
  block-per-row reduction with a shared-memory tree, a tiled transpose, a block scan) is written
  with ``kernels/block.py``'s phase macros, which run the threads of a block one after another,
  phase by phase between barriers, and learns the launch shape through block.py's one host
  convention: ``mge_host_launch(gx, gy, gz, bx, by, bz, shared_bytes)`` before the call, and
  afterwards ``int mge_host_error`` -- nonzero means the kernel needed more dynamic shared memory
  than the launch gave (a ``LaunchError`` here).
* **GEMM** (``gemm(g, a, b, c)``: a ``launch.Gemm`` on the operands' addresses) is numpy on
  strided views of that memory, following cuBLAS's column-major semantics argument by argument
  (``backend.check_gemm``): ``A`` is read as ``lda``-strided columns, ``beta == 0`` does not read
  ``C``, float16 accumulates in float32 (into float16 or float32, as the ``Gemm`` says).  So the
  device's row-major -> column-major mapping is exercised for real.
* **Streams and events.**  By default work runs when it is issued (``query()`` is always true).
  With ``asynchronous=True`` it runs as on a GPU: copies, memsets, kernels and GEMMs are checked
  and their arguments marshalled when issued (the driver's synchronous errors), then queued on a
  ``host_stream.HostStream`` whose thread runs them in order; a host-to-device copy takes its
  bytes at once (as the driver stages pageable memory), a device-to-host copy waits for the
  stream, ``release`` waits for it (as ``cuMemFree`` does), events are ``HostEvent``s, and a
  failure of queued work is raised at the next wait (``host_stream.AsyncKernelError``).

Counters for the tests: ``launches`` (kernel name -> launches), ``gemms`` (the ``launch.Gemm``
of each GEMM), ``builds`` (libraries built by this backend), ``htod_bytes``/``dtoh_bytes``.
"""
import atexit
import bisect
import collections
import ctypes
import itertools
import shutil
import tempfile
import threading

import numpy as np

from . import hostbuild
from .backend import (Backend, Event, GemmError, Stream, check_gemm, ctypes_struct, marshal_args,
                      parse_param)
from .host_stream import HostEvent, HostStream
from .kernels.elemwise import program
from .pool import OutOfDeviceMemory, format_bytes

__all__ = ["HostBackend", "HostMemoryError", "HostModule", "LaunchError"]

_SEGMENT_ALIGN = 512
_MAX_SHARED = 227 << 10  # an H100's opt-in dynamic shared memory per block
_FILL = 0xFF


class HostMemoryError(ValueError):
    """An access outside the emulated device memory (a GPU faults with
    ``CUDA_ERROR_ILLEGAL_ADDRESS``)."""


class LaunchError(ValueError):
    """A launch the driver would refuse (``CUDA_ERROR_INVALID_VALUE``): bad grid, block or
    shared memory size, or an unknown kernel."""


class _Allocation:
    """A reserved segment: its host array (kept alive here), address and size."""

    __slots__ = ("array", "address", "nbytes", "released")

    def __init__(self, array, address, nbytes):
        self.array, self.address, self.nbytes, self.released = array, address, nbytes, False

    def __int__(self):
        return self.address

    def __repr__(self):
        return f"<host segment {self.address:#x}+{self.nbytes}>"


class HostModule:
    """What ``HostBackend.load`` returns: kernel name -> (ctypes library, parsed parameters)."""

    def __init__(self, kernels):
        self.kernels = kernels

    def __contains__(self, name):
        return name in self.kernels

    def __repr__(self):
        return f"<HostModule {', '.join(sorted(self.kernels))}>"


# -- the process's host builds, shared by every HostBackend -----------------------------------------
_build_lock = threading.Lock()
_launch_lock = threading.Lock()  # synchronous launches: one at a time (a library's globals)
_libraries = {}     # (kernel name, kernel source) -> HostLibrary holding it
_build_dir = None
_build_counter = itertools.count()


def _directory():
    global _build_dir
    if _build_dir is None:
        _build_dir = tempfile.mkdtemp(prefix="mge_cuda_hostbackend_")
        atexit.register(shutil.rmtree, _build_dir, True)
    return _build_dir


def _key(kernel):
    return (kernel.name, kernel.source)


class HostBackend(Backend):
    """The emulated GPU of the module docstring: ``capacity`` bytes of memory, ``multiprocessors``
    for the grid sizes the launchers choose (no effect on results), ``index`` its number;
    ``asynchronous``: work runs later, on a ``HostStream``, as on a GPU."""

    name = "host emulation"

    def __init__(self, capacity=1 << 30, multiprocessors=4, index=0, asynchronous=False):
        self.capacity = int(capacity)
        self.multiprocessors = multiprocessors
        self.index = index
        self.asynchronous = bool(asynchronous)
        self.stream = HostStream(f"stream of emulated gpu {index}") if asynchronous else Stream()
        self._lock = threading.Lock()
        self._starts = []       # sorted segment addresses
        self._segments = {}     # address -> _Allocation
        self._reserved = 0
        self.launches = collections.Counter()
        self.gemms = []
        self.builds = 0         # libraries this backend built (the build cache is shared)
        self.htod_bytes = 0
        self.dtoh_bytes = 0

    def __repr__(self):
        return f"<HostBackend {format_bytes(self.capacity)}, {self._reserved} bytes reserved>"

    def _issue(self, fn, what):
        # run ``fn`` now, or (asynchronous) queue it on the stream; returns the ticket (or None)
        if self.asynchronous:
            return self.stream.submit(fn, what)
        fn()
        return None

    # -- memory ----------------------------------------------------------------------------------
    def reserve(self, nbytes):
        """A fresh segment of ``nbytes`` bytes of host memory, 512-aligned, filled with 0xFF;
        ``OutOfDeviceMemory`` beyond ``capacity``."""
        nbytes = int(nbytes)
        with self._lock:
            if self._reserved + nbytes > self.capacity:
                raise OutOfDeviceMemory(nbytes, f"the host emulation's {format_bytes(self.capacity)}"
                                        f" hold {format_bytes(self._reserved)} already")
            raw = np.empty(nbytes + _SEGMENT_ALIGN, np.uint8)
            skip = -raw.ctypes.data % _SEGMENT_ALIGN
            array = raw[skip:skip + nbytes]
            array.fill(_FILL)
            alloc = _Allocation(array, array.ctypes.data, nbytes)
            bisect.insort(self._starts, alloc.address)
            self._segments[alloc.address] = alloc
            self._reserved += nbytes
            return alloc.address, alloc

    def release(self, handle):
        """Give a segment back (a ``ValueError`` for one not reserved here or released twice);
        asynchronous, after the queued work (which may still use it) has run."""
        if self.asynchronous:
            self.stream.synchronize()
        with self._lock:
            if not isinstance(handle, _Allocation) or self._segments.get(handle.address) is not handle:
                raise ValueError(f"release of {handle!r}: not a live segment of this backend")
            handle.released = True
            del self._segments[handle.address]
            self._starts.remove(handle.address)
            self._reserved -= handle.nbytes

    @property
    def reserved_bytes(self):
        """Bytes in live segments."""
        return self._reserved

    def mem_info(self):
        """``(total, free)``: the capacity and what is not reserved."""
        return self.capacity, self.capacity - self._reserved

    def check_range(self, address, nbytes, what):
        """Raise ``HostMemoryError`` unless ``[address, address + nbytes)`` lies in one live
        segment (``nbytes`` 0: the address itself must)."""
        address, nbytes = int(address), int(nbytes)
        with self._lock:
            i = bisect.bisect_right(self._starts, address) - 1
            if i >= 0:
                seg = self._segments[self._starts[i]]
                if address + max(nbytes, 1) <= seg.address + seg.nbytes:
                    return
        raise HostMemoryError(f"{what}: {nbytes} byte(s) at {address:#x} are outside the "
                              f"emulated device memory (an illegal address on a GPU)")

    # -- copies ----------------------------------------------------------------------------------
    def copy_htod(self, address, host_array):
        """Copy ``host_array``'s bytes (C-contiguous) to ``address``."""
        host_array = _contiguous(host_array, "copy_htod")
        n = host_array.nbytes
        if n:
            self.check_range(address, n, "copy_htod")
            if self.asynchronous:  # the bytes are taken now: the caller may reuse its array
                host_array = host_array.copy()
            self._issue(lambda: ctypes.memmove(int(address), host_array.ctypes.data, n),
                        "copy_htod")
            self.htod_bytes += n

    def copy_dtoh(self, host_array, address):
        """Fill ``host_array`` (C-contiguous, writeable) from ``address``."""
        if not isinstance(host_array, np.ndarray) or not host_array.flags.writeable:
            raise TypeError("copy_dtoh: the destination must be a writeable numpy array")
        host_array = _contiguous(host_array, "copy_dtoh")
        n = host_array.nbytes
        if n:
            self.check_range(address, n, "copy_dtoh")
            ticket = self._issue(lambda: ctypes.memmove(host_array.ctypes.data, int(address), n),
                                 "copy_dtoh")
            if ticket is not None:
                self.stream.wait_for(ticket)  # the caller reads the bytes next
            self.dtoh_bytes += n

    def copy_dtoh_ready(self, host_array, address):
        """``copy_dtoh`` of bytes that are ready (their writer's event has passed): copied now,
        whatever the stream still has queued (a GPU copies them on a second stream)."""
        if not self.asynchronous:
            return self.copy_dtoh(host_array, address)
        if not isinstance(host_array, np.ndarray) or not host_array.flags.writeable:
            raise TypeError("copy_dtoh_ready: the destination must be a writeable numpy array")
        host_array = _contiguous(host_array, "copy_dtoh_ready")
        n = host_array.nbytes
        if n:
            self.check_range(address, n, "copy_dtoh_ready")
            ctypes.memmove(host_array.ctypes.data, int(address), n)
            self.dtoh_bytes += n

    def copy_dtod(self, dst, src, nbytes):
        """Copy ``nbytes`` from ``src`` to ``dst``."""
        if nbytes:
            self.check_range(src, nbytes, "copy_dtod (source)")
            self.check_range(dst, nbytes, "copy_dtod (destination)")
            self._issue(lambda: ctypes.memmove(int(dst), int(src), int(nbytes)), "copy_dtod")

    def memset(self, address, byte, nbytes):
        """Set ``nbytes`` bytes at ``address`` to ``byte``."""
        if nbytes:
            self.check_range(address, nbytes, "memset")
            self._issue(lambda: ctypes.memset(int(address), int(byte) & 0xFF, int(nbytes)),
                        "memset")

    # -- kernels ---------------------------------------------------------------------------------
    def preload(self, kernels):
        """Build every kernel of ``kernels`` not built yet in this process (one library per group
        of kernels with the same preludes); a later ``load`` of any of them takes it from
        there."""
        with _build_lock:
            self._build_missing(kernels)

    def load(self, kernels):
        """A ``HostModule`` of ``kernels``: built with g++ (those not built yet, together)."""
        kernels = list(kernels)
        with _build_lock:
            self._build_missing(kernels)
            entries = {k.name: (_libraries[_key(k)], [parse_param(p) for p in k.params])
                       for k in kernels}
        return HostModule(entries)

    def _build_missing(self, kernels):
        groups = {}
        for k in kernels:
            if _key(k) not in _libraries:
                groups.setdefault(_family(k), {})[_key(k)] = k
        for group in groups.values():
            members = list(group.values())
            lib = hostbuild.build([program(members)], _directory(), jobs=1,
                                  name=f"k{next(_build_counter)}")
            self.builds += 1
            for k in members:
                _libraries[_key(k)] = lib

    def launch(self, module, name, grid, block, args, shared_bytes=0):
        """Run kernel ``name`` of ``module`` on ``args`` (now, or queued when asynchronous; the
        launch's own checks are made now either way: see the module docstring)."""
        entry = module.kernels.get(name)
        if entry is None:
            raise LaunchError(f"launch of {name!r}: no such kernel in {module!r}")
        grid, block = _dims(grid, "grid", name), _dims(block, "block", name)
        _check_launch(name, grid, block, shared_bytes)
        lib, params = entry
        values = marshal_args(params, args, name)
        argtypes, cargs = [], []
        for p, v in zip(params, values):
            if p.kind == "pointer":
                if int(v) != 0:  # (NULL: an argument the kernel does not use, as on a GPU)
                    self.check_range(int(v), 0, f"{name}: argument {p.decl!r}")
                argtypes.append(ctypes.c_void_p)
                cargs.append(int(v))
            elif p.kind == "scalar":
                t = np.ctypeslib.as_ctypes_type(p.dtype)
                argtypes.append(t)
                cargs.append(v.item())
            else:
                t = _structs.get(v.dtype)
                if t is None:
                    t = _structs.setdefault(v.dtype, ctypes_struct(v.dtype))
                argtypes.append(t)
                cargs.append(t.from_buffer_copy(v.tobytes()))
        fn = lib.function(name, argtypes)
        self.launches[name] += 1
        if self.asynchronous:
            self.stream.submit(lambda: _run_kernel(lib, name, fn, cargs, grid, block, shared_bytes),
                               f"kernel {name}")
        else:
            with _launch_lock:
                _run_kernel(lib, name, fn, cargs, grid, block, shared_bytes)

    # -- GEMM ------------------------------------------------------------------------------------
    def gemm(self, g, a, b, c):
        """cuBLAS's strided-batched GEMM ``g`` (a ``launch.Gemm``) in numpy, column-major
        (``backend.check_gemm``), on the device addresses ``a``, ``b``, ``c`` of its operands:
        each operand read as its own dtype, the products summed in ``g.compute_dtype``, the
        result rounded once to ``g.c_dtype``."""
        check_gemm(g)
        self.gemms.append(g)
        if g.batch == 0 or g.m == 0 or g.n == 0:
            return
        # the operands' views are made (and their ranges checked) now, read when the GEMM runs
        rows_a, cols_a = (g.k, g.m) if g.transa else (g.m, g.k)
        rows_b, cols_b = (g.n, g.k) if g.transb else (g.k, g.n)
        cm = self._matrices(c, g.m, g.n, g.ldc, g.stride_c, g.batch, np.dtype(g.c_dtype), "C")
        am = bm = None
        if g.k:
            am = self._matrices(a, rows_a, cols_a, g.lda, g.stride_a, g.batch,
                                np.dtype(g.a_dtype), "A")
            bm = self._matrices(b, rows_b, cols_b, g.ldb, g.stride_b, g.batch,
                                np.dtype(g.b_dtype), "B")
        self._issue(lambda: _gemm(g, am, bm, cm), "gemm")

    def _matrices(self, address, rows, cols, ld, stride, batch, dtype, what):
        # ``batch`` column-major rows x cols matrices at ``address`` as a (batch, rows, cols)
        # numpy view of the memory (element (i, j) of matrix b at b * stride + i + j * ld)
        isz = dtype.itemsize
        if rows == 0 or cols == 0:
            return np.zeros((batch, rows, cols), dtype)
        if stride < 0:
            raise GemmError(f"stride of {what} = {stride} is negative")
        span = ((batch - 1) * stride + (cols - 1) * ld + rows) * isz
        self.check_range(address, span, f"gemm operand {what}")
        raw = np.frombuffer((ctypes.c_char * span).from_address(int(address)), np.uint8)
        flat = raw.view(dtype)
        return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols),
                                               (stride * isz, isz, ld * isz))

    # -- ordering --------------------------------------------------------------------------------
    def event(self, timing=True):
        """An ``Event``: a ``HostEvent`` on the stream when asynchronous, else immediate (every
        host event has a time: ``timing`` changes nothing here)."""
        return HostEvent(self.stream) if self.asynchronous else Event()


def _run_kernel(lib, name, fn, cargs, grid, block, shared_bytes):
    # block.py's one host convention: the launch shape (and dynamic shared size) before the
    # call, mge_host_error after it; grid-stride-only libraries export neither.  Those are a
    # library's globals: one launch at a time (the caller's lock, or the stream's one thread).
    blocks = _has_blocks(lib)
    if blocks:
        lib.function("mge_host_launch", [ctypes.c_uint] * 7)(*grid, *block, int(shared_bytes))
    fn(*cargs)
    if blocks:
        error = ctypes.c_int.in_dll(lib.lib, "mge_host_error").value
        if error:
            raise LaunchError(f"launch of {name}: the kernel needs more dynamic shared memory "
                              f"than the launch gave ({shared_bytes} bytes; "
                              f"mge_host_error={error})")


def _gemm(g, am, bm, cm):
    # C = alpha * op(A) @ op(B) + beta * C on the (batch, rows, cols) views, in the compute dtype
    acc = np.dtype(g.compute_dtype).type
    if am is None:  # k == 0
        prod = np.zeros(cm.shape, acc)
    else:
        am, bm = am.astype(acc), bm.astype(acc)
        if g.transa:
            am = am.transpose(0, 2, 1)
        if g.transb:
            bm = bm.transpose(0, 2, 1)
        prod = np.matmul(am, bm)
    out = acc(g.alpha) * prod
    if g.beta != 0:  # cuBLAS reads C only then: with beta == 0 it may hold NaN
        out = out + acc(g.beta) * cm.astype(acc)
    cm[...] = out.astype(g.c_dtype)


def _family(kernel):
    # kernels built into one translation unit: those with the same preludes (a small unit per
    # family builds in parallel with the others and is rebuilt alone when one family changes)
    return tuple(guard for guard, _ in kernel.parts if "PRELUDE" in guard)


# numpy struct dtype -> its ctypes Structure, one per process: a library's function objects are
# shared (ctypes caches them), so every caller must give the very same argtypes
_structs = {}
_blocks = {}  # library path -> whether it holds block.py's prelude (mge_host_launch)


def _has_blocks(lib):
    b = _blocks.get(lib.path)
    if b is None:
        b = _blocks[lib.path] = "mge_host_launch" in lib and "mge_host_error" in lib
    return b


def _contiguous(host_array, what):
    if not isinstance(host_array, np.ndarray):
        raise TypeError(f"{what}: a numpy array is needed, got {type(host_array).__name__}")
    if not host_array.flags.c_contiguous:
        raise ValueError(f"{what}: the host array must be C-contiguous")
    return host_array


def _dims(v, what, name):
    if isinstance(v, int):
        v = (v,)
    v = tuple(int(x) for x in v) + (1,) * (3 - len(v))
    if len(v) != 3:
        raise LaunchError(f"launch of {name}: {what} {v} has more than 3 dims")
    return v


def _check_launch(name, grid, block, shared):
    # the driver's limits (every architecture from Volta on)
    if min(grid) < 1 or min(block) < 1:
        raise LaunchError(f"launch of {name}: empty grid {grid} or block {block}")
    if block[0] * block[1] * block[2] > 1024 or block[2] > 64:
        raise LaunchError(f"launch of {name}: block {block} exceeds 1024 threads (z <= 64)")
    if grid[0] > 2 ** 31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        raise LaunchError(f"launch of {name}: grid {grid} exceeds (2**31 - 1, 65535, 65535)")
    if not 0 <= shared <= _MAX_SHARED:
        raise LaunchError(f"launch of {name}: {shared} bytes of dynamic shared memory "
                          f"(at most {_MAX_SHARED})")
